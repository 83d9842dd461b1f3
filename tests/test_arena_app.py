"""The arena through the real app server (our model and a tiny MarianMT, called by gradio_client): a blind battle,
a vote that reveals the names and is stored, a second vote on the same battle refused, refused choices named by their
kind (never echoed), the leaderboard, every output of /battle, /vote and /leaderboard named in the API; and a page
with one system, where /battle answers one line and no battle."""

import json
import os
import signal
import sqlite3
import threading
import time

import httpx
import pytest
from gradio_client import Client
from test_app_server import free_port
from tiny_marian import build_tiny_marian

from benchmarks.arena_attacks import HOLD_THE_WRITE_LOCK  # another process holding the write lock
from transformer_en_de.app.arena.arena import PAGE_LINE_CHARACTERS

READ_SECONDS = 4  # how long a person takes to read both translations
# Choices a client may send instead of one of the four: each refused by its kind, none of it echoed.
HOSTILE_CHOICES = ["x" * 100_000, "<img src=x onerror=alert(1)><b>bold</b>", "[click](javascript:alert(1))"]

pytestmark = pytest.mark.slow


def serve(app_model_dir, comparisons, votes_db):
    from conftest import start_in_thread

    import app

    translation_app = app.build_app(str(app_model_dir), comparisons, backend="torch", votes_db=votes_db)
    port = free_port()
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    return server, f"http://127.0.0.1:{port}/"


def wait_until_ready(visitor: Client) -> None:
    """Until the comparison model has loaded (and measured its step cost): a battle needs two systems."""
    deadline = time.monotonic() + 120
    while "ready" not in visitor.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the comparison model did not load"
        time.sleep(0.5)


def test_a_blind_battle_a_vote_that_reveals_and_is_stored_and_the_leaderboard(app_model_dir, tmp_path):
    votes_db = tmp_path / "votes.sqlite3"
    server, url = serve(app_model_dir, [str(build_tiny_marian(tmp_path / "marian"))], votes_db)
    try:
        visitor = Client(url, verbose=False)
        wait_until_ready(visitor)

        battle_id, first, second, shown = visitor.predict("A dog runs in the park.", api_name="/battle")
        hostile = [visitor.predict(battle_id, choice, api_name="/vote") for choice in HOSTILE_CHOICES]
        time.sleep(READ_SECONDS)
        system_a, system_b, message = visitor.predict(battle_id, "A", api_name="/vote")
        time.sleep(3.2)  # a person's pace between votes
        again = visitor.predict(battle_id, "B", api_name="/vote")
        unknown = visitor.predict("not-a-battle", "tie", api_name="/vote")
        table, _ = visitor.predict(api_name="/leaderboard")
        info = httpx.get(f"{url}gradio_api/info", timeout=30).json()["named_endpoints"]
        described = visitor.view_api(print_info=False, return_format="dict")["named_endpoints"]
    finally:
        server.should_exit = True

    assert len(battle_id) >= 16 and first and second and shown and "\n" not in shown
    for refused in hostile:  # named by kind, bounded, nothing of the choice in it
        assert refused[:2] == ("", "") and refused[2].startswith("A vote is one of A, B, tie, both bad; this one was")
        assert len(refused[2]) <= PAGE_LINE_CHARACTERS and "<" not in refused[2] and "javascript" not in refused[2]
    assert "a text of 100,000 characters" in hostile[0][2]
    assert {system_a, system_b} == {"Transformer (ours)", "marian"} and "stored" in message
    assert again[:2] == ("", "") and "unknown or has expired" in again[2]  # single use
    assert unknown[:2] == ("", "") and "\n" not in unknown[2]
    with sqlite3.connect(votes_db) as database:
        rows = database.execute("SELECT battle_id, system_a, system_b, choice, translation_a FROM votes").fetchall()
        decodings = database.execute("SELECT decoding_a, decoding_b FROM votes").fetchone()
    assert rows == [(battle_id, system_a, system_b, "A", first)]
    # Each system's decoding as its plan resolved it: the page's starting beams for both, each with its own bound.
    decoding_a, decoding_b = (json.loads(decoding) for decoding in decodings)
    assert decoding_a["num_beams"] == decoding_b["num_beams"] >= 1
    assert all(decoding["max_new_tokens_ratio"] and decoding["max_new_tokens"] for decoding in (decoding_a, decoding_b))
    assert "Transformer (ours)" in table and "marian" in table
    # no sign-in on this page: the board says it rests on anonymous votes, and from how many networks
    assert "This page has no sign-in: the ratings rest on 1 vote from 1 source (1 anonymous network)" in table
    assert "be the first" not in table and "1095-1095" not in table
    # every output named, as a client reads the API (no `value_NN`)
    expected = {
        "/battle": ["battle_id", "Translation A", "Translation B", "Message"],
        "/vote": ["A was", "B was", "Message"],
        "/leaderboard": ["Leaderboard", "Ratings"],
    }
    for endpoint, labels in expected.items():
        assert [output["label"] for output in info[endpoint]["returns"]] == labels
        assert [output["label"] for output in described[endpoint]["returns"]] == labels


