"""Deploy the app as a Hugging Face Space: stage what the Space runs in a temporary folder, then push it.

    python deploy_space.py your-name/transformer-en-de-demo
    python deploy_space.py your-name/transformer-en-de-demo --model runs/base --model_id your-name/transformer-en-de
    python deploy_space.py your-name/transformer-en-de-demo --stage_only space/   # look before pushing

The Space gets app.py, README.md (the Space's card: `space_card.md` with front matter that tells the Hub to run
app.py with Gradio), requirements.txt,
transformer_en_de/, modeling/, tokenizer/, the comparison results if present, and the model folder as
models/transformer-en-de/, the app's default. The upload goes through `transformer_en_de.hub.push_folder`.

- The model folder is loaded first (config, weights, tokenizer; offline): one that does not load is never staged.
- The Space's requirements.txt is generated from pyproject.toml (the dependencies and the `app` extra: what the app
  needs, listed once), with PyTorch's CPU package index in front: a Space on CPU hardware then installs the CPU build
  of torch, not the default CUDA build and its gigabytes of NVIDIA libraries.
- The Space ships the weights, so its front matter carries the weights' licence (from the model card's `license`,
  cc-by-nc-4.0 for Multi30k-trained weights); the card's last paragraph says the code is Apache-2.0.
"""

import argparse
import shutil
import sys
import tempfile
import tomllib
from importlib.metadata import version
from pathlib import Path

from huggingface_hub import ModelCard, SpaceCard, SpaceCardData

from transformer_en_de.hub import PublishError, check_model_loads, push_folder

ROOT = Path(__file__).resolve().parent
DEFAULT_MODEL_FOLDER = ROOT / "models" / "transformer-en-de"
# What a visitor of the Space reads (the project's README.md is for people who use the code).
SPACE_CARD_TEMPLATE = ROOT / "space_card.md"
MODEL_IN_SPACE = "models/transformer-en-de"  # where app.py looks by default
MARIAN_MODEL_ID = "Helsinki-NLP/opus-mt-en-de"
SPACE_FILES = ["app.py", "results/comparison_test_2016_flickr.json"]
SPACE_FOLDERS = ["transformer_en_de", "modeling", "tokenizer"]
# train.py's modules: the Space does not train (and needs none of the training packages, accelerate among them).
TRAINING_ONLY = ["training.py", "training_data.py"]
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


def space_readme(template: Path = SPACE_CARD_TEMPLATE, model_id: str | None = None,
                 weights_license: str | None = None) -> str:
    """README.md for the Space: the card template's text under the Space settings as front matter.

    `weights_license` (the shipped model's) replaces the code's licence: the Space distributes the weights.
    """
    settings = dict(SPACE_METADATA, license=weights_license or SPACE_METADATA["license"])
    card = SpaceCard.from_template(
        SpaceCardData(**settings), template_path=str(template),
        weights_license=weights_license or "see the model card",
    )
    if model_id and model_id not in (card.data.get("models") or []):
        card.data["models"] = [model_id, *(card.data.get("models") or [])]
    return str(card)


def app_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """What the app needs to run, as pyproject.toml lists it: the dependencies and the `app` extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["app"]]


def space_requirements(requirements: list[str]) -> str:
    """The Space's requirements.txt: `requirements`, with PyTorch's CPU index first (a CPU Space needs no CUDA)."""
    return (
        "# Generated by deploy_space.py from pyproject.toml (dependencies + the app extra). Spaces run on CPU unless\n"
        "# upgraded: PyTorch's CPU index makes pip install torch's CPU build instead of the CUDA build from PyPI.\n"
        f"--extra-index-url {TORCH_CPU_INDEX}\n" + "".join(f"{requirement}\n" for requirement in requirements)
    )


def stage_space(destination: Path, model_folder: Path = DEFAULT_MODEL_FOLDER, *, root: Path = ROOT,
                model_id: str | None = None) -> Path:
    """Copy everything the Space runs into `destination` (created; must be empty or absent) and return it."""
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
        shutil.copytree(root / name, destination / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *TRAINING_ONLY))
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
    return destination


def deploy(repo_id: str, model_folder: Path = DEFAULT_MODEL_FOLDER, *, model_id: str | None = None,
           token: str | None = None, endpoint: str | None = None, private: bool = False,
           staging: Path | None = None) -> str:
    """Stage the Space (in `staging`, else a temporary folder) and push it; return the Space's URL."""
    with tempfile.TemporaryDirectory(prefix="space-") as scratch:
        folder = stage_space(Path(staging or scratch), model_folder, model_id=model_id)
        return push_folder(folder, repo_id, repo_type="space", space_sdk="gradio", token=token, endpoint=endpoint,
                           private=private, commit_message="Deploy the translation demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Upload the app, its code and the model to a Hugging Face Space.")
    parser.add_argument("repo_id", nargs="?", help="the Space, e.g. your-name/transformer-en-de-demo")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_FOLDER,
                        help=f"saved model folder to ship (default {DEFAULT_MODEL_FOLDER.relative_to(ROOT)})")
    parser.add_argument("--model_id", "--model-id", default=None,
                        help="Hub id of the same model, listed in the Space's metadata")
    parser.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--private", action="store_true", help="create the Space as private")
    parser.add_argument("--stage_only", "--stage-only", type=Path, metavar="FOLDER",
                        help="write the Space's files here, push nothing")
    args = parser.parse_args(argv)
    if not args.repo_id and not args.stage_only:
        parser.error("give the Space's repo id (your-name/space-name), or --stage-only FOLDER")
    try:
        if args.stage_only:
            folder = stage_space(args.stage_only, args.model, model_id=args.model_id)
            print(f"staged in {folder}")
            return 0
        url = deploy(args.repo_id, args.model, model_id=args.model_id, token=args.token, endpoint=args.endpoint,
                     private=args.private)
    except PublishError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
