"""Evaluation: BLEU and chrF as `evaluate` metrics computed locally by sacreBLEU, a model scored through the engine,
and eval_results.json.

`evaluate.load("sacrebleu")` fetches its script from the Hub; these subclasses compute the same scores offline:
cased, detokenised, 13a tokenisation (sacreBLEU's defaults), one reference per sentence.
"""

import json
from pathlib import Path

import datasets
import evaluate
import sacrebleu

from .decoding.engine import DecodingSettings, resolved_settings, translate

_FEATURES = datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")})


class _SacreBleuMetric(evaluate.Metric):
    """An `evaluate` metric whose score is one of sacreBLEU's corpus metrics with its default settings."""

    scorer = None  # a sacrebleu metric class
    description = ""
    citation = ""

    def _info(self):
        return evaluate.MetricInfo(
            description=self.description,
            citation=self.citation,
            inputs_description="predictions and references: lists of detokenised strings, one reference each.",
            features=_FEATURES,
        )

    def _compute(self, predictions, references):
        scorer = self.scorer()
        score = scorer.corpus_score(predictions, [references])
        return {"score": score.score, "signature": str(scorer.get_signature())}


class SacreBleu(_SacreBleuMetric):
    """Corpus BLEU by sacreBLEU (cased, 13a tokenisation)."""

    scorer = sacrebleu.BLEU
    description = "Corpus BLEU computed by sacreBLEU with its default settings."
    citation = "Post 2018, A Call for Clarity in Reporting BLEU Scores."


class ChrF(_SacreBleuMetric):
    """Corpus chrF by sacreBLEU (character 6-grams, beta 2)."""

    scorer = sacrebleu.CHRF
    description = "Corpus chrF computed by sacreBLEU with its default settings."
    citation = "Popović 2015, chrF: character n-gram F-score for automatic MT evaluation."


def corpus_scores(predictions: list[str], references: list[str]) -> dict[str, float]:
    """{"bleu": ..., "chrf": ...} for a whole corpus (`score_split` without its signatures)."""
    scores = score_split(predictions, references)
    return {"bleu": scores["bleu"], "chrf": scores["chrf"]}


def sentence_scores(prediction: str, reference: str) -> dict[str, float]:
    """Sentence-level BLEU (with sacreBLEU's smoothing for short segments) and chrF of one translation."""
    return {
        "bleu": round(sacrebleu.sentence_bleu(prediction, [reference]).score, 2),
        "chrf": round(sacrebleu.sentence_chrf(prediction, [reference]).score, 2),
    }


