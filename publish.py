"""Put a saved model folder on the Hugging Face Hub as a model repo (the app goes to a Space with deploy_space.py).

    python publish.py models/transformer-en-de your-name/transformer-en-de

`push_folder` creates the repo if needed and uploads the folder in one commit through `huggingface_hub`. Before the
first request the folder is loaded as a user would load it, offline and in-process: config, every weight, the
tokenizer. Anything that stops the push (offline mode, an unreachable endpoint, a missing or read-only token, a folder
that is not a saved model, or one that does not load) is one line with the cause and what to do about it. While it
uploads, a line says what it is doing every few seconds; a Hub that stops answering is given up after --timeout
seconds without progress (and one more try), and running the same command again finishes the push.

A model folder with an eval_results.json gets its card written for the repo it goes to: the model's name, the usage
snippet and the links use the Hub id, not the local folder. The card is written into a staged copy (hard links where
the file system allows), so the local folder is left as it was; messages name the local folder, never the copy.
"""

import argparse
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub.utils import logging as hub_logging
from transformers import AutoConfig
from transformers.utils import logging as transformers_logging

from transformer_en_de.evaluation import EVAL_RESULTS
from transformer_en_de.publishing.model_card import write_model_card
from transformer_en_de.publishing.push import PUSH_TIMEOUT_S, PublishError, check_folder, check_model_loads, push_folder


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, destination)


@contextmanager
def staged_for_hub(folder: Path, repo_id: str):
    """The folder to upload, checked to load: with scores, a staged copy with its card written for `repo_id`."""
    check_folder(folder, "model")
    check_model_loads(folder)  # here, so that a broken folder is named as the user named it
    if not (folder / EVAL_RESULTS).is_file():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="publish-") as staging:
        staged = Path(staging) / folder.name
        shutil.copytree(folder, staged, copy_function=_link_or_copy, ignore=shutil.ignore_patterns("checkpoint-*"))
        (staged / "README.md").unlink(missing_ok=True)  # a link to the local card: never write through it
        config = AutoConfig.from_pretrained(staged, trust_remote_code=True, local_files_only=True)
        write_model_card(staged, config=config, hub_model_id=repo_id)
        try:
            yield staged
        except PublishError as error:
            raise PublishError(str(error).replace(str(staged), str(folder))) from error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the saved model folder to upload (train.py's --output_dir)")
    parser.add_argument("repo_id", help="the target repo, e.g. your-name/transformer-en-de")
    parser.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`)")
    parser.add_argument("--endpoint", default=None, help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--private", action="store_true", help="create the repo as private")
    parser.add_argument(
        "--timeout",
        type=float,
        default=PUSH_TIMEOUT_S,
        metavar="SECONDS",
        help="give a request up after this long without progress (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    # The progress lines go to stdout; stderr holds the error alone, not the loaders' bars or the retry warnings.
    transformers_logging.disable_progress_bar()
    hub_logging.set_verbosity_error()
    try:
        with staged_for_hub(args.folder, args.repo_id) as folder:
            url = push_folder(
                folder,
                args.repo_id,
                token=args.token,
                endpoint=args.endpoint,
                private=args.private,
                timeout=args.timeout,
            )
    except PublishError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
