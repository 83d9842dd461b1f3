"""Load a model by folder or Hub id, the way every caller decodes with it.

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
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import HfApi, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..hub_access import cause, hub_is_reachable

# What a model of this project needs to be loaded and fine-tuned (not other frameworks' weights or training state).
MODEL_FILES = ["*.json", "*.safetensors", "*.py", "*.md"]

SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
WEIGHT_FILES = SAFE_WEIGHTS + PICKLE_WEIGHTS


def pickle_only_message(where: str) -> str:
    """Why a model with only pickle weights is refused, and the command that converts it."""
    return (
        f"has only PyTorch pickle weights (pytorch_model.bin), and this project loads safetensors only (a pickle can "
        f'run code when it is read). Convert it once, on a machine you trust: python -c "from transformers import '
        f"AutoModelForSeq2SeqLM as M; M.from_pretrained('{where}', use_safetensors=False).save_pretrained('{where}')\" "
        "writes model.safetensors beside it (then delete pytorch_model.bin)."
    )


def check_safetensors(folder: str | Path, name: str | None = None) -> None:
    """RuntimeError (with the conversion command) if `folder` holds pickle weights and no safetensors."""
    folder = Path(folder)
    has = lambda names: any((folder / file).is_file() for file in names)  # noqa: E731
    if has(PICKLE_WEIGHTS) and not has(SAFE_WEIGHTS):
        raise RuntimeError(f"could not be loaded: {name or folder} {pickle_only_message(str(folder))}")


def display_id(model_id: str) -> str:
    """What others are shown of a model id (the page, a model card): a Hub id as it is, a local folder by its name only
    (no server or build-machine paths)."""
    if not model_id.strip():
        return ""  # Path("") is the current folder: an empty id must never show (or load) it
    path = Path(model_id).expanduser()
    if path.exists() or model_id.startswith((".", "/", "~")):
        return path.resolve().name
    return model_id


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
    from transformers import CONFIG_MAPPING, PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(source, revision=revision, local_files_only=local_files_only)
    return "auto_map" in config and config.get("model_type") not in CONFIG_MAPPING


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
        message = _offline_message(model_id) if local_only else f"could not be loaded: {cause(error)}"
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
        return (
            converted,
            True,
            (
                f"weights: the safetensors of {name}'s conversion pull request {ref} (commit {converted[:7]}), "
                f"made from its commit {commit[:7]}, which has PyTorch pickle weights only"
            ),
        )
    if _has(files, PICKLE_WEIGHTS) and allow_pickle:
        return (
            commit,
            False,
            (
                f"weights: {name} has PyTorch pickle weights only (pytorch_model.bin, commit {commit[:7]}), read with "
                "torch's weights_only unpickler, which refuses anything but tensors"
            ),
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
        return f"could not be loaded: {model_id} lacks a file a model needs on the Hugging Face Hub ({cause(error)})."
    return f"could not be loaded: {model_id} could not be read from the Hugging Face Hub ({cause(error)})."


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
        weights = (
            "weights: PyTorch pickle (pytorch_model.bin), read with torch's weights_only unpickler, which "
            "refuses anything but tensors"
        )
    elif folder.is_dir():
        check_safetensors(folder, model_id)
    try:
        configs = folder
        if not folder.is_dir():
            # The commit the id resolves to now: its configs are checked, and everything loads from one commit.
            try:
                configs = Path(
                    snapshot_download(
                        name, revision=revision, allow_patterns=list(CODE_MAP_FILES), local_files_only=local_only
                    )
                )
                check_code_origin(configs, name, hub_repo=True)  # before anything else of the repo is looked at
                revision, safetensors, weights = _hub_weights(name, model_id, configs.name, local_only, allow_pickle)
                if revision != configs.name:  # the conversion pull request's commit: its configs are the ones run
                    configs = Path(
                        snapshot_download(
                            name, revision=revision, allow_patterns=list(CODE_MAP_FILES), local_files_only=local_only
                        )
                    )
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
        raise RuntimeError(f"could not be loaded: {cause(error)}") from error
    except Exception as error:  # loaders raise OSError, ValueError, ImportError, ... depending on what is missing
        if local_only and not folder.is_dir():
            raise RuntimeError(_offline_message(model_id)) from error
        raise RuntimeError(f"could not be loaded: {model_id}: {cause(error)}") from error
    return LoadedModel(model.to(device).eval(), tokenizer, None if folder.is_dir() else revision, weights)
