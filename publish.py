"""Put a local folder on the Hugging Face Hub: a saved model folder as a model repo, an app folder as a Space.

    python publish.py models/transformer-en-de your-name/transformer-en-de
    python publish.py space/ your-name/transformer-en-de-demo --repo-type space --space-sdk gradio

`push_folder` creates the repo if needed and uploads the folder in one commit through `huggingface_hub`. Anything
that stops the push (offline mode, an unreachable endpoint, a missing or read-only token, a folder that is not what
the repo type needs) raises `PublishError` at once with the cause and what to do about it.
"""

import argparse
import socket
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled
from huggingface_hub.repocard import metadata_load

# huggingface_hub's HTTP client has no timeout: a dropped connection would hang, so reachability is checked first.
CONNECT_TIMEOUT_S = 5.0
# Never worth uploading: Python byte-code caches and notebook autosaves.
IGNORE_PATTERNS = ["*__pycache__*", "*.pyc", "*.ipynb_checkpoints*"]
REPO_TYPES = ("model", "dataset", "space")


class PublishError(RuntimeError):
    """The folder could not be pushed; the message says why and what to do."""


def push_folder(
    folder: str | Path,
    repo_id: str,
    *,
    repo_type: str = "model",
    space_sdk: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
    ignore_patterns: list[str] | None = None,
) -> str:
    """Create `repo_id` (if it does not exist) and upload every file of `folder` to it; return the repo URL.

    A Space's SDK comes from `space_sdk`, else from the `sdk:` field of the folder's README.md, else "gradio".
    `token` defaults to the one saved by `hf auth login` (or `HF_TOKEN`); `endpoint` to the Hub (`HF_ENDPOINT`).
    `ignore_patterns` (fnmatch patterns on paths inside the folder) are skipped besides byte-code caches.
    """
    folder = Path(folder)
    where = f"{repo_type} repo {repo_id!r}"
    check_folder(folder, repo_type)
    if repo_type == "space":
        space_sdk = space_sdk or _sdk_from_readme(folder) or "gradio"
    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")

    if constants.is_offline_mode():
        raise PublishError(
            f"Cannot push {folder} to the {where}: offline mode is on (HF_HUB_OFFLINE=1). "
            "Unset HF_HUB_OFFLINE on a machine with network access and run the push again."
        )
    _check_reachable(endpoint, where)

    api = HfApi(endpoint=endpoint, token=token)
    try:
        url = api.create_repo(
            repo_id,
            repo_type=repo_type,
            space_sdk=space_sdk if repo_type == "space" else None,
            private=private,
            exist_ok=True,
        )
        api.upload_folder(
            folder_path=folder,
            repo_id=url.repo_id,
            repo_type=repo_type,
            commit_message=commit_message or f"Upload {folder.name}",
            ignore_patterns=IGNORE_PATTERNS + list(ignore_patterns or []),
        )
    except (LocalTokenNotFoundError, HfHubHTTPError) as error:
        raise PublishError(_explain_refusal(error, where, endpoint)) from error
    except OfflineModeIsEnabled as error:
        raise PublishError(f"Cannot push to the {where}: offline mode is on ({error}).") from error
    except ValueError as error:  # bad repo id, unknown SDK, ...
        raise PublishError(f"Cannot push to the {where}: {error}") from error
    except Exception as error:  # transport errors of the HTTP client
        raise PublishError(
            f"Cannot push to the {where}: the connection to {endpoint} failed ({type(error).__name__}: {error}). "
            "Check the network and run the push again."
        ) from error
    return str(url)


def check_folder(folder: Path, repo_type: str) -> None:
    """Raise PublishError unless `folder` exists, has files, and holds what `repo_type` needs."""
    if repo_type not in REPO_TYPES:
        raise PublishError(f"Unknown repo type {repo_type!r}: use one of {', '.join(REPO_TYPES)}.")
    if not folder.is_dir():
        raise PublishError(f"Nothing to push: {folder} does not exist or is not a folder.")
    if not any(path.is_file() for path in folder.rglob("*")):
        raise PublishError(f"Nothing to push: {folder} is empty.")
    if repo_type == "model" and not (folder / "config.json").is_file():
        raise PublishError(
            f"{folder} has no config.json, so it is not a saved model folder. "
            "Push the folder written by train.py (or by save_pretrained)."
        )
    if repo_type == "space" and not (folder / "app.py").is_file():
        raise PublishError(f"{folder} has no app.py, the file a Gradio Space runs. Push the Space's folder.")


def _sdk_from_readme(folder: Path) -> str | None:
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    try:
        return (metadata_load(readme) or {}).get("sdk")
    except ValueError:
        return None


def _check_reachable(endpoint: str, where: str) -> None:
    """Open (and close) a TCP connection to the endpoint so that a dead network fails in seconds, not never."""
    if urllib.request.getproxies():
        return  # behind a proxy a direct connection says nothing; the HTTP client goes through the proxy
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise PublishError(
            f"Cannot push to the {where}: {endpoint} is unreachable ({error}). "
            "Check the network (or the endpoint) and run the push again."
        ) from error


def _explain_refusal(error: Exception, where: str, endpoint: str) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, LocalTokenNotFoundError) or status in (401, 403):
        return (
            f"Cannot push to the {where}: {endpoint} refused the request as not authorised (HTTP {status}). "
            "Log in with `hf auth login` using a token with write access, or pass one with --token / HF_TOKEN."
        )
    reason = str(error).splitlines()
    return f"Cannot push to the {where}: {endpoint} answered HTTP {status}: {' '.join(reason).strip()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Push a local folder (saved model or Space) to the Hugging Face Hub.")
    parser.add_argument("folder", type=Path, help="the folder to upload")
    parser.add_argument("repo_id", help="the target repo, e.g. your-name/transformer-en-de")
    parser.add_argument("--repo-type", choices=REPO_TYPES, default="model")
    parser.add_argument("--space-sdk", default=None, help="SDK of a new Space (default: README.md's sdk, or gradio)")
    parser.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--private", action="store_true", help="create the repo as private")
    args = parser.parse_args(argv)
    try:
        url = push_folder(
            args.folder,
            args.repo_id,
            repo_type=args.repo_type,
            space_sdk=args.space_sdk,
            token=args.token,
            endpoint=args.endpoint,
            private=args.private,
        )
    except PublishError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
