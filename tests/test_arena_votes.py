"""The arena's vote store: a round trip, WAL on, one vote per battle, concurrent writers, no committed vote lost to
SIGKILL, the schema migrated from an older file, a salted visitor hash."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from transformer_en_de.app.arena import votes as votes_module
from transformer_en_de.app.arena.votes import AlreadyVoted, Vote, VoteStore, visitor_hash

ROOT = Path(__file__).resolve().parent.parent


def make_vote(battle_id: str, choice: str = "A", visitor: str = "0123456789abcdef") -> Vote:
    return Vote(
        battle_id=battle_id, system_a="ours", system_b="marian", source_text="A dog runs.",
        translation_a="Ein Hund rennt.", translation_b="Ein Hund läuft.", choice=choice, visitor=visitor,
        decoding_a={"num_beams": 4, "length_penalty": 0.6}, decoding_b={"num_beams": 4},
    )  # fmt: skip


@pytest.fixture
def store(tmp_path):
    opened = VoteStore(tmp_path / "arena" / "votes.db")
    yield opened
    opened.close()


def test_round_trip(store):
    vote = make_vote("battle-1", choice="both bad")
    row_id = store.add(vote)

    (stored,) = store.all_votes()
    assert stored.id == row_id
    assert stored == Vote(**{**vote.__dict__, "id": row_id})
    assert stored.decoding_a == {"num_beams": 4, "length_penalty": 0.6}
    assert store.count() == 1


def test_database_is_in_wal_mode_with_full_sync(store):
    connection = sqlite3.connect(store.path)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # a property of the file
    connection.close()
    assert store._connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_second_vote_on_a_battle_is_refused(store):
    store.add(make_vote("battle-1", choice="A"))
    with pytest.raises(AlreadyVoted, match="battle-1"):
        store.add(make_vote("battle-1", choice="B"))
    assert [vote.choice for vote in store.all_votes()] == ["A"]


def test_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="both bad"):
        make_vote("battle-1", choice="C")


def test_votes_since_a_row(store):
    ids = [store.add(make_vote(f"battle-{number}")) for number in range(5)]

    assert [vote.battle_id for vote in store.votes_since(ids[2])] == ["battle-3", "battle-4"]
    assert store.votes_since(ids[-1]) == []
    assert len(store.votes_since(0)) == 5


def test_eight_threads_voting_at_once_are_all_stored(store, tmp_path):
    # Half the threads write through a second store (a second connection, as another process would): the busy
    # timeout makes them wait for each other's locks instead of failing.
    other = VoteStore(store.path)
    start = threading.Barrier(8)
    errors = []

    def vote_25_times(thread: int) -> None:
        start.wait()
        try:
            for number in range(25):
                (store if thread % 2 else other).add(make_vote(f"battle-{thread}-{number}"))
        except Exception as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=vote_25_times, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()

    assert errors == []
    assert store.count() == 200
    assert len({vote.battle_id for vote in store.all_votes()}) == 200


CHILD = """
import sys
from transformer_en_de.app.arena.votes import Vote, VoteStore
store = VoteStore(sys.argv[1])
for number in range(100_000):
    battle_id = f"battle-{number}"
    store.add(Vote(battle_id=battle_id, system_a="ours", system_b="marian", source_text="A dog runs. " * 20,
                   translation_a="Ein Hund rennt.", translation_b="Ein Hund läuft.", choice="tie", visitor="v"))
    print(battle_id, flush=True)
"""


def test_a_committed_vote_survives_sigkill(tmp_path):
    path = tmp_path / "votes.db"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    reported = []
    try:
        while len(reported) < 30:  # killed while it is still writing: between two commits, or in the middle of one
            line = child.stdout.readline()
            assert line, "the child stopped before it was killed"
            reported.append(line.strip())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = VoteStore(path)
    stored = {vote.battle_id for vote in store.all_votes()}
    store.close()
    assert set(reported) <= stored
    assert stored == {f"battle-{number}" for number in range(len(stored))}  # whole rows, in order, nothing torn


def test_an_empty_version_0_file_is_migrated(tmp_path):
    path = tmp_path / "votes.db"
    sqlite3.connect(path).close()  # an empty database: user_version 0, no tables

    store = VoteStore(path)
    assert store.schema_version == len(votes_module.MIGRATIONS) == 1
    store.add(make_vote("battle-1"))
    assert store.count() == 1
    store.close()


def test_a_file_at_an_older_version_keeps_its_votes_through_a_migration(tmp_path, monkeypatch):
    path = tmp_path / "votes.db"
    old = VoteStore(path)
    old.add(make_vote("battle-1"))
    old.close()
    monkeypatch.setattr(votes_module, "MIGRATIONS", [*votes_module.MIGRATIONS, "ALTER TABLE votes ADD note TEXT"])

    store = VoteStore(path)

    assert store.schema_version == 2
    assert [vote.battle_id for vote in store.all_votes()] == ["battle-1"]
    assert "note" in [column[1] for column in store._connection.execute("PRAGMA table_info(votes)")]
    store.close()


def test_a_file_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "votes.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with pytest.raises(RuntimeError, match="update the app"):
        VoteStore(path)


def test_visitor_hash_is_salted_stable_and_short(tmp_path):
    first = VoteStore(tmp_path / "votes.db")
    again = VoteStore(tmp_path / "votes.db")
    elsewhere = VoteStore(tmp_path / "other" / "votes.db")

    assert first.visitor_hash("session-1") == again.visitor_hash("session-1")  # the salt is kept in a file
    assert first.visitor_hash("session-1") != elsewhere.visitor_hash("session-1")
    assert first.visitor_hash("session-1") != first.visitor_hash("session-2")
    assert len(first.visitor_hash("session-1")) == 16
    assert visitor_hash("session-1", first.salt) == first.visitor_hash("session-1")
    salt_file = tmp_path / "votes.db.salt"
    assert salt_file.stat().st_mode & 0o777 == 0o600
    assert "session-1" not in salt_file.read_text()
    for store in (first, again, elsewhere):
        store.close()
