"""The Corpus comparison tab: whole-test-set scores from our model's eval_results.json and compare.py's JSON."""

import json
from pathlib import Path

from transformer_en_de.evaluation import EvalResultsError, read_eval_results
from transformer_en_de.markdown import markdown_table

from .text_checks import as_text
from .translators import OURS_NAME, display_id

HEADERS = ["Model", "Test set", "Sentences", "BLEU", "chrF", "Parameters", "Sentences per second"]
EXPLAINED = (
    "BLEU and chrF say how close a model's translations come to a person's, from 0 to 100 (higher is closer): BLEU "
    "counts the word sequences they share, chrF the character sequences. *val* is the Multi30k validation set, used "
    "to choose our model while it trained; *test* sets were kept apart until the final score."
)


def _number(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else ""


def _millions(count) -> str:
    return f"{count / 1e6:.1f}M" if isinstance(count, int | float) and not isinstance(count, bool) else ""


def test_set_name(split: str) -> str:
    """ "val", or "test 2016 flickr" for test_2016_flickr (a file name such as test_2016_flickr.en too)."""
    split = Path(split).name.split(".")[0]
    return split if split == "val" else split.replace("_", " ")


class Rows:
    """The table's rows, one per model and test set: values from either file fill the same row."""

    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = {}

    def put(self, model: str, split: str, **values) -> None:
        row = self.rows.setdefault((model, test_set_name(split)), {})
        row.update({name: value for name, value in values.items() if value not in (None, "")})

    def table(self) -> list[list[str]]:
        def order(key):  # ours first, then the others by name; val before the test sets
            model, split = key
            return (model != OURS_NAME, model, split != "val", split)

        return [
            [
                model,
                split,
                _count(row.get("sentences")),
                _number(row.get("bleu")),
                _number(row.get("chrf")),
                _millions(row.get("parameters")),
                _number(row.get("speed"), 1),
            ]
            for (model, split), row in sorted(self.rows.items(), key=lambda item: order(item[0]))
        ]


def evaluation_rows(results: dict, rows: Rows) -> None:
    """Our model's scored splits from eval_results.json (the shape `evaluation.write_eval_results` writes)."""
    for split, score in results["scores"].items():
        rows.put(
            OURS_NAME,
            split,
            sentences=score.get("num_sentences"),
            bleu=score["bleu"],
            chrf=score.get("chrf"),
            parameters=results["num_parameters"],
        )


def comparison_rows(comparison: dict, rows: Rows, ours: str | None, origins: list[str] | None = None) -> list[str]:
    """compare.py's JSON: a row per system scored (ours under our name); the names of those that were not. `origins`
    gets a line for each Hub model scored: the commit, and its weights when they were not main's safetensors."""
    split = str(comparison.get("source_file") or "?")
    missing = []
    for system in comparison.get("systems", []):
        if not isinstance(system, dict):
            continue
        name = display_id(str(system.get("model", "?")))
        name = OURS_NAME if name == ours else name
        if system.get("error") or system.get("bleu") is None:
            missing.append(name)
            continue
        rows.put(
            name,
            split,
            sentences=comparison.get("num_sentences"),
            bleu=system.get("bleu"),
            chrf=system.get("chrf"),
            parameters=system.get("num_parameters"),
            speed=system.get("sentences_per_second"),
        )
        if origins is not None and isinstance(system.get("revision"), str):
            weights = f" ({system['weights']})" if isinstance(system.get("weights"), str) else ""
            origins.append(f"{name} was scored at commit {system['revision'][:7]}{weights}.")
    return missing


def corpus_markdown(rows: list[list[str]]) -> str:
    """The rows as a Markdown table under `HEADERS` (each cell shown as text, numbers right-aligned); "" when there
    are none."""
    if not rows:
        return ""
    return markdown_table(HEADERS, [[as_text(cell) if cell else "" for cell in row] for row in rows], "ll" + "r" * 5)


def _read_json(path: Path) -> tuple[dict | None, str]:
    """The file's JSON object, or None and a note saying why not ("" when the file is simply absent)."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"{path.name} could not be read ({str(error).splitlines()[0]})."
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object.")


def corpus_table(
    model_folder: str | Path | None, comparison_path: Path, ours: str | None = None
) -> tuple[str, list[list[str]]]:
    """Notes in Markdown and the table's rows, from whichever of the two files exist and can be read. `ours` is how
    compare.py's JSON names our model (by default the folder's name)."""
    rows, notes = Rows(), [EXPLAINED]
    folder = Path(model_folder) if model_folder else None
    ours = ours or (display_id(str(folder)) if folder is not None else None)
    try:
        results = read_eval_results(folder) if folder is not None and folder.is_dir() else None
    except EvalResultsError as error:
        results = None
        notes.append(
            f"Our model's eval_results.json is not in the expected shape, so its scores are not shown "
            f"({str(error).replace(str(folder), display_id(str(folder)))})."
        )
    beams = None
    if results:
        evaluation_rows(results, rows)
        beams = results["decoding"].get("num_beams")
    comparison, problem = _read_json(comparison_path)
    notes += [problem] if problem else []
    if comparison:
        origins: list[str] = []
        missing = comparison_rows(comparison, rows, ours, origins)
        beams = beams or comparison.get("num_beams")
        notes.append(
            f"Every model translated with the same beam search ({beams} beams) and the same length limit, on the same "
            "machine (`python compare.py`); cased, detokenised sacreBLEU."
        )
        notes += [as_text(" ".join(origins))] if origins else []
        if missing:
            names = ", ".join(missing)
            notes.append(
                f"{names} {'has' if len(missing) == 1 else 'have'} no scores here: not available when the "
                "comparison ran."
            )
    table = rows.table()
    if not table:
        notes.insert(
            0,
            "No corpus-level results yet: train the model (`python train.py` writes eval_results.json beside it) "
            f"and run `python compare.py` (writes {comparison_path.name}).",
        )
    return "\n\n".join(notes), table
