"""Does the app's out-of-depth warning still flag everyday sentences and spare picture captions, for a model?

    python -m benchmarks.confidence [--model models/transformer-en-de] [--threads 2] [--quick]

The app flags a sentence by `transformer_en_de.app.out_of_depth.check_depth`: the model's confidence
(`engine.confidences`, the geometric mean of its probabilities for its own tokens), discounted where the English reads
unlike the training captions, below `LOW_SCORE`. A new model changes those probabilities, so run this before shipping
one: it translates Multi30k validation (what the model knows) and `everyday_sentences.txt` (what it does not; the
check's constants were chosen on its odd sentences and validation, the even ones held out) with the model's own
decoding, and prints each group's confidences and how many are flagged, by the check and by the confidence alone.
"""

import statistics
from pathlib import Path

from benchmarks import harness
from transformer_en_de.app.out_of_depth import LOW_SCORE, check_depth
from transformer_en_de.decoding.engine import confidences, translate

EVERYDAY_FILE = Path(__file__).with_name("everyday_sentences.txt")
QUICK_CAPTIONS = 200


def everyday_sentences() -> tuple[list[str], list[str]]:
    """(chosen on, held out): the odd and the even sentences of everyday_sentences.txt."""
    lines = EVERYDAY_FILE.read_text(encoding="utf-8").splitlines()
    sentences = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return sentences[0::2], sentences[1::2]


def share(count: int, total: int) -> str:
    return f"{count} ({100 * count / total:.1f}%)"


def main() -> None:
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0])
    captions = harness.read_split("val", "en")[: QUICK_CAPTIONS if args.quick else None]
    chosen, held_out = everyday_sentences()
    rows = []
    for name, sentences in (
        (f"Multi30k val ({len(captions)})", captions),
        ("everyday, chosen on", chosen),
        ("everyday, held out", held_out),
    ):
        run = translate(model, tokenizer, sentences)
        figures = confidences(model, run.translations)
        checks = check_depth(sentences, figures, run.texts)
        scores = [score for score in figures if score is not None]
        rows.append(
            [
                name,
                len(sentences),
                f"{min(scores):.2f}-{max(scores):.2f}",
                f"{statistics.median(scores):.2f}",
                share(sum(score < LOW_SCORE for score in scores), len(sentences)),
                share(sum(check.flagged for check in checks), len(sentences)),
            ]
        )
    print(f"\nOut-of-depth flags of {args.model} (score below {LOW_SCORE}):\n")
    harness.print_table(
        ["sentences", "count", "confidence range", "median", f"confidence < {LOW_SCORE}", "flagged by check_depth"],
        rows,
    )


if __name__ == "__main__":
    main()
