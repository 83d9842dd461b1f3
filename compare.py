"""Score translation models side by side: the same sentences, the same decoding settings, the same metric.

    python compare.py --models models/transformer-en-de Helsinki-NLP/opus-mt-en-de \\
        --source ../shared/data/multi30k/test_2016_flickr.en --reference ../shared/data/multi30k/test_2016_flickr.de \\
        --num_beams 4 --batch_size 32 --output results/comparison_test_2016_flickr.json

A model is a local folder or a Hub id, loaded with the Auto classes at one commit (recorded as `revision`); a Hub
model with no safetensors loads those of its conversion pull request, or its pickle weights through torch's
`weights_only` unpickler (the models are the operator's own list; `weights` says which, `load_listed_model`).
The scoring is `transformer_en_de/comparison.py`. Each is scored with cased sacreBLEU BLEU and chrF
(`evaluation.score_split`, the scorer of train.py and average_checkpoints.py) and timed; the results go to a JSON file
and a Markdown table (printed and written beside the JSON as .md). An --output that cannot be written is refused before
any scoring. A model that cannot be loaded gets a row with the reason and the others are still scored.

`--backend ctranslate2` decodes every model with CTranslate2 through the same engine (ours by our converter, others
by CTranslate2's own; converted once and cached, `transformer_en_de/decoding/backends.py`), `--int8` with int8 weights.
"""

import argparse
import sys
from pathlib import Path

from modeling.length_bound import DEFAULT_OFFSET, DEFAULT_RATIO
from transformer_en_de.comparison import compare, comparison_report, fair_settings, write_comparison
from transformer_en_de.data import DataError
from transformer_en_de.decoding.backends import BackendError, resolve_backend
from transformer_en_de.decoding.flags import add_backend_flags, add_length_bound_flags


def unwritable(output: Path) -> str | None:
    """Why `output` cannot be written, or None: tried for real (permissions alone say nothing to root)."""
    existed = output.exists()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "a", encoding="utf-8"):
            pass
        with open(output.with_suffix(".md"), "a", encoding="utf-8"):
            pass
    except OSError as error:
        return error.strerror or str(error)
    if not existed:
        output.unlink()
        output.with_suffix(".md").unlink(missing_ok=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="local model folders and/or Hub ids")
    parser.add_argument("--source", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, type=Path, help="reference translations, line by line")
    parser.add_argument("--output", required=True, type=Path, help="JSON file to write (the .md goes beside it)")
    # transformers' underscores, as in train.py; the dashed spellings work too.
    parser.add_argument(
        "--num_beams",
        "--num-beams",
        type=int,
        default=4,
        help="the beam width of every model, 1 for greedy (default: %(default)s, the shipped model's)",
    )
    add_length_bound_flags(parser, ratio=DEFAULT_RATIO, offset=DEFAULT_OFFSET, whose=", for every model")
    parser.add_argument(
        "--batch_size",
        "--batch-size",
        type=int,
        default=32,
        help="sentences per batch, sorted by length (default: %(default)s)",
    )
    parser.add_argument(
        "--length_penalty",
        "--length-penalty",
        type=float,
        default=None,
        help="same for every model (default: each model's own)",
    )
    parser.add_argument("--limit", type=int, default=None, help="score only the first N sentences")
    add_backend_flags(parser)
    args = parser.parse_args(argv)
    if args.int8 and args.device != "cpu":
        parser.error("--int8 quantizes for the CPU: use it with --device cpu.")
    try:
        args.backend = resolve_backend(args.backend, args.device)
    except BackendError as error:
        parser.error(f"--backend: {error}")
    for name in ("num_beams", "max_new_tokens", "batch_size", "limit", "max_new_tokens_ratio"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name} must be positive, got {value}.")
    if args.max_new_tokens_offset < 0:
        parser.error(f"--max_new_tokens_offset must be at least 0, got {args.max_new_tokens_offset}.")
    # Before any scoring: an output that cannot be written would lose every score at the end.
    problem = unwritable(args.output)
    if problem:
        print(f"error: --output {args.output} cannot be written: {problem}.", file=sys.stderr)
        return 2
    settings = fair_settings(
        args.num_beams,
        args.length_penalty,
        args.max_new_tokens,
        args.max_new_tokens_ratio,
        args.max_new_tokens_offset,
        args.batch_size,
    )

    def save_finished(comparison: dict) -> None:
        if any(system["error"] is None for system in comparison["systems"]):
            write_comparison(comparison, args.output)

    try:
        comparison = compare(
            args.models,
            args.source,
            args.reference,
            settings,
            limit=args.limit,
            device=args.device,
            int8=args.int8,
            backend=args.backend,
            on_row=save_finished,
        )
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    table = comparison_report(comparison)
    print(table)
    if not any(system["error"] is None for system in comparison["systems"]):
        print("error: no model could be scored (see the reasons above); nothing was written.", file=sys.stderr)
        return 1
    print(f"[compare] wrote {args.output} and {args.output.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
