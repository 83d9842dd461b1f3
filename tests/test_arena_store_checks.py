"""The vote store checked when it opens: a salt that is empty, unreadable, too short or missing while votes exist stops
it in one line, changing nothing; a damaged database (cut in half, its header overwritten, a folder in its place, 0
bytes while published votes exist) is set aside under a new name, nothing deleted, and the store starts on a fresh
one; a new or empty database while the salt or the published folder says votes existed is said in one line. Then
`python app.py` itself: an empty salt stops it in one line, with no traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from transformer_en_de.app.arena.votes import PUBLISHED_FOLDER, StoreUnavailable, Vote, VoteStore


def add_votes(store: VoteStore, count: int, start: int = 0) -> None:
    for number in range(start, start + count):
        store.add(
            Vote(
                battle_id=f"battle-{number}",
                system_a="ours",
                system_b="marian",
                source_text=f"A dog runs in the park, number {number}. " * 4,
                translation_a="Ein Hund. " * 8,
                translation_b="Hund. " * 8,
                choice="A",
                visitor="v",
                source="s",
            )
        )


@pytest.fixture
def kept(tmp_path):
    """A store of 400 votes, closed: (its path, its salt)."""
    path = tmp_path / "votes.sqlite3"
    store = VoteStore(path)
    add_votes(store, 400)
    salt = store.salt
    store.close()
    return path, salt


def publish(path, count: int) -> None:
    """`count` votes in the published folder beside the database, as the publisher writes them."""
    folder = path.with_name(PUBLISHED_FOLDER) / "votes"
    folder.mkdir(parents=True)
    lines = [json.dumps({"battle_id": f"battle-{number}", "choice": "A"}) + "\n" for number in range(count)]
    (folder / "votes-20261128T000000Z-0000.jsonl").write_text("".join(lines))


def files_of(folder) -> dict:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


@pytest.mark.parametrize("salt, expected", [("", "is empty"), (" \n", "is empty"), ("abc123", "6 characters, too")])
def test_an_empty_or_short_salt_stops_the_store_in_one_line_and_changes_nothing(kept, salt, expected):
    path, _ = kept
    path.with_name(path.name + ".salt").write_text(salt)
    before = files_of(path.parent)
    with pytest.raises(StoreUnavailable) as stopped:
        VoteStore(path)
    assert expected in str(stopped.value) and "\n" not in str(stopped.value)
    assert files_of(path.parent) == before


def test_an_unreadable_salt_stops_the_store_in_one_line(kept):
    path, _ = kept
    salt = path.with_name(path.name + ".salt")
    salt.unlink()
    salt.mkdir()  # unreadable as a file (permissions do not stop root, which the tests may run as)
    with pytest.raises(StoreUnavailable, match="cannot be read") as stopped:
        VoteStore(path)
    assert "\n" not in str(stopped.value)


def test_a_salt_missing_while_votes_exist_is_not_made_anew(kept, tmp_path):
    path, _ = kept
    salt = path.with_name(path.name + ".salt")
    salt.unlink()
    with pytest.raises(StoreUnavailable, match="missing while the database .* holds 400 votes"):
        VoteStore(path)
    assert not salt.exists()  # no new salt: every source would have a second weight

    elsewhere = tmp_path / "moved" / "votes.sqlite3"  # no database, but the folder beside it says votes existed
    publish(elsewhere, 3)
    with pytest.raises(StoreUnavailable, match="missing while 3 votes are published"):
        VoteStore(elsewhere)
    assert not elsewhere.exists() and not elsewhere.with_name(elsewhere.name + ".salt").exists()


def test_a_first_start_makes_its_salt_and_says_nothing(tmp_path, capsys):
    store = VoteStore(tmp_path / "votes.sqlite3")
    assert len(store.salt) == 64 and store.notes == []
    assert "arena:" not in capsys.readouterr().out
    store.close()


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def overwrite_header(path):
    with path.open("r+b") as file:
        file.write(b"\0" * 100)


def folder_in_place(path):
    path.unlink()
    path.mkdir()
    (path / "something.txt").write_text("kept")


def zero_bytes_with_published_votes(path):
    path.write_bytes(b"")
    publish(path, 400)


@pytest.mark.parametrize("damage", [cut_in_half, overwrite_header, folder_in_place, zero_bytes_with_published_votes])
def test_a_damaged_database_is_set_aside_and_the_store_starts_on_a_fresh_one(kept, damage, capsys):
    path, salt = kept
    damage(path)
    damaged = path.read_bytes() if path.is_file() else None

    store = VoteStore(path)

    (note,) = store.notes
    assert note.startswith(f"the votes database {path} is damaged (") and "set aside as" in note, note
    aside = Path(note.split("set aside as ")[1].split(" ")[0])
    assert aside.parent == path.parent
    assert aside.name.startswith(f"{path.name}.damaged-")
    if damaged is None:
        assert (aside / "something.txt").read_text() == "kept"  # the folder, whole
    else:
        assert aside.read_bytes() == damaged  # nothing lost: the damaged file as it was
    assert f"arena: {note}" in capsys.readouterr().out  # and in the log, in one line
    assert store.salt == salt  # the sources go on
    assert store.count() == 0
    add_votes(store, 1)  # a fresh database that takes votes
    assert store.count() == 1
    store.close()


def test_a_lost_database_beside_its_salt_is_said(kept):
    path, _ = kept
    path.unlink()  # lost: the salt beside it says a store was here
    store = VoteStore(path)
    assert store.notes == [
        f"the votes database {path} is new while its salt is from an earlier store: votes stored "
        "before are not in it (published ones stay published)"
    ]
    store.close()


def test_an_empty_database_beside_published_votes_is_said(tmp_path):
    path = tmp_path / "votes.sqlite3"
    VoteStore(path).close()  # a store with its salt and no vote
    publish(path, 2)
    store = VoteStore(path)
    folder = path.with_name(PUBLISHED_FOLDER)
    assert store.notes == [
        f"the votes database {path} is empty while 2 votes are published in {folder}: votes stored "
        "before are not in it (published ones stay published)"
    ]
    store.close()


@pytest.mark.slow
def test_an_empty_salt_stops_the_app_in_one_line(kept):
    path, _ = kept
    path.with_name(path.name + ".salt").write_text("")
    environment = dict(os.environ, VOTES_DB=str(path), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--comparison_models"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"app.py: the arena's salt {path}.salt is empty: a hash salted with it could be recomputed for "
        "every address; restore the salt it had"
    ], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