def test_with_one_system_the_battle_answers_one_line(app_model_dir, tmp_path):
    server, url = serve(app_model_dir, [], tmp_path / "votes.sqlite3")
    try:
        visitor = Client(url, verbose=False)
        battle_id, first, second, message = visitor.predict("A dog runs.", api_name="/battle")
        vote = visitor.predict(battle_id, "A", api_name="/vote")
    finally:
        server.should_exit = True
    # no battle: the translations are empty, the message says why once
    assert battle_id == first == second == "" and "needs two systems" in message and "\n" not in message
    assert vote == ("", "", "Start a battle first: there is nothing to vote on.")


def preferred(first: str, second: str) -> str:
    """A reader's choice: the tiny random MarianMT writes one letter over and over; our model writes German."""
    return "A" if len(set(first)) > len(set(second)) else "B"


def pid_on_port(port: int) -> int:
    """The `python app.py` process serving `port` (its command line names it)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                command = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"app.py" in b" ".join(command) and str(port).encode() in command:
                return int(entry)
    raise AssertionError(f"no app.py on port {port}")


def test_six_visitors_vote_at_once_every_vote_once_and_a_killed_server_keeps_them(app_model_dir, tmp_path):
    from test_app_server import app_process

    marian = build_tiny_marian(tmp_path / "marian")
    votes_db = tmp_path / "votes.sqlite3"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    outcomes, lock = [], threading.Lock()

    def visitor(url: str):
        client = Client(url, verbose=False)
        for caption in ("A dog runs in the park.", "Two men play football."):
            battle_id, first, second, _ = client.predict(caption, api_name="/battle")
            time.sleep(READ_SECONDS)  # a person reads both translations
            revealed = client.predict(battle_id, preferred(first, second), api_name="/vote")
            with lock:
                outcomes.append((battle_id, revealed))

    with app_process(app_model_dir, tmp_path / "first", comparisons=(marian,), VOTES_DB=str(votes_db)) as (port, _):
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while "ready" not in Client(url, verbose=False).predict(api_name="/status"):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        visitors = [threading.Thread(target=visitor, args=(url,)) for _ in range(6)]
        for thread in visitors:
            thread.start()
        for thread in visitors:
            thread.join(timeout=300)
        client = Client(url, verbose=False)
        refused = [client.predict(battle, "B", api_name="/vote") for battle in ("made-up", outcomes[0][0])]
        bad = [client.predict("", api_name="/battle"), client.predict("x", "maybe", api_name="/vote")]
        os.kill(pid_on_port(port), signal.SIGKILL)  # no shutdown: what was committed must be there
    with app_process(app_model_dir, tmp_path / "second", comparisons=(marian,), VOTES_DB=str(votes_db)) as (port, _):
        table, _ = Client(f"http://127.0.0.1:{port}/", verbose=False).predict(api_name="/leaderboard")

    assert len(outcomes) == 12 and all(revealed[0] and "stored" in revealed[2] for _, revealed in outcomes)
    assert all(result[:2] == ("", "") and "\n" not in result[2] for result in refused + bad[1:])
    assert bad[0][0] == "" and "Type an English sentence" in bad[0][3]
    with sqlite3.connect(votes_db) as database:
        rows = database.execute("SELECT battle_id, visitor FROM votes").fetchall()
        everything = " ".join(str(value) for row in database.execute("SELECT * FROM votes") for value in row)
    assert sorted(battle for battle, _ in rows) == sorted(battle for battle, _ in outcomes)  # each exactly once
    assert "127.0.0.1" not in everything  # no address anywhere in the rows
    assert table.index("Transformer (ours)") < table.index("marian")
    # all from one address: one anonymous network's voice, its 12 votes sharing its bound
    assert "rest on 12 votes from 1 source (1 anonymous network)" in table
    assert "2 votes' worth is beyond their sources' bounds" in table


def test_a_vote_under_another_process_s_write_lock_keeps_its_battle_and_goes_in_after(app_model_dir, tmp_path):
    import subprocess
    import sys

    votes_db = tmp_path / "votes.sqlite3"
    server, url = serve(app_model_dir, [str(build_tiny_marian(tmp_path / "marian"))], votes_db)
    try:
        visitor = Client(url, verbose=False)
        wait_until_ready(visitor)
        battle_id, first, second, _ = visitor.predict("A dog runs in the park.", api_name="/battle")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(votes_db), "12"], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout.readline().strip() == "held"
        asked = time.monotonic()
        under_lock = visitor.predict(battle_id, preferred(first, second), api_name="/vote")
        waited = time.monotonic() - asked
        holder.wait(timeout=60)
        again = visitor.predict(battle_id, preferred(first, second), api_name="/vote")  # the same battle, at once
    finally:
        server.should_exit = True

    assert under_lock[:2] == ("", "") and "could not be stored" in under_lock[2] and "\n" not in under_lock[2]
    assert waited < 10  # told in seconds, not after the lock's 12 s
    assert again[0] and "stored" in again[2]
    with sqlite3.connect(votes_db) as database:
        assert database.execute("SELECT battle_id FROM votes").fetchall() == [(battle_id,)]


def test_readers_of_an_unchanged_leaderboard_share_one_working_out_and_pages_showing_it_get_nothing(
    app_model_dir, tmp_path
):
    import app
    from transformer_en_de.app.arena.votes import Vote

    translation_app = app.build_app(
        str(app_model_dir),
        [str(build_tiny_marian(tmp_path / "marian"))],
        backend="torch",
        votes_db=tmp_path / "votes.sqlite3",
    )
    board, worked_out = translation_app.board, []
    table = board.table
    board.table = lambda: worked_out.append(1) or table()  # counts each working-out of the real board
    first_table, first_picture = board.read("reader-1")
    again_table, again_picture = board.read("reader-2")
    assert again_table == first_table and again_picture is first_picture and len(worked_out) == 1  # one of each
    assert board.read("reader-1") is None  # its page shows this board already: nothing is sent
    translation_app.arena.store.add(
        Vote(
            battle_id="b-1",
            system_a="Transformer (ours)",
            system_b="marian",
            source_text="A dog.",
            translation_a="Ein Hund.",
            translation_b="Hund",
            choice="A",
            visitor="v",
            source="s",
            seconds_to_vote=9.0,
        )
    )
    translation_app.voted(("Transformer (ours)", "marian", "Your vote is stored."))  # the page's vote says so
    new_table, new_picture = board.read("reader-1")
    assert new_table != first_table and new_picture is not first_picture and len(worked_out) == 2  # drawn again
    assert board.read("reader-2")[0] == new_table  # the other page is sent the new board once
