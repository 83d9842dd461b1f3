"""A real Chromium (Debian's, driven by Playwright) uses the Arena tab as a visitor does, then the test reads the
votes database the app was given.

The page serves our tiny model and a tiny MarianMT, so every battle is between those two. The visitor opens the page,
goes to the Arena tab (which has no sign-in, says that votes here are anonymous and what they count for), picks a
random caption, starts a battle (the Vote button is offered only then) and sees two translations with the systems'
names hidden; votes for the one that reads better; sees the names revealed and a thank-you, and the Vote button taken
away (a battle takes one vote); and, after "Show the leaderboard", sees both systems with the vote counted, and that
the board rests on anonymous votes. The SQLite file then holds exactly that one vote: the
revealed systems, the choice made in the browser, the English and both translations as the page showed them. No
JavaScript error is raised on the page. (A signed-in visitor: tests/test_arena_sign_in.py.)
"""

import socket
import sqlite3

import pytest
from conftest import ROOT
from test_browser import serve
from tiny_marian import build_tiny_marian

import app
from transformer_en_de.app.arena.arena import example_sentences, vote_rules
from transformer_en_de.app.page.arena import ANONYMOUS_ONLY
from transformer_en_de.app.translators import OURS_NAME

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SCREENSHOT = ROOT / "test-artifacts" / "arena.png"
MARIAN = "marian"  # the panel name of the comparison model: the last part of its folder's path
SENTENCE = "A dog runs in the park."
ONE_LINE_REFUSALS = ("One vote every 3 seconds", "This battle is unknown or has expired")
READ_SECONDS = 4  # how long a person takes to read both translations


@pytest.fixture
def votes_db(tmp_path):
    """The database file this test's app stores votes in (and the test reads): its own, empty."""
    return tmp_path / "votes.sqlite3"


@pytest.fixture
def page_url(app_model_dir, votes_db, tmp_path):
    marian = build_tiny_marian(tmp_path / MARIAN)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Two systems only, so that a battle is always ours against the MarianMT: both names are known, not which is A.
    yield from serve(app.build_app(str(app_model_dir), [str(marian)], backend="torch", votes_db=votes_db), port)


def value(page, elem_id: str) -> str:
    """What a visitor reads in a textbox of the page."""
    return page.locator(f"#{elem_id} textarea").input_value()


def wait_for_value(page, elem_id: str, timeout: int = 60_000) -> str:
    """The textbox's text once the server has filled it."""
    page.wait_for_function(
        "id => (document.querySelector(`#${id} textarea`)?.value ?? '') !== ''", arg=elem_id, timeout=timeout
    )
    return value(page, elem_id)


def wait_for_message(page, expected: tuple[str, ...], timeout: int = 30_000) -> str:
    """The arena's message once it starts with one of `expected` (each click answers with a new one)."""
    page.wait_for_function(
        "expected => expected.some(start => "
        "(document.querySelector('#arena-message textarea')?.value ?? '').trim().startsWith(start))",
        arg=list(expected),
        timeout=timeout,
    )
    return value(page, "arena-message").strip()


def vote(page, choice: str) -> None:
    page.locator("#arena-choice").get_by_label(choice, exact=True).check()
    page.locator("#arena-vote").click()


def leaderboard_rows(page) -> dict[str, dict[str, str]]:
    """The leaderboard table as the page shows it: {system: {column: cell}}."""
    table = page.locator("#arena-leaderboard table")
    headers = [cell.strip() for cell in table.locator("thead th").all_inner_texts()]
    rows = {}
    for row in table.locator("tbody tr").all():
        cells = dict(zip(headers, (cell.strip() for cell in row.locator("td").all_inner_texts()), strict=True))
        rows[cells["System"]] = cells
    return rows


