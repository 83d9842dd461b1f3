"""Whether visitors can sign in with Hugging Face to vote in the arena, decided and checked before the app starts.

Gradio serves the sign-in itself once the page has a `gr.LoginButton` (`gradio.oauth.attach_oauth`, when the page is
mounted), and picks its routes by where it runs:

- on a Space (SYSTEM=spaces and SPACE_ID, as the runtime sets them) the real OAuth routes: the visitor signs in on the
  Hub, with the OAuth app the Hub makes for a Space whose metadata says `hf_oauth: true` (it sets OAUTH_CLIENT_ID,
  OAUTH_CLIENT_SECRET, OAUTH_SCOPES and OPENID_PROVIDER_URL), through authlib;
- elsewhere a stand-in that signs every visitor in as the account of this machine's Hugging Face token, which it asks
  the Hub (`whoami` at HF_ENDPOINT) when the page is mounted.

Either fails inside Gradio with a traceback, at the first request or at start-up; `sign_in_mode` finds the same
problems first and says each in one line (`SignInUnavailable`). The account's name is never read here: only whether
one can be had.
"""

import importlib.util
import os
from collections.abc import Mapping

from gradio.utils import get_space
from huggingface_hub import constants, get_token, whoami

from ..hub_access import HUB_CONNECT_TIMEOUT_S, cause, connect

# What the Hub sets in a Space whose metadata has `hf_oauth: true`; Gradio's real routes need every one.
SPACE_OAUTH_VARIABLES = ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL")
# gradio[oauth]: authlib for the real routes; itsdangerous signs the session cookie that holds who signed in.
SPACE_PACKAGES, LOCAL_PACKAGES = ("authlib", "itsdangerous"), ("itsdangerous",)
ON_A_SPACE = "with their Hugging Face account (the Space's OAuth app)"
LOCALLY = "as the account of this machine's Hugging Face token, at {endpoint} (Gradio's local stand-in)"


class SignInUnavailable(Exception):
    """Sign-in was asked for and cannot work here; the message is one line saying why and what to do."""


def sign_in_mode(asked: bool, environ: Mapping[str, str] = os.environ) -> str | None:
    """None when votes are anonymous (sign-in neither asked for nor set up by a Space's `hf_oauth: true`); otherwise
    how visitors sign in, in a few words. Raises SignInUnavailable when it cannot work."""
    space = get_space() is not None
    if not (asked or (space and environ.get("OAUTH_CLIENT_ID"))):
        return None
    if space:
        need_packages(SPACE_PACKAGES)
        unset = [name for name in SPACE_OAUTH_VARIABLES if not environ.get(name)]
        if unset:
            raise SignInUnavailable(
                f"sign-in on a Space needs `hf_oauth: true` in its README's metadata ({', '.join(unset)} not set)."
            )
        return ON_A_SPACE
    need_packages(LOCAL_PACKAGES)
    check_local_account()
    return LOCALLY.format(endpoint=constants.ENDPOINT)


def need_packages(names: tuple[str, ...]) -> None:
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise SignInUnavailable(f"sign-in needs {', '.join(missing)}: pip install 'gradio[oauth]'.")


def check_local_account() -> None:
    """That Gradio's local stand-in will find a personal account behind this machine's token, as it asks the Hub."""
    token = get_token()
    if not token:
        raise SignInUnavailable(
            "--sign_in signs visitors in as the account of this machine's Hugging Face token, and there is none: "
            "run `hf auth login` or set HF_TOKEN (or leave out --sign_in: votes are then anonymous)."
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
