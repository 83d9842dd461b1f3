"""The Corpus comparison tab: whole-test-set scores from our model's eval_results.json and compare.py's JSON."""

import json
from pathlib import Path

from transformer_en_de.evaluation import EvalResultsError, read_eval_results

from .translators import OURS_NAME, display_id

HEADERS = ["System", "Test set", "Sentences", "BLEU", "chrF", "Parameters", "Sentences/s", "Note"]


def _number(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) else ""


def _millions(count) -> str:
    return f"{count / 1e6:.2f}M" if isinstance(count, int | float) else ""


def evaluation_rows(results: dict) -> list[list[str]]:
    """One row per scored split of eval_results.json (the shape `evaluation.write_eval_results` writes)."""
    beams = results["decoding"].get("num_beams")
    note = f"beam {beams}" if beams else ""
    return [
        [
            f"{OURS_NAME}, eval_results.json",
            split,
            _count(score.get("num_sentences")),
            _number(score["bleu"]),
            _number(score.get("chrf")),
            _millions(results["num_parameters"]),
            "",
            note,
        ]
        for split, score in results["scores"].items()
    ]


def comparison_rows(comparison: dict) -> list[list[str]]:
    """compare.py's JSON: one row per system, its error (if any) in the note."""
    test_set = Path(str(comparison.get("source_file") or "")).stem
    beams = f"beam {comparison.get('num_beams', '?')}"
    return [
        [
            display_id(str(system.get("model", "?"))),
            test_set,
            _count(comparison.get("num_sentences")),
            _number(system.get("bleu")),
            _number(system.get("chrf")),
            _millions(system.get("num_parameters")),
            _number(system.get("sentences_per_second"), 1),
            str(system.get("error") or beams),
        ]
        for system in comparison.get("systems", [])
        if isinstance(system, dict)
    ]


def _read_json(path: Path) -> tuple[dict | None, str]:
    """The file's JSON object, or None and a note saying why not ("" when the file is simply absent)."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"{path.name} could not be read ({str(error).splitlines()[0]})."
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object.")


def corpus_table(model_folder: str | Path | None, comparison_path: Path) -> tuple[str, list[list[str]]]:
    """A Markdown summary and the table's rows, from whichever of the two files exist and can be read."""
    rows, notes = [], []
    folder = Path(model_folder) if model_folder else None
    try:
        results = read_eval_results(folder) if folder is not None and folder.is_dir() else None
    except EvalResultsError as error:
        results = None
        notes.append(
            f"Our model's eval_results.json is not in the expected shape, so its scores are not shown "
            f"({str(error).replace(str(folder), display_id(str(folder)))})."
        )
    if results:
        rows += evaluation_rows(results)
    comparison, problem = _read_json(comparison_path)
    notes += [problem] if problem else []
    if comparison:
        rows += comparison_rows(comparison)
        notes.append(
            f"`{comparison_path.name}`: {comparison.get('num_sentences', '?')} sentences of "
            f"`{Path(str(comparison.get('source_file', '?'))).name}`, beam {comparison.get('num_beams', '?')}, every "
            "system on the same machine (`python compare.py`)."
        )
    if not rows:
        notes.insert(
            0,
            "No corpus-level results yet: train the model (`python train.py` writes eval_results.json beside it) "
            f"and run `python compare.py` (writes {comparison_path.name}).",
        )
    return "Cased, detokenised sacreBLEU and chrF on whole test sets.\n\n" + "\n\n".join(notes), rows
