"""The arena's vote store: one SQLite row per vote, committed (WAL, synchronous=FULL) before the visitor is thanked.
Visitors and sources are stored only as hashes salted with a secret beside the database (`<database>.salt`, 0600). At
start, a bad salt, or one missing while votes exist, stops the app in one line (a new salt would give every source a
second weight); a damaged database is set aside (nothing deleted) and a fresh one started."""

import hashlib
import ipaddress
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from ...hub_access import cause

CHOICES = ("A", "B", "tie", "both bad")
# A vote waits about (1 + RETRIES) x BUSY_TIMEOUT_SECONDS at most for another process's lock: a write takes a ms or two.
BUSY_TIMEOUT_SECONDS, RETRIES = 1.5, 1
NOT_STORED = "Your vote could not be stored just now ({why}); nothing was lost: vote again in a moment."
PUBLISHED_FOLDER = "votes-dataset"  # beside the database: the votes the publisher wrote (`publish.py`)
SALT_CHARACTERS = 32  # at least: a salt made here is 64 hex characters

# Each entry moves a database from `PRAGMA user_version` i to i + 1; append, never edit one that has shipped.
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
    """
    ALTER TABLE votes ADD COLUMN source TEXT NOT NULL DEFAULT '';
    ALTER TABLE votes ADD COLUMN signed_in INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE votes ADD COLUMN seconds_to_vote REAL
    """,
]
# The votes as the ratings read them, counted by SQLite (never the texts); a vote stored before sources existed
# counts for its session.
COUNTS = """
    SELECT system_a, system_b, choice, CASE WHEN source = '' THEN 'session:' || visitor ELSE source END,
           signed_in, COUNT(*)
    FROM votes WHERE id > :after AND id <= :last GROUP BY 1, 2, 3, 4, 5
"""


class Refused(Exception):
    """A battle or a vote that cannot be had now; the message is one line for the visitor."""


class VoteNotStored(Refused):  # the database could not take it now (locked, full, read-only)
    pass


class BadChoice(Refused, ValueError):
    pass


class AlreadyVoted(Exception):
    pass


class StoreUnavailable(Exception):
    """The vote store cannot open as it is; one line saying why and what to do."""


def check_choice(choice) -> None:
    if not isinstance(choice, str) or choice not in CHOICES:  # named by its kind, never echoed: it may be of any size
        if isinstance(choice, str):
            kind = f"a text of {len(choice):,} character{'s' * (len(choice) != 1)}"
        else:
            kind = "nothing" if choice is None else f"of type {type(choice).__name__}"
        raise BadChoice(f"A vote is one of {', '.join(CHOICES)}; this one was {kind}.")


@dataclass(frozen=True, kw_only=True)
class Shown:
    """What a battle showed its visitor (`visitor_hash` of the page session), which systems made it and how."""

    battle_id: str
    visitor: str
    system_a: str
    system_b: str
    source_text: str
    translation_a: str
    translation_b: str
    decoding_a: Mapping = field(default_factory=dict)  # e.g. {"num_beams": 4, "length_penalty": 0.6}
    decoding_b: Mapping = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Vote(Shown):
    choice: str
    source: str = ""  # `source_hash`: the account or network the ratings count the vote for
    signed_in: bool = False
    seconds_to_vote: float | None = None  # from the battle shown to the vote sent
    time: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="milliseconds"))
    id: int | None = None  # the row's id, once stored

    def __post_init__(self):
        check_choice(self.choice)

    def published(self, salt: str) -> dict:
        """The vote as a published row (the dataset card says why): no row id, the time to the hour, whole seconds,
        the source hashed again with its UTC day (linked within a day, never across)."""
        row = asdict(self) | {"time": self.time[:13] + ":00Z"}
        del row["id"]
        row["source"] = visitor_hash(f"day:{self.time[:10]}:{self.source}", salt) if self.source else ""
        row["seconds_to_vote"] = None if self.seconds_to_vote is None else round(self.seconds_to_vote)
        return row


COLUMNS = [column.name for column in fields(Vote)]
DECODINGS = ("decoding_a", "decoding_b")  # JSON in the database


class VoteCount(NamedTuple):  # `count` stored votes alike: the same systems, choice and source
    system_a: str
    system_b: str
    choice: str
    source: str
    signed_in: bool
    count: int = 1


