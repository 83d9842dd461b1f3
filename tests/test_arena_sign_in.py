"""Signing in with Hugging Face to vote in the arena, end to end: `python app.py` as a Space runs it, the loopback Hub
as the Hub's OpenID provider, Chromium as the visitor.

The app runs with the environment a Space with `hf_oauth: true` gets (SYSTEM=spaces, SPACE_ID, the OAUTH_* variables
of the Space's OAuth app, OPENID_PROVIDER_URL at the loopback Hub), so Gradio serves its real OAuth routes (authlib):
the visitor clicks "Sign in with Hugging Face", the Hub signs them in and sends them back with a code, the app trades
it for an ID token that it checks against the Hub's key, and the page then says the visitor is signed in. A battle and
a vote follow, then the visitor signs out and votes again, anonymously. The votes database then holds both votes, the
first counted for the account and the second for the network (each as its salted hash), the account's name nowhere;
the app's log never mentions it.

Gradio's sign-in cookie is a `Secure` one: over plain HTTP a browser keeps it only where the page is a secure context,
at localhost or 127.0.0.1 (the test opens the page at http://localhost), not at any other address.

Sign-in that cannot work (no real OAuth app off a Space, no token for the stand-in, a Hub that cannot be reached, a
Space without `hf_oauth`) stops `app.py` at once with one line; locally, `--sign_in stand-in` signs visitors in as the
account of the machine's token, which the loopback Hub answers for (Gradio's local stand-in), and their votes count as
anonymous.
"""

import os
import socket
import sqlite3
import subprocess
import sys

import pytest
from conftest import ROOT
from loopback_hub import LoopbackHub
from test_app_server import app_process, free_port
from test_arena_browser import MARIAN, ONE_LINE_REFUSALS, vote, wait_for_message, wait_for_value
from tiny_marian import build_tiny_marian

from transformer_en_de.app.arena.arena import vote_rules
from transformer_en_de.app.arena.votes import VoteStore
from transformer_en_de.app.page.arena import STAND_IN
from transformer_en_de.app.translators import OURS_NAME

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ACCOUNT, FULL_NAME = "ada-lovelace-votes", "Ada Lovelace"  # names no translation or hash could contain by chance
CLIENT_ID, CLIENT_SECRET = "loopback-space-oauth-app", "loopback-oauth-secret"
SENTENCE = "A dog runs in the park."


def space_with_oauth(hub: LoopbackHub, votes_db) -> dict:
    """What a Space whose metadata has `hf_oauth: true` sees, its Hub being the loopback one."""
    return dict(
        SYSTEM="spaces",
        SPACE_ID="someone/transformer-en-de-demo",
        OAUTH_CLIENT_ID=CLIENT_ID,
        OAUTH_CLIENT_SECRET=CLIENT_SECRET,
        OAUTH_SCOPES="openid profile",
        OPENID_PROVIDER_URL=hub.endpoint,
        VOTES_DB=str(votes_db),
    )


@pytest.fixture
def hub():
    """The loopback Hub with one account, the Space's OAuth app, and the browser signed in to the Hub as that
    account."""
    with LoopbackHub() as server:
        server.add_account(ACCOUNT, FULL_NAME)
        server.add_oauth_app(CLIENT_ID, CLIENT_SECRET)
        server.sign_in_as(ACCOUNT)
        yield server


def renamed(page) -> None:
    """Wait until the sign-in button no longer says "Sign in": a load event of Gradio's own renames it, and may end
    after the page's line on sign-in."""
    page.wait_for_function(
        "() => !(document.querySelector('#arena-sign-in')?.innerText ?? 'Sign in').includes('Sign in')", timeout=30_000
    )


def battle_and_vote(page) -> tuple[str, str, str]:
    """A battle on the sentence and a vote for A: (translation A, translation B, the vote's message)."""
    page.locator("#arena-english textarea").fill(SENTENCE)
    # No translation shown yet (the page was loaded anew), so what shows next is this battle's. Checked before the
    # click: after it, a fast battle may have answered before the first look.
    page.wait_for_function("() => (document.querySelector('#arena-a textarea')?.value ?? '') === ''", timeout=30_000)
    page.locator("#arena-battle").click()
    first, second = wait_for_value(page, "arena-a"), wait_for_value(page, "arena-b")
    page.locator("#arena-vote:not([disabled])").wait_for(timeout=30_000)  # offered once the battle is there
    vote(page, "A")
    return first, second, wait_for_message(page, ("Thank you", *ONE_LINE_REFUSALS))


