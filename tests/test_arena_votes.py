"""The arena's vote store: a round trip, WAL on, one vote per battle, concurrent writers, no committed vote lost to
SIGKILL, the schema migrated from an older file, a salted visitor hash."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.arena_attacks import HOLD_THE_WRITE_LOCK  # another process holding the write lock
from transformer_en_de.app.arena import votes as votes_module
from transformer_en_de.app.arena.votes import AlreadyVoted, Vote, VoteStore, visitor_hash

ROOT = Path(__file__).resolve().parent.parent


def make_vote(battle_id: str, choice: str = "A", visitor: str = "0123456789abcdef") -> Vote:
    return Vote(
        battle_id=battle_id,
        system_a="ours",
        system_b="marian",
        source_text="A dog runs.",
        translation_a="Ein Hund rennt.",
        translation_b="Ein Hund läuft.",
        choice=choice,
        visitor=visitor,
        decoding_a={"num_beams": 4, "length_penalty": 0.6},
        decoding_b={"num_beams": 4},
    )


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
    assert store.schema_version == len(votes_module.MIGRATIONS) == 2
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

    assert store.schema_version == 3
    assert [vote.battle_id for vote in store.all_votes()] == ["battle-1"]
    assert "note" in [column[1] for column in store._connection.execute("PRAGMA table_info(votes)")]
    store.close()


def test_a_file_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "votes.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with pytest.raises(votes_module.StoreUnavailable, match="update the app"):
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


def test_a_version_1_file_gains_the_source_columns_and_keeps_its_votes(tmp_path):
    path = tmp_path / "votes.db"
    connection = sqlite3.connect(path)
    connection.execute(votes_module.MIGRATIONS[0])
    connection.execute(
        "INSERT INTO votes (time, battle_id, system_a, system_b, decoding_a, decoding_b, source_text, "
        "translation_a, translation_b, choice, visitor) VALUES ('2026-11-01T00:00:00.000+00:00', "
        "'old-1', 'ours', 'marian', '{}', '{}', 'A dog.', 'Ein Hund.', 'Hund.', 'A', 'abc')"
    )
    connection.execute("PRAGMA user_version = 1")
    connection.commit()
    connection.close()
    (tmp_path / "votes.db.salt").write_text("5a1t" * 16)  # its salt, as every store made since version 1 has

    store = VoteStore(path)

    (old,) = store.all_votes()
    assert (old.battle_id, old.visitor, old.source, old.signed_in, old.seconds_to_vote) == (
        "old-1",
        "abc",
        "",
        False,
        None,
    )
    store.add(make_vote("battle-2"))
    last, counts = store.counts_since(0)
    assert last == 2
    assert sorted((count.source, count.signed_in, count.count) for count in counts) == [
        ("session:0123456789abcdef", False, 1),
        ("session:abc", False, 1),
    ]
    store.close()


def test_source_hash_names_an_account_or_a_network_never_as_it_is(tmp_path):
    store = VoteStore(tmp_path / "votes.db")
    by_account = store.source_hash("alice", "203.0.113.7")
    assert by_account == store.source_hash("alice", "198.51.100.1")  # the account, wherever it votes from
    assert by_account != store.source_hash(None, "203.0.113.7") != store.source_hash("bob", "203.0.113.7")
    # anonymous: one IPv4 address, or one IPv6 /64 (a machine's usual share of addresses)
    assert store.source_hash(None, "2001:db8::1") == store.source_hash(None, "2001:db8::ffff:2")
    assert store.source_hash(None, "2001:db8:0:1::1") != store.source_hash(None, "2001:db8::1")
    assert store.source_hash(None, "::ffff:203.0.113.7") == store.source_hash(None, "203.0.113.7")
    assert "alice" not in by_account and len(by_account) == 16
    store.close()


def test_a_vote_under_another_process_s_write_lock_is_refused_in_one_line_in_seconds_and_then_stored(tmp_path):
    path = tmp_path / "votes.db"
    store = VoteStore(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(path), "8"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(votes_module.VoteNotStored) as refused:
            store.add(make_vote("battle-1"))
        waited = time.monotonic() - started
        assert waited < 2 * (votes_module.RETRIES + 1) * votes_module.BUSY_TIMEOUT_SECONDS
        assert "vote again" in str(refused.value) and "\n" not in str(refused.value)
    finally:
        holder.wait(timeout=30)
    store.add(make_vote("battle-1"))  # the lock is gone: the same vote goes in
    assert [vote.battle_id for vote in store.all_votes()] == ["battle-1"]
    store.close()


def test_a_vote_on_a_full_database_is_refused_in_one_line_and_the_store_goes_on(tmp_path):
    store = VoteStore(tmp_path / "votes.db")
    store.add(make_vote("battle-0"))
    pages = store._connection.execute("PRAGMA page_count").fetchone()[0]
    store._connection.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: as a full disk
    with pytest.raises(votes_module.VoteNotStored, match="full"):
        for number in range(1, 200):
            store.add(make_vote(f"battle-{number}"))
    store._connection.execute("PRAGMA max_page_count = 1073741823")
    store.add(make_vote("battle-late"))
    assert store.all_votes()[-1].battle_id == "battle-late"
    store.close()


def test_counts_since_groups_alike_votes_and_reads_only_what_is_new(store):
    for number in range(6):
        source = "net-1" if number < 4 else "net-2"
        store.add(Vote(**{**make_vote(f"battle-{number}").__dict__, "source": source, "seconds_to_vote": 9.0}))
    last, counts = store.counts_since(0)
    assert last == 6
    assert sorted((count.source, count.count) for count in counts) == [("net-1", 4), ("net-2", 2)]
    store.add(make_vote("battle-late", choice="tie"))
    last, counts = store.counts_since(6)
    assert last == 7 and [(count.choice, count.count) for count in counts] == [("tie", 1)]
