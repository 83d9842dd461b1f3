"""BLEU and chrF as `evaluate` metrics computed locally by sacreBLEU.

`evaluate.load("sacrebleu")` fetches its script from the Hub; these subclasses compute the same scores offline:
cased, detokenised, 13a tokenisation (sacreBLEU's defaults), one reference per sentence.
"""

import datasets
import evaluate
import sacrebleu

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
    """{"bleu": ..., "chrf": ...} for a whole corpus, through the `evaluate` metrics above."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references: they must pair up.")
    if not predictions:
        raise ValueError("No sentences to score.")
    bleu = SacreBleu().compute(predictions=predictions, references=references)["score"]
    chrf = ChrF().compute(predictions=predictions, references=references)["score"]
    return {"bleu": round(bleu, 2), "chrf": round(chrf, 2)}


def sentence_scores(prediction: str, reference: str) -> dict[str, float]:
    """Sentence-level BLEU (with sacreBLEU's smoothing for short segments) and chrF of one translation."""
    return {
        "bleu": round(sacrebleu.sentence_bleu(prediction, [reference]).score, 2),
        "chrf": round(sacrebleu.sentence_chrf(prediction, [reference]).score, 2),
    }
