"""Deploy the app as a Hugging Face Space: stage what the Space runs in a temporary folder, then push it.

    python deploy_space.py your-name/transformer-en-de-demo
    python deploy_space.py your-name/transformer-en-de-demo --model runs/base --model_id your-name/transformer-en-de
    python deploy_space.py --stage_only space/                                    # look before pushing
    python deploy_space.py --write_lock                                           # after changing the environment

The Space gets app.py, README.md (the Space's card: `space_card.md` with front matter that tells the Hub to run
app.py with Gradio), requirements.txt,
transformer_en_de/, modeling/, tokenizer/, the comparison results if present, and the model folder as
models/transformer-en-de/, the app's default. The upload goes through `transformer_en_de.publishing.push.push_folder`.

- The model folder is loaded first (config, weights, tokenizer; offline): one that does not load is never staged.
- The Space's requirements.txt pins every package the app needs (pyproject.toml's dependencies and `app` extra, and
  all they need in turn) to the version in `space_requirements.lock`, which `--write_lock` writes from the environment
  the tests ran in (tests/test_space.py fails while the two differ). torch is pinned to its CPU build (`+cpu`), which
  only PyTorch's CPU index (listed in front) has: pip cannot swap in the CUDA build and its gigabytes of NVIDIA
  libraries, whatever PyPI holds.
- The Corpus comparison tab's scores are made here, where the Hub is reachable, before staging: our model and MarianMT
  translate Multi30k's test_2016_flickr on this machine (`comparison.py`'s scorer, the settings of the shipped
  comparison), and the Space ships the result. The Space's CPU goes to visitors, and its disk is wiped at every
  restart, so scores made there would be made again, at visitors' expense, every time it wakes. Offline (or with
  `--no_scores`) the shipped comparison is staged as it is, and the line says so.
- The Space ships the weights, so its front matter carries the weights' licence (from the model card's `license`,
  cc-by-nc-4.0 for Multi30k-trained weights); the card's last paragraph says the code is Apache-2.0.
"""

import argparse
import json
import shutil
import sys
import tempfile
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

from huggingface_hub import ModelCard, SpaceCard, SpaceCardData
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from transformer_en_de.hub_access import hub_is_reachable
from transformer_en_de.publishing.push import PublishError, check_model_loads, push_folder

ROOT = Path(__file__).resolve().parent
DEFAULT_MODEL_FOLDER = ROOT / "models" / "transformer-en-de"
# What a visitor of the Space reads (the project's README.md is for people who use the code).
SPACE_CARD_TEMPLATE = ROOT / "space_card.md"
MODEL_IN_SPACE = "models/transformer-en-de"  # where app.py looks by default
MARIAN_MODEL_ID = "Helsinki-NLP/opus-mt-en-de"
COMPARISON_FILE = "results/comparison_test_2016_flickr.json"
SPACE_FILES = ["app.py", COMPARISON_FILE]
# The versions the app runs with on the Space: written from the tested environment by `--write_lock`.
LOCK_FILE = ROOT / "space_requirements.lock"
# Where the test set comes from when the shared copy is not beside the checkout (transformer_en_de.data downloads it).
LOCAL_TEST_SET = ROOT.parent / "shared" / "data" / "multi30k"
SPACE_FOLDERS = ["transformer_en_de", "modeling", "tokenizer"]
# train.py's modules: the Space does not train (and needs none of the training packages, accelerate among them).
TRAINING_ONLY = ["training"]  # transformer_en_de/training/: what only train.py and average_checkpoints.py use
REQUIRED = ["app.py", "pyproject.toml", "transformer_en_de", "modeling", "tokenizer"]
# pip reads options in a requirements file; with this index torch resolves to its "+cpu" wheels (a local version
# label sorts above the same PyPI version), which carry no CUDA libraries. Other packages still come from PyPI.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# The Space's settings (https://huggingface.co/docs/hub/spaces-config-reference).
SPACE_METADATA = {
    "title": "Transformer vs MarianMT EN→DE",
    "emoji": "🔤",
    "colorFrom": "blue",
    "colorTo": "indigo",
    "sdk": "gradio",
    "sdk_version": version("gradio"),  # the Gradio the app was tested with
    "python_version": "3.11",
    "app_file": "app.py",
    "models": [MARIAN_MODEL_ID],
    "license": "apache-2.0",  # the code's; replaced by the shipped weights' licence when the model card has one
    "pinned": False,
    "short_description": "A from-scratch Transformer beside MarianMT, English→German",
    # "Sign in with Hugging Face" for the arena's votes: the Hub makes the Space an OAuth app and gives it the OAUTH_*
    # variables, with which app.py shows the sign-in button. The default scopes (openid profile) are all it needs.
    "hf_oauth": True,
}


