"""The serving layer as the page sees it: one object per page (`Serving`) that registers its events of work, admits
each of their callbacks, gives side work its turn, and builds the server the page is served by.

Every event that spends CPU is in one concurrency group of Gradio's queue, `WORK`, the admission point: Gradio bounds
how many are in their callbacks and how many wait (`Limits.concurrent_jobs`, `queue_size`), and in the callbacks they
take turns in the scheduler's one order. Inputs reach the callbacks as sent (preprocess=False): the page checks a value
out of a control's range and answers in one line, where Gradio's own check would log a traceback for each. Each such
event is told to the HTTP front (`Gate.count`): its calls count against their session there until the callback's
`admitted` block ends.
"""

from collections.abc import Callable
from contextlib import contextmanager

import uvicorn

from .guard import Gate
from .limits import Limits
from .scheduler import Cancelled, FairScheduler
from .server import build_server
from .uploads import UploadQuota

WORK, SIDE = "work", "side work"  # the concurrency groups of the events that spend CPU: the admission point


class Serving:
    """The defences of one page: the HTTP front's `gate`, the `uploads` quota, the `scheduler` every piece of work
    takes turns in, all bounded by `limits`."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.gate, self.uploads = Gate(limits), UploadQuota(limits)
        # The one order every piece of work takes turns in; a call nobody reads is dropped before it runs.
        self.scheduler = FairScheduler(
            heavy_jobs=limits.heavy_jobs,
            ordinary_seconds=limits.ordinary_cpu_seconds,
            is_read=self.gate.readers.is_read,
            side_welcome=self.gate.side_welcome,
            stream_wait_seconds=limits.stream_wait_seconds,
            unread_grace_seconds=limits.unread_grace_seconds,
        )

    def work(self, listener: Callable, fn: Callable, inputs, outputs, *, side: bool = False, **options):
        """`listener(fn, inputs, outputs, **options)` (a button's `click`, `demo.load`, an event's `then`) as an event
        of work: in the `WORK` group (`side`: the `SIDE` group), its inputs as sent, its calls counted by the HTTP
        front. Returns the event, to chain on; `fn` runs its work inside `admitted`.

        `side`: side work (a look inside, a picture, a battle, a vote, the leaderboard) has its group and its
        `side_jobs` slots of Gradio's queue, so that a class's burst of it never holds the slots a translation needs
        (hostile_clients: views at once; a mounted page's queue has 40 in all: `__init__.py`)."""
        group, limit = (SIDE, self.limits.side_jobs) if side else (WORK, self.limits.concurrent_jobs)
        event = listener(
            fn, inputs, outputs, concurrency_id=group, concurrency_limit=limit, preprocess=False, **options
        )
        return self.gate.count(event)

    def paced(self, event, burst: int, per_second: float):
        """`event` (a work event) paced per address: `burst` calls at once, then `per_second`; more are refused at the
        front in one line. Returns it, to chain on."""
        return self.gate.pace(event, burst, per_second)

    @contextmanager
    def admitted(self, request):
        """The callback of a work event runs inside this block (`request`: its `gr.Request`): its call stops counting
        against the session at the end. Yields when the call entered Gradio's queue (time.monotonic(); None for a call
        not counted), so that its time limit counts the wait for a free callback too."""
        with self.gate.serving(request.session_hash) as arrived:
            yield arrived

    def arrival(self, request) -> float | None:
        """When the session's call now running entered Gradio's queue, as `admitted` yields it."""
        return self.gate.arrival(request.session_hash)

    def side_work(self, request, work: Callable[[], tuple], dropped: tuple) -> tuple:
        """`work()` (a picture, a table, a vote), admitted, in the scheduler's side lane: never refused as heavy, and
        a call nobody reads is dropped (Cancelled) and answers `dropped`, logging nothing."""
        with self.admitted(request) as arrived:
            try:
                with self.scheduler.job(request.session_hash, self.limits.text.seconds, side=True, since=arrived):
                    return work()
            except Cancelled:
                return dropped

    def queue(self, demo) -> None:
        """Gradio's queue for the page `demo`: the work group's `concurrent_jobs` calls in their callbacks at once, and
        beyond them at most `queue_size` calls wait (a further one is refused at once, in one line); the REST routes
        that would run a callback outside it (/run, /api) are closed."""
        demo.queue(max_size=self.limits.queue_size, api_open=False)

    def server(
        self, demo, *, css: str, host: str | None = None, port: int | None = None, forwarded_allow_ips: str = ""
    ) -> uvicorn.Server:
        """The server for the page `demo` (with its `css`): the HTTP front first in line, uploads within their quota,
        sessions kept in memory bounded, connections bounded, X-Forwarded-For trusted from `forwarded_allow_ips` only
        (`server.py`)."""
        return build_server(
            demo,
            gate=self.gate,
            uploads=self.uploads,
            limits=self.limits,
            css=css,
            host=host,
            port=port,
            forwarded_allow_ips=forwarded_allow_ips,
        )