def score_split(hypotheses: list[str], references: list[str]) -> dict:
    """BLEU and chrF of a whole split, with sacreBLEU's signatures (what eval_results.json keeps per split)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} predictions but {len(references)} references: they must pair up.")
    if not hypotheses:
        raise ValueError("No sentences to score.")
    bleu = SacreBleu().compute(predictions=hypotheses, references=references)
    chrf = ChrF().compute(predictions=hypotheses, references=references)
    return {
        "bleu": round(bleu["score"], 2),
        "chrf": round(chrf["score"], 2),
        "num_sentences": len(references),
        "bleu_signature": bleu["signature"],
        "chrf_signature": chrf["signature"],
    }


def score_model(
    model, tokenizer, sources: list[str], references: list[str], settings: DecodingSettings = DecodingSettings()
) -> tuple[list[str], dict]:
    """Translate `sources` through the engine (the model's saved decoding by default) and score them in file order."""
    texts = translate(model, tokenizer, sources, settings).texts
    return texts, score_split(texts, references)


def score_splits(
    model, tokenizer, splits: dict[str, tuple[list[str], list[str]]], known: dict[str, dict] | None = None
) -> tuple[dict, dict]:
    """({split: scores}, {split: translations}) of (sources, references) per split, through the engine with the
    model's saved decoding, every sentence in file order, with a line for each; a split in `known` keeps the scores
    measured already (and has no translations)."""
    scores, translations = {}, {}
    for split, (sources, references) in splits.items():
        if known and split in known:
            scores[split] = known[split]
        else:
            translations[split], scores[split] = score_model(model, tokenizer, sources, references)
        print(
            f"[score] {split}: {scores[split]['bleu']} BLEU / {scores[split]['chrf']} chrF "
            f"({scores[split]['num_sentences']} sentences)"
        )
    return scores, translations


def decoding_record(model, settings: DecodingSettings = DecodingSettings()) -> dict:
    """The decoding a score was measured with, as eval_results.json keeps it (the engine's resolved settings)."""
    record = resolved_settings(model, settings)
    if not record["do_sample"]:  # search: the sampling fields say nothing
        for name in ("do_sample", "top_k", "top_p", "temperature"):
            record.pop(name)
    return record


def decoding_label(decoding: dict, unset_penalty: str = "") -> str:
    """How a score was decoded, in words: "greedy", or "beam 4, length penalty 0.6"; where no length penalty is
    given, `unset_penalty` says whose applies (a comparison leaves it to each model: "each model's own")."""
    beams = decoding.get("num_beams")
    if not isinstance(beams, int) or isinstance(beams, bool):
        return "unknown"
    if beams == 1:
        return "greedy"
    penalty = decoding.get("length_penalty")
    if penalty is not None:
        return f"beam {beams}, length penalty {penalty:g}"
    return f"beam {beams}, {unset_penalty} length penalty" if unset_penalty else f"beam {beams}"


# ----------------------------------------------------------------------------------------------- eval_results.json
#
# One shape, written by one function (train.py and average_checkpoints.py call it) and read by one (the card, the
# app, average_checkpoints.py):
#
#   {
#     "num_parameters": 7577600,
#     "languages": {"source": "en", "target": "de"},
#     "decoding": {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 255, "max_new_tokens_ratio": 1.5,
#                  "max_new_tokens_offset": 10, "batch_size": 32},
#     "scores": {"val": {"bleu": .., "chrf": .., "num_sentences": .., "bleu_signature": .., "chrf_signature": ..},
#                "test_2016_flickr": {...}},
#     "command": ["python train.py ...", "python average_checkpoints.py ..."],
#     "training": {"validation_curve": [{"epoch", "step", "loss", "bleu", "chrf"}, ...], "validation_split": "val",
#                  "trained_steps": {"from", "to"}, "best_checkpoint": .., "averaged_checkpoints": [..],
#                  "average_candidates": [{"name", "checkpoints", "validation": {"bleu", "chrf"}}, ...],
#                  "corpora": [{"name", "pairs", "weight", "tagged"}, ...], "case_augmentation": .., ...}
#   }
#
# "scores" are measured through the engine (`decoding.engine.translate`) with "decoding", on every sentence
# of each split in file order; the validation split is named by training["validation_split"] (default "val").

EVAL_RESULTS = "eval_results.json"


class EvalResultsError(ValueError):
    """eval_results.json is missing a field or is not the shape above; the message names the file and the field."""


def write_eval_results(
    folder: str | Path,
    *,
    num_parameters: int,
    decoding: dict,
    scores: dict[str, dict],
    command: list[str],
    training: dict | None = None,
    languages: tuple[str, str] = ("en", "de"),
) -> Path:
    """Write `folder/eval_results.json` in the one shape above; returns its path."""
    results = {
        "num_parameters": int(num_parameters),
        "languages": {"source": languages[0], "target": languages[1]},
        "decoding": dict(decoding),
        "scores": {split: dict(score) for split, score in scores.items()},
        "command": list(command),
        "training": dict(training or {}),
    }
    path = Path(folder) / EVAL_RESULTS
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def validation_split_of(results: dict) -> str:
    """The split a model in eval_results.json was chosen on (files written before the field: "val")."""
    return results["training"].get("validation_split", "val")


def read_eval_results(folder: str | Path) -> dict | None:
    """`folder/eval_results.json` checked against the shape above; None if the folder has none."""
    path = Path(folder) / EVAL_RESULTS
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EvalResultsError(f"{path} could not be read: {error}") from error
    if not isinstance(results, dict):
        raise EvalResultsError(f"{path} is not a JSON object.")
    expected = {"num_parameters": int, "decoding": dict, "scores": dict, "command": list, "training": dict}
    for name, kind in expected.items():
        if not isinstance(results.get(name), kind):
            raise EvalResultsError(f"{path}: field {name!r} is missing or not a {kind.__name__}.")
    languages = results.setdefault("languages", {"source": "en", "target": "de"})  # files written before the field
    if not (isinstance(languages, dict) and all(isinstance(languages.get(k), str) for k in ("source", "target"))):
        raise EvalResultsError(f"{path}: field 'languages' is not {{'source': .., 'target': ..}}.")
    for split, score in results["scores"].items():
        if not isinstance(score, dict) or not isinstance(score.get("bleu"), int | float):
            raise EvalResultsError(f"{path}: scores[{split!r}] has no BLEU.")
    return results
