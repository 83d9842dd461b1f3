"""Push a folder to the Hugging Face Hub as a model repo or a Space.

`push_folder` creates the repo if needed and uploads the folder in one commit, saying what it is doing while it waits;
anything that stops the push (offline mode, an unreachable endpoint, a missing or read-only token, a folder that is
not what the repo type needs, a model folder that does not load, a Hub that stops answering half-way) raises
`PublishError` with the cause and what to do about it. `check_model_loads`
is that last check: the folder is loaded here, offline, as a user would load it from the Hub, before a single byte is
uploaded.
"""

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from huggingface_hub import HfApi, constants, get_session, set_client_factory
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled
from huggingface_hub.repocard import metadata_load
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..decoding.loading import WEIGHT_FILES, check_code_origin, check_safetensors, needs_remote_code
from ..hub_access import cause, connect

# huggingface_hub's HTTP client has no timeout: a dropped connection would hang, so reachability is checked first,
CONNECT_TIMEOUT_S = 5.0
# and every request of a push gives up after this long without progress (connecting, sending, or awaiting the answer).
PUSH_TIMEOUT_S = 120.0
# While a request of a push runs, a line says so this often.
PROGRESS_EVERY_S = 10.0
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
    timeout: float = PUSH_TIMEOUT_S,
    report=print,
) -> str:
    """Create `repo_id` (if it does not exist) and upload every file of `folder` to it; return the repo URL.

    A Space's SDK comes from `space_sdk`, else from the `sdk:` field of the folder's README.md, else "gradio".
    `token` defaults to the one saved by `hf auth login` (or `HF_TOKEN`); `endpoint` to the Hub (`HF_ENDPOINT`).
    `ignore_patterns` (fnmatch patterns on paths inside the folder) are skipped besides byte-code caches.
    Each request gives up after `timeout` seconds without progress; `report` gets a line for each step of the push and
    one every `PROGRESS_EVERY_S` seconds while a request runs. A push that gave up can simply be run again: files the
    repo already holds are not sent twice.
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
    for model_folder in model_folders(folder, repo_type):  # before the first request: a broken model never lands
        check_model_loads(model_folder)

    api = HfApi(endpoint=endpoint, token=token)
    files = [path for path in folder.rglob("*") if path.is_file()]
    size = sum(path.stat().st_size for path in files) / 2**20
    progress = _Progress(report, timeout)
    try:
        with bounded_hub_requests(timeout, report=report), progress:
            progress.step(f"creating (or finding) the {where} on {endpoint}")
            url = api.create_repo(
                repo_id,
                repo_type=repo_type,
                space_sdk=space_sdk if repo_type == "space" else None,
                private=private,
                exist_ok=True,
            )
            progress.step(f"uploading {folder.name} ({len(files)} files, {size:,.1f} MiB at most) to the {where}")
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
        if _is_timeout(error):
            raise PublishError(
                f"Cannot push to the {where}: {endpoint} stopped answering while {progress.doing} (nothing for "
                f"{timeout:.0f} s, sent twice), so the push gave up. Run the same command again to finish it: files "
                "the repo already holds are not sent twice."
            ) from error
        raise PublishError(
            f"Cannot push to the {where}: the connection to {endpoint} failed ({type(error).__name__}: {error}). "
            "Check the network and run the push again."
        ) from error
    return str(url)


class HubStalled(TimeoutError):
    """A request of a push went unanswered again after it had been sent again."""


@contextmanager
def bounded_hub_requests(timeout: float, retries: int = 1, report=print):
    """Every request huggingface_hub sends in the block gives up after `timeout` seconds without progress, and one
    left unanswered is sent again at most `retries` times (then HubStalled).

    Its HTTP client waits forever by default, and some of its calls pass `timeout=None` themselves; so the client is
    made (through `set_client_factory`, its documented hook) with the timeout, and a request hook puts it on every
    request that carries none. huggingface_hub itself sends a request that timed out up to 5 times more, with waits
    between: the same hook counts those, so that a Hub that has stalled is given up in minutes, not a quarter of an
    hour. A client like the one before the block is back afterwards.
    """
    bounded = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    unanswered: dict[tuple[str, str], int] = {}  # requests sent that got no answer yet: times sent
    lock = threading.Lock()

    def on_request(request) -> None:
        limits = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {part: limits.get(part) or limit for part, limit in bounded.items()}
        key = (request.method, str(request.url))
        with lock:
            sent = unanswered.get(key, 0)
            if sent > retries:
                raise HubStalled(f"{request.method} {request.url.path} went unanswered {sent} times")
            unanswered[key] = sent + 1
        if sent:
            report(f"[push] no answer to {request.method} {request.url.path} within {timeout:.0f} s: sending it again")

    def on_response(response) -> None:
        with lock:
            unanswered.pop((response.request.method, str(response.request.url)), None)

    # The client in place (huggingface_hub's default: its request hook, redirects followed): the push's client and
    # the one after it are made like it, the push's bounded and with the hooks above added.
    before = get_session()
    hooks, follow_redirects, unbounded = before.event_hooks, before.follow_redirects, before.timeout

    def client(bound=unbounded, added_request=(), added_response=()):
        return type(before)(
            event_hooks={
                "request": [*hooks["request"], *added_request],
                "response": [*hooks["response"], *added_response],
            },
            follow_redirects=follow_redirects,
            timeout=bound,
        )

    set_client_factory(lambda: client(timeout, [on_request], [on_response]))
    try:
        yield
    finally:
        set_client_factory(client)


def _is_timeout(error: BaseException) -> bool:
    """The HTTP client's timeout (httpx's TimeoutException, or one wrapped in another error) or the OS's."""
    while error is not None:
        if isinstance(error, TimeoutError) or any(cls.__name__ == "TimeoutException" for cls in type(error).__mro__):
            return True
        error = error.__cause__ or error.__context__
    return False


