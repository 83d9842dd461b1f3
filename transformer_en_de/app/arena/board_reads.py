"""The leaderboard as pages read it: worked out again after a vote was stored here (or `FRESH_SECONDS` after, for a
writer elsewhere), drawn again when its table changed, sent to a session only when it changed since that session saw
it: sixty pages reading back to back cost one working-out, and a page showing the board gets nothing."""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..serving.limits import keep_latest

FRESH_SECONDS = 10.0  # a vote stored by another process shows on the board at most this long after
SESSIONS_REMEMBERED = 4_096  # sessions whose last board is remembered (the least recent go first)


class BoardReads:
    """`table()` gives (the board's rows, its Markdown table); `draw(rows)` the plot as sent to the page."""

    def __init__(self, table: Callable, draw: Callable, fresh_seconds=FRESH_SECONDS, clock=time.monotonic):
        self.table, self.draw, self.fresh_seconds, self.clock = table, draw, fresh_seconds, clock
        self._answer: tuple[str, object] | None = None
        self._version, self._worked_out = 0, float("-inf")
        self._seen: OrderedDict[str, int] = OrderedDict()  # session -> the version it was sent
        self._lock = threading.Lock()  # one reader works the board out; the others wait for it and share it

    def vote_stored(self) -> None:
        with self._lock:
            self._worked_out = float("-inf")

    def is_fresh(self) -> bool:
        """Whether a read now costs nothing but a comparison (the caller may then skip its turn on the CPU)."""
        with self._lock:
            return self._answer is not None and self.clock() - self._worked_out < self.fresh_seconds

    def read(self, session: str | None) -> tuple[str, object] | None:
        """(table, picture), or None when `session` was sent this one already."""
        with self._lock:
            now = self.clock()
            if self._answer is None or now - self._worked_out >= self.fresh_seconds:
                rows, table = self.table()
                if self._answer is None or table != self._answer[0]:
                    self._answer, self._version = (table, self.draw(rows)), self._version + 1
                self._worked_out = now
            if session is None:
                return self._answer
            seen = self._seen.get(session)
            keep_latest(self._seen, session, self._version, SESSIONS_REMEMBERED)
            return None if seen == self._version else self._answer
