"""The one order the visitors' work takes turns on the CPU in (heavy_visitors.py; hostile_clients: heavy, busy
clients, inside redraws, views at once; arena_attacks: flood).

One request computes at a time and hands over at each search step and between engine batches to a waiting one that
comes first: by lane (translations, side work, heavy), then the session that used the least CPU lately, so a class
behind one address is served like many addresses. A lower lane's job that has waited `HEAVY_AGING` x `aging_seconds`
goes next, never two such turns in a row. A call nobody reads is dropped before it runs and stops when its reader left.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .limits import keep_latest

SLICE_SECONDS = 0.05  # how far ahead of a waiting request the running one may get before it hands over
AGING_SECONDS = 0.5  # the unit of the lower lanes' aging, and how often a waiting request looks again
HEAVY_AGING = 10
AGED, ORDINARY, SIDE, HEAVY = -1, 0, 1, 2  # the lanes, first first
USAGE_HALF_LIFE = 10.0  # seconds
SESSIONS_REMEMBERED = 4_096
UNREAD_GRACE_SECONDS = 5.0  # how long a running request's results may go unread before it stops


class Busy(RuntimeError):
    """A heavy request refused at once: as many as allowed are in flight."""


class Cancelled(RuntimeError):
    """The visitor left: the request was stopped and its result is not wanted."""


@dataclass(eq=False)
class Job:
    session: str
    deadline: float  # start no new engine batch after it (80% of its time)
    hard_deadline: float  # end the batch in progress
    lane: int = ORDINARY
    watched: bool = False  # whether its session's stream is watched (`FairScheduler.is_read`)
    cancelled: bool = False
    served: float = 0.0  # CPU seconds of its turns before the present one
    turn_began: float | None = None  # None: not its turn
    waiting_since: float | None = None  # None: not waiting for a turn
    unread_since: float | None = None


class FairScheduler:
    def __init__(
        self,
        *,
        aging_seconds: float = AGING_SECONDS,
        heavy_jobs: int = 2,
        ordinary_seconds: float = 1.5,
        is_read=None,
        side_welcome=None,
        stream_wait_seconds: float = 0.5,
    ):
        self.aging_seconds, self.heavy_jobs, self.ordinary_seconds = aging_seconds, heavy_jobs, ordinary_seconds
        self.is_read = is_read  # session -> whether its results are read; None: every call is (scripts)
        self.side_welcome = side_welcome  # session -> whether its side work may run; None: always
        self.stream_wait_seconds = stream_wait_seconds
        self._usage: OrderedDict[str, tuple[float, float]] = OrderedDict()  # session -> (CPU seconds, as of when)
        self._condition = threading.Condition()
        self._holder: Job | None = None
        self._aged_last = False  # whether the present (or last) turn was an aged job's
        self._jobs: list[Job] = []  # every admitted request, running or waiting
        self._local = threading.local()  # the job of the request this thread is serving

    @contextmanager
    def job(
        self, session: str | None, seconds: float, *, work=0.0, side=False, since: float | None = None
    ) -> Iterator[Job]:
        """A request's computation runs inside, taking turns; Busy or Cancelled. `work`: estimated CPU seconds;
        `since`: its arrival in Gradio's queue, whence its `seconds` count."""
        now = time.monotonic()
        start = now if since is None else min(since, now)
        watched = session is not None and self.is_read is not None  # an anonymous job has no stream to watch
        if side and self.side_welcome is not None and not self.side_welcome(session):
            raise Cancelled(f"the address of session {session} leaves its event streams unread")
        while watched and not self.is_read(session):  # dropped before it spends anything unless someone reads it
            if time.monotonic() >= start + self.stream_wait_seconds:
                raise Cancelled(f"nobody reads the results of session {session}")
            time.sleep(0.02)
        lane = SIDE if side else HEAVY if work > self.ordinary_seconds else ORDINARY
        session = session or f"anonymous-{threading.get_ident()}"
        job = Job(session, start + 0.8 * seconds, start + seconds, lane, watched)
        with self._condition:
            if lane == HEAVY:
                self.check_room(work)
            self._jobs.append(job)
        self._local.job = job
        try:
            with self._condition:
                self._take_turn(job)
            yield job
        finally:
            self._local.job = None
            with self._condition:
                self._end_turn(job)
                self._jobs.remove(job)

    def check_room(self, work: float) -> None:
        """Busy if a request of `work` CPU seconds is heavy and `heavy_jobs` are in flight (a caller may ask first)."""
        with self._condition:  # re-entrant: `job` asks holding it
            if work > self.ordinary_seconds and sum(other.lane == HEAVY for other in self._jobs) >= self.heavy_jobs:
                raise Busy(
                    f"This request needs about {work:.0f} s of CPU time, more than an ordinary one, and the server is "
                    f"already running as many long requests as it can ({self.heavy_jobs}), so it was not started. "
                    "Try again in a minute, or send fewer sentences or fewer beams."
                )

    def checkpoint(self) -> None:
        """At every step of the search (`engine.TurnPoint`): hand over the CPU if due; Cancelled if gone."""
        job = getattr(self._local, "job", None)
        if job is None:
            return  # not a request's computation (a test, a script)
        if self._gone(job):
            raise Cancelled(f"the visitor of session {job.session} left")
        with self._condition:
            if time.monotonic() - job.turn_began < SLICE_SECONDS:
                return  # a turn lasts at least a slice
            first = self._first_waiting()
            if first is None:
                return
            (first_lane, first_used), (lane, used) = self._priority(first), self._priority(job)
            if first_lane < lane or (first_lane == lane and first_used + SLICE_SECONDS < used):
                self._end_turn(job)
                self._take_turn(job)

    def should_stop(self) -> bool:
        """Between engine batches: whether to stop cleanly, keeping what is translated (gone, or past its deadline)."""
        job = getattr(self._local, "job", None)
        if job is not None and (self._gone(job) or time.monotonic() > job.deadline):
            return True
        self.checkpoint()
        return False

    def cancel(self, session: str | None) -> bool:
        """Stop the session's requests; True if one was running or waiting."""
        with self._condition:
            jobs = [job for job in self._jobs if job.session == session]
            for job in jobs:
                job.cancelled = True
            self._condition.notify_all()
        return bool(jobs)

    def describe(self) -> str:
        with self._condition:
            running, heavy = len(self._jobs), sum(job.lane == HEAVY for job in self._jobs)
            plural, waiting = "s" if running != 1 else "", sum(job.waiting_since is not None for job in self._jobs)
        return f"{running} request{plural} in progress ({heavy} long), {waiting} waiting for the CPU."

    def _gone(self, job: Job) -> bool:
        """Cancelled, or nobody has read its results for `UNREAD_GRACE_SECONDS` (said once in the log)."""
        if job.cancelled or not job.watched or self.is_read(job.session):
            job.unread_since = None
            return job.cancelled
        now = time.monotonic()
        job.unread_since = job.unread_since or now
        if now - job.unread_since >= UNREAD_GRACE_SECONDS:
            job.cancelled = True
            print("app.py: nobody reads a request's results any more; it was cancelled.", flush=True)
        return job.cancelled

    def _take_turn(self, job: Job) -> None:
        """Waits, holding the condition, until the CPU is handed to `job`."""
        job.waiting_since = time.monotonic()
        self._hand_over()
        while self._holder is not job:
            if self._gone(job):
                job.waiting_since = None
                raise Cancelled(f"the visitor of session {job.session} left")
            # Woken at each hand-over, and to look again as its reader may have left.
            self._condition.wait(timeout=self.aging_seconds)
        job.turn_began = time.monotonic()

    def _end_turn(self, job: Job) -> None:
        if self._holder is job:
            now = time.monotonic()
            turn, job.served = now - job.turn_began, job.served + now - job.turn_began
            keep_latest(self._usage, job.session, (self._recent_usage(job.session) + turn, now), SESSIONS_REMEMBERED)
            self._holder = job.turn_began = None
            self._hand_over()

    def _hand_over(self) -> None:
        if self._holder is None and (first := self._first_waiting()) is not None:
            self._aged_last = self._priority(first)[0] == AGED
            self._holder, first.waiting_since = first, None
            self._condition.notify_all()

    def _first_waiting(self) -> Job | None:
        return min((job for job in self._jobs if job.waiting_since is not None), key=self._priority, default=None)

    def _priority(self, job: Job) -> tuple[int, float]:
        """Lower comes first: the lane (an aged job's first, then the better lanes'), then recent CPU use."""
        now = time.monotonic()
        waited = 0.0 if job.waiting_since is None else now - job.waiting_since
        if job.lane > ORDINARY and not self._aged_last and waited >= HEAVY_AGING * self.aging_seconds:
            return (AGED, job.served)
        used = job.served + (0.0 if job.turn_began is None else now - job.turn_began)
        if job.session in self._usage:
            return (job.lane, self._recent_usage(job.session) + used)
        # A session new here starts level with the least-served one in the scheduler, never ahead of every visitor
        # already waiting (a client making fresh sessions in a loop gains nothing by it).
        known = [self._recent_usage(other.session) for other in self._jobs if other.session in self._usage]
        return (job.lane, min(known, default=0.0) + used)

    def _recent_usage(self, session: str) -> float:
        seconds, when = self._usage.get(session, (0.0, 0.0))
        return seconds * 0.5 ** ((time.monotonic() - when) / USAGE_HALF_LIFE)
