"""Score translation models side by side: the same sentences, the same decoding settings, the same metric.

    python compare.py --models models/transformer-en-de Helsinki-NLP/opus-mt-en-de \\
        --source ../shared/data/multi30k/test_2016_flickr.en --reference ../shared/data/multi30k/test_2016_flickr.de \\
        --num-beams 4 --batch-size 32 --output results/comparison_test_2016_flickr.json

A model is a local folder or a Hub id, loaded with the Auto classes. Each is scored with cased sacreBLEU BLEU and chrF
(`metrics.corpus_scores`) and timed; the results go to a JSON file and a Markdown table (printed and written beside
the JSON as .md). A model that cannot be loaded gets a row with the reason and the others are still scored.
"""

import argparse
import copy
import json
import socket
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import torch
from huggingface_hub import constants
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from data import DataError, read_parallel
from metrics import ChrF, SacreBleu, corpus_scores

HUB_CONNECT_TIMEOUT_S = 3.0


# ---------------------------------------------------------------------------------------------------- translation


def translate(
    model,
    tokenizer,
    sentences: list[str],
    num_beams: int = 4,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    length_penalty: float | None = None,
) -> list[str]:
    """Translate `sentences` in batches of similar length (less padding) and return them in the input order.

    `max_new_tokens` is capped by the decoder's position table; `length_penalty=None` keeps the model's own.
    """
    if not sentences:
        return []
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit:
        max_new_tokens = min(max_new_tokens, limit - 1)  # the decoder start token takes position 0
    generation_config = copy.deepcopy(model.generation_config)
    # max_length from a checkpoint's config would clash (with a warning) with max_new_tokens.
    generation_config.max_length = None
    generation_config.num_beams = num_beams
    generation_config.max_new_tokens = max_new_tokens
    if length_penalty is not None:
        generation_config.length_penalty = length_penalty
    if num_beams == 1:  # greedy search: beam-only settings do nothing, and transformers warns about them
        generation_config.length_penalty, generation_config.early_stopping = 1.0, False

    lengths = [len(ids) for ids in tokenizer(sentences, truncation=True)["input_ids"]]
    order = sorted(range(len(sentences)), key=lambda index: lengths[index], reverse=True)
    translations: list[str] = [""] * len(sentences)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            batch = tokenizer(
                [sentences[index] for index in indices], return_tensors="pt", padding=True, truncation=True
            ).to(model.device)
            output_ids = model.generate(**batch, generation_config=generation_config)
            for index, text in zip(indices, tokenizer.batch_decode(output_ids, skip_special_tokens=True), strict=True):
                translations[index] = text.strip()
    return translations


# ---------------------------------------------------------------------------------------------------- loading


def hub_is_reachable(timeout: float = HUB_CONNECT_TIMEOUT_S) -> bool:
    """False in offline mode (HF_HUB_OFFLINE=1) or when a TCP connection to the Hub fails within `timeout`."""
    if constants.is_offline_mode():
        return False
    if urllib.request.getproxies():
        return True  # only the proxy can tell; let the HTTP client try
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection(
            (endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80)), timeout=timeout
        ).close()
    except OSError:
        return False
    return True


