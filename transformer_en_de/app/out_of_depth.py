"""Is our model out of its depth on a sentence? It learned German from picture captions only.

`check_depth(sources, confidences)` gives, per sentence, whether to warn the visitor, the score shown as the
confidence, and a short reason. A sentence is flagged when the model's confidence (`engine.confidences`: the
geometric mean of its probabilities for its own tokens) is below `LOW_CONFIDENCE`.
"""

from dataclasses import dataclass

LOW_CONFIDENCE = 0.62
LOW_CONFIDENCE_REASON = "our model is unsure of its own translation"


@dataclass(frozen=True)
class DepthCheck:
    flagged: bool
    score: float  # 0..1, shown as the confidence %
    reason: str  # short, for the visitor; "" when not flagged


def check_depth(sources: list[str], confidences: list[float | None]) -> list[DepthCheck]:
    """One check per source sentence and its translation's confidence. A sentence with no confidence (not translated)
    has no translation to warn about: not flagged, score nan (show no figure)."""
    if len(sources) != len(confidences):
        raise ValueError(f"{len(sources)} sources but {len(confidences)} confidences: one each is needed")
    checks: list[DepthCheck] = []
    for confidence in confidences:
        if confidence is None:
            checks.append(DepthCheck(False, float("nan"), ""))
            continue
        flagged = confidence < LOW_CONFIDENCE
        checks.append(DepthCheck(flagged, confidence, LOW_CONFIDENCE_REASON if flagged else ""))
    return checks


__all__ = ["DepthCheck", "check_depth"]
