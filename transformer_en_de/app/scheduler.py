"""Admission and turns on the CPU for the visitors' requests: by the work a request carries, not by who sends it.

Generation on a CPU is one long computation per request; run side by side, requests slow each other down, and run
one after another, a one-sentence request waits behind a long one. So requests take turns: one computes at a time,
and at every decoder step (`take_turns_at_each_decoder_step`: a forward pre-hook on each model's decoder) and between
engine batches (`should_stop`) the running request hands the CPU to a waiting one that comes first.

What comes first rests on what was sent, never on who sent it: a client chooses its session (a raw API call without
one gets a fresh session each time) and on one machine every client may share one address. Each request arrives with
its estimated CPU seconds (`limits.plan_work`). Ordinary requests (a few sentences at the page's defaults) have a lane
of their own, served before any heavy one, shortest remaining work first: one of them waits at most one decoder step of
a heavy request. Heavy requests alternate slice by slice (least served first). No admitted request starves: an ordinary
request that has waited `aging_seconds` in all is aged for good, and the aged ones go before every other request,
alternating slice by slice (least served first), so a stream of shorter requests cannot keep one waiting; a heavy
request waiting `HEAVY_AGING` times as long at a stretch gets a turn too. A turn lasts at least a slice. Only
`heavy_jobs` heavy requests are in flight at once: beyond that a heavy request is refused at once with `Full` (a
message in words). An address the operator trusts (the last X-Forwarded-For hop behind a proxy) may further hold
`heavy_jobs_per_address`.

The same checkpoints cancel: a request whose visitor left (the page's `unload` event, or a raw client gone) stops at its
next decoder step. A request past 80% of its time starts no new engine batch (`should_stop`), and at its whole time
the engine ends the batch in progress (`Job.hard_deadline`, passed as `engine.translate(deadline=...)`): either way it
keeps what it has translated. The time counts from when the request entered Gradio's queue, where the HTTP front
knows it (`guard.Gate.serving`): a wait for a free callback is part of it, and counts towards its aging. A session
runs one request at a time (a page's second click is refused with `Busy`): a convenience for pages, not a limit anyone
relies on. Nothing is kept per session once its request ends.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SLICE_SECONDS = 0.05  # how far ahead of a waiting request the running one may get before it hands over the CPU
AGING_SECONDS = 0.5  # an ordinary request waiting this long in all goes first from then on
HEAVY_AGING = 10  # a heavy request waiting this many times as long at a stretch gets a turn
AGED, ORDINARY, HEAVY = -1, 0, 1  # the lanes: aged first, then every ordinary request before any heavy one


class Busy(RuntimeError):
    """The request was not started (the visitor's previous one is still running, or the server is full); the message
    says why and what to do."""


class Full(Busy):
    """A heavy request refused at once: as many heavy requests as allowed are in flight."""


class Cancelled(RuntimeError):
    """The visitor left: the request was stopped and its result is not wanted."""


@dataclass(eq=False)
class Job:
    """One request: its visitor, lane and estimated work, its deadlines, the CPU time it has been served, and whether
    it must stop."""

    session: str
    deadline: float  # (time.monotonic()) start no new engine batch after it
    hard_deadline: float  # end the batch in progress (the engine's `deadline`), keeping what it has
    lane: int = ORDINARY
    work: float = 0.0  # estimated CPU seconds
    address: str | None = None  # a trusted client address, for the per-address limit on heavy requests
    served: float = 0.0
    cancelled: bool = False
    turn_started: float | None = None
    turn_began: float = 0.0  # (time.monotonic()) when its present turn began
    waiting_since: float | None = None  # (time.monotonic()) since when it has waited for the CPU, if it does
    waited: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def past_deadline(self) -> bool:
        return time.monotonic() > self.deadline

    def priority(self, aging_seconds: float = AGING_SECONDS) -> tuple[int, float]:
        """Lower comes first: aged jobs (least served first), then the lane, then the remaining work (ordinary) or the
        work served so far (heavy)."""
        waiting = time.monotonic() - self.waiting_since if self.waiting_since is not None else 0.0
        if self.lane == ORDINARY and self.waited + waiting >= aging_seconds:
            return (AGED, self.served)
        if self.lane == HEAVY and waiting >= HEAVY_AGING * aging_seconds:
            return (AGED, self.served)
        return (self.lane, max(self.work - self.served, 0.0) if self.lane == ORDINARY else self.served)


class FairScheduler:
    """Gives the CPU to one job at a time: aged first, then ordinary before heavy."""

    def __init__(
        self,
        *,
        slice_seconds: float = SLICE_SECONDS,
        aging_seconds: float = AGING_SECONDS,
        heavy_jobs: int = 2,
        heavy_jobs_per_address: int = 1,
        ordinary_seconds: float = 1.5,
    ):
        self.slice_seconds = slice_seconds
        self.aging_seconds = aging_seconds
        self.heavy_jobs = heavy_jobs
        self.heavy_jobs_per_address = heavy_jobs_per_address
        self.ordinary_seconds = ordinary_seconds  # for `check_room`: no heavier is ordinary
        self._condition = threading.Condition()
        self._holder: Job | None = None
        self._waiting: list[Job] = []
        self._jobs: list[Job] = []  # every admitted request, running or waiting
        self._local = threading.local()  # the job of the request this thread is serving

    # ------------------------------------------------------------------------------------------------ requests

    @contextmanager
    def job(
        self,
        session: str | None,
        seconds: float,
        *,
        heavy: bool = False,
        work: float = 0.0,
        address: str | None = None,
        since: float | None = None,
    ) -> Iterator[Job]:
        """Run a request's computation inside this block, taking turns; raises Busy (Full) or Cancelled.

        `heavy` requests are bounded in number (`heavy_jobs`, and `heavy_jobs_per_address` for a trusted `address`);
        `work` is the estimate that orders ordinary ones. A session has one request running at a time. `since`
        (time.monotonic()): when the request arrived, if it waited before its callback ran (in Gradio's queue); its
        `seconds` count from then, and the wait counts towards its aging.
        """
        session = session or f"anonymous-{threading.get_ident()}"
        now = time.monotonic()
        start = now if since is None else min(since, now)
        # The softer deadline leaves a fifth of the time for the batch in progress to finish.
        lane = HEAVY if heavy else ORDINARY
        deadline, hard_deadline = start + 0.8 * seconds, start + seconds
        job = Job(session, deadline, hard_deadline, lane, work, address, waited=now - start, started=start)
        with self._condition:
            if any(other.session == job.session for other in self._jobs):
                raise Busy(
                    "Your previous request is still running; this one was not started. Wait for the first to finish "
                    "(or reload the page to cancel it)."
                )
            if heavy:
                self._admit_heavy(work, address)
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

    def check_room(self, work: float, address: str | None = None) -> None:
        """Full at once if a request of at least `work` CPU seconds would be heavy and could not be admitted now: a
        caller may ask before doing anything costly with a request (its `work` a lower bound of the estimate)."""
        if work <= self.ordinary_seconds:
            return
        with self._condition:
            self._admit_heavy(work, address)

    def _admit_heavy(self, work: float, address: str | None) -> None:
        """Full unless a heavy request of `work` CPU seconds from `address` may start (lock held)."""
        heavy = [other for other in self._jobs if other.lane == HEAVY]
        advice = f"This request needs about {work:.0f} s of CPU time, more than an ordinary one, and"
        if len(heavy) >= self.heavy_jobs:
            raise Full(
                f"{advice} the server is already running as many long requests as it can ({self.heavy_jobs}), so it "
                "was not started. Try again in a minute, or send fewer sentences or fewer beams."
            )
        mine = [other for other in heavy if address is not None and other.address == address]
        if len(mine) >= self.heavy_jobs_per_address:
            raise Full(
                f"{advice} your address already has a long request running, so it was not started. Wait for it to "
                "finish, or send fewer sentences or fewer beams."
            )

    def take_turns_at_each_decoder_step(self, model) -> None:
        """Make every decoder step of `model` a turn point (`checkpoint`): there, inside `generate()`, the request may
        wait while another one runs, or stop with Cancelled. A forward pre-hook on the decoder, not the whole model:
        generation loops may call the decoder directly (ours does, in its compact beam search)."""
        model.get_decoder().register_forward_pre_hook(lambda module, args: self.checkpoint())

    def checkpoint(self) -> None:
        """Called by the request's own thread at every decoder step: hand over the CPU if due; Cancelled if gone."""
        job = getattr(self._local, "job", None)
        if job is None:
            return  # not a request's computation (a test, a script)
        if job.cancelled:
            raise Cancelled(f"the visitor of session {job.session} left")
        with self._condition:
            now = time.monotonic()
            job.served += now - job.turn_started
            job.turn_started = now
            if now - job.turn_began < self.slice_seconds:
                return  # a turn lasts at least a slice
            if not any(self._comes_first(other, job) for other in self._waiting):
                return
            self._end_turn(job)
            self._waiting.append(job)
            self._hand_over()
        self._take_turn(job)

    def _comes_first(self, other: Job, running: Job) -> bool:
        """Whether a waiting job should take the CPU from the running one: a better lane, or more than a slice ahead
        in its own."""
        (other_lane, other_key), (lane, key) = other.priority(self.aging_seconds), running.priority(self.aging_seconds)
        return other_lane < lane or (other_lane == lane and other_key + self.slice_seconds < key)

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
        """Stop the session's requests (the visitor left); True if one was running or waiting."""
        with self._condition:
            jobs = [job for job in self._jobs if job.session == session]
            for job in jobs:
                job.cancelled = True
            self._condition.notify_all()
        return bool(jobs)

    def sessions(self) -> set[str]:
        """The sessions whose requests are running or waiting for the CPU."""
        with self._condition:
            return {job.session for job in self._jobs}

    def describe(self) -> str:
        """One line for the status endpoint: requests running and waiting for the CPU."""
        with self._condition:
            running = len(self._jobs)
            heavy = sum(job.lane == HEAVY for job in self._jobs)
            waiting = len(self._waiting)
        return (
            f"{running} request{'s' if running != 1 else ''} in progress ({heavy} long), {waiting} waiting for the CPU."
        )

    # ------------------------------------------------------------------------------------------------ turns

    def _take_turn(self, job: Job) -> None:
        asked = time.monotonic()
        with self._condition:
            if job not in self._waiting and self._holder is not job:
                self._waiting.append(job)
            job.waiting_since = asked
            self._hand_over()
            while self._holder is not job and not job.cancelled:
                # Woken to look again when this job ages: the running job hands over at its next checkpoint.
                self._condition.wait(timeout=self.aging_seconds)
                self._hand_over()
            job.waiting_since = None
            if self._holder is not job:
                self._waiting.remove(job)
                raise Cancelled(f"the visitor of session {job.session} left")
            job.turn_started = job.turn_began = time.monotonic()
        job.waited += job.turn_started - asked

    def _end_turn(self, job: Job) -> None:
        """Add the time since the job's turn started to what it has been served (lock held)."""
        if job.turn_started is not None:
            job.served += time.monotonic() - job.turn_started
            job.turn_started = None
        if self._holder is job:
            self._holder = None

    def _hand_over(self) -> None:
        """Give a free CPU to the waiting job that comes first (lock held)."""
        if self._holder is None and self._waiting:
            self._holder = min(self._waiting, key=lambda job: job.priority(self.aging_seconds))
            self._waiting.remove(self._holder)
            self._condition.notify_all()