def model_license(model_folder: Path) -> str | None:
    """The `license` of the model card (README.md front matter) in `model_folder`, if it declares one."""
    readme = Path(model_folder) / "README.md"
    if not readme.is_file():
        return None
    try:
        return ModelCard.load(readme).data.get("license")
    except ValueError:
        return None


def space_readme(
    template: Path = SPACE_CARD_TEMPLATE, model_id: str | None = None, weights_license: str | None = None
) -> str:
    """README.md for the Space: the card template's text under the Space settings as front matter.

    `weights_license` (the shipped model's) replaces the code's licence: the Space distributes the weights.
    """
    settings = dict(SPACE_METADATA, license=weights_license or SPACE_METADATA["license"])
    card = SpaceCard.from_template(
        SpaceCardData(**settings),
        template_path=str(template),
        weights_license=weights_license or "see the model card",
    )
    if model_id and model_id not in (card.data.get("models") or []):
        card.data["models"] = [model_id, *(card.data.get("models") or [])]
    return str(card)


def app_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """What the app needs to run, as pyproject.toml lists it: the dependencies and the `app` extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["app"]]


def locked_versions(requirements: list[str]) -> dict[str, str]:
    """{package: installed version} for `requirements` and everything they need in turn, as installed here (the
    environment the tests run in): markers are evaluated for this Python and platform, the Space's (python_version)."""
    environment = default_environment()
    pending, seen, locked = [Requirement(text) for text in requirements], set(), {}
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            installed = distribution(requirement.name)
        except PackageNotFoundError as error:
            raise PublishError(
                f"{requirement.name} is required but not installed here: install the `app` extra "
                "(pip install -e '.[app]') before writing the lock."
            ) from error
        locked[name] = installed.version
        for text in installed.requires or []:
            needed, extras = Requirement(text), requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({**environment, "extra": x}) for x in extras):
                pending.append(needed)
    return dict(sorted(locked.items()))


def cpu_torch(version_text: str) -> str:
    """torch's CPU build of the same release (2.13.0+cu128 or 2.13.0 -> 2.13.0+cpu): only the CPU index has it."""
    return f"{Version(version_text).public}+cpu"


def lock_text(requirements: list[str]) -> str:
    """`space_requirements.lock`: `name==version` for every package the app installs, as in this environment."""
    lines = [
        "# Written by `python deploy_space.py --write_lock` from the environment the tests ran in: every package",
        "# the app needs (pyproject.toml's dependencies and `app` extra) and all they need in turn. deploy_space.py",
        "# pins the Space's requirements.txt to these versions; tests/test_space.py fails while this file and the",
        "# environment differ.",
    ]
    for name, installed in locked_versions(requirements).items():
        lines.append(f"{name}=={cpu_torch(installed) if name == 'torch' else installed}")
    return "\n".join(lines) + "\n"


def read_lock(path: Path = LOCK_FILE) -> dict[str, str]:
    """{package: version} of the lock file; PublishError if there is none."""
    if not path.is_file():
        raise PublishError(
            f"{path.name} is missing: write it with `python deploy_space.py --write_lock` in the "
            "environment the tests pass in."
        )
    return read_lock_text(path.read_text(encoding="utf-8"))


def read_lock_text(text: str) -> dict[str, str]:
    """{package: version} of `name==version` lines (comments skipped)."""
    pins = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            pins[canonicalize_name(name)] = pinned.strip()
    return pins


