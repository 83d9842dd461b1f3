"""The arena through the real app server (our model and a tiny MarianMT, called by gradio_client): a blind battle,
a vote that reveals the names and is stored, a second vote on the same battle refused, the leaderboard; and a page
with one system, where /battle answers one line."""

import sqlite3
import time

import pytest
from gradio_client import Client
from test_app_server import free_port
from tiny_marian import build_tiny_marian

pytestmark = pytest.mark.slow


def serve(app_model_dir, comparisons, votes_db):
    import app
    from transformer_en_de.app.server import start_in_thread

    translation_app = app.build_app(str(app_model_dir), comparisons, backend="torch", votes_db=votes_db)
    port = free_port()
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    return server, f"http://127.0.0.1:{port}/"


def test_a_blind_battle_a_vote_that_reveals_and_is_stored_and_the_leaderboard(app_model_dir, tmp_path):
    votes_db = tmp_path / "votes.sqlite3"
    server, url = serve(app_model_dir, [str(build_tiny_marian(tmp_path / "marian"))], votes_db)
    try:
        visitor = Client(url, verbose=False)
        deadline = time.monotonic() + 120
        while "ready" not in visitor.predict(api_name="/status"):
            assert time.monotonic() < deadline, "the comparison model did not load"
            time.sleep(0.5)

        battle_id, first, second = visitor.predict("A dog runs in the park.", api_name="/battle")
        system_a, system_b, message = visitor.predict(battle_id, "A", api_name="/vote")
        time.sleep(3.2)  # a person's pace between votes
        again = visitor.predict(battle_id, "B", api_name="/vote")
        unknown = visitor.predict("not-a-battle", "tie", api_name="/vote")
        table, _ = visitor.predict(api_name="/leaderboard")
    finally:
        server.should_exit = True

    assert len(battle_id) >= 16 and first and second
    assert {system_a, system_b} == {"Transformer (ours)", "marian"} and "stored" in message
    assert again[:2] == ("", "") and "unknown or has expired" in again[2]  # single use
    assert unknown[:2] == ("", "") and "\n" not in unknown[2]
    with sqlite3.connect(votes_db) as database:
        rows = database.execute("SELECT battle_id, system_a, system_b, choice, translation_a FROM votes").fetchall()
    assert rows == [(battle_id, system_a, system_b, "A", first)]
    assert "Transformer (ours)" in table and "marian" in table and "from 1 votes" in table


def test_with_one_system_the_battle_answers_one_line(app_model_dir, tmp_path):
    server, url = serve(app_model_dir, [], tmp_path / "votes.sqlite3")
    try:
        battle_id, message, second = Client(url, verbose=False).predict("A dog runs.", api_name="/battle")
    finally:
        server.should_exit = True
    assert battle_id == "" and second == "" and "needs two systems" in message and "\n" not in message