def test_a_visitor_signs_in_with_hugging_face_votes_signs_out_and_votes_anonymously(
    app_model_dir, hub, tmp_path, browser
):
    votes_db = tmp_path / "votes.sqlite3"
    marian = build_tiny_marian(tmp_path / MARIAN)
    with app_process(app_model_dir, tmp_path, comparisons=(marian,), **space_with_oauth(hub, votes_db)) as (port, log):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://localhost:{port}/")
        page.locator("#status-1").get_by_text("ready").wait_for(timeout=120_000)
        page.get_by_role("tab", name="Arena").click()
        sign_in = page.locator("#arena-sign-in")
        assert sign_in.inner_text().strip() == "Sign in with Hugging Face"
        assert "You are not signed in" in page.locator("#arena-signed-in").inner_text()
        assert page.locator("#arena-vote-rules").inner_text().strip() == vote_rules(True).replace("**", "")

        with page.expect_navigation(url=f"http://localhost:{port}/", timeout=60_000):
            sign_in.click()  # to the Hub's authorize endpoint and back, the page loaded anew
        page.get_by_role("tab", name="Arena").click()
        page.locator("#arena-signed-in").get_by_text("You are signed in").wait_for(timeout=30_000)
        renamed(page)
        assert page.locator("#arena-sign-in").inner_text().strip() == f"Logout ({ACCOUNT})"
        signed_in_vote = battle_and_vote(page)

        with page.expect_navigation(url=f"http://localhost:{port}/", timeout=60_000):
            page.locator("#arena-sign-in").click()  # signs out: the page is loaded anew, anonymous
        page.get_by_role("tab", name="Arena").click()
        page.locator("#arena-signed-in").get_by_text("You are not signed in").wait_for(timeout=30_000)
        anonymous_vote = battle_and_vote(page)
        assert errors == []
        page.close()
        log_text = log.read_text()

    # The sign-in went through the Hub's OpenID endpoints: the code was traded for a token, the key fetched.
    asked = {(method, path) for method, path in hub.requests}
    assert {("GET", "/oauth/authorize"), ("POST", "/oauth/token"), ("GET", "/oauth/jwks")} <= asked
    for first, second, message in (signed_in_vote, anonymous_vote):
        assert first and second and message.startswith("Thank you"), message
    with sqlite3.connect(votes_db) as database:
        columns = [row[1] for row in database.execute("PRAGMA table_info(votes)")]
        rows = [dict(zip(columns, row, strict=True)) for row in database.execute("SELECT * FROM votes ORDER BY id")]
    assert [(row["translation_a"], row["translation_b"]) for row in rows] == [signed_in_vote[:2], anonymous_vote[:2]]
    assert {rows[0]["system_a"], rows[0]["system_b"]} == {OURS_NAME, MARIAN}
    # The first vote counts for the account, the second for the network it came from: each as its salted hash.
    store = VoteStore(votes_db)
    assert [row["signed_in"] for row in rows] == [1, 0]
    assert [row["source"] for row in rows] == [store.source_hash(ACCOUNT, ""), store.source_hash(None, "127.0.0.1")]
    stored = " ".join(str(value) for row in rows for value in row.values()).lower()
    assert ACCOUNT not in stored and FULL_NAME.lower() not in stored  # the account is never stored as it is
    assert ACCOUNT not in log_text and "Traceback" not in log_text  # nor logged


def own_address() -> str | None:
    """This machine's address on its network (not a loopback one), if it has one: the route out, no packet sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never answers, only picks the outgoing interface
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_over_plain_http_the_sign_in_cookie_is_kept_on_loopback_only(app_model_dir, hub, tmp_path, browser):
    """Gradio's session cookie, which carries the sign-in, is `Secure`: over plain HTTP Chromium keeps it where the page
    is a secure context, at localhost and 127.0.0.1, and drops it at any other address (there, sign-in needs HTTPS, as
    a Space has)."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    env = dict(space_with_oauth(hub, tmp_path / "votes.sqlite3"), GRADIO_SERVER_NAME="0.0.0.0")
    with app_process(app_model_dir, tmp_path, **env) as (port, _):
        context = browser.new_context()
        for host in ("127.0.0.1", "localhost", address):
            page = context.new_page()
            page.goto(f"http://{host}:{port}/login/huggingface?_target_url=/", timeout=60_000)
            page.close()
        kept = {cookie["domain"] for cookie in context.cookies() if cookie["name"] == "session"}
        context.close()
    assert kept == {"127.0.0.1", "localhost"}


