"""The arena's vote store: one SQLite row per vote, committed to disk before the visitor is thanked.

The database is in WAL mode with `synchronous=FULL`, so a vote whose `add` returned survives the process being killed
(and the machine losing power); a busy timeout makes a second writer (another process on the same file) wait for the
lock instead of failing. The schema is the code's: `PRAGMA user_version` says which of `MIGRATIONS` a file has had,
and opening a file applies the rest, in order, in one transaction.

A visitor is stored as `visitor_hash(session, salt)`, never as an address or an account name: the salt is a random
secret in a file beside the database (`<database>.salt`, mode 0600), so a hash cannot be reversed or recomputed by
someone who reads the published votes. A vote's `source` is the voter the ratings bound (`ratings.py`), hashed the same
way: the Hub account of a signed-in visitor, else the network the vote came from; it is stable across restarts (the
bounds need that) and stays in this database: a published row holds it hashed again with its UTC day
(`Vote.published`), so the published votes link one source's votes within a day, never across days.

The salt and the database are checked when the store opens (`VoteStore.__init__`). A salt that is empty, too short or
unreadable, or missing while votes exist (in the database or in the published folder beside it), stops the app in
one line (`StoreUnavailable`): a new salt would make every source a new one, with a second weight. A damaged database
(not a database, malformed, a folder in its place, 0 bytes while published votes exist) is set aside under a new name
(`<database>.damaged-<UTC time>`, with its -wal and -shm files), nothing deleted, and the store starts on a fresh one;
each of these, and a database that is new while its salt or published folder says votes existed, is one line in the
log (`arena: ...`) and in `notes`.

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
PUBLISHED_FOLDER = "votes-dataset"  # beside the database: the votes the publisher wrote (`publish.py`)
SALT_CHARACTERS = 32  # at least: the salt made here is 64 hex characters (256 bits)

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
_COLUMNS = (
    "id",
    "time",
    "battle_id",
    "system_a",
    "system_b",
    "decoding_a",
    "decoding_b",
    "source_text",
    "translation_a",
    "translation_b",
    "choice",
    "visitor",
    "source",
    "signed_in",
    "seconds_to_vote",
)
# What the ratings read: the votes counted by SQLite, grouped by everything the ratings tell apart (never the texts),
# so a leaderboard reads one row per source, pair of systems and choice however many votes there are.
_COUNTS = """
    SELECT system_a, system_b, choice, CASE WHEN source = '' THEN 'session:' || visitor ELSE source END,
           signed_in, COUNT(*)
    FROM votes WHERE id > :after AND id <= :last GROUP BY 1, 2, 3, 4, 5
"""


class AlreadyVoted(Exception):
    """A vote for a battle that already has one."""


class VoteNotStored(Exception):
    """A vote the database could not take now (locked, full, read-only); the message is one line for the visitor."""


class StoreUnavailable(Exception):
    """The vote store cannot open as it is (its salt empty, unreadable or missing while votes exist; the database
    unreadable for a reason other than damage); the message is one line saying why and what to do."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def hour_of(time: str) -> str:
    """An ISO-8601 UTC time rounded down to its hour ("2026-11-28T21:00Z"): what a published row says of when."""
    return time[:13] + ":00Z" if len(time) >= 13 else time


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
            raise ValueError(f"A vote is one of {', '.join(CHOICES)}; this one was not.")  # never echoed: any size

    def as_row(self) -> dict:
        """The vote as plain JSON-ready values (the stored form)."""
        return {name: getattr(self, name) for name in _COLUMNS} | {
            "decoding_a": dict(self.decoding_a),
            "decoding_b": dict(self.decoding_b),
            "signed_in": bool(self.signed_in),
        }

    def published(self, salt: str) -> dict:
        """The vote as a published row (`publish.py`, whose dataset card says what each field is and why): no row id
        (a store's own numbering), the time to the hour, the seconds to the vote whole, and the source hashed again
        with its UTC day, so that a row links to the same source's rows of that day only."""
        row = self.as_row()
        del row["id"]
        daily = visitor_hash(f"day:{self.time[:10]}:{self.source}", salt) if self.source else ""
        row.update(
            time=hour_of(self.time),
            source=daily,
            seconds_to_vote=None if self.seconds_to_vote is None else round(self.seconds_to_vote),
        )
        return row


@dataclass(frozen=True)
class VoteCount:
    """`count` stored votes alike for the ratings (`VoteStore.counts_since`): the same systems, choice and source."""

    system_a: str
    system_b: str
    choice: str
    source: str  # the vote's source; for a vote stored before sources existed, its session ("session:<visitor>")
    signed_in: bool
    count: int = 1

    @classmethod
    def of(cls, vote: Vote) -> "VoteCount":
        source = vote.source or f"session:{vote.visitor}"
        return cls(vote.system_a, vote.system_b, vote.choice, source, bool(vote.signed_in))


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


def load_or_create_salt(path: str | Path, votes_exist: str = "") -> str:
    """The secret salt in `path`; made once (mode 0600), by whichever process gets there first. `votes_exist`: where
    votes are known to exist ("" if nowhere): then a missing salt is not made anew (`StoreUnavailable`)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        if votes_exist:
            raise StoreUnavailable(
                f"the arena's salt {path} is missing while {votes_exist}: restore it (a new salt would make every "
                "voter a new source, with a second weight), or move the database and its published folder aside to "
                "start anew"
            )
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
    try:
        salt = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        why = cause_of(error)
        raise StoreUnavailable(f"the arena's salt {path} cannot be read ({why}): fix or restore it") from error
    if len(salt) < SALT_CHARACTERS:
        raise StoreUnavailable(
            f"the arena's salt {path} is {'empty' if not salt else f'{len(salt)} characters, too short'}: a hash "
            "salted with it could be recomputed for every address; restore the salt it had"
        )
    return salt


def cause_of(error: BaseException) -> str:
    """An error's first line, without the traceback."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def published_votes(folder: Path) -> int:
    """How many votes the publisher's files in `folder` hold (its lines; 0 if there is none)."""
    count = 0
    for path in (folder / "votes").glob("*.jsonl"):
        try:
            with path.open("rb") as file:
                count += sum(1 for line in file if line.strip())
        except OSError:
            continue
    return count