def space_requirements(requirements: list[str], lock: dict[str, str] | None = None) -> str:
    """The Space's requirements.txt: every package of the lock pinned (the app's requirements, checked against it),
    torch's CPU build, with PyTorch's CPU index first. Pins, not a `-c` constraints file: a Space installs
    requirements.txt before the rest of its files are copied in."""
    lock = read_lock() if lock is None else lock
    for text in requirements:  # a lock older than pyproject.toml would ship versions the app does not declare
        requirement = Requirement(text)
        pinned = lock.get(canonicalize_name(requirement.name))
        if pinned is None or not requirement.specifier.contains(Version(pinned), prereleases=True):
            raise PublishError(
                f"{LOCK_FILE.name} pins {requirement.name} to {pinned or 'nothing'}, but pyproject.toml "
                f"asks for {text}: run `python deploy_space.py --write_lock` and the tests again."
            )
    if "torch" in lock and not lock["torch"].endswith("+cpu"):
        raise PublishError(f"{LOCK_FILE.name} pins torch to {lock['torch']}, not its CPU build: write it again.")
    return (
        "# Generated by deploy_space.py from space_requirements.lock: the versions the tests ran with. torch is its\n"
        "# CPU build (+cpu), which only PyTorch's CPU index has: pip cannot install the CUDA build from PyPI instead.\n"
        f"--extra-index-url {TORCH_CPU_INDEX}\n" + "".join(f"{name}=={pinned}\n" for name, pinned in lock.items())
    )


def test_set(source: str | None = None, reference: str | None = None) -> tuple[Path, Path]:
    """Multi30k's test_2016_flickr: the files given, else the shared copy beside the checkout, else downloaded."""
    if source and reference:
        return Path(source), Path(reference)
    folder = LOCAL_TEST_SET
    if not (folder / "test_2016_flickr.en").is_file():
        from transformer_en_de.data import download_multi30k

        folder = download_multi30k()
    return folder / "test_2016_flickr.en", folder / "test_2016_flickr.de"


def comparison_scores(
    staged: Path,
    model_folder: Path,
    comparison_models: list[str],
    *,
    test_files: tuple[Path, Path] | None = None,
    report=print,
) -> bool:
    """Score our model and `comparison_models` on the test set here and write the staged comparison file (our model
    under the name it has in the Space); False, saying why, when that cannot be done (the shipped file stays)."""
    from modeling.length_bound import DEFAULT_OFFSET, DEFAULT_RATIO
    from transformer_en_de.comparison import compare, fair_settings, write_comparison
    from transformer_en_de.data import DataError

    if not hub_is_reachable():
        report(
            "[deploy] the Hugging Face Hub is unreachable: the Space ships the comparison as it is, so its Corpus "
            f"tab has no scores for {', '.join(comparison_models)}."
        )
        return False
    try:
        source, reference = test_files or test_set()
    except DataError as error:
        report(f"[deploy] no test set to score on ({error}): the Space ships the comparison as it is.")
        return False
    shipped = staged / COMPARISON_FILE
    settings = json.loads(shipped.read_text(encoding="utf-8")) if shipped.is_file() else {}
    fair = fair_settings(
        num_beams=settings.get("num_beams") or 4,
        length_penalty=settings.get("length_penalty"),
        max_new_tokens=settings.get("max_new_tokens"),
        max_new_tokens_ratio=settings.get("max_new_tokens_ratio") or DEFAULT_RATIO,
        max_new_tokens_offset=settings.get("max_new_tokens_offset", DEFAULT_OFFSET),
    )
    report(
        f"[deploy] scoring our model and {', '.join(comparison_models)} on {source.name} for the Corpus tab "
        "(a few minutes on a CPU) ..."
    )
    try:
        comparison = compare([str(model_folder), *comparison_models], source, reference, fair)
    except (DataError, OSError) as error:
        report(f"[deploy] the test set could not be read ({error}): the Space ships the comparison as it is.")
        return False
    comparison["systems"][0]["model"] = MODEL_IN_SPACE  # the name the app gives it in the Space
    comparison["source_file"], comparison["reference_file"] = source.name, reference.name
    for system in comparison["systems"]:
        scored = f"BLEU {system['bleu']:.2f}, chrF {system['chrf']:.2f}" if system["error"] is None else system["error"]
        report(f"[deploy]   {system['model']}: {scored}")
    shipped.parent.mkdir(parents=True, exist_ok=True)
    write_comparison(comparison, shipped)
    return all(system["error"] is None for system in comparison["systems"])


