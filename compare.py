"""Score translation models side by side: the same sentences, the same decoding settings, the same metric.

    python compare.py --models models/transformer-en-de Helsinki-NLP/opus-mt-en-de \\
        --source ../shared/data/multi30k/test_2016_flickr.en --reference ../shared/data/multi30k/test_2016_flickr.de \\
        --num_beams 4 --batch_size 32 --output results/comparison_test_2016_flickr.json

A model is a local folder or a Hub id, loaded with the Auto classes at one commit (recorded as `revision`); a Hub
model with no safetensors loads those of its conversion pull request, or its pickle weights through torch's
`weights_only` unpickler (the models are the operator's own list; `weights` says which, `hub.load_listed_model`).
Each is scored with cased sacreBLEU BLEU and chrF
(`evaluation.score_split`, the scorer of train.py and average_checkpoints.py) and timed; the results go to a JSON file
and a Markdown table (printed and written beside the JSON as .md). An --output that cannot be written is refused before
any scoring. A model that cannot be loaded gets a row with the reason and the others are still scored.

`--backend ctranslate2` decodes every model with CTranslate2 through the same engine (ours by our converter, others
by CTranslate2's own; converted once and cached, `transformer_en_de/backends.py`), `--int8` with int8 weights.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from modeling.length_bound import DEFAULT_OFFSET, DEFAULT_RATIO
from transformer_en_de.backends import BackendError, load_backend, resolve_backend
from transformer_en_de.data import DataError, read_parallel
from transformer_en_de.engine import DecodingSettings, translate
from transformer_en_de.evaluation import score_split
from transformer_en_de.hub import load_listed_model
from transformer_en_de.precision import int8_dynamic


def score_system(
    model_id: str,
    sources: list[str],
    references: list[str],
    settings: DecodingSettings,
    *,
    device: str | torch.device = "cpu",
    int8: bool = False,
    backend: str = "torch",
) -> dict:
    """One row of the comparison: scores (with sacreBLEU's signatures), size and speed of `model_id`, or its `error`.

    The row also carries the `translations` (in input order) that were scored. `backend`: "torch" or "ctranslate2"
    (converted once and cached). `int8`: the model's linear layers in dynamic int8 first (`precision.int8_dynamic`,
    CPU only), or CTranslate2's int8 weights.
    """
    row = {"model": model_id, "bleu": None, "chrf": None, "num_parameters": None, "seconds": None,
           "sentences_per_second": None, "error": None, "translations": None}  # fmt: skip
    try:
        loaded = load_listed_model(model_id, device, allow_pickle=True)  # listed by whoever runs the comparison
    except RuntimeError as error:
        row["error"] = str(error)
        return row
    model, tokenizer = loaded.model, loaded.tokenizer
    if loaded.revision:
        row["revision"] = loaded.revision
    if loaded.weights:
        row["weights"] = loaded.weights
    row["num_parameters"] = model.num_parameters()  # a tied embedding counts once
    decoder = None
    if backend == "ctranslate2":
        try:
            decoder = load_backend(model_id, model, tokenizer, int8=int8, log=sys.stderr)
        except (BackendError, OSError, ValueError) as error:
            row["error"] = f"could not be converted to CTranslate2: {' '.join(str(error).split())}"
            return row
    elif int8:
        model = int8_dynamic(model)
    try:
        run = translate(model, tokenizer, sources, settings, backend=decoder)
    except Exception as error:  # one model failing mid-way must not lose the others' scores
        row["error"] = f"failed while translating: {type(error).__name__}: {error}"
        return row
    finally:
        if decoder is not None:
            decoder.close()
    scores = score_split(run.texts, references)
    row.update(bleu=scores["bleu"], chrf=scores["chrf"])
    row["signatures"] = (scores["bleu_signature"], scores["chrf_signature"])
    row["seconds"] = round(run.seconds, 2)
    row["sentences_per_second"] = round(len(sources) / run.seconds, 2) if run.seconds > 0 else None
    row["translations"] = run.texts
    return row


# ---------------------------------------------------------------------------------------------------- report


def _format_parameters(count: int | None) -> str:
    if count is None:
        return "—"
    return f"{count / 1e6:.1f}M" if count >= 100_000 else f"{count:,}"


def _format_number(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown_table(comparison: dict) -> str:
    """The comparison as a Markdown table, with the models that could not be scored listed below it."""
    lines = [
        f"Scored on {comparison['num_sentences']} sentences of `{comparison['source_file']}` against "
        f"`{comparison['reference_file']}` (beam {comparison['num_beams']}, cased sacreBLEU"
        f"{', decoded by ' + comparison['backend'] if comparison.get('backend', 'PyTorch') != 'PyTorch' else ''}"
        f"{', int8 dynamic weights' if comparison.get('weights') == 'int8 dynamic' else ''}).",
        "",
        "| Model | BLEU | chrF | Parameters | Seconds | Sentences/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for system in comparison["systems"]:
        lines.append(
            f"| {system['model']} | {_format_number(system['bleu'])} | {_format_number(system['chrf'])} | "
            f"{_format_parameters(system['num_parameters'])} | {_format_number(system['seconds'], 1)} | "
            f"{_format_number(system['sentences_per_second'], 1)} |"
        )
    failures = [system for system in comparison["systems"] if system["error"]]
    if failures:
        lines.append("")
        lines.extend(f"- {system['model']}: {system['error']}" for system in failures)
    return "\n".join(lines) + "\n"


def fair_settings(
    num_beams: int = 4,
    length_penalty: float | None = None,
    max_new_tokens: int | None = None,
    max_new_tokens_ratio: float = DEFAULT_RATIO,
    max_new_tokens_offset: int = DEFAULT_OFFSET,
    batch_size: int = 32,
) -> DecodingSettings:
    """The decoding every compared model gets: the same beams and the same length bound per sentence."""
    return DecodingSettings(
        num_beams=num_beams, length_penalty=length_penalty, max_new_tokens=max_new_tokens,
        max_new_tokens_ratio=max_new_tokens_ratio, max_new_tokens_offset=max_new_tokens_offset, batch_size=batch_size,
    )  # fmt: skip


def compare(
    model_ids: list[str],
    source_file: str | Path,
    reference_file: str | Path,
    settings: DecodingSettings,
    *,
    limit: int | None = None,
    device: str | torch.device = "cpu",
    int8: bool = False,
    backend: str = "torch",
    on_row=None,
) -> dict:
    """Score every model on the same sentences; returns the comparison (the JSON document) without translations.

    `on_row(comparison_so_far)` is called after each model, so that a caller can save what is finished.
    """
    sources, references = read_parallel(source_file, reference_file)
    if limit is not None:
        sources, references = sources[:limit], references[:limit]
    comparison = {
        "source_file": str(source_file),
        "reference_file": str(reference_file),
        "num_sentences": len(sources),
        "num_beams": settings.num_beams,
        "length_penalty": settings.length_penalty,
        "max_new_tokens": settings.max_new_tokens,
        "max_new_tokens_ratio": settings.max_new_tokens_ratio,
        "max_new_tokens_offset": settings.max_new_tokens_offset,
        "backend": ("CTranslate2 int8" if int8 else "CTranslate2 float32") if backend == "ctranslate2" else "PyTorch",
        "weights": "int8 dynamic" if int8 and backend == "torch" else "as saved",
        "bleu_signature": None,
        "chrf_signature": None,
        "systems": [],
    }
    for model_id in model_ids:
        print(f"[compare] {model_id} ...", file=sys.stderr, flush=True)
        row = score_system(model_id, sources, references, settings, device=device, int8=int8, backend=backend)
        row.pop("translations")
        signatures = row.pop("signatures", None)
        if signatures and comparison["bleu_signature"] is None:  # the same settings for every model
            comparison["bleu_signature"], comparison["chrf_signature"] = signatures
        comparison["systems"].append(row)
        if on_row is not None:
            on_row(comparison)
    return comparison


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


def write_comparison(comparison: dict, output: Path) -> str:
    """The JSON document and its Markdown table beside it (.md); returns the table."""
    table = markdown_table(comparison)
    output.write_text(json.dumps(comparison, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    output.with_suffix(".md").write_text(table, encoding="utf-8")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="local model folders and/or Hub ids")
    parser.add_argument("--source", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, type=Path, help="reference translations, line by line")
    parser.add_argument("--output", required=True, type=Path, help="JSON file to write (the .md goes beside it)")
    # transformers' underscores, as in train.py; the dashed spellings work too.
    parser.add_argument("--num_beams", "--num-beams", type=int, default=4)
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=None,
                        help="a hard cap besides the bound per sentence")
    parser.add_argument(
        "--max_new_tokens_ratio", "--max-new-tokens-ratio", type=float, default=DEFAULT_RATIO,
        help="each sentence gets at most RATIO * (its source tokens) + OFFSET new tokens, for every model",
    )  # fmt: skip
    parser.add_argument("--max_new_tokens_offset", "--max-new-tokens-offset", type=int, default=DEFAULT_OFFSET)
    parser.add_argument("--batch_size", "--batch-size", type=int, default=32)
    parser.add_argument("--length_penalty", "--length-penalty", type=float, default=None,
                        help="same for every model (default: each model's own)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N sentences")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", choices=["torch", "ctranslate2", "auto"], default="torch",
                        help="what decodes every model: PyTorch, or CTranslate2 (converted once and cached; auto: "
                             "CTranslate2 where it is installed)")
    parser.add_argument("--int8", action="store_true",
                        help="int8 weights for every model (CPU only): PyTorch's dynamic int8 linear layers (about "
                             "1.4x faster for ours), or CTranslate2's int8 with --backend ctranslate2")
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
        args.num_beams, args.length_penalty, args.max_new_tokens, args.max_new_tokens_ratio,
        args.max_new_tokens_offset, args.batch_size,
    )  # fmt: skip

    def save_finished(comparison: dict) -> None:
        if any(system["error"] is None for system in comparison["systems"]):
            write_comparison(comparison, args.output)

    try:
        comparison = compare(
            args.models, args.source, args.reference, settings, limit=args.limit, device=args.device,
            int8=args.int8, backend=args.backend, on_row=save_finished,
        )  # fmt: skip
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    table = markdown_table(comparison)
    print(table)
    if not any(system["error"] is None for system in comparison["systems"]):
        print("error: no model could be scored (see the reasons above); nothing was written.", file=sys.stderr)
        return 1
    print(f"[compare] wrote {args.output} and {args.output.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
