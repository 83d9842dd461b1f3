"""The Hugging Face Hub: load a model by folder or id, and push a folder as a model repo or a Space.

`load_model` takes a local folder or a Hub id and says in plain words why it could not load one (offline, no such
folder, not in the cache); `model_folder` finds or downloads a model's files the same way, for fine-tuning. A Hub id
may pin a revision (`id@revision`: a commit, tag or branch) and is always loaded at one commit: the one the revision
names when it is looked up. Weights load from safetensors: a pickle (`pytorch_model.bin`) can run code when it is
read, so a folder or repo that has only one is refused with the command that converts it (`pickle_only_message`).
Hub repos published before safetensors (the OPUS-MT models among them) often have them only in the pull request the
Hub's conversion bot opened: `load_listed_model` then loads that pull request's commit, when it converts the very
commit asked for (transformers finds it only for `main`, never for a pinned commit); and, for a model the operator
listed (`allow_pickle`), a pickle through transformers' own loading with torch's `weights_only` unpickler, which
refuses anything but tensors. `LoadedModel.weights` says which, for the page. Remote code is trusted only where the
config needs it (a model type transformers
does not know, with an `auto_map`: this project's own models), and then only code inside the folder or Hub repo that
was named: an `auto_map` entry that points at another repository (`owner/repo--module.Class`) is refused before
anything is imported, and a Hub repo is loaded at the commit its config was read from, so the code checked is the code
run.
Every other model loads with transformers' own code.
`push_folder` creates the repo if needed and uploads the folder in one commit, saying what it is doing while it waits;
anything that stops the push (offline mode, an unreachable endpoint, a missing or read-only token, a folder that is
not what the repo type needs, a model folder that does not load, a Hub that stops answering half-way) raises
`PublishError` with the cause and what to do about it. `check_model_loads`
is that last check: the folder is loaded here, offline, as a user would load it from the Hub, before a single byte is
uploaded.
"""

import json
import socket
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from huggingface_hub import HfApi, constants, set_client_factory, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalTokenNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.repocard import metadata_load
from huggingface_hub.utils import _http as hub_http  # its default client, to bound it (no public accessor)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

# huggingface_hub's HTTP client has no timeout: a dropped connection would hang, so reachability is checked first,
CONNECT_TIMEOUT_S = 5.0
# and every request of a push gives up after this long without progress (connecting, sending, or awaiting the answer).
PUSH_TIMEOUT_S = 120.0
# While a request of a push runs, a line says so this often.
PROGRESS_EVERY_S = 10.0
# Loading a model by id: a quick look first, so that an offline machine falls back to the local cache at once.
HUB_CONNECT_TIMEOUT_S = 3.0
# Never worth uploading: Python byte-code caches and notebook autosaves.
IGNORE_PATTERNS = ["*__pycache__*", "*.pyc", "*.ipynb_checkpoints*"]
REPO_TYPES = ("model", "dataset", "space")
# What a model of this project needs to be loaded and fine-tuned (not other frameworks' weights or training state).
MODEL_FILES = ["*.json", "*.safetensors", "*.py", "*.md"]


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
    hour. The client before the block is back afterwards.
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

    def client():
        made = hub_http.default_client_factory()
        made.timeout = timeout
        hooks = made.event_hooks
        made.event_hooks = {"request": [*hooks["request"], on_request], "response": [*hooks["response"], on_response]}
        return made

    previous = getattr(hub_http, "_GLOBAL_CLIENT_FACTORY", hub_http.default_client_factory)
    set_client_factory(client)
    try:
        yield
    finally:
        set_client_factory(previous)


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
            self.report(f"[push] still {self.doing}: {time.monotonic() - self.started:.0f} s so far (a request "
                        f"with no progress for {self.timeout:.0f} s is given up)")

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


SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
WEIGHT_FILES = SAFE_WEIGHTS + PICKLE_WEIGHTS


def pickle_only_message(where: str) -> str:
    """Why a model with only pickle weights is refused, and the command that converts it."""
    return (
        f"has only PyTorch pickle weights (pytorch_model.bin), and this project loads safetensors only (a pickle can "
        f"run code when it is read). Convert it once, on a machine you trust: python -c \"from transformers import "
        f"AutoModelForSeq2SeqLM as M; M.from_pretrained('{where}', use_safetensors=False).save_pretrained('{where}')\" "
        "writes model.safetensors beside it (then delete pytorch_model.bin)."
    )


