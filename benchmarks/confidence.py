"""Does the app's out-of-depth warning still flag everyday sentences and spare picture captions, for a new model?

Multi30k validation and `everyday_sentences.txt` (the check was tuned on its odd lines and validation; the even
lines are held out): each group's confidences, and how many are flagged by the check and by the confidence alone.

    python -m benchmarks.confidence [--model models/transformer-en-de] [--threads 2] [--quick]
"""

import statistics
from pathlib import Path

from benchmarks import harness
from transformer_en_de.app.out_of_depth import LOW_SCORE, check_depth
from transformer_en_de.decoding.engine import confidences, translate

EVERYDAY_FILE = Path(__file__).with_name("everyday_sentences.txt")


def everyday_sentences() -> tuple[list[str], list[str]]:
    """(chosen on, held out): the odd and the even sentences of everyday_sentences.txt."""
    lines = EVERYDAY_FILE.read_text(encoding="utf-8").splitlines()
    sentences = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return sentences[0::2], sentences[1::2]


def main() -> None:
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0])
    captions = harness.read_split("val", "en")[: 200 if args.quick else None]
    chosen, held_out = everyday_sentences()
    groups = {
        f"Multi30k val ({len(captions)})": captions,
        "everyday, chosen on": chosen,
        "everyday, held out": held_out,
    }
    rows = []
    for name, sentences in groups.items():
        run = translate(model, tokenizer, sentences)
        figures = confidences(model, run.translations)
        flagged = sum(check.flagged for check in check_depth(sentences, figures, run.texts))
        scores = [score for score in figures if score is not None]
        low = sum(score < LOW_SCORE for score in scores)
        rows.append([name, len(sentences), f"{min(scores):.2f}-{max(scores):.2f}", f"{statistics.median(scores):.2f}"])
        rows[-1] += [f"{count} ({100 * count / len(sentences):.1f}%)" for count in (low, flagged)]
    print(f"\nOut-of-depth flags of {args.model} (score below {LOW_SCORE}):\n")
    header = ["sentences", "count", "confidence range", "median", f"confidence < {LOW_SCORE}", "flagged by check_depth"]
    harness.print_table(header, rows)


if __name__ == "__main__":
    main()
