"""Does the app's low-confidence notice still separate picture captions from everyday sentences, for a model?

    python -m benchmarks.confidence [--model models/transformer-en-de] [--threads 2]

The app flags a sentence whose confidence (`engine.confidences`: the geometric mean of the model's probabilities for
its own tokens) is below `LOW_CONFIDENCE`. A new model changes those probabilities, so run this before shipping one:
it translates the first 60 Multi30k validation sentences (what the model knows) and twelve everyday sentences written
here (what it does not) with the model's own decoding, and prints each group's confidences and how many are flagged.
"""

import statistics

from benchmarks import harness
from transformer_en_de.app.translation import LOW_CONFIDENCE
from transformer_en_de.engine import confidences, translate

CAPTIONS = 60
EVERYDAY = [
    "Hello, how are you?",
    "Where is the train station?",
    "I would like a cup of coffee, please.",
    "The meeting has been moved to Thursday afternoon.",
    "Can you help me with my homework?",
    "We are going on holiday next week.",
    "My phone battery is almost empty.",
    "Thank you very much for your help.",
    "The weather will be cold tomorrow.",
    "Please send me the report by email.",
    "How much does this jacket cost?",
    "I have lived in this city for ten years.",
]


def main() -> None:
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0])
    rows = []
    for name, sentences in (("Multi30k val, first 60", harness.read_split("val", "en")[:CAPTIONS]),
                            ("everyday sentences", EVERYDAY)):
        run = translate(model, tokenizer, sentences)
        scores = confidences(model, run.translations)
        flagged = sum(score < LOW_CONFIDENCE for score in scores)
        rows.append([name, len(scores), f"{min(scores):.2f}-{max(scores):.2f}", f"{statistics.median(scores):.2f}",
                     f"{flagged} ({100 * flagged / len(scores):.0f}%)"])
    print(f"\nConfidence of {args.model} (flagged below {LOW_CONFIDENCE}):\n")
    harness.print_table(["sentences", "count", "range", "median", "flagged"], rows)


if __name__ == "__main__":
    main()