def check_safetensors(folder: str | Path, name: str | None = None) -> None:
    """RuntimeError (with the conversion command) if `folder` holds pickle weights and no safetensors."""
    folder = Path(folder)
    has = lambda names: any((folder / file).is_file() for file in names)  # noqa: E731
    if has(PICKLE_WEIGHTS) and not has(SAFE_WEIGHTS):
        raise RuntimeError(f"could not be loaded: {name or folder} {pickle_only_message(str(folder))}")


def split_revision(model_id: str) -> tuple[str, str | None]:
    """("owner/name", "revision") from "owner/name@revision"; a local folder or an id without "@" has no revision."""
    if "@" not in model_id or Path(model_id).expanduser().exists():
        return model_id, None
    name, revision = model_id.rsplit("@", 1)
    if not name or not revision:
        raise RuntimeError(f"could not be loaded: {model_id!r} is not an id@revision (a commit, tag or branch).")
    return name, revision


class ForeignCodeError(RuntimeError):
    """A model's `auto_map` names code outside the folder or Hub repo that was asked for; nothing of it was run."""


# The files whose `auto_map` tells transformers which code to import for a model and its tokenizer.
CODE_MAP_FILES = ("config.json", "tokenizer_config.json")


def code_references(folder: str | Path) -> list[tuple[str, str, str]]:
    """(file, Auto class, reference) for every `auto_map` entry of the folder's config and tokenizer config."""
    found = []
    for name in CODE_MAP_FILES:
        path = Path(folder) / name
        if not path.is_file():
            continue
        try:
            auto_map = json.loads(path.read_text(encoding="utf-8")).get("auto_map") or {}
        except (ValueError, AttributeError):
            continue  # not a JSON object: the loader says what is wrong with it, and runs no code
        for auto_class, references in auto_map.items() if isinstance(auto_map, dict) else ():
            for reference in references if isinstance(references, list) else [references]:
                if isinstance(reference, str):
                    found.append((name, auto_class, reference))
    return found


def check_code_origin(folder: str | Path, listed: str, *, hub_repo: bool) -> None:
    """ForeignCodeError unless every `auto_map` reference of `folder` is code inside what the operator listed: the
    folder itself, or for a Hub repo that repo (`listed--module.Class` names it again). A reference `repo--module.Class`
    to any other repository would make transformers download and import that repository's code."""
    for name, auto_class, reference in code_references(folder):
        if "--" not in reference:
            continue  # module.Class: a file of the folder or repo itself
        repo = reference.split("--", 1)[0]
        if hub_repo and repo == listed:
            continue
        raise ForeignCodeError(
            f"could not be loaded: its {name} maps {auto_class} to {reference!r}, code in another repository "
            f"({repo}), and code is run only from the folder or Hub repo listed ({listed}); nothing of {repo} was "
            "run. If you trust that code, copy it into the model's own folder or repo."
        )


def needs_remote_code(source: str, *, revision: str | None = None, local_files_only: bool = False) -> bool:
    """Whether loading `source` needs its own modeling code: its config names a model type transformers does not
    know and maps it to code (`auto_map`). Reads config.json only; runs nothing."""
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config, _ = PretrainedConfig.get_config_dict(source, revision=revision, local_files_only=local_files_only)
    return "auto_map" in config and config.get("model_type") not in CONFIG_MAPPING


def model_folders(folder: Path, repo_type: str) -> list[Path]:
    """The saved models a push carries: the folder itself for a model repo; for a Space, every folder inside it that
    holds a config.json beside weights (deploy_space.py ships the model as models/transformer-en-de/)."""
    if repo_type == "model":
        return [folder]
    if repo_type == "space":
        return sorted(
            config.parent for config in folder.rglob("config.json")
            if any((config.parent / name).is_file() for name in WEIGHT_FILES)
        )
    return []


