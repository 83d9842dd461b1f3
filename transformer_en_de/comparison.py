"""Score translation models side by side: the same sentences, the same decoding settings, the same metric (what
compare.py runs, and deploy_space.py for the Space's Corpus tab).

A model is a local folder or a Hub id, loaded at one commit (`decoding.loading.load_listed_model`); each is scored
with cased sacreBLEU BLEU and chrF (`evaluation.score_split`) and timed. A model that cannot be loaded gets a row with
the reason and the others are still scored.
"""

import json
import sys
from pathlib import Path

import torch

from modeling.length_bound import DEFAULT_OFFSET, DEFAULT_RATIO

from .data import read_parallel
from .decoding.backends import BackendError, load_backend
from .decoding.engine import DecodingSettings, translate
from .decoding.int8 import int8_dynamic
from .decoding.loading import load_listed_model
from .evaluation import decoding_label, score_split
from .markdown import markdown_table


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
    (converted once and cached). `int8`: the model's linear layers in dynamic int8 first (`decoding.int8.int8_dynamic`,
    CPU only), or CTranslate2's int8 weights.
    """
    row = {
        "model": model_id,
        "bleu": None,
        "chrf": None,
        "num_parameters": None,
        "seconds": None,
        "sentences_per_second": None,
        "error": None,
        "translations": None,
    }
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


OWN = "each model's own"  # the length penalty where a comparison sets none


def comparison_report(comparison: dict) -> str:
    """The comparison as Markdown: what was scored, a table, and the models that could not be scored below it."""
    rows = [
        [
            system["model"],
            _format_number(system["bleu"]),
            _format_number(system["chrf"]),
            _format_parameters(system["num_parameters"]),
            _format_number(system["seconds"], 1),
            _format_number(system["sentences_per_second"], 1),
        ]
        for system in comparison["systems"]
    ]
    lines = [
        f"Scored on {comparison['num_sentences']} sentences of `{comparison['source_file']}` against "
        f"`{comparison['reference_file']}` (every model decoded the same way: {decoding_label(comparison, OWN)}, "
        f"at most {comparison['max_new_tokens_ratio']} × source tokens + {comparison['max_new_tokens_offset']} "
        "new tokens; cased sacreBLEU"
        f"{', decoded by ' + comparison['backend'] if comparison.get('backend', 'PyTorch') != 'PyTorch' else ''}"
        f"{', int8 dynamic weights' if comparison.get('weights') == 'int8 dynamic' else ''}).",
        "",
        markdown_table(["Model", "BLEU", "chrF", "Parameters", "Seconds", "Sentences/s"], rows, "lrrrrr"),
    ]
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
        num_beams=num_beams,
        length_penalty=length_penalty,
        max_new_tokens=max_new_tokens,
        max_new_tokens_ratio=max_new_tokens_ratio,
        max_new_tokens_offset=max_new_tokens_offset,
        batch_size=batch_size,
    )


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


def write_comparison(comparison: dict, output: Path) -> str:
    """The JSON document and its Markdown table beside it (.md); returns the table."""
    table = comparison_report(comparison)
    output.write_text(json.dumps(comparison, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    output.with_suffix(".md").write_text(table, encoding="utf-8")
    return table
