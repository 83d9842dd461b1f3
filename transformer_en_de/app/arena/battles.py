"""The rules a vote must pass (`Arena.cast_vote` applies them): its battle issued here, single use, in time, from its
visitor; a person's pace; a signed-in account's daily allowance; and how fast one source may start battles. A vote
carries only a battle's id and a choice (never which systems were seen); the books are in memory, bounded (a restart
only asks open battles' visitors to start again)."""

import math
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields

from ..serving.limits import RateLimit
from .votes import Refused, Shown, Vote

UNKNOWN_BATTLE = "This battle is unknown or has expired: start a new one."
OTHER_VISITOR = "This battle was shown to another session: start a new one."
DAILY_VOTES = 200  # a signed-in account's votes a day
OVER_ALLOWANCE = f"This account has cast its {DAILY_VOTES} votes for today: thank you, come back tomorrow (UTC)."
TOO_MANY_BATTLES = "Many battles are being started from your network or account right now: try again in {wait} s."
TOO_SOON = "One vote every {every:g} seconds: wait {wait} s and vote again."
SYSTEM_FAILED = "A system failed on this text, so this battle cannot be voted on: start a new one."


class BattleRefused(Refused):
    pass


class VoteTooSoon(Refused):  # faster than a person reads two translations
    pass


@dataclass(frozen=True, kw_only=True)
class Battle(Shown):
    """Two systems' translations of one text, shown anonymously as A and B."""

    failed: tuple[str, ...] = ()  # the systems that failed on the text
    issued_at: float = 0.0  # on the book's clock

    def vote(self, choice: str, source: str = "", signed_in: bool = False, seconds: float | None = None) -> Vote:
        shown = {name.name: getattr(self, name.name) for name in fields(Shown)}
        seconds = None if seconds is None else round(seconds, 3)
        return Vote(**shown, choice=choice, source=source, signed_in=signed_in, seconds_to_vote=seconds)


class BattleBook:
    """The open battles: issued with an unguessable id, claimed once by their visitor within `ttl_seconds`."""

    def __init__(self, ttl_seconds: float = 1800, max_open: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_seconds, self.max_open, self.clock = ttl_seconds, max_open, clock
        self._open: OrderedDict[str, Battle] = OrderedDict()  # oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def issue(self, **shown) -> str:  # `Battle`'s fields: visitor, system_a, ...
        battle = Battle(battle_id=secrets.token_urlsafe(16), **shown, issued_at=self.clock())
        with self._lock:
            self._sweep()
            self._open[battle.battle_id] = battle
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)  # the oldest first: its visitor has most likely left
        return battle.battle_id

    def claim(self, battle_id: str, visitor: str) -> Battle:
        """The battle, removed from the book (a battle takes one vote); `BattleRefused` if it cannot be voted on."""
        with self._lock:
            self._sweep()
            battle = self._open.get(battle_id)
            if battle is None:
                raise BattleRefused(UNKNOWN_BATTLE)
            if battle.visitor != visitor:
                raise BattleRefused(OTHER_VISITOR)  # left open: a stranger cannot spend someone else's battle
            del self._open[battle_id]
        if battle.failed:
            raise BattleRefused(SYSTEM_FAILED)
        return battle

    def reopen(self, battle: Battle) -> None:
        """Put a claimed battle back (its vote could not be stored), as old as it was."""
        with self._lock:
            self._open[battle.battle_id] = battle
            self._open = OrderedDict(sorted(self._open.items(), key=lambda item: item[1].issued_at))

    def _sweep(self) -> None:
        deadline = self.clock() - self.ttl_seconds
        while self._open and next(iter(self._open.values())).issued_at <= deadline:
            self._open.popitem(last=False)


class Paced:
    """A limit whose `take(key)` is the seconds `key` must wait (0: admitted and counted, until `give_back`); its
    refusal is a `refusal(message)` for the visitor, saying how long to wait."""

    refusal: type[Exception]
    message: str

    def admit(self, key: str) -> None:
        if wait := self.take(key):
            raise self.refusal(self.message.format(every=self.interval, wait=math.ceil(wait)))


class VotePace(Paced, RateLimit):
    """One vote per `min_seconds` from each visitor (a hashed session, or a signed-in account), so the
    visitors behind one school's address are paced one by one."""

    refusal, message = VoteTooSoon, TOO_SOON

    def __init__(self, min_seconds: float = 3.0, max_visitors: int = 100_000, clock=time.monotonic):
        super().__init__(min_seconds, 1, max_visitors, clock)


class BattleRate(Paced, RateLimit):
    """How fast one source (a signed-in account, else a network) may start battles. A class of 60 behind one
    address, each starting a battle every two minutes or so, stays inside it; a script's sessions from that address
    share it, at about what one core decodes beside a visitor."""

    refusal, message = BattleRefused, TOO_MANY_BATTLES

    def __init__(self, per_second: float = 0.5, burst: float = 60.0, clock=time.monotonic):
        super().__init__(1 / per_second, burst, 100_000, clock)  # sources remembered


class DailyAllowance(Paced):
    """At most `per_day` votes a UTC day from each signed-in account (anonymous votes are bounded by the ratings)."""

    refusal, message, interval = BattleRefused, OVER_ALLOWANCE, 86_400

    def __init__(self, per_day: int = DAILY_VOTES, clock: Callable[[], float] = time.time):
        self.per_day, self.clock = per_day, clock
        self._day, self._used = None, Counter()  # only today's accounts are held
        self._lock = threading.Lock()

    def take(self, account: str) -> float:
        with self._lock:
            now = self.clock()
            if (day := int(now // self.interval)) != self._day:
                self._day, self._used = day, Counter()
            if self._used[account] >= self.per_day:
                return (day + 1) * self.interval - now  # until the next UTC day
            self._used[account] += 1
            return 0.0

    def give_back(self, account: str) -> None:
        with self._lock:
            self._used[account] = max(0, self._used[account] - 1)