def visitor_hash(session_id: str, salt: str) -> str:  # stable and pseudonymous
    return hashlib.sha256((salt + session_id).encode()).hexdigest()[:16]


def published_rows(folder: Path, cut_torn: bool = False) -> list[bytes]:
    """The lines the publisher wrote in `folder`, one a vote; `cut_torn`: a line a crash cut short is cut off."""
    rows = []
    for path in sorted((folder / "votes").glob("*.jsonl")):
        try:
            data = path.read_bytes()
            whole = data[: data.rfind(b"\n") + 1]
            if cut_torn and whole != data:
                path.write_bytes(whole)  # its vote is in the database: it goes into this process's file
        except OSError:
            continue
        rows += [line for line in whole.splitlines() if line.strip()]
    return rows


def load_or_create_salt(path: Path, votes_exist: str) -> str:
    """The salt in `path`, made (mode 0600) if it is missing and no votes exist (`votes_exist`: where they do)."""
    if not os.path.lexists(path):
        if votes_exist:
            raise StoreUnavailable(
                f"the arena's salt {path} is missing while {votes_exist}: restore it (a new salt would make every "
                "voter a new source, with a second weight), or move the database and its published folder aside"
            )
        # Written whole, then linked into place: no reader sees half a salt, and of two processes racing to make it
        # the second's link fails and it reads the first's.
        temporary = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_hex(32))
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    try:
        salt = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise StoreUnavailable(f"the arena's salt {path} cannot be read ({cause(error)}): fix or restore it") from error
    if len(salt) < SALT_CHARACTERS:
        raise StoreUnavailable(
            f"the arena's salt {path} is {f'{len(salt)} characters, too short' if salt else 'empty'}: a hash salted "
            "with it could be recomputed for every address; restore the salt it had"
        )
    return salt


