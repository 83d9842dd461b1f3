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
    served: float = 0.0  # CPU seconds of its turns
    charged: float = 0.0  # of `served`, what its session's usage already counts
    cancelled: bool = False
    watched: bool = False  # whether its session's stream is watched (`FairScheduler.is_read`)
    unread_since: float | None = None
    turn_started: float | None = None  # up to when its turn now is counted in `served` (None: not its turn)
    turn_began: float = 0.0
    waiting_since: float | None = None


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
        unread_grace_seconds: float = 5.0,
    ):
        self.aging_seconds, self.heavy_jobs, self.ordinary_seconds = aging_seconds, heavy_jobs, ordinary_seconds
        self.is_read = is_read  # session -> whether its results are read; None: every call is (scripts)
        self.side_welcome = side_welcome  # session -> whether its side work may run; None: always
        self.stream_wait_seconds, self.unread_grace_seconds = stream_wait_seconds, unread_grace_seconds
        self._usage: OrderedDict[str, tuple[float, float]] = OrderedDict()  # session -> (CPU seconds, as of when)
        self._condition = threading.Condition()
        self._holder: Job | None = None
        self._aged_last = False  # whether the present (or last) turn was an aged job's
        self._waiting: list[Job] = []
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
        session = session or f"anonymous-{threading.get_ident()}"
        lane = SIDE if side else HEAVY if work > self.ordinary_seconds else ORDINARY
        deadline, hard_deadline = start + 0.8 * seconds, start + seconds
        job = Job(session, deadline, hard_deadline, lane, watched=watched)
        with self._condition:
            if lane == HEAVY:
                self.check_room(work)
            self._jobs.append(job)
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
                self._jobs.remove(job)
                self._hand_over()

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
            now = time.monotonic()
            job.served += now - job.turn_started
            job.turn_started = now
            if now - job.turn_began < SLICE_SECONDS:
                return  # a turn lasts at least a slice
            if not any(self._comes_first(other, job) for other in self._waiting):
                return
            self._end_turn(job)
            self._waiting.append(job)
            self._hand_over()
        self._take_turn(job)

    def _comes_first(self, other: Job, running: Job) -> bool:
        (other_lane, other_used), (lane, used) = self._priority(other), self._priority(running)
        return other_lane < lane or (other_lane == lane and other_used + SLICE_SECONDS < used)

    def _priority(self, job: Job) -> tuple[int, float]:
        """Lower comes first: the lane (an aged job's first, then the better lanes'), then recent CPU use."""
        waited = 0.0 if job.waiting_since is None else time.monotonic() - job.waiting_since
        if job.lane > ORDINARY and not self._aged_last and waited >= HEAVY_AGING * self.aging_seconds:
            return (AGED, job.served)
        if job.session in self._usage:
            return (job.lane, self._recent_usage(job.session) + job.served)
        # A session new here starts level with the least-served one in the scheduler, never ahead of every visitor
        # already waiting (a client making fresh sessions in a loop gains nothing by it).
        known = [self._recent_usage(other.session) for other in self._jobs if other.session in self._usage]
        return (job.lane, min(known, default=0.0) + job.served)

    def _recent_usage(self, session: str, now: float | None = None) -> float:
        seconds, when = self._usage.get(session, (0.0, 0.0))
        now = time.monotonic() if now is None else now
        return seconds * 0.5 ** ((now - when) / USAGE_HALF_LIFE)

    def _charge(self, session: str, seconds: float) -> None:
        now = time.monotonic()
        keep_latest(self._usage, session, (self._recent_usage(session, now) + seconds, now), SESSIONS_REMEMBERED)

    def should_stop(self) -> bool:
        job = getattr(self._local, "job", None)
        if job is None:
            return False  # not a request's computation (a test, a script)
        if self._gone(job) or time.monotonic() > job.deadline:
            return True  # between batches: stop cleanly, keeping what is translated
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

    def _gone(self, job: Job) -> bool:
        """Cancelled, or nobody has read its results for `unread_grace_seconds` (said once in the log)."""
        if job.cancelled or not job.watched or self.is_read(job.session):
            job.unread_since = None
            return job.cancelled
        now = time.monotonic()
        job.unread_since = job.unread_since or now
        if now - job.unread_since >= self.unread_grace_seconds:
            job.cancelled = True
            print("app.py: nobody reads a request's results any more; it was cancelled.", flush=True)
        return job.cancelled

    def describe(self) -> str:
        with self._condition:
            running, heavy = len(self._jobs), sum(job.lane == HEAVY for job in self._jobs)
            plural, waiting = "s" if running != 1 else "", len(self._waiting)
        return f"{running} request{plural} in progress ({heavy} long), {waiting} waiting for the CPU."

    def _take_turn(self, job: Job) -> None:
        with self._condition:
            if job not in self._waiting and self._holder is not job:
                self._waiting.append(job)
            job.waiting_since = time.monotonic()
            self._hand_over()
            while self._holder is not job and not self._gone(job):
                # Woken to look again when this job ages: the running job hands over at its next checkpoint.
                self._condition.wait(timeout=self.aging_seconds)
                self._hand_over()
            job.waiting_since = None
            if self._holder is not job:
                self._waiting.remove(job)
                raise Cancelled(f"the visitor of session {job.session} left")
            job.turn_started = job.turn_began = time.monotonic()

    def _end_turn(self, job: Job) -> None:
        if job.turn_started is not None:
            job.served += time.monotonic() - job.turn_started
            job.turn_started = None
        self._charge(job.session, job.served - job.charged)
        job.charged = job.served
        if self._holder is job:
            self._holder = None

    def _hand_over(self) -> None:
        if self._holder is None and self._waiting:
            self._holder = min(self._waiting, key=self._priority)
            self._aged_last = self._priority(self._holder)[0] == AGED
            self._waiting.remove(self._holder)
            self._condition.notify_all()