def check_model_loads(folder: str | Path) -> None:
    """Raise PublishError unless `folder` loads as a user would load it from the Hub, here and offline: the config,
    every weight (none missing, unexpected, mis-shaped or non-finite) and the tokenizer, matching the config's ids."""
    folder = Path(folder)
    refusal = (f"{folder} does not load, so it would not load from the Hub either; nothing was uploaded. Fix the "
               "folder (save it again with train.py or save_pretrained) and push again")
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
        raise PublishError(f"{refusal}. Loading the model failed ({type(error).__name__}): {_cause(error)}") from error
    wrong = {kind: sorted(info.get(kind) or []) for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    wrong = {kind: keys for kind, keys in wrong.items() if keys}
    if wrong:
        details = "; ".join(f"{len(keys)} {kind.replace('_', ' ')} ({', '.join(map(str, keys[:3]))}...)"
                            for kind, keys in wrong.items())
        raise PublishError(f"{refusal}. Its weights do not fit its config.json: {details}.")
    broken = [name for name, parameter in model.named_parameters() if not torch.isfinite(parameter).all()]
    if broken:
        raise PublishError(f"{refusal}. {len(broken)} weight tensors hold NaN or infinity ({', '.join(broken[:3])}).")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **options)
    except Exception as error:
        raise PublishError(
            f"{refusal}. Loading the tokenizer failed ({type(error).__name__}): {_cause(error)}"
        ) from error
    config = model.config
    if len(tokenizer) > config.vocab_size:
        raise PublishError(f"{refusal}. The tokenizer has {len(tokenizer)} tokens but the model only "
                           f"{config.vocab_size} embeddings (config.json vocab_size).")
    for name in ("pad_token_id", "eos_token_id"):
        ours, theirs = getattr(tokenizer, name), getattr(config, name, None)
        if ours is not None and theirs is not None and ours != theirs:
            raise PublishError(f"{refusal}. The tokenizer's {name} is {ours} but config.json says {theirs}.")


def _cause(error: Exception, length: int = 300) -> str:
    """The error's message on one line, cut to `length` characters."""
    cause = " ".join(str(error).split())
    return cause if len(cause) <= length else cause[: length - 3] + "..."


def _sdk_from_readme(folder: Path) -> str | None:
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    try:
        return (metadata_load(readme) or {}).get("sdk")
    except ValueError:
        return None


def _connect(endpoint: str, timeout: float) -> None:
    """Open (and close) a TCP connection to the endpoint, so that a dead network fails in seconds, not never.

    Raises OSError. Behind a proxy a direct connection says nothing: the HTTP client goes through the proxy.
    """
    if urllib.request.getproxies():
        return
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    socket.create_connection((parsed.hostname, port), timeout=timeout).close()


def _check_reachable(endpoint: str, where: str) -> None:
    try:
        _connect(endpoint, CONNECT_TIMEOUT_S)
    except OSError as error:
        raise PublishError(
            f"Cannot push to the {where}: {endpoint} is unreachable ({error}). "
            "Check the network (or the endpoint) and run the push again."
        ) from error


def hub_is_reachable(timeout: float = HUB_CONNECT_TIMEOUT_S) -> bool:
    """False in offline mode (HF_HUB_OFFLINE=1) or when a TCP connection to the Hub fails within `timeout`."""
    if constants.is_offline_mode():
        return False
    try:
        _connect(constants.ENDPOINT, timeout)
    except OSError:
        return False
    return True


def _explain_refusal(error: Exception, where: str, endpoint: str) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, LocalTokenNotFoundError) or status in (401, 403):
        return (
            f"Cannot push to the {where}: {endpoint} refused the request as not authorised (HTTP {status}). "
            "Log in with `hf auth login` using a token with write access, or pass one with --token / HF_TOKEN."
        )
    reason = str(error).splitlines()
    return f"Cannot push to the {where}: {endpoint} answered HTTP {status}: {' '.join(reason).strip()}"