def stage_space(
    destination: Path,
    model_folder: Path = DEFAULT_MODEL_FOLDER,
    *,
    root: Path = ROOT,
    model_id: str | None = None,
    scores: bool = True,
    test_files: tuple[Path, Path] | None = None,
    report=print,
) -> Path:
    """Copy everything the Space runs into `destination` (created; must be empty or absent) and return it. `scores`:
    make the Corpus tab's scores here (`comparison_scores`, on `test_files`, by default Multi30k's test set)."""
    model_folder = Path(model_folder)
    if not (model_folder / "config.json").is_file():
        raise PublishError(
            f"No saved model at {model_folder} (no config.json). Train one with "
            "`python train.py --output_dir models/transformer-en-de` or pass --model FOLDER."
        )
    check_model_loads(model_folder)  # a folder that does not load here would not load in the Space either
    missing = [name for name in REQUIRED if not (root / name).exists()]
    if missing:
        raise PublishError(f"Cannot stage the Space: {', '.join(missing)} missing in {root}.")
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    if any(destination.iterdir()):
        raise PublishError(f"Staging folder {destination} is not empty; give an empty or new folder.")

    for name in SPACE_FILES:
        if (root / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, destination / name)
    for name in SPACE_FOLDERS:
        shutil.copytree(
            root / name, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *TRAINING_ONLY)
        )
    # Only the folder's own files: training checkpoints and logs live in sub-folders and stay home.
    target = destination / MODEL_IN_SPACE
    target.mkdir(parents=True)
    for path in sorted(model_folder.iterdir()):
        if path.is_file():
            shutil.copy2(path, target / path.name)
    requirements = app_requirements(root / "pyproject.toml")
    (destination / "requirements.txt").write_text(space_requirements(requirements), encoding="utf-8")
    readme = space_readme(model_id=model_id, weights_license=model_license(model_folder))
    (destination / "README.md").write_text(readme, encoding="utf-8")
    if scores:
        comparison_scores(destination, model_folder, [MARIAN_MODEL_ID], test_files=test_files, report=report)
    return destination


def deploy(
    repo_id: str,
    model_folder: Path = DEFAULT_MODEL_FOLDER,
    *,
    model_id: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool = False,
    staging: Path | None = None,
    scores: bool = True,
    test_files: tuple[Path, Path] | None = None,
) -> str:
    """Stage the Space (in `staging`, else a temporary folder) and push it; return the Space's URL."""
    with tempfile.TemporaryDirectory(prefix="space-") as scratch:
        folder = stage_space(
            Path(staging or scratch), model_folder, model_id=model_id, scores=scores, test_files=test_files
        )
        return push_folder(
            folder,
            repo_id,
            repo_type="space",
            space_sdk="gradio",
            token=token,
            endpoint=endpoint,
            private=private,
            commit_message="Deploy the translation demo",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Upload the app, its code and the model to a Hugging Face Space.")
    parser.add_argument("repo_id", nargs="?", help="the Space, e.g. your-name/transformer-en-de-demo")
    parser.add_argument(
        "--model",
        type=Path,
        default=DEFAULT_MODEL_FOLDER,
        help=f"saved model folder to ship (default {DEFAULT_MODEL_FOLDER.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--model_id", "--model-id", default=None, help="Hub id of the same model, listed in the Space's metadata"
    )
    parser.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--private", action="store_true", help="create the Space as private")
    parser.add_argument(
        "--stage_only", "--stage-only", type=Path, metavar="FOLDER", help="write the Space's files here, push nothing"
    )
    parser.add_argument(
        "--no_scores",
        "--no-scores",
        action="store_true",
        help="ship the comparison as it is, without scoring MarianMT here first",
    )
    parser.add_argument(
        "--test_source",
        "--test-source",
        default=None,
        help="English test sentences for the scores (default: Multi30k's test_2016_flickr.en)",
    )
    parser.add_argument("--test_reference", "--test-reference", default=None, help="their German references")
    parser.add_argument(
        "--write_lock",
        "--write-lock",
        action="store_true",
        help=f"write {LOCK_FILE.name} from this environment (after the tests pass in it) and stop",
    )
    args = parser.parse_args(argv)
    if args.write_lock:
        LOCK_FILE.write_text(lock_text(app_requirements()), encoding="utf-8")
        print(f"wrote {LOCK_FILE.name}")
        return 0
    if not args.repo_id and not args.stage_only:
        parser.error("give the Space's repo id (your-name/space-name), or --stage-only FOLDER")
    if bool(args.test_source) != bool(args.test_reference):
        parser.error("give both --test_source and --test_reference, or neither")
    test_files = (Path(args.test_source), Path(args.test_reference)) if args.test_source else None
    options = dict(model_id=args.model_id, scores=not args.no_scores, test_files=test_files)
    try:
        if args.stage_only:
            folder = stage_space(args.stage_only, args.model, **options)
            print(f"staged in {folder}")
            return 0
        url = deploy(
            args.repo_id, args.model, token=args.token, endpoint=args.endpoint, private=args.private, **options
        )
    except PublishError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
