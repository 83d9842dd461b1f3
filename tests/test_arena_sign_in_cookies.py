"""Only a session cookie signed with the OAuth app's secret makes a signed-in vote.

Gradio keeps who signed in in a session cookie signed with sha256(OAUTH_CLIENT_SECRET + "-v4") (itsdangerous's
timestamp signature over the base64 of the session's JSON, as Starlette's session middleware writes it). The app runs
as a Space with sign-in runs it, with a secret this test sets; API clients then battle and vote carrying cookies the
test makes: one signed with that secret (as Gradio's own callback would have signed it after a real sign-in), which
is a signed-in vote; and forged ones, signed with the key a missing secret gives (anyone can compute it), with another
secret, or not signed at all, which are never a signed-in vote. The first board then rests on the one signed-in vote;
the forged ones stand on the anonymous board.
"""

import base64
import hashlib
import json
import sqlite3
import time

import pytest
from gradio_client import Client
from itsdangerous import TimestampSigner
from test_app_server import app_process
from tiny_marian import build_tiny_marian

from transformer_en_de.app.arena.votes import VoteStore

pytestmark = pytest.mark.slow

SECRET = "the-space-oauth-app-secret-this-test-knows"
ACCOUNT = "grace-hopper-votes"


def session_cookie(secret_key: str | None, account: str) -> str:
    """A session cookie saying `account` signed in, signed with `secret_key` (None: not signed)."""
    session = {
        "oauth_info": {
            "access_token": "an-access-token",
            "scope": "openid profile",
            "expires_at": int(time.time()) + 3600,
            "userinfo": {
                "preferred_username": account,
                "name": account,
                "profile": f"https://huggingface.co/{account}",
                "picture": "",
            },
        }
    }
    data = base64.b64encode(json.dumps(session).encode())
    return (TimestampSigner(secret_key).sign(data) if secret_key else data).decode()


def gradio_key(secret: str) -> str:
    """The key Gradio signs its session cookie with, for an OAuth app's secret ("" when there is none)."""
    return hashlib.sha256((secret + "-v4").encode()).hexdigest()


def test_only_a_cookie_signed_with_the_oauth_app_s_secret_is_a_signed_in_vote(app_model_dir, tmp_path):
    votes_db = tmp_path / "votes.sqlite3"
    marian = build_tiny_marian(tmp_path / "marian")
    space = dict(
        SYSTEM="spaces",
        SPACE_ID="someone/transformer-en-de-demo",
        OAUTH_CLIENT_ID="a-client-id",
        OAUTH_CLIENT_SECRET=SECRET,
        OAUTH_SCOPES="openid profile",
        OPENID_PROVIDER_URL="http://127.0.0.1:9",
        VOTES_DB=str(votes_db),
    )
    cookies = {
        "signed with the secret": session_cookie(gradio_key(SECRET), ACCOUNT),
        "signed with no secret": session_cookie(gradio_key(""), "forged-without-secret"),
        "signed with another secret": session_cookie(gradio_key("another-secret"), "forged-other-secret"),
        "not signed": session_cookie(None, "forged-unsigned"),
    }
    outcomes = {}
    with app_process(app_model_dir, tmp_path, comparisons=(marian,), **space) as (port, log):
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while "ready" not in Client(url, verbose=False).predict(api_name="/status"):
            assert time.monotonic() < deadline, "the comparison model did not load"
            time.sleep(0.5)
        for kind, cookie in cookies.items():
            visitor = Client(url, verbose=False, headers={"Cookie": f"session={cookie}"})
            battle_id, _, _, message = visitor.predict("A dog runs in the park.", api_name="/battle")
            assert battle_id, message
            outcomes[kind] = visitor.predict(battle_id, "A", api_name="/vote")
        table, _ = Client(url, verbose=False).predict(api_name="/leaderboard")
        log_text = log.read_text()

    assert all(revealed[0] and "stored" in revealed[2] for revealed in outcomes.values()), outcomes
    with sqlite3.connect(votes_db) as database:
        rows = database.execute("SELECT signed_in, source FROM votes ORDER BY id").fetchall()
    store = VoteStore(votes_db)
    network = store.source_hash(None, "127.0.0.1")
    assert rows == [(1, store.source_hash(ACCOUNT, "")), (0, network), (0, network), (0, network)]
    store.close()
    # The first board rests on the signed-in vote; the forged ones are on the anonymous board, apart.
    first, anonymous = table.split("#### Anonymous votes")
    assert "These ratings rest on 1 vote of 1 signed-in account." in first
    assert "These ratings rest on 3 anonymous votes from 1 network" in anonymous
    assert "Traceback" not in log_text and ACCOUNT not in log_text