def app_exit(env: dict, *flags: str) -> subprocess.CompletedProcess:
    """`python app.py` with `flags` in the environment `env` adds (no Space, token or Hub of the test run's)."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "SPACE_", "OAUTH_", "OPENID_")) and key != "SYSTEM"
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py"), *flags, "--comparison_models"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(base, **env),
    )


@pytest.mark.parametrize(
    "case, expected",
    [
        (
            "no OAuth app",
            "--sign_in counts a vote as an account's only through a real OAuth app, and OAUTH_CLIENT_ID, "
            "OAUTH_CLIENT_SECRET, OAUTH_SCOPES, OPENID_PROVIDER_URL are not set",
        ),
        ("an OAuth app off a Space", "Gradio serves its real sign-in only where SYSTEM=spaces and SPACE_ID are set"),
        ("no token", "there is none: run `hf auth login` or set HF_TOKEN"),
        ("unreachable Hub", "could not ask the Hub (http://127.0.0.1:"),
        ("Space without hf_oauth", "needs `hf_oauth: true` in its README's metadata (OAUTH_CLIENT_SECRET"),
    ],
)
def test_a_sign_in_that_cannot_work_stops_the_app_in_one_line(case, expected, tmp_path):
    home = dict(HOME=str(tmp_path), HF_HUB_OFFLINE="0", VOTES_DB=str(tmp_path / "votes.sqlite3"))
    if case == "no OAuth app":  # even with a token: the stand-in's cookie key is sha256("-v4"), which anyone computes
        result = app_exit(dict(home, HF_TOKEN="hf_some_token"), "--sign_in")
    elif case == "an OAuth app off a Space":
        oauth = dict(
            OAUTH_CLIENT_ID="id",
            OAUTH_CLIENT_SECRET="secret",
            OAUTH_SCOPES="openid profile",
            OPENID_PROVIDER_URL="https://huggingface.co",
        )
        result = app_exit(dict(home, **oauth), "--sign_in")
    elif case == "no token":
        result = app_exit(home, "--sign_in", "stand-in")
    elif case == "unreachable Hub":  # a port nobody listens on
        result = app_exit(
            dict(home, HF_TOKEN="hf_some_token", HF_ENDPOINT=f"http://127.0.0.1:{free_port()}"), "--sign_in", "stand-in"
        )
    else:  # OAUTH_CLIENT_ID alone: the Space's metadata asks for sign-in without the rest the Hub would set
        result = app_exit(dict(home, SYSTEM="spaces", SPACE_ID="someone/demo", OAUTH_CLIENT_ID="id"))
    assert result.returncode == 1
    assert result.stderr.strip().startswith("app.py: ") and expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no traceback


def test_locally_the_stand_in_plays_the_account_of_the_machines_token_and_its_votes_are_anonymous(
    app_model_dir, tmp_path, browser
):
    """`--sign_in stand-in` off a Space: Gradio's stand-in signs the visitor in as the account the Hub says the token
    is; the page says that votes count as anonymous, and the vote is stored as the network's."""
    token, votes_db = "hf_loopback_user_token", tmp_path / "votes.sqlite3"
    marian = build_tiny_marian(tmp_path / MARIAN)
    with LoopbackHub() as hub:
        hub.add_account(ACCOUNT, FULL_NAME, token=token)
        env = dict(
            ARENA_SIGN_IN="stand-in",
            HF_TOKEN=token,
            HF_ENDPOINT=hub.endpoint,
            HOME=str(tmp_path),
            VOTES_DB=str(votes_db),
        )
        with app_process(app_model_dir, tmp_path, comparisons=(marian,), offline=False, **env) as (port, log):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://localhost:{port}/")
            page.locator("#status-1").get_by_text("ready").wait_for(timeout=120_000)
            page.get_by_role("tab", name="Arena").click()
            with page.expect_navigation(url=f"http://localhost:{port}/", timeout=60_000):
                page.locator("#arena-sign-in").click()
            page.get_by_role("tab", name="Arena").click()
            renamed(page)
            button = page.locator("#arena-sign-in").inner_text().strip()
            line = page.locator("#arena-signed-in").inner_text().strip()
            rules = page.locator("#arena-vote-rules").inner_text().strip()
            *_, message = battle_and_vote(page)
            page.close()
            log_text = log.read_text()
        asked = list(hub.requests)
    assert button == f"Logout ({ACCOUNT})"  # Gradio's stand-in signed the visitor in
    assert line == STAND_IN and rules == vote_rules(False).replace("**", "")  # and the page says what that counts for
    assert message.startswith("Thank you"), message
    assert ("GET", "/api/whoami-v2") in asked and not any(path.startswith("/oauth/") for _, path in asked)
    assert f"can sign in as the account of this machine's Hugging Face token, at {hub.endpoint}" in log_text
    assert ACCOUNT not in log_text
    with sqlite3.connect(votes_db) as database:
        assert database.execute("SELECT signed_in, source FROM votes").fetchall() == [
            (0, VoteStore(votes_db).source_hash(None, "127.0.0.1"))
        ]  # the network's vote, not the account's
