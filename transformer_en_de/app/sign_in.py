"""Whether visitors can sign in with Hugging Face to vote in the arena, decided and checked before the app starts.

Gradio serves the sign-in itself once the page has a `gr.LoginButton` (`gradio.oauth.attach_oauth`, when the page is
mounted), and picks its routes by where it runs:

- on a Space (SYSTEM=spaces and SPACE_ID, as the runtime sets them) the real OAuth routes: the visitor signs in on the
  Hub, with the OAuth app the Hub makes for a Space whose metadata says `hf_oauth: true` (it sets OAUTH_CLIENT_ID,
  OAUTH_CLIENT_SECRET, OAUTH_SCOPES and OPENID_PROVIDER_URL), through authlib;
- elsewhere a stand-in that signs every visitor in as the account of this machine's Hugging Face token, which it asks
  the Hub (`whoami` at HF_ENDPOINT) when the page is mounted.

Who signed in is kept in a session cookie signed with sha256(OAUTH_CLIENT_SECRET + "-v4"). Off a Space there is
usually no secret, so anyone can compute that key and forge a cookie for any account; and the stand-in's login route
hands every visitor the machine's account anyway. So only the real routes with a real OAuth app's secret make a
signed-in visitor an account (`SignIn.accounts`): `--sign_in` (`accounts`) refuses to start anywhere else, in one
line, and `--sign_in stand-in` keeps Gradio's stand-in as a way to try the page, its votes counted as anonymous.

Either route fails inside Gradio with a traceback, at the first request or at start-up; `sign_in_mode` finds the same
problems first and says each in one line (`SignInUnavailable`). The account's name is never read here: only whether
one can be had.
"""

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from huggingface_hub import constants, get_token, whoami

from ..hub_access import HUB_CONNECT_TIMEOUT_S, cause, connect

# What the Hub sets in a Space whose metadata has `hf_oauth: true`; Gradio's real routes need every one.
SPACE_OAUTH_VARIABLES = ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL")
# gradio[oauth]: authlib for the real routes; itsdangerous signs the session cookie that holds who signed in.
SPACE_PACKAGES, LOCAL_PACKAGES = ("authlib", "itsdangerous"), ("itsdangerous",)
ON_A_SPACE = "with their Hugging Face account (the Space's OAuth app)"
LOCALLY = (
    "as the account of this machine's Hugging Face token, at {endpoint} (Gradio's local stand-in, to try the page: "
    "its votes count as anonymous)"
)
ACCOUNTS, STAND_IN = "accounts", "stand-in"  # what `--sign_in` asks for (`--sign_in` alone: accounts)
NO_OAUTH_APP = (
    "--sign_in counts a vote as an account's only through a real OAuth app, and {unset} {verb} not set: off a "
    "Space, Gradio's sign-in is a local stand-in that signs anyone in as this machine's account, under a cookie key "
    "anyone can compute. Run on a Space with `hf_oauth: true` (or set SYSTEM=spaces and SPACE_ID with a real OAuth "
    "app's OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, OAUTH_SCOPES and OPENID_PROVIDER_URL), or try the page with "
    "`--sign_in stand-in` (its votes count as anonymous)."
)
NOT_A_SPACE = (
    "--sign_in: an OAuth app is set, but Gradio serves its real sign-in only where SYSTEM=spaces and SPACE_ID are set "
    "(as on a Space); here it would serve its local stand-in, which signs anyone in as this machine's account. Set "
    "them, or try the page with `--sign_in stand-in` (its votes count as anonymous)."
)


class SignInUnavailable(Exception):
    """Sign-in was asked for and cannot work here; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class SignIn:
    """How visitors sign in (`how`, a few words for the log), and whether a signed-in visitor counts as an account
    (`accounts`: only through Gradio's real OAuth routes and a real OAuth app's secret)."""

    how: str
    accounts: bool

    def __str__(self) -> str:
        return self.how


def asked_for(value: str | bool | None) -> str:
    """What `--sign_in` or ARENA_SIGN_IN asks for: "" (nothing), ACCOUNTS or STAND_IN."""
    if value in (None, False, "", "0"):
        return ""
    return STAND_IN if str(value).strip().lower() in (STAND_IN, "standin", "stand_in") else ACCOUNTS


def sign_in_mode(asked: str | bool | None, environ: Mapping[str, str] = os.environ) -> SignIn | None:
    """None when votes are anonymous (sign-in neither asked for nor set up by a Space's `hf_oauth: true`); otherwise
    how visitors sign in (`SignIn`). Raises SignInUnavailable when it cannot work, or when accounts are asked for where
    Gradio would serve its stand-in."""
    asked = asked_for(asked)
    # A Space as Gradio tells one (SYSTEM=spaces and a SPACE_ID): only there does it serve its real OAuth routes.
    space = environ.get("SYSTEM") == "spaces" and environ.get("SPACE_ID") is not None
    if not (asked or (space and environ.get("OAUTH_CLIENT_ID"))):
        return None
    if space:  # Gradio's real routes (a stand-in is not served on a Space)
        need_packages(SPACE_PACKAGES)
        unset = [name for name in SPACE_OAUTH_VARIABLES if not environ.get(name)]
        if unset:
            raise SignInUnavailable(
                f"sign-in on a Space needs `hf_oauth: true` in its README's metadata ({', '.join(unset)} not set)."
            )
        return SignIn(ON_A_SPACE, accounts=True)
    if asked == ACCOUNTS:
        unset = [name for name in SPACE_OAUTH_VARIABLES if not environ.get(name)]
        if unset:
            verb = "is" if len(unset) == 1 else "are"
            raise SignInUnavailable(NO_OAUTH_APP.format(unset=", ".join(unset), verb=verb))
        raise SignInUnavailable(NOT_A_SPACE)
    need_packages(LOCAL_PACKAGES)
    check_local_account()
    return SignIn(LOCALLY.format(endpoint=constants.ENDPOINT), accounts=False)


def need_packages(names: tuple[str, ...]) -> None:
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise SignInUnavailable(f"sign-in needs {', '.join(missing)}: pip install 'gradio[oauth]'.")


def check_local_account() -> None:
    """That Gradio's local stand-in will find a personal account behind this machine's token, as it asks the Hub."""
    token = get_token()
    if not token:
        raise SignInUnavailable(
            "--sign_in stand-in signs visitors in as the account of this machine's Hugging Face token, and there is "
            "none: run `hf auth login` or set HF_TOKEN (or leave out --sign_in: votes are then anonymous)."
        )
    if constants.is_offline_mode():
        raise SignInUnavailable("--sign_in asks the Hub whose token this is, and HF_HUB_OFFLINE=1 forbids it.")
    try:
        # huggingface_hub's client has no timeout: a Hub that cannot be reached fails here in seconds instead.
        connect(constants.ENDPOINT, HUB_CONNECT_TIMEOUT_S)
        account = whoami(token=token)
    except Exception as error:  # OSError, HTTP errors: anything that keeps the account from being known
        raise SignInUnavailable(
            f"--sign_in could not ask the Hub ({constants.ENDPOINT}) whose token this is: {cause(error, 200)}"
        ) from error
    if account.get("type") != "user":
        raise SignInUnavailable(
            "--sign_in needs a personal account's token; this machine's token belongs to an organization or an app."
        )
