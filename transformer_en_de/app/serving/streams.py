"""The responses that stay open (event streams, heartbeats, downloads): how many of each key are open (`Open`), and
which event streams their clients do not read (`Stalls`), by address.

A client can open a session's event stream and never read it: the call's answer (an Inside view is ~200 kB of JSON)
is computed, encoded, and then held in the server's memory, because uvicorn's `send` waits for the client to take the
bytes (its flow control) and Gradio keeps the session's later messages behind it. Which streams those are is known
only there: a `send` that has waited `stalled_seconds` is stalled. An address with `most` stalled streams gets no
more side work (looks inside, pictures, battles) until it reads them: the scheduler drops that work before it runs
(`FairScheduler.side_welcome`), so 100 unread views cost the server a few views, not 100. Translations are never
refused this way: a class on a congested link still gets them.
"""

import threading
import time
from collections import Counter
from contextlib import contextmanager


class Stalls:
    """The sends to event streams in progress, by address: which have waited long enough to count as unread."""

    def __init__(self, stalled_seconds: float, most: int):
        self.stalled_seconds, self.most = stalled_seconds, most
        self._pending: dict[object, tuple[str, float]] = {}  # a send in progress → (its address, since when)
        self._lock = threading.Lock()

    def watched(self, address: str, send):
        """`send` (an ASGI send of an event stream to `address`), each call watched while it waits."""

        async def watched_send(message):
            token = object()
            with self._lock:
                self._pending[token] = (address, time.monotonic())
            try:
                await send(message)
            finally:
                with self._lock:
                    del self._pending[token]

        return watched_send

    def stalled(self, address: str) -> int:
        """How many of `address`'s streams have a send waiting `stalled_seconds` or more."""
        since = time.monotonic() - self.stalled_seconds
        with self._lock:
            return sum(owner == address and started <= since for owner, started in self._pending.values())

    def welcome(self, address: str | None) -> bool:
        """Whether side work of `address` may run: fewer than `most` of its streams stalled."""
        return address is None or self.stalled(address) < self.most


class Open:
    """How many responses of each key (a session, an address) are open now."""

    def __init__(self):
        self._open = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def open(self, key: str, most: float = float("inf")):
        """Yields False, without counting, if `key` already has `most` open; else counts one while the block runs and
        yields True."""
        with self._lock:
            admitted = self._open[key] < most
            self._open[key] += admitted
        try:
            yield admitted
        finally:
            with self._lock:
                self._open[key] -= admitted
                if self._open[key] <= 0:
                    del self._open[key]

    def is_read(self, key: str | None) -> bool:
        """Whether a response of `key` is open (for the readers: whether the session's results are being read)."""
        with self._lock:
            return key is not None and self._open.get(key, 0) > 0
