"""The arena's vote store: one SQLite row per vote, committed to disk before the visitor is thanked.

The database is in WAL mode with `synchronous=FULL`, so a vote whose `add` returned survives the process being killed
(and the machine losing power); a busy timeout makes a second writer (another process on the same file) wait for the
lock instead of failing. The schema is the code's: `PRAGMA user_version` says which of `MIGRATIONS` a file has had,
and opening a file applies the rest, in order, in one transaction.

A visitor is stored as `visitor_hash(session, salt)`, never as an address or an account name: the salt is a random
secret in a file beside the database (`<database>.salt`, mode 0600), so a visitor's hash is stable across restarts but
cannot be reversed or recomputed by someone who reads the published votes. A vote's `source` is the voter the ratings
bound (`ratings.py`), hashed the same way: the Hub account of a signed-in visitor, else the network the vote came from.

A vote that cannot be written (another process holds the write lock past `BUSY_TIMEOUT_SECONDS` and a retry, the disk
is full, the file is read-only) raises `VoteNotStored`, whose message is one line for the visitor: the caller keeps the
battle open so that the same vote can be cast again.
"""

import hashlib
import ipaddress
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

CHOICES = ("A", "B", "tie", "both bad")
# A visitor waits at most about (1 + RETRIES) x BUSY_TIMEOUT_SECONDS for a lock another process holds, then is told
# to vote again; a vote takes a millisecond or two to write, so a lock held longer than that is a stuck writer.
BUSY_TIMEOUT_SECONDS, RETRIES = 1.5, 1
NOT_STORED = "Your vote could not be stored just now ({why}); nothing was lost: vote again in a moment."

# Each entry moves a database from version i to i + 1; append, never edit one that has shipped.
MIGRATIONS = [
    f"""
    CREATE TABLE votes (
        id INTEGER PRIMARY KEY,
        time TEXT NOT NULL,
        battle_id TEXT NOT NULL UNIQUE,
        system_a TEXT NOT NULL,
        system_b TEXT NOT NULL,
        decoding_a TEXT NOT NULL,
        decoding_b TEXT NOT NULL,
        source_text TEXT NOT NULL,
        translation_a TEXT NOT NULL,
        translation_b TEXT NOT NULL,
        choice TEXT NOT NULL CHECK (choice IN ({", ".join(repr(choice) for choice in CHOICES)})),
        visitor TEXT NOT NULL
    )
    """,
    # Who the ratings count the vote for (a hashed account or network), whether signed in, and how long after its
    # battle was shown the vote came (None for the votes stored before these columns existed).
    """
    ALTER TABLE votes ADD COLUMN source TEXT NOT NULL DEFAULT '';
    ALTER TABLE votes ADD COLUMN signed_in INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE votes ADD COLUMN seconds_to_vote REAL
    """,
]
_COLUMNS = ("id", "time", "battle_id", "system_a", "system_b", "decoding_a", "decoding_b", "source_text",
            "translation_a", "translation_b", "choice", "visitor", "source", "signed_in",
            "seconds_to_vote")  # fmt: skip
# What the ratings read: the votes counted by SQLite, grouped by everything the ratings tell apart (never the texts),
# so a leaderboard reads one row per source, pair of systems and choice however many votes there are.
_COUNTS = """
    SELECT system_a, system_b, choice, CASE WHEN source = '' THEN 'session:' || visitor ELSE source END,
           signed_in, COALESCE(seconds_to_vote < :quick, 0), COUNT(*)
    FROM votes WHERE id > :after AND id <= :last GROUP BY 1, 2, 3, 4, 5, 6
"""


class AlreadyVoted(Exception):
    """A vote for a battle that already has one."""


class VoteNotStored(Exception):
    """A vote the database could not take now (locked, full, read-only); the message is one line for the visitor."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Vote:
    """One vote: what the visitor saw (source, both translations, who made them and how) and what they chose."""

    battle_id: str
    system_a: str
    system_b: str
    source_text: str
    translation_a: str
    translation_b: str
    choice: str
    visitor: str
    decoding_a: Mapping = field(default_factory=dict)  # e.g. {"num_beams": 4, "length_penalty": 0.6}
    decoding_b: Mapping = field(default_factory=dict)
    source: str = ""  # `source_hash`: the account or network the ratings count the vote for ("": the visitor)
    signed_in: bool = False
    seconds_to_vote: float | None = None  # from the battle shown to the vote
    time: str = field(default_factory=utc_now)  # UTC, ISO-8601
    id: int | None = None  # the row's id, once stored

    def __post_init__(self):
        if self.choice not in CHOICES:
            raise ValueError(f"A vote is one of {', '.join(CHOICES)}, not {self.choice!r}.")

    def as_row(self) -> dict:
        """The vote as plain JSON-ready values (the published form)."""
        return {name: getattr(self, name) for name in _COLUMNS} | {
            "decoding_a": dict(self.decoding_a), "decoding_b": dict(self.decoding_b), "signed_in": bool(self.signed_in)
        }  # fmt: skip


@dataclass(frozen=True)
class VoteCount:
    """`count` stored votes alike for the ratings (`VoteStore.counts_since`): the same systems, choice and source,
    and all cast within, or all after, the reading time."""

    system_a: str
    system_b: str
    choice: str
    source: str  # the vote's source; for a vote stored before sources existed, its session ("session:<visitor>")
    signed_in: bool
    quick: bool  # cast within the reading time of its battle
    count: int = 1

    @classmethod
    def of(cls, vote: Vote, quick_seconds: float) -> "VoteCount":
        quick = vote.seconds_to_vote is not None and vote.seconds_to_vote < quick_seconds
        source = vote.source or f"session:{vote.visitor}"
        return cls(vote.system_a, vote.system_b, vote.choice, source, bool(vote.signed_in), quick)


def visitor_hash(session_id: str, salt: str) -> str:
    """sha256(salt + session), hex, 16 characters: a visitor's stable, pseudonymous name."""
    return hashlib.sha256((salt + session_id).encode()).hexdigest()[:16]