class _Progress:
    """The step a push is at, reported when it starts and every `PROGRESS_EVERY_S` seconds while it runs."""

    def __init__(self, report, timeout: float, every: float = PROGRESS_EVERY_S):
        self.report, self.timeout, self.every = report, timeout, every
        self.doing, self.started = "connecting", time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="push progress", daemon=True)

    def step(self, doing: str) -> None:
        self.doing, self.started = doing, time.monotonic()
        self.report(f"[push] {doing}")

    def _tick(self) -> None:
        while not self._done.wait(self.every):
            self.report(
                f"[push] still {self.doing}: {time.monotonic() - self.started:.0f} s so far (a request "
                f"with no progress for {self.timeout:.0f} s is given up)"
            )

    def __enter__(self) -> "_Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


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


def model_folders(folder: Path, repo_type: str) -> list[Path]:
    """The saved models a push carries: the folder itself for a model repo; for a Space, every folder inside it that
    holds a config.json beside weights (deploy_space.py ships the model as models/transformer-en-de/)."""
    if repo_type == "model":
        return [folder]
    if repo_type == "space":
        return sorted(
            config.parent
            for config in folder.rglob("config.json")
            if any((config.parent / name).is_file() for name in WEIGHT_FILES)
        )
    return []


def check_model_loads(folder: str | Path) -> None:
    """Raise PublishError unless `folder` loads as a user would load it from the Hub, here and offline: the config,
    every weight (none missing, unexpected, mis-shaped or non-finite) and the tokenizer, matching the config's ids."""
    folder = Path(folder)
    refusal = (
        f"{folder} does not load, so it would not load from the Hub either; nothing was uploaded. Fix the "
        "folder (save it again with train.py or save_pretrained) and push again"
    )
    try:
        check_safetensors(folder)
        # The folder's own copy of the modeling code, where its config needs one (and none from elsewhere).
        options = dict(trust_remote_code=needs_remote_code(str(folder), local_files_only=True), local_files_only=True)
        if options["trust_remote_code"]:
            check_code_origin(folder, str(folder), hub_repo=False)
        model, info = AutoModelForSeq2SeqLM.from_pretrained(
            folder, output_loading_info=True, use_safetensors=True, **options
        )
    except Exception as error:  # OSError (no weights), ValueError (config), SafetensorError (truncated), ...
        raise PublishError(f"{refusal}. Loading the model failed ({type(error).__name__}): {cause(error)}") from error
    wrong = {kind: sorted(info.get(kind) or []) for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    wrong = {kind: keys for kind, keys in wrong.items() if keys}
    if wrong:
        details = "; ".join(
            f"{len(keys)} {kind.replace('_', ' ')} ({', '.join(map(str, keys[:3]))}...)" for kind, keys in wrong.items()
        )
        raise PublishError(f"{refusal}. Its weights do not fit its config.json: {details}.")
    broken = [name for name, parameter in model.named_parameters() if not torch.isfinite(parameter).all()]
    if broken:
        raise PublishError(f"{refusal}. {len(broken)} weight tensors hold NaN or infinity ({', '.join(broken[:3])}).")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **options)
    except Exception as error:
        raise PublishError(
            f"{refusal}. Loading the tokenizer failed ({type(error).__name__}): {cause(error)}"
        ) from error
    config = model.config
    if len(tokenizer) > config.vocab_size:
        raise PublishError(
            f"{refusal}. The tokenizer has {len(tokenizer)} tokens but the model only "
            f"{config.vocab_size} embeddings (config.json vocab_size)."
        )
    for name in ("pad_token_id", "eos_token_id"):
        ours, theirs = getattr(tokenizer, name), getattr(config, name, None)
        if ours is not None and theirs is not None and ours != theirs:
            raise PublishError(f"{refusal}. The tokenizer's {name} is {ours} but config.json says {theirs}.")


def _sdk_from_readme(folder: Path) -> str | None:
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    try:
        return (metadata_load(readme) or {}).get("sdk")
    except ValueError:
        return None


def _check_reachable(endpoint: str, where: str) -> None:
    try:
        connect(endpoint, CONNECT_TIMEOUT_S)
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