def inspect(path: Path, published: int) -> tuple[str, int]:
    """(why the database cannot be used as it is, "" if it can; how many votes it holds)."""
    if path.is_dir():
        return "a folder is in its place", 0
    size = path.stat().st_size if path.is_file() else None
    if not size:
        return (f"it is 0 bytes while {published:,} votes are published" if size == 0 and published else ""), 0
    try:
        with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS)) as probe:
            found = [row[0] for row in probe.execute("PRAGMA quick_check(3)")]
            if found != ["ok"]:
                return f"malformed: {'; '.join(map(str, found))[:200]}", 0
            if not probe.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'votes'").fetchone():
                return "", 0
            return "", probe.execute("SELECT COUNT(*) FROM votes").fetchone()[0]
    except sqlite3.DatabaseError as error:
        if (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return cause(error), 0
        raise


class VoteStore:
    """The votes in an SQLite file. `notes`: what the start-up checks found, one line each (also printed)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.published_folder = self.path.with_name(PUBLISHED_FOLDER)
        self.notes: list[str] = []
        try:
            self._check_and_open()
        except (OSError, sqlite3.Error) as error:
            raise StoreUnavailable(f"the votes database {self.path} cannot be opened ({cause(error)})") from error

    def _check_and_open(self) -> None:
        salt_path = self.path.with_name(self.path.name + ".salt")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        had_salt = os.path.lexists(salt_path)
        size = self.path.stat().st_size if self.path.is_file() else 0
        published = len(published_rows(self.published_folder))
        damage, stored = inspect(self.path, published)
        evidence = [f"the database {self.path} holds {stored:,} votes"] if stored else []
        evidence += [f"a damaged database is at {self.path}"] if damage and size else []
        published_line = f"{published:,} votes are published in {self.published_folder}" if published else ""
        evidence += [published_line] if published else []
        self.salt = load_or_create_salt(salt_path, " and ".join(evidence))  # first: a stop sets nothing aside
        if damage:
            self._set_aside(damage)
        elif not stored and (published or (had_salt and not size)):
            self._note(
                f"the votes database {self.path} is {'empty' if size else 'new'} while "
                f"{published_line or 'its salt is from an earlier store'}: votes stored before are not in it "
                "(published ones stay published)"
            )
        # One connection behind a lock, shared by every thread: votes come at a person's pace and a write takes a
        # millisecond or two; a busy timeout makes another process's writer wait for the lock instead of failing.
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=FULL")  # a vote `add` returned survives a power cut
        self._migrate()

    def _note(self, line: str) -> None:
        self.notes.append(line)
        print(f"arena: {line}", flush=True)

    def _set_aside(self, why: str) -> None:  # with its -wal and -shm files, to a new name beside it
        aside = self.path.with_name(f"{self.path.name}.damaged-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
        while aside.exists():
            aside = aside.with_name(f"{aside.name}-{secrets.token_hex(2)}")
        for suffix in ("-wal", "-shm"):
            companion = self.path.with_name(self.path.name + suffix)
            if companion.exists():
                os.rename(companion, aside.with_name(aside.name + suffix))
        os.rename(self.path, aside)
        self._note(
            f"the votes database {self.path} is damaged ({why}); set aside as {aside} (nothing deleted), "
            "starting on a fresh one"
        )

    def _migrate(self) -> None:
        with self._lock, self._connection:  # committed, or rolled back on an error
            # The write lock before the version is read: two processes opening an old file migrate it once.
            self._connection.execute("BEGIN IMMEDIATE")
            version = self.schema_version
            if version > len(MIGRATIONS):
                raise StoreUnavailable(
                    f"{self.path} is at schema version {version}, newer than this code's {len(MIGRATIONS)}: update "
                    "the app."
                )
            for step in MIGRATIONS[version:]:
                for statement in step.split(";"):
                    self._connection.execute(statement)
            self._connection.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")

    def _query(self, sql: str, parameters=()) -> list[tuple]:
        with self._lock:
            return self._connection.execute(sql, parameters).fetchall()

    @property
    def schema_version(self) -> int:
        return self._connection.execute("PRAGMA user_version").fetchone()[0]

    def visitor_hash(self, session_id: str) -> str:
        return visitor_hash(session_id, self.salt)

    def source_hash(self, account: str | None, address: str) -> str:
        """Whom the ratings count a vote for, hashed: the Hub account when signed in, else the address's network (an
        IPv4 address, the /64 of an IPv6 one: one machine's usual share)."""
        if account:
            return self.visitor_hash(f"account:{account}")
        try:
            parsed = ipaddress.ip_address(address)
            parsed = getattr(parsed, "ipv4_mapped", None) or parsed  # an IPv4 visitor seen through an IPv6 socket
            network = str(parsed if parsed.version == 4 else ipaddress.ip_network(f"{parsed}/64", strict=False))
        except ValueError:
            network = address
        return self.visitor_hash(f"network:{network}")

    def add(self, vote: Vote) -> int:
        """Store `vote` durably; its row id."""
        row = asdict(vote) | {name: json.dumps(getattr(vote, name), sort_keys=True) for name in DECODINGS}
        names = COLUMNS[:-1]  # all but the id
        sql = f"INSERT INTO votes ({', '.join(names)}) VALUES ({', '.join(':' + name for name in names)})"
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
                    why = cause(error)
                    if "locked" not in why and "busy" not in why:
                        raise VoteNotStored(NOT_STORED.format(why=why)) from error  # full, read-only: no retry helps
            if attempt < RETRIES:
                time.sleep(0.2)  # outside the lock: the other threads' reads go on meanwhile
        raise VoteNotStored(NOT_STORED.format(why="the database is busy"))

    def votes_since(self, row_id: int) -> list[Vote]:  # oldest first
        rows = self._query(f"SELECT {', '.join(COLUMNS)} FROM votes WHERE id > ? ORDER BY id", (row_id,))
        rows = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
        for row in rows:
            row.update({name: json.loads(row[name]) for name in DECODINGS}, signed_in=bool(row["signed_in"]))
        return [Vote(**row) for row in rows]

    def all_votes(self) -> list[Vote]:
        return self.votes_since(0)

    def counts_since(self, row_id: int) -> tuple[int, list[VoteCount]]:  # (the last id, the votes up to it)
        last = self._query("SELECT COALESCE(MAX(id), 0) FROM votes")[0][0]
        rows = self._query(COUNTS, {"after": row_id, "last": last})
        return last, [VoteCount(a, b, choice, source, bool(signed), n) for a, b, choice, source, signed, n in rows]

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM votes")[0][0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()