def _where(model_id: str) -> tuple[str, bool]:
    """(what to load from, whether only local files can be used): a local folder, or a Hub id looked up online when
    the Hub is reachable and in the local cache otherwise. A path that is no folder raises RuntimeError."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        return str(folder), True
    if model_id.startswith((".", "/", "~")) or folder.exists() or model_id.count("/") > 1:
        raise RuntimeError(f"could not be loaded: there is no model folder at {model_id}.")
    return model_id, not hub_is_reachable()


def _offline_message(model_id: str) -> str:
    return (
        f"could not be loaded: the Hugging Face Hub is unreachable (offline) and {model_id} is neither a local folder "
        "nor in the local cache. Run once with network access to download it, or pass a folder."
    )


def model_folder(model_id: str) -> Path:
    """A local folder with the files of `model_id` (`id@revision` pins one): the folder itself, or the Hub repo
    downloaded (or found in the cache when offline). Raises RuntimeError in plain words, for a folder or repo with
    pickle weights only too."""
    name, revision = split_revision(model_id)
    source, local_only = _where(name)
    if Path(source).is_dir():
        check_safetensors(source, model_id)
        return Path(source)
    try:
        folder = Path(
            snapshot_download(name, revision=revision, allow_patterns=MODEL_FILES, local_files_only=local_only)
        )
    except Exception as error:  # offline, not in the cache, no such repo, no access
        message = _offline_message(model_id) if local_only else f"could not be loaded: {_cause(error)}"
        raise RuntimeError(message) from error
    if not any((folder / file).is_file() for file in SAFE_WEIGHTS):
        raise RuntimeError(f"could not be loaded: {model_id} {pickle_only_message(name)}")
    return folder


# The Hub's safetensors conversion bot: the author of the pull requests that add model.safetensors to a repo.
CONVERSION_BOT = "SFconvertbot"


@dataclass
class LoadedModel:
    """A model as `load_listed_model` loaded it, and from where: `revision` is the Hub commit (None for a folder),
    `weights` says in a visitor's words which weights, when they are not the safetensors of what was named."""

    model: object
    tokenizer: object
    revision: str | None = None
    weights: str = ""


def _has(files, names) -> bool:
    return any(name in files for name in names)


def _conversion_pull_request(name: str, commit: str) -> tuple[str, str] | None:
    """(ref, commit) of the open pull request by the Hub's conversion bot that adds safetensors to `commit` (its
    parent is that very commit, as transformers checks too), or None. Only the bot's: anyone may open a pull request."""
    api = HfApi()
    for discussion in api.get_repo_discussions(
        name, author=CONVERSION_BOT, discussion_type="pull_request", discussion_status="open"
    ):
        if discussion.author != CONVERSION_BOT or not discussion.is_pull_request or discussion.status != "open":
            continue  # the Hub filtered already; a stand-in that did not must not widen what is trusted
        history = api.list_repo_commits(name, revision=discussion.git_reference)
        if len(history) < 2 or history[1].commit_id != commit:
            continue  # it converted another commit than the one asked for: other weights, perhaps another config
        info = api.model_info(name, revision=history[0].commit_id)
        if _has({sibling.rfilename for sibling in info.siblings or []}, SAFE_WEIGHTS):
            return discussion.git_reference, info.sha
    return None


def _hub_weights(name: str, model_id: str, commit: str, local_only: bool, allow_pickle: bool) -> tuple[str, bool, str]:
    """(commit to load, whether from safetensors, what the page says) for a Hub repo at `commit`: its safetensors,
    else those of its conversion pull request, else (`allow_pickle`) its pickle; RuntimeError in plain words."""
    if local_only:  # what the cache holds of that commit
        files = {file for file in WEIGHT_FILES if isinstance(try_to_load_from_cache(name, file, revision=commit), str)}
    else:
        files = {sibling.rfilename for sibling in HfApi().model_info(name, revision=commit).siblings or []}
    if _has(files, SAFE_WEIGHTS):
        return commit, True, ""
    pull_request = None if local_only or not _has(files, PICKLE_WEIGHTS) else _conversion_pull_request(name, commit)
    if pull_request is not None:
        ref, converted = pull_request
        return converted, True, (
            f"weights: the safetensors of {name}'s conversion pull request {ref} (commit {converted[:7]}), made from "
            f"its commit {commit[:7]}, which has PyTorch pickle weights only"
        )
    if _has(files, PICKLE_WEIGHTS) and allow_pickle:
        return commit, False, (
            f"weights: {name} has PyTorch pickle weights only (pytorch_model.bin, commit {commit[:7]}), read with "
            "torch's weights_only unpickler, which refuses anything but tensors"
        )
    if _has(files, PICKLE_WEIGHTS):
        raise RuntimeError(f"could not be loaded: {model_id} {pickle_only_message(name)}")
    where = "in the local cache" if local_only else "on the Hugging Face Hub"
    raise RuntimeError(
        f"could not be loaded: {model_id} has no model weights {where} at commit {commit[:7]} (neither "
        "model.safetensors nor pytorch_model.bin)."
    )


