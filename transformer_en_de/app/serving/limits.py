"""The server's limits in one object, `Limits`: each is a command-line flag of app.py (`Limits.add_flags`), whose
default is the environment variable LIMIT_<NAME> if set, else the value here (measured on the shipped model, one core).
`RateLimit` is the token bucket the front and the arena pace their clients with.
"""

import argparse
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass


class RateLimit:
    """Per key, `burst` admissions at once and one more every `interval` seconds: a token bucket, kept as the time it
    is full again (GCRA). A key a script drained has a token again within `interval`, where a window (the `limits`
    library's) would refuse it for up to a whole window (hostile_clients: one session's views after the churn). A full
    bucket changes no answer and is forgotten; at most `max_keys` are held, the least recently admitted go first."""

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
            self._full_at.pop(key, None)
            self._full_at[key] = full_at + self.interval
            while len(self._full_at) > self.max_keys:  # a flood of keys: the least recent go early
                self._full_at.popitem(last=False)
        return 0.0

    def give_back(self, key: Hashable) -> None:
        """Return `key`'s last token (what it was for did not happen)."""
        with self._lock:
            if key in self._full_at:
                self._full_at[key] -= self.interval


@dataclass(frozen=True)
class Budget:
    """What one request may take: estimated CPU seconds of decoding (`decoding/budget.py`), and seconds on the clock
    from its arrival (at 80% it starts no new batch, at 100% the batch in progress ends)."""

    cpu_seconds: float
    seconds: float


@dataclass(frozen=True)
class Limits:
    max_beams: int = 8
    max_new_tokens: int = 255
    max_input_chars: int = 3_000  # a longer text is cut (and says so)
    max_reference_chars: int = 10_000  # a longer reference is not scored (a cut one would score wrong)
    max_reference_lines: int = 200
    # Every body but an upload's: 3,000 characters of emoji, JSON-escaped, are 36 kB; a reference at its limit 120 kB.
    max_body_bytes: int = 256_000
    max_sentence_words: int = 30  # longer sentences are translated in parts (trained on up to ~40 words)
    max_file_bytes: int = 1_000_000  # also the server's upload cap
    max_file_lines: int = 2_000
    text: Budget = Budget(cpu_seconds=8.0, seconds=25.0)  # 3,000 characters in 30-word parts at 8 beams: ~7 s
    file: Budget = Budget(cpu_seconds=60.0, seconds=120.0)
    batch_size: int = 8  # sentences per engine batch
    # A request estimated above this is heavy: only `heavy_jobs` of those at once, more refused (scheduler.py).
    ordinary_cpu_seconds: float = 1.5
    heavy_jobs: int = 2
    score_seconds_per_char: float = 2.5e-6  # sacreBLEU's BLEU and chrF on one core, counted against the budget
    # Gradio's queue: callbacks at once for translations and for side work (together under the 40 a mounted page runs,
    # less two for events outside the groups: `__init__.py`), and calls waiting beyond them.
    concurrent_jobs: int = 24
    side_jobs: int = 14
    queue_size: int = 128
    # A call nobody reads within this long of its arrival is dropped; a running one stops after the grace.
    stream_wait_seconds: float = 2.0
    unread_grace_seconds: float = 5.0
    # An address with this many event streams whose send waits this long gets no side work until it reads them.
    stalled_send_seconds: float = 10.0  # a 200 kB view drains in 5 s over a slow mobile link
    stalled_streams_per_address: int = 8
    memory_sweep_seconds: float = 60.0  # glibc's free heap is given back this often
    own_pages_bytes: int = 262_144  # blocks this large get pages of their own, returned when freed
    # New sessions per address: a class opening the page is within the burst; a loop cannot push out Gradio's 10,000.
    new_sessions_per_address_per_second: float = 2.0
    new_sessions_per_address_burst: int = 100
    # Leaderboard reads per address: 45 a second from one address held the event loop from a visitor's translation.
    board_reads_per_address_burst: int = 60
    board_reads_per_address_per_second: float = 1.0
    calls_per_session: int = 1  # queued or running: a page runs one at a time
    files_per_upload: int = 4
    uploads_in_progress_per_address: int = 4
    uploads_per_address: int = 100
    upload_bytes_per_address: int = 50_000_000
    upload_total_bytes: int = 200_000_000
    upload_block_bytes: int = 4_096  # what the smallest file costs the disk
    upload_disk_margin_bytes: int = 100_000_000  # free disk an upload must leave
    upload_seconds: float = 900.0  # how long an upload is kept
    max_connections: int = 10_000  # past them a request is answered 503
    request_seconds: float = 30.0  # to send a whole body: 1 MB at 300 kbit/s
    keep_alive_seconds: float = 5.0
    max_header_bytes: int = 16_384
    streams_per_address: int = 256  # responses that stay open: a class of 30 holds about 60

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """A flag per limit (a budget's two: --text_cpu_seconds, --text_seconds), its default LIMIT_<NAME> if set."""
        group = parser.add_argument_group("limits", "the server's limits (environment: LIMIT_<NAME>)")
        for name, default in flat(cls()).items():
            # argparse parses a string default as it parses the flag: a bad LIMIT_ value is a one-line usage error.
            value = os.environ.get(f"LIMIT_{name.upper()}", default)
            group.add_argument(f"--{name}", type=type(default), default=value, help="default %(default)s")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Limits":
        values = {name: getattr(args, name) for name in flat(cls())}
        for name, default in vars(cls()).items():
            if isinstance(default, Budget):
                values[name] = Budget(values.pop(f"{name}_cpu_seconds"), values.pop(f"{name}_seconds"))
        return cls(**values)


def flat(limits: Limits) -> dict:
    """Every limit by its flag's name, a budget's parts after it."""
    values = {}
    for name, value in vars(limits).items():
        parts = vars(value) if isinstance(value, Budget) else {"": value}
        values.update({f"{name}_{part}".rstrip("_"): part_value for part, part_value in parts.items()})
    return values
