"""`Serving`, the one object a page goes through, and its uvicorn server: the page (its API also as MCP tools) behind
the HTTP front (`guard.py`). A client is the connection's address, or the one a trusted proxy appended to
X-Forwarded-For (on a Space, one of `SPACE_PROXY_NETWORKS`)."""

import asyncio
import contextlib
import math
import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import gradio as gr
import uvicorn
from fastapi import FastAPI

from transformer_en_de import heap

from .guard import NOT_STARTED, REMEMBERED, UNREAD_CALLS, Refused, RequestGuard
from .http_answers import OpenResponses
from .limits import Limits, RateLimit, keep_latest
from .scheduler import Cancelled, FairScheduler
from .uploads import UploadQuota

SPACE_PROXY_NETWORKS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"


class Serving:
    """The defences of one page within `limits`: what the front (guard.py) knows of its visitors and shares with the
    callbacks, the `uploads` quota and the `scheduler`."""

    def __init__(self, limits: Limits = Limits()):
        self.limits, self.uploads = limits, UploadQuota(limits)
        self.readers = OpenResponses()  # the event streams being read and pages open, by session
        self.streams = OpenResponses()  # the responses open that stay open, by address
        # Sends to event streams in progress, by address: uvicorn's `send` waits for the client to take the bytes, so
        # an unread stream (~200 kB of a view held in memory) is known only there.
        self.sends = OpenResponses()
        burst, per_second = limits.new_sessions_per_address_burst, limits.new_sessions_per_address_per_second
        self.new_sessions = RateLimit(1 / per_second, burst, REMEMBERED)  # by (address, kind of session)
        # Sessions admitted lately → the address of their latest call; raw calls, ("call", event id) → their session.
        self._known: OrderedDict[str | tuple, str] = OrderedDict()
        self._calls: OrderedDict[str, float] = OrderedDict()  # session → when its call queued or running came
        self._unread: OrderedDict[object, tuple[str, float]] = OrderedDict()  # raw call → (address, when), unread
        self._lock = threading.Lock()
        self.counted: set[int] = set()  # the fn_index of each event whose calls count
        self.paces: dict[int, RateLimit] = {}  # fn_index → its calls' pace, by address
        self.scheduler = FairScheduler(
            heavy_jobs=limits.heavy_jobs,
            is_read=self.readers.is_read,
            side_welcome=self.side_welcome,
            stream_wait_seconds=limits.stream_wait_seconds,
        )

    def work(self, listener: Callable, fn: Callable, inputs, outputs, *, side: bool = False, **options):
        """`listener(fn, inputs, outputs, **options)`, its calls counted by the front, in the queue's "work" group or
        in side work's own slots (a class's looks inside never hold a translation's: hostile_clients, views at once);
        inputs as sent (the page answers a bad one in one line, where Gradio would log a traceback)."""
        group, limit = ("side work", self.limits.side_jobs) if side else ("work", self.limits.concurrent_jobs)
        event = listener(
            fn, inputs, outputs, concurrency_id=group, concurrency_limit=limit, preprocess=False, **options
        )
        self.counted.add(event["id"])
        return event

    def paced(self, event, burst: int, per_second: float):
        """`event` paced per address at the front: `burst` calls, then `per_second`."""
        self.paces[event["id"]] = RateLimit(1 / per_second, burst, REMEMBERED)
        return event

    @contextlib.contextmanager
    def admitted(self, request):
        """A work callback runs inside; yields when its call entered Gradio's queue (None if not counted)."""
        try:
            yield self.arrival(request)
        finally:
            self.served(request.session_hash)

    def arrival(self, request) -> float | None:
        with self._lock:
            return self._calls.get(request.session_hash)

    def admit_session(self, session: str | None, address: str, counted: bool = True) -> None:
        """Refused if a call of `session` from `address` may not enter Gradio's queue; a `counted` call holds its
        session's one place until its callback ends (`admitted`)."""
        now = time.monotonic()
        with self._lock:
            if session is None or session not in self._known:
                kind = "no session" if session is None else "page" if self.readers.is_read(session) else "other"
                if self.new_sessions.take((address, kind)):
                    raise Refused(429, f"Too many new sessions from this address at once; {NOT_STARTED}")
            if session is None:
                return
            keep_latest(self._known, session, address, REMEMBERED)
            # A call older than any time limit was dropped unstarted by Gradio.
            if counted and now - self._calls.get(session, -math.inf) < self.limits.file.seconds * 2:
                running = "This session's previous request is still running; this one was not started"
                raise Refused(429, f"{running} (or reload the page).")
            if counted:
                keep_latest(self._calls, session, now, REMEMBERED)

    def check_pace(self, event: dict, address: str) -> None:
        """Refused if a call of `event` (its config) from `address` is past its pace."""
        pace = self.paces.get(event["id"])
        if pace is not None and pace.take(address):
            rate = f"more often than {1 / pace.interval:g} a second lately"
            raise Refused(429, f"/{event.get('api_name')} was called from this address {rate}; {NOT_STARTED}")

    def unread_slot(self, address: str) -> object | None:
        """A place among the raw calls `address` posted within `stream_wait_seconds` and has not read (taken at once:
        calls posted side by side cannot all pass); None if it has `UNREAD_CALLS`."""
        now = time.monotonic()
        with self._lock:
            while self._unread and now - next(iter(self._unread.values()))[1] > self.limits.stream_wait_seconds:
                self._unread.popitem(last=False)
            if sum(poster == address for poster, _ in self._unread.values()) >= UNREAD_CALLS:
                return None
            self._unread[slot := object()] = (address, now)
            return slot

    def posted(self, slot: object, event: str | None, session: str | None) -> None:
        """A raw call Gradio queued as `event`, whose stream reads `session`; or (no `event`) not queued: slot freed."""
        with self._lock:
            place = self._unread.pop(slot, None)
            if event is not None:
                keep_latest(self._known, ("call", event), session, REMEMBERED)
                if place:
                    self._unread[event] = place

    def stalled(self, address: str) -> int:
        """How many sends to the streams of `address` have waited `stalled_send_seconds` or more."""
        return self.sends.count(address, self.limits.stalled_send_seconds)

    def side_welcome(self, session: str | None) -> bool:
        """Whether side work of `session` may run: its address has under `stalled_streams_per_address` stalled sends."""
        with self._lock:
            address = self._known.get(session)
        return address is None or self.stalled(address) < self.limits.stalled_streams_per_address

    def session_of(self, key: str | tuple) -> str | None:
        """The session a stream reads (by its session, or ("call", event id): read from now on), if it was admitted."""
        with self._lock:
            if isinstance(key, str):
                return key if key in self._known else None
            self._unread.pop(key[1], None)
            return self._known.get(key)

    def served(self, session: str | None) -> None:
        with self._lock:
            self._calls.pop(session, None)

    def run_side_work(self, request, work: Callable[[], tuple], dropped: tuple) -> tuple:
        """`work()` admitted in the scheduler's side lane; a call nobody reads answers `dropped`."""
        with self.admitted(request) as arrived:
            try:
                with self.scheduler.job(request.session_hash, self.limits.text.seconds, side=True, since=arrived):
                    return work()
            except Cancelled:
                return dropped

    def page_closed(self, session: str) -> None:
        """A page's heartbeat ended: its requests stop. (Gradio's `unload` runs a callback per page: 256 pages closed
        at once held the server 11 s; hostile_clients: held heartbeats.)"""
        if self.scheduler.cancel(session):
            print("app.py: a visitor left; their request was cancelled.", flush=True)

    def queue(self, demo) -> None:
        """Gradio's queue: 128 calls waiting at most; no route runs a queued event outside it (/run, /api)."""
        demo.queue(max_size=128, api_open=False)

    def server(
        self, demo, *, css: str, host: str | None = None, port: int | None = None, forwarded_allow_ips: str = ""
    ) -> uvicorn.Server:
        """The server for `demo`; host and port default to GRADIO_SERVER_NAME / _PORT (as a Space sets)."""
        limits, descriptors = self.limits, raise_descriptor_limit()
        app = FastAPI(lifespan=self.giving_back_memory)
        app.add_middleware(RequestGuard, demo=demo, serving=self)
        app = gr.mount_gradio_app(app, demo, path="", max_file_size=limits.max_file_bytes, css=css, mcp_server=True)
        config = uvicorn.Config(
            app,
            host=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
            access_log=False,  # a flood of requests would flood the log
            http="h11",  # bounds a request's headers (16 kB by default); idle connections close after 5 s
            # Counts every connection, even one still sending headers: kept below the descriptors, with room for the
            # process's own files, so that past it a request is told 503 (hostile_clients: slow connections).
            limit_concurrency=min(10_000, descriptors - 256),
            timeout_graceful_shutdown=2,  # event streams stay open as long as their pages
            proxy_headers=bool(forwarded_allow_ips),  # uvicorn alone would trust loopback peers
            forwarded_allow_ips=forwarded_allow_ips or "",
        )
        return uvicorn.Server(config)

    @contextlib.asynccontextmanager
    async def giving_back_memory(self, _app):
        """glibc's free pages given back every minute (by an hour's end 417 of 664 MiB were free yet resident:
        mixed_use.py); blocks of 256 kB or more get pages of their own, returned when freed."""

        async def give_back() -> None:
            while True:
                await asyncio.sleep(60)
                await asyncio.to_thread(heap.give_back)

        heap.large_blocks_apart(262_144)
        task = asyncio.create_task(give_back())
        yield
        task.cancel()


def raise_descriptor_limit(unlimited: int = 65_536) -> int:
    """The soft descriptor limit raised to the hard one, or to `unlimited` where the hard one is (a connection that
    never ends its headers holds one): the descriptors the process may hold."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = unlimited if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return unlimited if soft == resource.RLIM_INFINITY else soft


def forwarded_allow_ips_by_default(environ) -> str:
    """FORWARDED_ALLOW_IPS; else on a Space (SPACE_ID set) its proxy's networks; else nothing trusted."""
    return environ.get("FORWARDED_ALLOW_IPS", SPACE_PROXY_NETWORKS if environ.get("SPACE_ID") else "")