def _hub_failure(model_id: str, name: str, revision: str | None, error: Exception) -> str:
    """Why a Hub repo could not be looked up, in a visitor's words (never a library's advice to a programmer)."""
    if isinstance(error, RevisionNotFoundError):
        return f"could not be loaded: {name} has no revision {revision!r} on the Hugging Face Hub."
    if isinstance(error, RepositoryNotFoundError):
        return f"could not be loaded: there is no model {name} on the Hugging Face Hub (or it is private)."
    if isinstance(error, EntryNotFoundError):
        return f"could not be loaded: {model_id} lacks a file a model needs on the Hugging Face Hub ({_cause(error)})."
    return f"could not be loaded: {model_id} could not be read from the Hugging Face Hub ({_cause(error)})."


def load_model(model_id: str, device: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) from a local folder or a Hub id (`id@revision` pins a commit, tag or branch),
    from safetensors only, trusting remote code only where the config needs it; raises RuntimeError in plain words."""
    loaded = load_listed_model(model_id, device)
    return loaded.model, loaded.tokenizer


def load_listed_model(model_id: str, device: str | torch.device = "cpu", *, allow_pickle: bool = False) -> LoadedModel:
    """`load_model`, saying where the weights came from. A Hub id is loaded at one commit: the one its revision names
    (default main), or that of its conversion pull request when only that has safetensors. `allow_pickle` (for a model
    the operator listed, never one a visitor names): pickle weights where there are no safetensors, through
    transformers' loading with torch's `weights_only` unpickler."""
    name, revision = split_revision(model_id)
    source, local_only = _where(name)
    folder = Path(name).expanduser()
    weights, safetensors = "", True
    held = {path.name for path in folder.iterdir()} if folder.is_dir() else set()
    if allow_pickle and _has(held, PICKLE_WEIGHTS) and not _has(held, SAFE_WEIGHTS):
        safetensors = False
        weights = ("weights: PyTorch pickle (pytorch_model.bin), read with torch's weights_only unpickler, which "
                   "refuses anything but tensors")
    elif folder.is_dir():
        check_safetensors(folder, model_id)
    try:
        configs = folder
        if not folder.is_dir():
            # The commit the id resolves to now: its configs are checked, and everything loads from one commit.
            try:
                configs = Path(snapshot_download(name, revision=revision, allow_patterns=list(CODE_MAP_FILES),
                                                 local_files_only=local_only))
                check_code_origin(configs, name, hub_repo=True)  # before anything else of the repo is looked at
                revision, safetensors, weights = _hub_weights(name, model_id, configs.name, local_only, allow_pickle)
                if revision != configs.name:  # the conversion pull request's commit: its configs are the ones run
                    configs = Path(snapshot_download(name, revision=revision, allow_patterns=list(CODE_MAP_FILES),
                                                     local_files_only=local_only))
            except RuntimeError:
                raise
            except Exception as error:
                if local_only:
                    raise RuntimeError(_offline_message(model_id)) from error
                raise RuntimeError(_hub_failure(model_id, name, revision, error)) from error
        options = dict(revision=revision, local_files_only=local_only)
        # Our own models carry their modeling code (auto_map); any model transformers knows loads with its own.
        trust = needs_remote_code(source, **options)
        if trust:
            check_code_origin(configs, model_id if folder.is_dir() else name, hub_repo=not folder.is_dir())
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust, **options)
        # Pickle weights only where allowed above, and then through torch's weights_only unpickler (no code runs).
        weight_options = dict(use_safetensors=True) if safetensors else dict(use_safetensors=False, weights_only=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(source, trust_remote_code=trust, **weight_options, **options)
    except (ForeignCodeError, RuntimeError) as error:
        if isinstance(error, ForeignCodeError) or str(error).startswith("could not be loaded"):
            raise
        raise RuntimeError(f"could not be loaded: {_cause(error)}") from error
    except Exception as error:  # loaders raise OSError, ValueError, ImportError, ... depending on what is missing
        if local_only and not folder.is_dir():
            raise RuntimeError(_offline_message(model_id)) from error
        raise RuntimeError(f"could not be loaded: {model_id}: {_cause(error)}") from error
    return LoadedModel(model.to(device).eval(), tokenizer, None if folder.is_dir() else revision, weights)
