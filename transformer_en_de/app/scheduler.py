"""Turns on the CPU for the visitors' requests: the least-served request computes next.

Generation on a CPU is one long computation per request; run side by side, requests slow each other down, and run
one after another, a one-sentence request waits behind a long one. So requests take turns: one computes at a time,
and at every decoder step (a forward pre-hook on each model's decoder) and between engine batches (`should_stop`) the
running request hands the CPU to a waiting one whose visitor has had less CPU time lately, by more than a slice
("least attained service" per visitor, fading with time). A one-sentence request from a visitor who has not been
computing waits at most one decoder step of a heavy one, and heavy requests alternate slice by slice.

The same checkpoints cancel: a request whose visitor left (the page's `unload` event) stops at its next decoder step.
A request past 80% of its time starts no new engine batch (`should_stop`), and at its whole time the engine ends the
batch in progress (`Job.hard_deadline`, passed as `engine.translate(deadline=...)`): either way it keeps what it has
translated. Each visitor (a Gradio session) runs at most one request at a time; a second one is refused at once
with `Busy` instead of queueing.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SLICE_SECONDS = 0.05  # how far ahead of a waiting request the running one may get before it hands over the CPU
# A visitor's CPU time counts against their next requests too, fading by half every HALF_LIFE seconds: back-to-back
# requests cannot starve a long one, and a visitor who paused is served first again.
HALF_LIFE_SECONDS = 10.0


class Busy(RuntimeError):
    """The visitor already has a request running."""


class Cancelled(RuntimeError):
    """The visitor left: the request was stopped and its result is not wanted."""


@dataclass(eq=False)
class Job:
    """One request: its visitor, its deadline, the CPU time it has been served, and whether it must stop."""

    session: str
    deadline: float  # (time.monotonic()) start no new engine batch after it
    hard_deadline: float  # end the batch in progress (the engine's `deadline`), keeping what it has
    served: float = 0.0
    cancelled: bool = False
    turn_started: float | None = None
    waited: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def past_deadline(self) -> bool:
        return time.monotonic() > self.deadline


class FairScheduler:
    """Gives the CPU to one job at a time, least served first; `fair=False` lets every job run at once, as before."""

    def __init__(self, *, fair: bool = True, slice_seconds: float = SLICE_SECONDS):
        self.fair = fair
        self.slice_seconds = slice_seconds
        self._condition = threading.Condition()
        self._holder: Job | None = None
        self._waiting: list[Job] = []
        self._sessions: dict[str, Job] = {}  # visitor -> their running request (one each)
        self._local = threading.local()  # the job of the request this thread is serving
        self._service: dict[str, tuple[float, float]] = {}  # visitor -> (recent CPU seconds, when counted)

    # ------------------------------------------------------------------------------------------------ requests

    @contextmanager
    def job(self, session: str | None, seconds: float, *, exclusive: bool = True) -> Iterator[Job]:
        """Run a request's computation inside this block, taking turns; raises Busy or Cancelled.

        `exclusive` requests count against the visitor's one running request (heatmap redraws do not).
        """
        session = session or f"anonymous-{threading.get_ident()}"
        now = time.monotonic()
        # The softer deadline leaves a fifth of the time for the batch in progress to finish.
        job = Job(session, now + 0.8 * seconds, now + seconds)
        with self._condition:
            if exclusive and self.fair:  # unfair is the app as it was: no turns, no limit per visitor
                if session in self._sessions:
                    raise Busy(
                        "Your previous request is still running; this one was not started. Wait for the "
                        "first to finish (or reload the page to cancel it)."
                    )
                self._sessions[session] = job
        self._local.job = job
        try:
            self._take_turn(job)
            yield job
        finally:
            self._local.job = None
            with self._condition:
                self._end_turn(job)
                if job in self._waiting:
                    self._waiting.remove(job)
                if self._sessions.get(session) is job:
                    del self._sessions[session]
                self._hand_over()

    def checkpoint(self) -> None:
        """Called by the request's own thread at every decoder step: hand over the CPU if due; Cancelled if gone."""
        job = getattr(self._local, "job", None)
        if job is None:
            return  # not a request's computation (a test, a script)
        if job.cancelled:
            raise Cancelled(f"the visitor of session {job.session} left")
        if not self.fair:
            return
        with self._condition:
            now = time.monotonic()
            self._account(job, now - job.turn_started)
            job.turn_started = now
            mine = self._priority(job.session)
            if not any(self._priority(other.session) + self.slice_seconds < mine for other in self._waiting):
                return
            self._end_turn(job)
            self._waiting.append(job)
            self._hand_over()
        self._take_turn(job)

    def should_stop(self) -> bool:
        """The engine's `should_stop`: a turn point between batches; True past the deadline or when cancelled."""
        job = getattr(self._local, "job", None)
        if job is None:
            return False  # not a request's computation (a test, a script)
        if job.cancelled or job.past_deadline:
            return True  # between batches: stop cleanly, keeping what is translated
        self.checkpoint()
        return False

    def cancel(self, session: str | None) -> bool:
        """Stop the visitor's requests (they left); True if one was running or waiting."""
        with self._condition:
            everyone = [self._holder, *self._waiting, *self._sessions.values()]
            jobs = [job for job in everyone if job is not None and job.session == session]
            for job in jobs:
                job.cancelled = True
            self._condition.notify_all()
        return bool(jobs)

    def describe(self) -> str:
        """One line for the status endpoint: requests running and waiting for the CPU."""
        with self._condition:
            running = len(self._sessions)
            waiting = len(self._waiting)
        return f"{running} request{'s' if running != 1 else ''} in progress, {waiting} waiting for the CPU."

    @property
    def active_sessions(self) -> set[str]:
        with self._condition:
            return set(self._sessions)

    # ------------------------------------------------------------------------------------------------ turns

    def _take_turn(self, job: Job) -> None:
        if not self.fair:
            job.turn_started = time.monotonic()
            return
        asked = time.monotonic()
        with self._condition:
            if job not in self._waiting and self._holder is not job:
                self._waiting.append(job)
            self._hand_over()
            while self._holder is not job and not job.cancelled:
                self._condition.wait()
            if self._holder is not job:
                self._waiting.remove(job)
                raise Cancelled(f"the visitor of session {job.session} left")
            job.turn_started = time.monotonic()
        job.waited += job.turn_started - asked

    def _end_turn(self, job: Job) -> None:
        """Add the time since the job's turn started to what it has been served (lock held)."""
        if job.turn_started is not None:
            self._account(job, time.monotonic() - job.turn_started)
            job.turn_started = None
        if self._holder is job:
            self._holder = None

    def _account(self, job: Job, seconds: float) -> None:
        """Count CPU time to the job and (fading) to its visitor (lock held)."""
        job.served += seconds
        self._service[job.session] = (self._priority(job.session) + seconds, time.monotonic())

    def _priority(self, session: str) -> float:
        """The visitor's recent CPU seconds, halving every HALF_LIFE_SECONDS: the least comes first."""
        amount, stamp = self._service.get(session, (0.0, 0.0))
        return amount * 0.5 ** ((time.monotonic() - stamp) / HALF_LIFE_SECONDS)

    def _hand_over(self) -> None:
        """Give a free CPU to the least-served waiting job (lock held)."""
        if self._holder is None and self._waiting:
            self._holder = min(self._waiting, key=lambda job: self._priority(job.session))
            self._waiting.remove(self._holder)
            self._condition.notify_all()
