"""Battles the server issued and the rules a vote on one must pass: single use, in time, from its visitor, at a
person's pace, within a signed-in account's daily allowance; and the rate at which one source may start battles.

A battle is issued when a visitor is shown two anonymous translations; it holds everything the vote will store, so
that a vote carries nothing but its battle's id and a choice (the client never says which systems it saw). The books
live in memory and are bounded: a restart forgets open battles, which only asks their visitors to start new ones. A
vote the database cannot take now (`VoteNotStored`) puts its battle back and counts nothing against the visitor, so
the same vote can be cast again.
"""

import math
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .votes import CHOICES, Vote, VoteNotStored, VoteStore

UNKNOWN_BATTLE = "This battle is unknown or has expired: start a new one."
OTHER_VISITOR = "This battle was shown to another session: start a new one."
DAILY_VOTES = 200  # a signed-in account's votes a day
OVER_ALLOWANCE = f"This account has cast its {DAILY_VOTES} votes for today: thank you, come back tomorrow (UTC)."
TOO_MANY_BATTLES = "Many battles are being started from your network or account right now: try again in {wait} s."
SYSTEM_FAILED = "A system failed on this text, so this battle cannot be voted on: start a new one."


class BattleRefused(Exception):
    """A vote on a battle that cannot take one; the message is one line for the visitor."""


class VoteTooSoon(Exception):
    """A vote faster than a person reads two translations; the message says how long to wait."""


@dataclass(frozen=True)
class Battle:
    """Two systems' translations of one text, shown anonymously as A and B."""

    battle_id: str
    visitor: str
    system_a: str
    system_b: str
    source_text: str
    translation_a: str
    translation_b: str
    decoding_a: Mapping = field(default_factory=dict)
    decoding_b: Mapping = field(default_factory=dict)
    failed: tuple[str, ...] = ()  # the systems that failed on the text (their translation is an error)
    issued_at: float = 0.0  # on the book's clock

    def vote(self, choice: str, source: str = "", signed_in: bool = False, seconds: float | None = None) -> Vote:
        """This battle's visitor's vote for `choice`, counted for `source`, `seconds` after the battle was shown."""
        return Vote(
            battle_id=self.battle_id,
            system_a=self.system_a,
            system_b=self.system_b,
            source_text=self.source_text,
            translation_a=self.translation_a,
            translation_b=self.translation_b,
            choice=choice,
            visitor=self.visitor,
            decoding_a=self.decoding_a,
            decoding_b=self.decoding_b,
            source=source,
            signed_in=signed_in,
            seconds_to_vote=None if seconds is None else round(seconds, 3),
        )


class BattleBook:
    """The open battles: issued with an unguessable id, claimed once by their visitor within `ttl_seconds`."""

    def __init__(self, ttl_seconds: float = 1800, max_open: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_seconds = ttl_seconds
        self.max_open = max_open
        self.clock = clock
        self._open: OrderedDict[str, Battle] = OrderedDict()  # oldest first: every battle lives ttl_seconds
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def issue(
        self,
        *,
        visitor: str,
        system_a: str,
        system_b: str,
        source_text: str,
        translation_a: str,
        translation_b: str,
        decoding_a: Mapping | None = None,
        decoding_b: Mapping | None = None,
        failed: tuple[str, ...] = (),
    ) -> str:
        """Open a battle for `visitor` (a hashed session) and return its id."""
        battle_id = secrets.token_urlsafe(16)
        battle = Battle(
            battle_id,
            visitor,
            system_a,
            system_b,
            source_text,
            translation_a,
            translation_b,
            dict(decoding_a or {}),
            dict(decoding_b or {}),
            tuple(failed),
            self.clock(),
        )
        with self._lock:
            self._sweep()
            self._open[battle_id] = battle
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)  # the oldest battle goes first: its visitor has most likely left
        return battle_id

    def claim(self, battle_id: str, visitor: str) -> Battle:
        """The battle, removed from the book (a battle takes one vote); `BattleRefused` if it cannot be voted on."""
        with self._lock:
            self._sweep()
            battle = self._open.get(battle_id)
            if battle is None:
                raise BattleRefused(UNKNOWN_BATTLE)
            if battle.visitor != visitor:
                raise BattleRefused(OTHER_VISITOR)  # and left open: a stranger cannot spend someone else's battle
            del self._open[battle_id]
        if battle.failed:
            raise BattleRefused(SYSTEM_FAILED)
        return battle

    def reopen(self, battle: Battle) -> None:
        """Put a claimed battle back (its vote could not be stored), as old as it was."""
        with self._lock:
            self._open[battle.battle_id] = battle
            # The sweep expects the oldest first; a reopening is rare (a database that refused a write).
            self._open = OrderedDict(sorted(self._open.items(), key=lambda item: item[1].issued_at))

    def _sweep(self) -> None:
        deadline = self.clock() - self.ttl_seconds
        while self._open and next(iter(self._open.values())).issued_at <= deadline:
            self._open.popitem(last=False)