def network_of(address: str) -> str:
    """The network an address stands for: an IPv4 address itself, the /64 of an IPv6 one (one machine's usual share);
    anything else (no address, a name) as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 6:
        if parsed.ipv4_mapped is not None:  # an IPv4 visitor seen through an IPv6 socket
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def source_hash(account: str | None, address: str, salt: str) -> str:
    """The voter the ratings count a vote for, hashed like a visitor: the Hub account when signed in, else the
    network of the address the vote came from (never stored as it is)."""
    return visitor_hash(f"account:{account}" if account else f"network:{network_of(address)}", salt)


def load_or_create_salt(path: str | Path) -> str:
    """The secret salt in `path`; made once (mode 0600), by whichever process gets there first."""
    path = Path(path)
    if not path.exists():
        # Written whole under a temporary name, then linked into place: a reader never sees a half-written salt,
        # and of two processes racing to create it, the second's link fails and it reads the first's.
        temporary = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32))
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    return path.read_text().strip()


class VoteStore:
    """The votes in an SQLite file: `add` one, read them all, or those after a row id."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.salt = load_or_create_salt(self.path.with_name(self.path.name + ".salt"))
        # One connection behind a lock, shared by every thread: votes come at a person's pace, a write takes a
        # millisecond or two, and one connection is one file handle whatever the size of the server's thread pool.
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=FULL")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            # BEGIN IMMEDIATE takes the write lock before reading the version, so two processes opening an old file
            # at once migrate it once.
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                version = self._connection.execute("PRAGMA user_version").fetchone()[0]
                if version > len(MIGRATIONS):
                    raise RuntimeError(f"{self.path} is at schema version {version}, newer than this code's "
                                       f"{len(MIGRATIONS)}: update the app.")  # fmt: skip
                for step in MIGRATIONS[version:]:
                    for statement in step.split(";"):
                        self._connection.execute(statement)
                self._connection.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._connection.execute("PRAGMA user_version").fetchone()[0]

    def visitor_hash(self, session_id: str) -> str:
        """The stored name of the visitor with this session (hashed with this database's salt)."""
        return visitor_hash(session_id, self.salt)

    def source_hash(self, account: str | None, address: str) -> str:
        """The stored name of the account, or else the network, a vote is counted for (`source_hash`)."""
        return source_hash(account, address, self.salt)

    def add(self, vote: Vote) -> int:
        """Store `vote` durably and return its row id; `AlreadyVoted` if its battle has a vote already."""
        row = vote.as_row()
        row.update(decoding_a=json.dumps(row["decoding_a"], sort_keys=True),
                   decoding_b=json.dumps(row["decoding_b"], sort_keys=True))  # fmt: skip
        names = [name for name in _COLUMNS if name != "id"]
        sql = f"INSERT INTO votes ({', '.join(names)}) VALUES ({', '.join(':' + name for name in names)})"
        row["signed_in"] = int(row["signed_in"])
        for attempt in range(RETRIES + 1):
            with self._lock:
                try:
                    # In autocommit mode the INSERT is its own transaction: committed (and fsynced) when it returns.
                    return self._connection.execute(sql, row).lastrowid
                except sqlite3.IntegrityError as error:
                    if "battle_id" in str(error):
                        raise AlreadyVoted(f"Battle {vote.battle_id} already has a vote.") from error
                    raise
                except sqlite3.OperationalError as error:
                    why = str(error).splitlines()[0]
                    if "locked" not in why and "busy" not in why:
                        raise VoteNotStored(NOT_STORED.format(why=why)) from error  # full, read-only: no retry helps
            if attempt < RETRIES:
                time.sleep(0.2)  # outside the lock: the other threads' reads go on meanwhile
        raise VoteNotStored(NOT_STORED.format(why="the database is busy"))

    def _select(self, where: str = "", parameters: tuple = ()) -> list[Vote]:
        with self._lock:
            rows = self._connection.execute(f"SELECT {', '.join(_COLUMNS)} FROM votes {where} ORDER BY id",
                                            parameters).fetchall()  # fmt: skip
        votes = []
        for row in rows:
            values = dict(zip(_COLUMNS, row, strict=True))
            values.update(decoding_a=json.loads(values["decoding_a"]), decoding_b=json.loads(values["decoding_b"]),
                          signed_in=bool(values["signed_in"]))  # fmt: skip
            votes.append(Vote(**values))
        return votes

    def counts_since(self, row_id: int, quick_seconds: float) -> tuple[int, list[VoteCount]]:
        """(the last vote's id, the votes after row `row_id` up to it, counted alike: `VoteCount`)."""
        with self._lock:
            last = self._connection.execute("SELECT COALESCE(MAX(id), 0) FROM votes").fetchone()[0]
            rows = self._connection.execute(_COUNTS, {"quick": quick_seconds, "after": row_id, "last": last}).fetchall()
        return last, [VoteCount(a, b, choice, source, bool(signed), bool(quick), count)
                      for a, b, choice, source, signed, quick, count in rows]  # fmt: skip

    def all_votes(self) -> list[Vote]:
        return self._select()

    def votes_since(self, row_id: int) -> list[Vote]:
        """The votes stored after row `row_id`, oldest first (0: all of them)."""
        return self._select("WHERE id > ?", (row_id,))

    def count(self) -> int:
        with self._lock:
            return self._connection.execute("SELECT COUNT(*) FROM votes").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()
