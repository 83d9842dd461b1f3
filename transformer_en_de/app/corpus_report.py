"""The Corpus comparison tab: whole-test-set scores from our model's eval_results.json and compare.py's JSON, a row per
model, test set and decoding, each saying what scored it."""

import json
from pathlib import Path

from transformer_en_de.comparison import OWN  # compare.py without --length_penalty leaves it to each model
from transformer_en_de.evaluation import EvalResultsError, decoding_label, read_eval_results
from transformer_en_de.markdown import markdown_table

from .text_checks import as_text
from .translators import OURS_NAME, display_id

HEADERS = "Model|Test set|Decoding|Scored by|Sentences|BLEU|chrF|Parameters|Sentences per second".split("|")
EXPLAINED = (
    "BLEU and chrF say how close a model's translations come to a person's, from 0 to 100 (higher is closer): BLEU "
    "counts the word sequences they share, chrF the character sequences. *val* is the Multi30k validation set, used "
    "to choose our model while it trained; *test* sets were kept apart until the final score."
)
# The figures' columns: (field, format, scale, unit)
FIGURES = [("sentences", ","), ("bleu", ".2f"), ("chrf", ".2f"), ("parameters", ".1f", 1e-6, "M"), ("speed", ".1f")]
RECORD = "its record (eval_results.json)"
COMPARISON = "compare.py"


def cell(value, form: str, scale: float = 1, unit: str = "") -> str:
    """A number as `form` ("" for anything else)."""
    return f"{value * scale:{form}}{unit}" if isinstance(value, int | float) and not isinstance(value, bool) else ""


class Rows:
    """The table's rows, one per model, test set and decoding: a run scored with another decoding is a row of its own,
    so that a score never stands under another run's label."""

    def __init__(self):
        self.rows: dict[tuple[str, str, str], dict] = {}

    def put(self, model: str, split: str, decoding: str, scored_by: str, **values) -> None:
        values = {name: value for name, value in values.items() if value not in (None, "")}
        # "val", or "test 2016 flickr" for test_2016_flickr (a file name such as test_2016_flickr.en too)
        key = (model, Path(split).name.split(".")[0].replace("_", " "), decoding)
        row = self.rows.get(key)
        scores = {name: round(value, 2) for name, value in values.items() if name in ("bleu", "chrf")}
        if row and any(round(row.get(name, score), 2) != score for name, score in scores.items()):
            # the same decoding scored with other figures (another run): both rows, each named by its source
            key, row = (*key[:2], f"{decoding} "), None
        row = row or self.rows.setdefault(key, {"scored_by": []})
        row["scored_by"].append(scored_by)
        row.update(values)

    def table(self) -> list[list[str]]:
        def order(item):  # ours first, then the others by name; val before the test sets; the record's row first
            (model, split, decoding), row = item
            return (model != OURS_NAME, model, split != "val", split, RECORD not in row["scored_by"], decoding)

        return [
            [model, split, decoding.strip(), " and ".join(row["scored_by"])]
            + [cell(row.get(name), *form) for name, *form in FIGURES]
            for (model, split, decoding), row in sorted(self.rows.items(), key=order)
        ]


def comparison_rows(comparison: dict, rows: Rows, ours: str | None, our_decoding: dict | None) -> tuple[list, list]:
    """compare.py's rows under its one decoding (ours: its record's length penalty where it left it to each model);
    (the systems not scored, a line per Hub model's commit and weights)."""
    split = str(comparison.get("source_file") or "?")
    decoding = decoding_label(comparison, OWN)
    our_label = decoding
    if our_decoding and comparison.get("length_penalty") is None:
        our_label = decoding_label({**comparison, "length_penalty": our_decoding.get("length_penalty")})
    missing, origins = [], []
    for system in (system for system in comparison.get("systems", []) if isinstance(system, dict)):
        name = display_id(str(system.get("model", "?")))
        name = OURS_NAME if name == ours else name
        if system.get("error") or system.get("bleu") is None:
            missing.append(name)
            continue
        figures = dict(bleu=system.get("bleu"), chrf=system.get("chrf"), parameters=system.get("num_parameters"))
        label = our_label if name == OURS_NAME else decoding
        speed = system.get("sentences_per_second")
        rows.put(name, split, label, COMPARISON, sentences=comparison.get("num_sentences"), speed=speed, **figures)
        if isinstance(system.get("revision"), str):
            weights = f" ({system['weights']})" if isinstance(system.get("weights"), str) else ""
            origins.append(f"{name} was scored at commit {system['revision'][:7]}{weights}.")
    return missing, origins


