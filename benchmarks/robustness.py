"""Robustness of a model's outputs with its saved decoding: runaway outputs and input typed in capitals.

    python -m benchmarks.robustness [--model models/transformer-en-de] [--quick]

1. Runaway outputs: every val and test_2016_flickr sentence through the engine (the model's own decoding, with the
   per-sentence length bound); the longest output against its source, in characters, and how many exceed 3x.
2. Casing: the first 300 validation sentences as they are, typed in capitals (raw, and with the engine's casing
   step), and all lower-case; lowercased BLEU of each, and the share of the as-is figure it keeps.
"""

from dataclasses import replace

import sacrebleu

from benchmarks import harness
from transformer_en_de.decoding.engine import DecodingSettings, translate

CASING_SENTENCES = 300
RUNAWAY_FACTOR = 3.0


def lowercased_bleu(hypotheses: list[str], references: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score, 2)


def main() -> None:
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0])
    settings = DecodingSettings()
    limit = 100 if args.quick else None

    rows = []
    for split in ("val", "test_2016_flickr"):
        sources = harness.read_split(split, "en")[:limit]
        outputs = translate(model, tokenizer, sources, settings).texts
        ratios = [len(output) / max(len(source), 1) for source, output in zip(sources, outputs, strict=True)]
        worst = max(range(len(ratios)), key=ratios.__getitem__)
        over = sum(ratio > RUNAWAY_FACTOR for ratio in ratios)
        rows.append([split, len(sources), f"{ratios[worst]:.2f}", over, f"{sources[worst][:60]!r}"])
    print("\nRunaway outputs (output characters / source characters):\n")
    harness.print_table(["split", "sentences", "longest ratio", f"over {RUNAWAY_FACTOR:g}x", "its source"], rows)

    count = 50 if args.quick else CASING_SENTENCES
    sources, references = harness.read_split("val", "en")[:count], harness.read_split("val", "de")[:count]
    variants = [
        ("as is", sources, settings),
        ("capitals, raw", [source.upper() for source in sources], replace(settings, normalise_case=False)),
        ("capitals, engine's casing step", [source.upper() for source in sources], settings),
        ("all lower-case", [source.lower() for source in sources], settings),
    ]
    rows, as_is = [], None
    for name, inputs, variant in variants:
        bleu = lowercased_bleu(translate(model, tokenizer, inputs, variant).texts, references)
        as_is = bleu if as_is is None else as_is
        rows.append([name, bleu, f"{100 * bleu / as_is:.0f}%" if as_is else ""])
    print(f"\nCasing: lowercased BLEU on the first {count} validation sentences:\n")
    harness.print_table(["input", "lowercased BLEU", "of as-is"], rows)


if __name__ == "__main__":
    main()
