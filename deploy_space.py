"""Deploy the app as a Hugging Face Space: stage what the Space runs in a temporary folder, then push it.

    python deploy_space.py your-name/transformer-en-de-demo
    python deploy_space.py your-name/transformer-en-de-demo --model runs/base --model-id your-name/transformer-en-de
    python deploy_space.py your-name/transformer-en-de-demo --stage-only space/   # look before pushing

The Space gets app.py, requirements.txt, README.md (its front matter tells the Hub to run app.py with Gradio),
metrics.py, modeling/, tokenizer/, the comparison results if present, and the model folder as
models/transformer-en-de/, the app's default. The upload goes through `publish.push_folder`.
"""

import argparse
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from huggingface_hub import SpaceCard

from transformer_en_de.hub import PublishError, push_folder

ROOT = Path(__file__).resolve().parent
DEFAULT_MODEL_FOLDER = ROOT / "models" / "transformer-en-de"
MODEL_IN_SPACE = "models/transformer-en-de"  # where app.py looks by default
MARIAN_MODEL_ID = "Helsinki-NLP/opus-mt-en-de"
SPACE_FILES = ["app.py", "requirements.txt", "metrics.py", "results/comparison_test_2016_flickr.json"]
SPACE_FOLDERS = ["modeling", "tokenizer"]
REQUIRED = ["app.py", "requirements.txt", "metrics.py", "modeling", "tokenizer"]

# The Space's settings (https://huggingface.co/docs/hub/spaces-config-reference); README.md's own front matter wins.
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
    "license": "apache-2.0",
    "pinned": False,
    "short_description": "A from-scratch Transformer beside MarianMT, English→German",
}


def space_readme(readme: Path | None, model_id: str | None = None) -> str:
    """README.md for the Space: the project's README with every Space setting it lacks added to its front matter."""
    text = readme.read_text(encoding="utf-8") if readme is not None and readme.is_file() else ""
    card = SpaceCard(text or "# Transformer vs MarianMT, English → German\n")
    for key, value in SPACE_METADATA.items():
        if card.data.get(key) is None:
            card.data[key] = value
    if model_id and model_id not in (card.data.get("models") or []):
        card.data["models"] = [model_id, *(card.data.get("models") or [])]
    return str(card)


def stage_space(destination: Path, model_folder: Path = DEFAULT_MODEL_FOLDER, *, root: Path = ROOT,
                model_id: str | None = None) -> Path:
    """Copy everything the Space runs into `destination` (created; must be empty or absent) and return it."""
    model_folder = Path(model_folder)
    if not (model_folder / "config.json").is_file():
        raise PublishError(
            f"No saved model at {model_folder} (no config.json). Train one with "
            "`python train.py --output_dir models/transformer-en-de` or pass --model FOLDER."
        )
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
        shutil.copytree(root / name, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Only the folder's own files: training checkpoints and logs live in sub-folders and stay home.
    target = destination / MODEL_IN_SPACE
    target.mkdir(parents=True)
    for path in sorted(model_folder.iterdir()):
        if path.is_file():
            shutil.copy2(path, target / path.name)
    readme = root / "README.md"
    (destination / "README.md").write_text(space_readme(readme, model_id), encoding="utf-8")
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
    parser.add_argument("--model-id", default=None, help="Hub id of the same model, listed in the Space's metadata")
    parser.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--private", action="store_true", help="create the Space as private")
    parser.add_argument("--stage-only", type=Path, metavar="FOLDER", help="write the Space's files here, push nothing")
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