class VotePace:
    """At most one vote per `min_seconds` from each visitor (a hashed session, not an address, so the visitors
    behind one school's or office's address are paced one by one)."""

    def __init__(
        self, min_seconds: float = 3.0, max_visitors: int = 100_000, clock: Callable[[], float] = time.monotonic
    ):
        self.min_seconds = min_seconds
        self.max_visitors = max_visitors
        self.clock = clock
        self._last_vote: OrderedDict[str, float] = OrderedDict()  # least recent voter first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._last_vote)

    def admit(self, visitor: str) -> None:
        """Count a vote from `visitor` now, or raise `VoteTooSoon` (and count nothing) if it comes too soon."""
        now = self.clock()
        with self._lock:
            # A visitor whose last vote is min_seconds old would be admitted anyway, so forgetting them changes no
            # answer: memory holds only the voters of the last min_seconds.
            while self._last_vote and next(iter(self._last_vote.values())) <= now - self.min_seconds:
                self._last_vote.popitem(last=False)
            last = self._last_vote.get(visitor)
            if last is not None:
                wait = math.ceil(self.min_seconds - (now - last))
                raise VoteTooSoon(f"One vote every {self.min_seconds:g} seconds: wait {wait} s and vote again.")
            self._last_vote[visitor] = now
            while len(self._last_vote) > self.max_visitors:  # a flood of sessions: the least recent is let go early
                self._last_vote.popitem(last=False)

    def forget(self, visitor: str) -> None:
        """Take back `visitor`'s last counted vote (it could not be stored): they may vote again at once."""
        with self._lock:
            self._last_vote.pop(visitor, None)


class DailyAllowance:
    """At most `per_day` votes a UTC day from each signed-in account (anonymous votes are bounded by the ratings)."""

    def __init__(self, per_day: int = DAILY_VOTES, clock: Callable[[], float] = time.time):
        self.per_day, self.clock = per_day, clock
        self._day, self._used = None, Counter()  # only today's accounts are held
        self._lock = threading.Lock()

    def admit(self, account: str) -> None:
        with self._lock:
            day = int(self.clock() // 86_400)
            if day != self._day:
                self._day, self._used = day, Counter()
            if self._used[account] >= self.per_day:
                raise BattleRefused(OVER_ALLOWANCE)
            self._used[account] += 1

    def give_back(self, account: str) -> None:
        with self._lock:
            if self._used[account] > 0:
                self._used[account] -= 1


class BattleRate:
    """How fast one source (a signed-in account, else a network) may start battles: a bucket of `burst` battles,
    refilled at `per_second`. A class of 60 behind one address, each reading a battle, voting and starting the next
    every two minutes or so, stays inside it; a script's sessions from that address share it, whatever their number,
    at about what one core decodes beside a visitor (two translations a battle)."""

    def __init__(
        self,
        per_second: float = 0.5,
        burst: float = 60.0,
        max_sources: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.per_second, self.burst, self.max_sources, self.clock = per_second, burst, max_sources, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (tokens, as of when)
        self._lock = threading.Lock()

    def admit(self, source: str) -> None:
        """Take one battle from `source`'s bucket, or raise `BattleRefused` saying how long to wait."""
        now = self.clock()
        with self._lock:
            tokens, when = self._buckets.pop(source, (self.burst, now))
            tokens = min(self.burst, tokens + (now - when) * self.per_second)
            if tokens < 1:
                self._buckets[source] = (tokens, now)
                raise BattleRefused(TOO_MANY_BATTLES.format(wait=math.ceil((1 - tokens) / self.per_second)))
            self._buckets[source] = (tokens - 1, now)
            while len(self._buckets) > self.max_sources:  # the least recent source is let go: it starts full again
                self._buckets.popitem(last=False)


@dataclass(frozen=True)
class Ballot:
    """A vote as cast: on which battle, by which visitor (a hashed session), for what; the source the ratings count it
    for (`VoteStore.source_hash`) and whether that is a signed-in account (then paced and bounded as the account)."""

    battle_id: str
    visitor: str
    choice: str
    source: str = ""
    signed_in: bool = False


def cast_vote(
    ballot: Ballot,
    *,
    book: BattleBook,
    pace: VotePace,
    store: VoteStore,
    allowance: DailyAllowance | None = None,
    cast_at: float | None = None,
) -> Battle:
    """Check a vote against every rule and store it; the battle comes back so the page can reveal the systems.

    The pace (per account when signed in, else per session) is checked before the battle is claimed: a vote too soon
    leaves the battle open for a second try. A vote the database cannot take puts everything back (`VoteNotStored`).
    `cast_at` (the book's clock) is when the vote was sent, if it waited in a queue before this call.
    """
    if ballot.choice not in CHOICES:
        raise ValueError(f"A vote is one of {', '.join(CHOICES)}; this one was not.")  # never echoed: any size
    paced = ballot.source if ballot.signed_in else ballot.visitor
    allowed = allowance if ballot.signed_in else None
    pace.admit(paced)
    counted = False
    try:
        if allowed is not None:
            allowed.admit(ballot.source)
            counted = True
        battle = book.claim(ballot.battle_id, ballot.visitor)
        try:
            seconds = (book.clock() if cast_at is None else cast_at) - battle.issued_at  # from shown to sent
            store.add(battle.vote(ballot.choice, ballot.source, ballot.signed_in, seconds))
        except VoteNotStored:
            book.reopen(battle)
            raise
    except (BattleRefused, VoteNotStored):
        pace.forget(paced)  # nothing was stored: the visitor may vote again at once, within the same allowance
        if counted:
            allowed.give_back(ballot.source)
        raise
    return battle