def bleu_by_model(rows: list[list[str]]) -> dict[str, tuple[float, str]]:
    """Each model's BLEU on test 2016 flickr (the arena's boards show it) and its decoding, from its first row (ours:
    its record's)."""
    found: dict[str, tuple[float, str]] = {}
    for model, split, decoding, _, _, bleu, *_ in rows:
        if split == "test 2016 flickr" and bleu and model not in found:
            found[model] = (float(bleu), decoding)
    return found


def corpus_markdown(rows: list[list[str]]) -> str:
    """The rows as a Markdown table, each cell shown as text; "" when there are none."""
    if not rows:
        return ""
    return markdown_table(HEADERS, [[as_text(cell) if cell else "" for cell in row] for row in rows], "llll" + "r" * 5)


def read_json(path: Path) -> tuple[dict | None, str]:
    """The file's JSON object, or None and a note saying why not ("" when the file is simply absent)."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"{path.name} could not be read ({str(error).splitlines()[0]})."
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object.")


def corpus_table(
    model: str | Path | None, comparison_path: Path, ours: str | None = None
) -> tuple[str, list[list[str]]]:
    """Notes (Markdown) and the table's rows for our `model`, a folder (its record read) or a Hub id; `ours`: its name
    in compare.py's JSON (`display_id(model)` if not given)."""
    rows, notes = Rows(), [EXPLAINED]
    folder = Path(model) if model and Path(model).is_dir() else None
    ours = ours or (display_id(str(model)) if model else None)
    try:
        results = read_eval_results(folder) if folder is not None else None
    except EvalResultsError as error:
        results = None
        notes.append(
            f"Our model's eval_results.json is not in the expected shape, so its scores are not shown "
            f"({str(error).replace(str(folder), display_id(str(folder)))})."
        )
    if results:
        scored_with = decoding_label(results["decoding"])
        for split, score in results["scores"].items():
            figures = dict(bleu=score["bleu"], chrf=score.get("chrf"), parameters=results["num_parameters"])
            rows.put(OURS_NAME, split, scored_with, RECORD, sentences=score.get("num_sentences"), **figures)
        notes.append(
            f"Our model's rows scored by its record were measured by the command that scored the folder, with the "
            f"decoding it was saved with ({scored_with})."
        )
        saved, _ = read_json(folder / "generation_config.json")
        if saved:
            saved_with = decoding_label({"num_beams": 1, "length_penalty": 1.0} | saved)
            if saved_with != scored_with:
                notes.append(
                    f"The folder now decodes with {saved_with}, not as its scores were made: rescore it "
                    "(`python average_checkpoints.py --rescore FOLDER`) before reading them as this model's."
                )
    comparison, problem = read_json(comparison_path)
    notes += [problem] if problem else []
    if comparison:
        missing, origins = comparison_rows(comparison, rows, ours, results["decoding"] if results else None)
        notes.append(
            "The rows scored by compare.py come from one run in which every model translated the same sentences with "
            f"the same decoding ({decoding_label(comparison, OWN)}) and the same length limit, on one "
            "machine; cased, detokenised sacreBLEU. A row scored by both agrees in both."
        )
        notes += [as_text(" ".join(origins))] if origins else []
        if missing:
            have = "has" if len(missing) == 1 else "have"
            notes.append(f"{', '.join(missing)} {have} no scores here: not available when the comparison ran.")
    table = rows.table()
    if not table:
        notes.insert(
            0,
            "No corpus-level results yet: train the model (`python train.py` writes eval_results.json beside it) "
            f"and run `python compare.py` (writes {comparison_path.name}).",
        )
    return "\n\n".join(notes), table
