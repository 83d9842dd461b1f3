"""The server's limits in one object, `Limits`: each a flag of app.py whose default is LIMIT_<NAME> if set, else the
value here (measured on the shipped model, one core); and `RateLimit`, the token bucket clients are paced with."""

import argparse
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields


class RateLimit:
    """Per key, `burst` admissions at once and one more every `interval` seconds (GCRA): a drained key has a token
    again within `interval`, where a window (the `limits` library's) refuses it up to a whole window (hostile_clients:
    one session's views after the churn). At most `max_keys` are held, the least recent forgotten first."""

    def __init__(
        self, interval: float, burst: float, max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic
    ):
        self.interval, self.burst, self.max_keys, self.clock = interval, burst, max_keys, clock
        self._full_at: OrderedDict[Hashable, float] = OrderedDict()  # least recently admitted first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._full_at)

    def take(self, key: Hashable) -> float:
        """The seconds `key` must wait for a token: 0.0 when it had one and took it (a refusal takes nothing)."""
        now = self.clock()
        with self._lock:
            while self._full_at and next(iter(self._full_at.values())) <= now:
                self._full_at.popitem(last=False)
            full_at = max(self._full_at.get(key, now), now)
            wait = full_at - (self.burst - 1) * self.interval - now
            if wait > 0:
                return wait
            keep_latest(self._full_at, key, full_at + self.interval, self.max_keys)
        return 0.0

    def give_back(self, key: Hashable) -> None:
        with self._lock:
            if key in self._full_at:
                self._full_at[key] -= self.interval


def keep_latest(table: OrderedDict, key, value, most: int) -> None:
    """`table[key] = value` as its newest entry, the least recent forgotten past `most` entries."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > most:
        table.popitem(last=False)


def limit(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Budget:
    """What one request may take."""

    cpu_seconds: float = field(metadata={"help": "estimated CPU seconds of decoding (decoding/budget.py)"})
    seconds: float = field(
        metadata={"help": "seconds from its arrival (at 80% it starts no new batch, at 100% the batch ends)"}
    )


@dataclass(frozen=True)
class Limits:
    max_beams: int = limit(8, "beams a request may ask for")
    max_new_tokens: int = limit(255, "tokens of a sentence's translation")
    max_input_chars: int = limit(3_000, "characters of a text; a longer one is cut (and says so)")
    max_reference_chars: int = limit(10_000, "characters of a reference; a longer one is not scored (nor cut)")
    max_reference_lines: int = limit(200, "lines of a reference")
    # 3,000 characters of emoji, JSON-escaped, are 36 kB; a reference at its limit 120 kB.
    max_body_bytes: int = limit(256_000, "bytes of a request's body, an upload's aside")
    max_sentence_words: int = limit(30, "words of a sentence; a longer one is translated in parts (trained: ~40)")
    max_file_bytes: int = limit(1_000_000, "bytes of a file to translate, also the server's upload cap")
    max_file_lines: int = limit(2_000, "lines of a file to translate")
    text: Budget = limit(Budget(8.0, 25.0), "a text's request (3,000 characters in 30-word parts at 8 beams: ~7 s)")
    file: Budget = limit(Budget(60.0, 120.0), "a file's request")
    batch_size: int = limit(8, "sentences per engine batch")
    heavy_jobs: int = limit(2, "heavy requests at once; more are refused")
    score_seconds_per_char: float = limit(2.5e-6, "sacreBLEU's BLEU and chrF on one core, counted against the budget")
    # With side_jobs under the 40 a mounted page runs, less two for events outside the groups (`__init__.py`).
    concurrent_jobs: int = limit(24, "translations' callbacks at once in Gradio's queue")
    side_jobs: int = limit(14, "side work's callbacks at once in Gradio's queue, in slots of their own")
    stream_wait_seconds: float = limit(2.0, "a call nobody reads within this long of its arrival is dropped")
    # A 200 kB view drains in 5 s over a slow mobile link.
    stalled_send_seconds: float = limit(10.0, "a send to an event stream that waits this long is stalled")
    stalled_streams_per_address: int = limit(8, "stalled sends of an address past which it gets no side work")
    new_sessions_per_address_per_second: float = limit(2.0, "new sessions an address may open a second past its burst")
    # A class opening the page is within the burst; a loop cannot push out Gradio's 10,000.
    new_sessions_per_address_burst: int = limit(100, "new sessions an address may open at once")
    # 45 a second from one address held the event loop from a visitor's translation.
    board_reads_per_address_burst: int = limit(60, "leaderboard reads of an address at once")
    board_reads_per_address_per_second: float = limit(1.0, "leaderboard reads of an address a second past its burst")
    uploads_per_address: int = limit(100, "uploads an address may keep")
    upload_seconds: float = limit(900.0, "seconds an upload is kept")
    request_seconds: float = limit(30.0, "seconds to send a whole body (1 MB at 300 kbit/s)")

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """A flag per limit (a budget's two: --text_cpu_seconds, --text_seconds)."""
        group = parser.add_argument_group("limits", "the server's limits (environment: LIMIT_<NAME>)")
        for name, default, help in flags(cls()):
            # argparse parses a string default as it parses the flag: a bad LIMIT_ value is a one-line usage error.
            value = os.environ.get(f"LIMIT_{name.upper()}", default)
            help = help.replace("%", "%%") + " (default %(default)s)"
            group.add_argument(f"--{name}", type=type(default), default=value, help=help)
        # A limit that became a constant, or a misspelt one, would otherwise be ignored without a word.
        known = {f"LIMIT_{name.upper()}" for name, _, _ in flags(cls())}
        for unknown in sorted(name for name in os.environ if name.startswith("LIMIT_") and name not in known):
            print(
                f"app.py: {unknown} names no limit of this server (--help lists them); it is ignored.", file=sys.stderr
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Limits":
        values = {name: getattr(args, name) for name, _, _ in flags(cls())}
        for name, default in vars(cls()).items():
            if isinstance(default, Budget):
                values[name] = Budget(values.pop(f"{name}_cpu_seconds"), values.pop(f"{name}_seconds"))
        return cls(**values)


def flags(limits: Limits):
    """(flag name, value, help) of every limit, a budget's parts after it."""
    for item in fields(limits):
        value, help = getattr(limits, item.name), item.metadata["help"]
        if isinstance(value, Budget):
            for part in fields(value):
                yield f"{item.name}_{part.name}", getattr(value, part.name), f"{help}: {part.metadata['help']}"
        else:
            yield item.name, value, help