def test_a_visitor_battles_votes_sees_the_names_is_refused_twice_and_the_vote_is_stored(page_url, votes_db, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_url)
    # The MarianMT loads in the background: a battle before it is ready would be refused ("needs two systems").
    page.locator("#status-1").get_by_text("ready").wait_for(timeout=60_000)

    page.get_by_role("tab", name="Arena").click()
    # A page without sign-in says so, and what an anonymous vote counts for; it has no sign-in button.
    assert page.locator("#arena-signed-in").inner_text().strip() == ANONYMOUS_ONLY
    assert page.locator("#arena-vote-rules").inner_text().strip() == vote_rules().replace("**", "")
    assert page.locator("#arena-sign-in").count() == 0
    page.get_by_role("button", name="A random caption").click()
    assert wait_for_value(page, "arena-english", timeout=30_000) in example_sentences("caption")
    # The battle itself on a sentence both tiny random models translate (for some captions one writes nothing, and
    # an empty translation is what the page would show, not a battle to vote on).
    english = SENTENCE
    page.locator("#arena-english textarea").fill(english)
    assert page.locator("#arena-vote").is_disabled()  # nothing to vote on yet

    page.locator("#arena-battle").click()
    first, second = wait_for_value(page, "arena-a"), wait_for_value(page, "arena-b")
    # Blind: nothing on the Arena tab says which system wrote which translation until the vote.
    assert value(page, "arena-system-a") == value(page, "arena-system-b") == ""
    arena = page.get_by_role("tabpanel")
    assert MARIAN not in arena.inner_text() and OURS_NAME not in arena.inner_text()

    # A reader's choice, made from what the page shows: the translation with more different letters (both tiny
    # random models repeat a few pieces; which one wins does not matter, only that the store records this choice).
    choice = "A" if len(set(first)) >= len(set(second)) else "B"
    page.locator("#arena-vote:not([disabled])").wait_for(timeout=30_000)  # offered once the battle is there
    page.wait_for_timeout(READ_SECONDS * 1000)  # a person reads both
    vote(page, choice)
    thanks = wait_for_message(page, ("Thank you",))
    system_a, system_b = value(page, "arena-system-a"), value(page, "arena-system-b")
    assert {system_a, system_b} == {OURS_NAME, MARIAN}
    assert f"({choice})" in thanks and f"A was {system_a}, B was {system_b}" in thanks and "\n" not in thanks
    winner, loser = (system_a, system_b) if choice == "A" else (system_b, system_a)

    # A battle takes one vote: the button is taken away (a second vote through the API is refused in one line:
    # tests/test_arena_app.py).
    page.wait_for_function("() => document.querySelector('#arena-vote')?.disabled === true", timeout=30_000)

    page.locator("#arena-refresh").click()
    page.locator("#arena-leaderboard table").wait_for(timeout=30_000)
    board = leaderboard_rows(page)
    assert set(board) == {OURS_NAME, MARIAN}
    assert (board[winner]["Won"], board[winner]["Lost"]) == ("1", "0")
    assert (board[loser]["Won"], board[loser]["Lost"]) == ("0", "1")
    assert board[winner]["95% interval"] == "-"  # one vote: no interval
    # The board says what it rests on: one anonymous vote, on a page without sign-in.
    said = " ".join(page.locator("#arena-leaderboard").inner_text().split())
    assert "This page has no sign-in: the ratings rest on 1 vote from 1 source (1 anonymous network)" in said, said
    assert "be the first (the Arena tab)" not in said

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []
    page.close()

    # The store: one row, the vote the browser cast, with what the page showed (the battle id and the visitor's hash
    # are the server's secrets, so only their presence is checked).
    with sqlite3.connect(votes_db) as database:
        rows = database.execute(
            "SELECT system_a, system_b, choice, source_text, translation_a, translation_b, battle_id, visitor "
            "FROM votes"
        ).fetchall()
    assert len(rows) == 1
    assert rows[0][:6] == (system_a, system_b, choice, english, first, second)
    assert rows[0][6] and rows[0][7]
