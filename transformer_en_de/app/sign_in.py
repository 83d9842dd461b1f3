"""Whether the arena's visitors can sign in with Hugging Face, decided and checked before the app starts.

Gradio serves the sign-in once the page has a `gr.LoginButton`: on a Space (SYSTEM=spaces and SPACE_ID) its real OAuth
routes; elsewhere a stand-in that signs every visitor in as the account of this machine's token. The sign-in cookie is
signed with sha256(OAUTH_CLIENT_SECRET + "-v4"): without a real secret anyone can forge it. So only the real routes
count a visitor as an account (`SignIn.accounts`); `--sign_in stand-in` tries the page, its votes anonymous."""

import importlib.util
import os
from dataclasses import dataclass

from huggingface_hub import constants, get_token, whoami

from ..hub_access import HUB_CONNECT_TIMEOUT_S, cause, connect

# What the Hub sets in a Space whose metadata has `hf_oauth: true`; Gradio's real routes need every one.
SPACE_OAUTH_VARIABLES = ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL")
ACCOUNTS, STAND_IN = "accounts", "stand-in"  # what `--sign_in` asks for (`--sign_in` alone: accounts)
TRY_STAND_IN = "try the page with `--sign_in stand-in` (its votes count as anonymous)"
NO_OAUTH_APP = (
    "--sign_in counts a vote as an account's only through a real OAuth app, and {unset} {verb} not set: off a "
    "Space, Gradio's sign-in is a local stand-in that signs anyone in as this machine's account, under a cookie key "
    "anyone can compute. Run on a Space with `hf_oauth: true` (or set SYSTEM=spaces and SPACE_ID with a real OAuth "
    f"app's {', '.join(SPACE_OAUTH_VARIABLES)}), or {TRY_STAND_IN}."
)
NOT_A_SPACE = (
    "--sign_in: an OAuth app is set, but Gradio serves its real sign-in only where SYSTEM=spaces and SPACE_ID are set "
    "(as on a Space); here it would serve its local stand-in, which signs anyone in as this machine's account. Set "
    f"them, or {TRY_STAND_IN}."
)


class SignInUnavailable(Exception):
    """Sign-in was asked for and cannot work here; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class SignIn:
    how: str  # a few words for the log
    accounts: bool  # whether a signed-in visitor counts as an account


def asked_for(value: str | None) -> str:
    """What ARENA_SIGN_IN asks for (`--sign_in`'s default): "" (nothing), ACCOUNTS or STAND_IN."""
    if value in (None, "", "0"):
        return ""
    return STAND_IN if str(value).strip().lower() in (STAND_IN, "standin", "stand_in") else ACCOUNTS


def sign_in_mode(asked: str | None) -> SignIn | None:
    """None when votes are anonymous (no sign-in `asked` for, nor set up by a Space's `hf_oauth: true`); else how
    visitors sign in. Raises SignInUnavailable where it cannot work, or where accounts would be a stand-in's."""
    space = os.environ.get("SYSTEM") == "spaces" and os.environ.get("SPACE_ID") is not None  # as Gradio tells a Space
    if not (asked or (space and os.environ.get("OAUTH_CLIENT_ID"))):
        return None
    unset = [name for name in SPACE_OAUTH_VARIABLES if not os.environ.get(name)]
    if space:  # Gradio's real routes (authlib), whose session cookie itsdangerous signs
        need_packages("authlib", "itsdangerous")
        if unset:
            raise SignInUnavailable(
                f"sign-in on a Space needs `hf_oauth: true` in its README's metadata ({', '.join(unset)} not set)."
            )
        return SignIn("with their Hugging Face account (the Space's OAuth app)", accounts=True)
    if asked == ACCOUNTS:
        verb = "is" if len(unset) == 1 else "are"
        raise SignInUnavailable(NO_OAUTH_APP.format(unset=", ".join(unset), verb=verb) if unset else NOT_A_SPACE)
    need_packages("itsdangerous")
    # That Gradio's stand-in will find a personal account behind this machine's token, as it asks the Hub.
    token = get_token()
    if not token:
        raise SignInUnavailable(
            "--sign_in stand-in signs visitors in as the account of this machine's Hugging Face token, and there is "
            "none: run `hf auth login` or set HF_TOKEN (or leave out --sign_in: votes are then anonymous)."
        )
    if constants.is_offline_mode():
        raise SignInUnavailable("--sign_in asks the Hub whose token this is, and HF_HUB_OFFLINE=1 forbids it.")
    try:
        connect(constants.ENDPOINT, HUB_CONNECT_TIMEOUT_S)  # huggingface_hub has no timeout: fail in seconds here
        account = whoami(token=token)
    except Exception as error:  # OSError, HTTP errors: anything that keeps the account from being known
        raise SignInUnavailable(
            f"--sign_in could not ask the Hub ({constants.ENDPOINT}) whose token this is: {cause(error, 200)}"
        ) from error
    if account.get("type") != "user":
        raise SignInUnavailable(
            "--sign_in needs a personal account's token; this machine's token belongs to an organization or an app."
        )
    return SignIn(
        f"as the account of this machine's Hugging Face token, at {constants.ENDPOINT} (Gradio's local stand-in, to "
        "try the page: its votes count as anonymous)",
        accounts=False,
    )


def need_packages(*names: str) -> None:
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise SignInUnavailable(f"sign-in needs {', '.join(missing)}: pip install 'gradio[oauth]'.")
