"""What a Hub user gets from a model folder: Auto classes, `generate()` with the saved defaults, nothing of ours.

The folder's own modeling code runs (`trust_remote_code`; `modeling/` is never imported); `--engine`: the app's
engine instead. Printed: BLEU and chrF of each split, runaway outputs (over 3x the source's characters), and the
lowercased BLEU of the first 300 val sentences as they are, in capitals and in lower case.

    python -m benchmarks.hub_user [--model models/transformer-en-de] [--splits val] [--threads 1] [--quick] [--engine]
"""

import argparse
import platform
import sys
import time
from pathlib import Path

import sacrebleu
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from transformer_en_de.markdown import markdown_table  # imports nothing else of the project

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT.parent / "shared" / "data" / "multi30k"
RUNAWAY_FACTOR = 3.0


def read_split(split: str, language: str) -> list[str]:
    """A Multi30k file, as `harness.read_split` reads it without importing the project's modeling code."""
    path = DATA_DIR / f"{split}.{language}"
    if not path.is_file():
        raise SystemExit(f"Multi30k not found: expected {path}.")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def generate_all(model, tokenizer, sources: list[str], batch_size: int = 32) -> list[str]:
    """`generate()` with the saved defaults over batches of sentences of similar length, returned in input order."""
    order = sorted(range(len(sources)), key=lambda index: len(sources[index]))
    outputs = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        batch = tokenizer([sources[index] for index in chosen], return_tensors="pt", padding=True, truncation=True)
        batch = batch.to(model.device)
        with torch.inference_mode():
            ids = model.generate(**batch)
        for index, text in zip(chosen, tokenizer.batch_decode(ids, skip_special_tokens=True), strict=True):
            outputs[index] = text
    return outputs


def translator(args):
    """A function (sentences, casing step on) -> translations: the engine's with `--engine`, else generate()'s."""
    if args.engine:
        from transformer_en_de.decoding import engine, loading

        model, tokenizer = loading.load_model(args.model)
        return lambda sources, casing: (
            engine.translate(model, tokenizer, sources, engine.DecodingSettings(normalise_case=casing)).texts
        )
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=True).eval()
    assert "modeling" not in sys.modules, "the project's modeling/ was imported: this must not be"
    return lambda sources, casing: generate_all(model, tokenizer, sources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "transformer-en-de"), help="a model folder")
    parser.add_argument("--splits", nargs="+", default=["val"], help="Multi30k splits to score (default: val)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="100 sentences per split, 50 for casing")
    parser.add_argument("--engine", action="store_true", help="through the app's engine, not generate() alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"# {args.model} through {'the engine' if args.engine else 'Auto classes and generate() defaults'}; torch "
        f"{torch.__version__}, {args.threads} thread(s), CPU {platform.machine()} "
        f"{torch.backends.cpu.get_cpu_capability()}, float32"
    )
    translate = translator(args)
    limit = 100 if args.quick else None
    rows, runaway = [], []
    for split in args.splits:
        sources, references = read_split(split, "en")[:limit], read_split(split, "de")[:limit]
        started = time.perf_counter()
        outputs = translate(sources, True)
        rate = len(sources) / (time.perf_counter() - started)
        bleu, chrf = (score(outputs, [references]).score for score in (sacrebleu.corpus_bleu, sacrebleu.corpus_chrf))
        rows.append([split, len(sources), f"{bleu:.2f}", f"{chrf:.2f}", f"{rate:.1f}"])
        ratios = [len(output) / max(len(source), 1) for source, output in zip(sources, outputs, strict=True)]
        worst = max(range(len(ratios)), key=ratios.__getitem__)
        over = sum(ratio > RUNAWAY_FACTOR for ratio in ratios)
        runaway.append([split, len(sources), f"{ratios[worst]:.2f}", over, repr(sources[worst][:60])])
    print("\nQuality (cased sacreBLEU, detokenised):\n")
    print(markdown_table(["split", "sentences", "BLEU", "chrF", "sentences/s"], rows))
    print("\nRunaway outputs (output characters / source characters):\n")
    print(markdown_table(["split", "sentences", "longest ratio", f"over {RUNAWAY_FACTOR:g}x", "its source"], runaway))

    count = 50 if args.quick else 300
    sources, references = read_split("val", "en")[:count], read_split("val", "de")[:count]
    capitals = [source.upper() for source in sources]
    variants = {"as is": sources, "capitals, raw": capitals}
    if args.engine:
        variants["capitals, engine's casing step"] = capitals
    variants["all lower-case"] = [source.lower() for source in sources]
    bleus = {}
    for name, inputs in variants.items():
        outputs = translate(inputs, name != "capitals, raw")
        bleus[name] = round(sacrebleu.corpus_bleu(outputs, [references], lowercase=True).score, 2)
    rows = [
        [name, bleu, f"{100 * bleu / bleus['as is']:.0f}%" if bleus["as is"] else ""] for name, bleu in bleus.items()
    ]
    print(f"\nCasing: lowercased BLEU on the first {count} validation sentences:\n")
    print(markdown_table(["input", "lowercased BLEU", "of as-is"], rows))


if __name__ == "__main__":
    main()
