"""Put a local folder on the Hugging Face Hub: a saved model folder as a model repo, an app folder as a Space.

    python publish.py models/transformer-en-de your-name/transformer-en-de
    python publish.py space/ your-name/transformer-en-de-demo --repo-type space --space-sdk gradio

`push_folder` creates the repo if needed and uploads the folder in one commit through `huggingface_hub`. Before the
first request it loads every model folder it would upload (a model repo's folder; a Space's models/*/), offline and
in-process: config, every weight, the tokenizer. Anything that stops the push (offline mode, an unreachable endpoint,
a missing or read-only token, a folder that is not what the repo type needs, a model folder that does not load)
raises `PublishError` at once with the cause and what to do about it.
"""

import argparse
import sys
from pathlib import Path

from transformer_en_de.hub import REPO_TYPES, PublishError, push_folder


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
