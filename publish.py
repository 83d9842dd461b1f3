"""Put a local folder on the Hugging Face Hub: a saved model folder as a model repo, an app folder as a Space.

    python publish.py models/transformer-en-de your-name/transformer-en-de
    python publish.py space/ your-name/transformer-en-de-demo --repo-type space --space-sdk gradio

`push_folder` creates the repo if needed and uploads the folder in one commit through `huggingface_hub`. Before the
first request it loads every model folder it would upload (a model repo's folder; a Space's models/*/), offline and
in-process: config, every weight, the tokenizer. Anything that stops the push (offline mode, an unreachable endpoint,
a missing or read-only token, a folder that is not what the repo type needs, a model folder that does not load)
raises `PublishError` at once with the cause and what to do about it.

A model folder with an eval_results.json gets its card written for the repo it goes to: the model's name, the usage
snippet and the links use the Hub id, not the local folder. The card is written into a staged copy (hard links where
the file system allows), so the local folder is left as it was.
"""

import argparse
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from transformers import AutoConfig

from transformer_en_de.evaluation import EVAL_RESULTS
from transformer_en_de.hub import REPO_TYPES, PublishError, push_folder
from transformer_en_de.model_card import write_model_card


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, destination)


@contextmanager
def staged_for_hub(folder: Path, repo_id: str, repo_type: str):
    """The folder to upload: a model folder with scores is staged with its card written for `repo_id`."""
    if repo_type != "model" or not (folder / EVAL_RESULTS).is_file() or not (folder / "config.json").is_file():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="publish-") as staging:
        staged = Path(staging) / folder.name
        shutil.copytree(folder, staged, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("checkpoint-*"))
        (staged / "README.md").unlink(missing_ok=True)  # a link to the local card: never write through it
        config = AutoConfig.from_pretrained(staged, trust_remote_code=True)
        write_model_card(staged, config=config, hub_model_id=repo_id)
        yield staged


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
        with staged_for_hub(args.folder, args.repo_id, args.repo_type) as folder:
            url = push_folder(
                folder,
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