def is_damage(error: sqlite3.Error) -> bool:
    """Whether SQLite says the file is not a database or is malformed (its primary codes CORRUPT and NOTADB)."""
    return (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF in (11, 26)


class VoteStore:
    """The votes in an SQLite file: `add` one, read them all, or those after a row id."""

    def __init__(self, path: str | Path, published: str | Path | None = None):
        """`published`: the folder of published votes (default: `PUBLISHED_FOLDER` beside the database), read to know
        whether votes existed before."""
        self.path = Path(path)
        self.published_folder = Path(published) if published else self.path.with_name(PUBLISHED_FOLDER)
        self.notes: list[str] = []  # what the start-up checks found, one line each (also printed)
        salt_path = self.path.with_name(self.path.name + ".salt")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            had_salt = salt_path.exists() or salt_path.is_symlink()
            published_count = published_votes(self.published_folder)
            size = self.path.stat().st_size if self.path.is_file() else None
            damage = self._damage(size, published_count)
            stored = self._stored_votes() if size and not damage else 0
            existed = []
            if stored:
                existed.append(f"the database {self.path} holds {stored:,} votes")
            if damage and size:
                existed.append(f"a damaged database is at {self.path}")
            if published_count:
                existed.append(f"{published_count:,} votes are published in {self.published_folder}")
            # the salt first: a store that stops for its salt has set nothing aside
            self.salt = load_or_create_salt(salt_path, " and ".join(existed))
            if damage:
                self._set_aside(damage)
                size = None
            if not damage and not stored and (published_count or (had_salt and not size)):
                self._note(
                    f"the votes database {self.path} is {'empty' if size else 'new'} while "
                    + (
                        f"{published_count:,} votes are published in {self.published_folder}"
                        if published_count
                        else "its salt is from an earlier store"
                    )
                    + ": votes stored before are not in it (published ones stay published)"
                )
            # One connection behind a lock, shared by every thread: votes come at a person's pace, a write takes a
            # millisecond or two, and one connection is one file handle whatever the size of the server's thread pool.
            self._lock = threading.Lock()
            self._connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
            )
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except (OSError, sqlite3.Error) as error:
            raise StoreUnavailable(f"the votes database {self.path} cannot be opened ({cause_of(error)})") from error

    def _note(self, line: str) -> None:
        self.notes.append(line)
        print(f"arena: {line}", flush=True)

    def _damage(self, size: int | None, published_count: int) -> str:
        """Why the database cannot be used as it is ("" if it can): a folder in its place, not a database, malformed
        (SQLite's quick check), or 0 bytes while published votes exist."""
        if self.path.is_dir():
            return "a folder is in its place"
        if size == 0:
            return f"it is 0 bytes while {published_count:,} votes are published" if published_count else ""
        if size is None:
            return ""
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS)
            try:
                found = [row[0] for row in connection.execute("PRAGMA quick_check(3)").fetchall()]
            finally:
                connection.close()
        except sqlite3.DatabaseError as error:
            if is_damage(error):
                return cause_of(error)
            raise
        return "" if found == ["ok"] else f"malformed: {'; '.join(map(str, found))[:200]}"

    def _stored_votes(self) -> int:
        """How many votes the database holds (0 before its first migration)."""
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS)
        try:
            if not connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'votes'").fetchone():
                return 0
            return connection.execute("SELECT COUNT(*) FROM votes").fetchone()[0]
        finally:
            connection.close()

    def _set_aside(self, why: str) -> None:
        """Move the damaged database (and its -wal and -shm files) to a new name beside it; delete nothing."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        while aside.exists():
            aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{secrets.token_hex(2)}")
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
        with self._lock:
            # BEGIN IMMEDIATE takes the write lock before reading the version, so two processes opening an old file
            # at once migrate it once.
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                version = self._connection.execute("PRAGMA user_version").fetchone()[0]
                if version > len(MIGRATIONS):
                    raise StoreUnavailable(
                        f"{self.path} is at schema version {version}, newer than this code's "
                        f"{len(MIGRATIONS)}: update the app."
                    )
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
        row.update(
            decoding_a=json.dumps(row["decoding_a"], sort_keys=True),
            decoding_b=json.dumps(row["decoding_b"], sort_keys=True),
        )
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
            rows = self._connection.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM votes {where} ORDER BY id", parameters
            ).fetchall()
        votes = []
        for row in rows:
            values = dict(zip(_COLUMNS, row, strict=True))
            values.update(
                decoding_a=json.loads(values["decoding_a"]),
                decoding_b=json.loads(values["decoding_b"]),
                signed_in=bool(values["signed_in"]),
            )
            votes.append(Vote(**values))
        return votes

    def counts_since(self, row_id: int) -> tuple[int, list[VoteCount]]:
        """(the last vote's id, the votes after row `row_id` up to it, counted alike: `VoteCount`)."""
        with self._lock:
            last = self._connection.execute("SELECT COALESCE(MAX(id), 0) FROM votes").fetchone()[0]
            rows = self._connection.execute(_COUNTS, {"after": row_id, "last": last}).fetchall()
        return last, [
            VoteCount(a, b, choice, source, bool(signed), count) for a, b, choice, source, signed, count in rows
        ]

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