def load_model(model_id: str, device: str | torch.device = "cpu"):
    """(model in eval mode, tokenizer) from a local folder or a Hub id; raises RuntimeError in plain words."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        source, local_only = str(folder), True
    elif model_id.startswith((".", "/", "~")) or folder.exists() or model_id.count("/") > 1:
        raise RuntimeError(f"could not be loaded: there is no model folder at {model_id}.")
    else:
        source, local_only = model_id, not hub_is_reachable()
    try:
        # Our own folders carry their modeling code (auto_map); loading it needs trust_remote_code.
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=True, local_files_only=local_only)
        model = AutoModelForSeq2SeqLM.from_pretrained(source, trust_remote_code=True, local_files_only=local_only)
    except Exception as error:  # loaders raise OSError, ValueError, ImportError, ... depending on what is missing
        cause = " ".join(str(error).split())
        if len(cause) > 300:
            cause = cause[:297] + "..."
        if local_only and not folder.is_dir():
            raise RuntimeError(
                f"could not be loaded: the Hugging Face Hub is unreachable (offline) and {model_id} is neither a "
                "local folder nor in the local cache. Run once with network access to download it, or pass a folder."
            ) from error
        raise RuntimeError(f"could not be loaded: {cause}") from error
    return model.to(device).eval(), tokenizer


def count_parameters(model) -> int:
    """Distinct parameters (a tied embedding counts once)."""
    return sum(parameter.numel() for parameter in model.parameters())


def score_model(
    model_id: str,
    sources: list[str],
    references: list[str],
    *,
    num_beams: int = 4,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    length_penalty: float | None = None,
    device: str | torch.device = "cpu",
) -> dict:
    """One row of the comparison: scores, size and speed of `model_id`, or its `error`.

    The row also carries the `translations` (in input order) that were scored.
    """
    row = {"model": model_id, "bleu": None, "chrf": None, "num_parameters": None, "seconds": None,
           "sentences_per_second": None, "error": None, "translations": None}  # fmt: skip
    try:
        model, tokenizer = load_model(model_id, device)
    except RuntimeError as error:
        row["error"] = str(error)
        return row
    row["num_parameters"] = count_parameters(model)
    started = time.perf_counter()
    translations = translate(model, tokenizer, sources, num_beams, max_new_tokens, batch_size, length_penalty)
    seconds = time.perf_counter() - started
    row.update(corpus_scores(translations, references))
    row["seconds"] = round(seconds, 2)
    row["sentences_per_second"] = round(len(sources) / seconds, 2) if seconds > 0 else None
    row["translations"] = translations
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
        f"`{comparison['reference_file']}` (beam {comparison['num_beams']}, cased sacreBLEU).",
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


def compare(
    model_ids: list[str],
    source_file: str | Path,
    reference_file: str | Path,
    *,
    num_beams: int = 4,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    length_penalty: float | None = None,
    limit: int | None = None,
    device: str | torch.device = "cpu",
) -> dict:
    """Score every model on the same sentences; returns the comparison (the JSON document) without translations."""
    sources, references = read_parallel(source_file, reference_file)
    if limit is not None:
        sources, references = sources[:limit], references[:limit]
    systems = []
    bleu_signature = chrf_signature = None
    for model_id in model_ids:
        print(f"[compare] {model_id} ...", file=sys.stderr, flush=True)
        row = score_model(
            model_id, sources, references, num_beams=num_beams, max_new_tokens=max_new_tokens,
            batch_size=batch_size, length_penalty=length_penalty, device=device,
        )  # fmt: skip
        translations = row.pop("translations")
        if translations is not None and bleu_signature is None:  # the same settings for every model
            bleu_signature = SacreBleu().compute(predictions=translations, references=references)["signature"]
            chrf_signature = ChrF().compute(predictions=translations, references=references)["signature"]
        systems.append(row)
    return {
        "source_file": str(source_file),
        "reference_file": str(reference_file),
        "num_sentences": len(sources),
        "num_beams": num_beams,
        "max_new_tokens": max_new_tokens,
        "length_penalty": length_penalty,
        "bleu_signature": bleu_signature,
        "chrf_signature": chrf_signature,
        "systems": systems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", required=True, help="local model folders and/or Hub ids")
    parser.add_argument("--source", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, type=Path, help="reference translations, line by line")
    parser.add_argument("--output", required=True, type=Path, help="JSON file to write (the .md goes beside it)")
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--length-penalty", type=float, default=None, help="same for every model (default: each model's own)"
    )
    parser.add_argument("--limit", type=int, default=None, help="score only the first N sentences")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    for name in ("num_beams", "max_new_tokens", "batch_size", "limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}.")

    try:
        comparison = compare(
            args.models, args.source, args.reference, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size, length_penalty=args.length_penalty, limit=args.limit, device=args.device,
        )  # fmt: skip
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    table = markdown_table(comparison)
    print(table)
    if not any(system["error"] is None for system in comparison["systems"]):
        print("error: no model could be scored (see the reasons above); nothing was written.", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(comparison, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    args.output.with_suffix(".md").write_text(table, encoding="utf-8")
    print(f"[compare] wrote {args.output} and {args.output.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
