"""Command line: train the joint BPE tokenizer on parallel text files and save it.

python -m tokenizer --files data/train.en data/train.de --vocab_size 8000 --output_dir tokenizer-out
"""

import argparse
import sys

from .bpe import train_tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenizer", description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", required=True, help="text files, one sentence per line (both languages)")
    # Flags as train.py spells them (transformers' underscores); the dashed spellings work too.
    parser.add_argument("--vocab_size", "--vocab-size", type=int, default=8000, help="BPE vocabulary size")
    parser.add_argument(
        "--bpe_min_frequency",
        "--min-frequency",
        "--min_frequency",
        type=int,
        default=2,
        help="minimum pair frequency for a BPE merge",
    )
    parser.add_argument("--model_max_length", "--model-max-length", type=int, default=256)
    parser.add_argument("--output_dir", "--output-dir", required=True)
    args = parser.parse_args(argv)
    try:
        tokenizer = train_tokenizer(
            files=args.files,
            vocab_size=args.vocab_size,
            min_frequency=args.bpe_min_frequency,
            model_max_length=args.model_max_length,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tokenizer.save_pretrained(args.output_dir)
    print(f"Saved a {len(tokenizer)}-token BPE tokenizer to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
