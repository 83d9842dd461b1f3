"""Robustness of a model's outputs with its saved decoding: runaway outputs and input typed in capitals.

1. Runaway outputs: every val and test_2016_flickr sentence through the engine (with the per-sentence bound); the
   longest output against its source, in characters, and how many exceed 3x.
2. Casing: the first 300 val sentences as they are, in capitals (raw, and with the engine's casing step), and in lower
   case; lowercased BLEU of each and the share of the as-is figure it keeps.

    python -m benchmarks.robustness [--model models/transformer-en-de] [--quick]
"""

from dataclasses import replace

import sacrebleu

from benchmarks import harness
from transformer_en_de.decoding.engine import DecodingSettings, translate

RUNAWAY_FACTOR = 3.0


def main() -> None:
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0])
    settings = DecodingSettings()
    rows = []
    for split in ("val", "test_2016_flickr"):
        sources = harness.read_split(split, "en")[: 100 if args.quick else None]
        outputs = translate(model, tokenizer, sources, settings).texts
        ratios = [len(output) / max(len(source), 1) for source, output in zip(sources, outputs, strict=True)]
        worst = max(range(len(ratios)), key=ratios.__getitem__)
        over = sum(ratio > RUNAWAY_FACTOR for ratio in ratios)
        rows.append([split, len(sources), f"{ratios[worst]:.2f}", over, f"{sources[worst][:60]!r}"])
    print("\nRunaway outputs (output characters / source characters):\n")
    harness.print_table(["split", "sentences", "longest ratio", f"over {RUNAWAY_FACTOR:g}x", "its source"], rows)

    count = 50 if args.quick else 300
    sources, references = harness.read_split("val", "en")[:count], harness.read_split("val", "de")[:count]
    capitals = [source.upper() for source in sources]
    variants = {
        "as is": (sources, settings),
        "capitals, raw": (capitals, replace(settings, normalise_case=False)),
        "capitals, engine's casing step": (capitals, settings),
        "all lower-case": ([source.lower() for source in sources], settings),
    }
    bleus = {}
    for name, (inputs, variant) in variants.items():
        outputs = translate(model, tokenizer, inputs, variant).texts
        bleus[name] = round(sacrebleu.corpus_bleu(outputs, [references], lowercase=True).score, 2)
    as_is = bleus["as is"]
    rows = [[name, bleu, f"{100 * bleu / as_is:.0f}%" if as_is else ""] for name, bleu in bleus.items()]
    print(f"\nCasing: lowercased BLEU on the first {count} validation sentences:\n")
    harness.print_table(["input", "lowercased BLEU", "of as-is"], rows)


if __name__ == "__main__":
    main()
