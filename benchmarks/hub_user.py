"""What a Hub user gets from a model folder: Auto classes, `generate()` with the saved defaults, nothing of ours.

    python -m benchmarks.hub_user [--model models/transformer-en-de] [--splits val] [--threads 1] [--quick]

The folder is loaded in this process with `AutoTokenizer` / `AutoModelForSeq2SeqLM` and `trust_remote_code=True`;
the project's packages are never imported, so the folder's own copy of the modeling code runs, as it does for someone
who downloads the model. Sentences go through `model.generate(**batch)` in batches of 32 sorted by length, with no
argument: the saved generation config decides (its beams, length penalty, the per-sentence bound). Printed:

1. cased sacreBLEU BLEU and chrF on each split (val by default; add test_2016_flickr once, for the shipped model);
2. runaway outputs: the longest output against its source, in characters, and how many exceed 3x;
3. casing: the first 300 validation sentences as they are, in capitals and in lower case, lowercased BLEU of each
   and the share of the as-is figure it keeps (no casing step: that is the engine's, not the model's).
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import sacrebleu
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT.parent / "shared" / "data" / "multi30k"
BATCH_SIZE = 32
CASING_SENTENCES = 300
RUNAWAY_FACTOR = 3.0


def read_split(split: str, language: str) -> list[str]:
    """A Multi30k file, as `harness.read_split` reads it but without the project's code (see above)."""
    path = DATA_DIR / f"{split}.{language}"
    if not path.is_file():
        raise SystemExit(f"Multi30k not found: expected {path}.")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def generate_all(model, tokenizer, sources: list[str]) -> list[str]:
    """`generate()` with the saved defaults over batches of sentences of similar length, returned in input order."""
    order = sorted(range(len(sources)), key=lambda index: len(sources[index]))
    outputs = [""] * len(sources)
    for start in range(0, len(order), BATCH_SIZE):
        chosen = order[start : start + BATCH_SIZE]
        batch = tokenizer([sources[index] for index in chosen], return_tensors="pt", padding=True, truncation=True)
        with torch.inference_mode():
            ids = model.generate(**batch)
        for index, text in zip(chosen, tokenizer.batch_decode(ids, skip_special_tokens=True), strict=True):
            outputs[index] = text
    return outputs


def table(header: list[str], rows: list[list[object]]) -> None:
    """A Markdown table on stdout (written here, not by the project's writer: this script imports nothing of ours)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "transformer-en-de"), help="a model folder")
    parser.add_argument("--splits", nargs="+", default=["val"], help="Multi30k splits to score (default: val)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="100 sentences per split, 50 for casing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"# {args.model} through Auto classes and generate() defaults; torch {torch.__version__}, "
        f"{args.threads} thread(s), CPU {platform.machine()} {torch.backends.cpu.get_cpu_capability()}, float32"
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=True).eval()
    assert "modeling" not in sys.modules, "the project's modeling/ was imported: this must not be"
    limit = 100 if args.quick else None

    rows, runaway = [], []
    for split in args.splits:
        sources, references = read_split(split, "en")[:limit], read_split(split, "de")[:limit]
        started = time.perf_counter()
        outputs = generate_all(model, tokenizer, sources)
        seconds = time.perf_counter() - started
        bleu = sacrebleu.corpus_bleu(outputs, [references])
        chrf = sacrebleu.corpus_chrf(outputs, [references])
        rows.append([split, len(sources), f"{bleu.score:.2f}", f"{chrf.score:.2f}", f"{len(sources) / seconds:.1f}"])
        ratios = [len(output) / max(len(source), 1) for source, output in zip(sources, outputs, strict=True)]
        worst = max(range(len(ratios)), key=ratios.__getitem__)
        runaway.append(
            [split, f"{ratios[worst]:.2f}", sum(ratio > RUNAWAY_FACTOR for ratio in ratios), repr(sources[worst][:60])]
        )
    print("\nQuality (cased sacreBLEU, detokenised):\n")
    table(["split", "sentences", "BLEU", "chrF", "sentences/s"], rows)
    print("\nRunaway outputs (output characters / source characters):\n")
    table(["split", "longest ratio", f"over {RUNAWAY_FACTOR:g}x", "its source"], runaway)

    count = 50 if args.quick else CASING_SENTENCES
    sources, references = read_split("val", "en")[:count], read_split("val", "de")[:count]
    rows, as_is = [], None
    for name, inputs in (
        ("as is", sources),
        ("capitals", [s.upper() for s in sources]),
        ("lower case", [s.lower() for s in sources]),
    ):
        bleu = round(
            sacrebleu.corpus_bleu(generate_all(model, tokenizer, inputs), [references], lowercase=True).score, 2
        )
        as_is = bleu if as_is is None else as_is
        rows.append([name, bleu, f"{100 * bleu / as_is:.0f}%" if as_is else ""])
    print(f"\nCasing through generate() alone: lowercased BLEU on the first {count} validation sentences:\n")
    table(["input", "lowercased BLEU", "of as-is"], rows)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
