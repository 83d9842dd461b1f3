"""What a Hub user gets from a model folder: Auto classes, `generate()` with the saved defaults, nothing of ours.

The folder's own modeling code runs (`trust_remote_code`; `modeling/` is never imported); `--engine`: the app's
engine instead, and the page's out-of-depth flags on validation and `everyday_sentences.txt` (tuned on its odd lines
and validation; the even lines are held out). Runaway outputs: over 3x the source's characters.

    python -m benchmarks.hub_user [--model models/transformer-en-de] [--splits val] [--threads 1] [--quick] [--engine]
"""

import statistics
import sys
import time
from pathlib import Path

import sacrebleu
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from benchmarks import harness
from benchmarks.harness import read_split

RUNAWAY_FACTOR = 3.0
EVERYDAY_FILE = Path(__file__).with_name("everyday_sentences.txt")


def everyday_sentences() -> tuple[list[str], list[str]]:
    """(chosen on, held out): the odd and the even sentences of everyday_sentences.txt."""
    lines = EVERYDAY_FILE.read_text(encoding="utf-8").splitlines()
    sentences = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return sentences[0::2], sentences[1::2]


def translator(args):
    """A function (sentences, casing step on) -> translations: the engine's with `--engine`, else generate()'s."""
    if args.engine:
        from transformer_en_de.decoding import engine, loading

        model, tokenizer = loading.load_model(args.model)
        args.engine_model = model, tokenizer
        return lambda sources, casing: (
            engine.translate(model, tokenizer, sources, engine.DecodingSettings(normalise_case=casing)).texts
        )
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=True).eval()
    assert "modeling" not in sys.modules, "the project's modeling/ was imported: this must not be"
    return lambda sources, casing: harness.generate_all(model, tokenizer, sources)


def options(parser):
    parser.add_argument("--model", default=str(harness.SHIPPED_DIR), help="a model folder")
    parser.add_argument("--splits", nargs="+", default=["val"], help="Multi30k splits to score (default: val)")
    parser.add_argument("--engine", action="store_true", help="through the app's engine, not generate() alone")
    parser.set_defaults(threads=1)


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0], options)
    way = "the engine" if args.engine else "Auto classes and generate() defaults"
    print(f"# {args.model} through {way}, float32; {harness.describe_machine(args.threads)}")
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
    harness.print_table(["split", "sentences", "BLEU", "chrF", "sentences/s"], rows)
    print("\nRunaway outputs (output characters / source characters):\n")
    harness.print_table(["split", "sentences", "longest ratio", f"over {RUNAWAY_FACTOR:g}x", "its source"], runaway)

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
    harness.print_table(["input", "lowercased BLEU", "of as-is"], rows)
    if args.engine:
        out_of_depth_flags(*args.engine_model, read_split("val", "en")[: 200 if args.quick else None])


def out_of_depth_flags(model, tokenizer, captions: list[str]) -> None:
    """Each group's confidences, and how many the page flags: by the check, and by the confidence alone."""
    from transformer_en_de.app.out_of_depth import LOW_SCORE, check_depth
    from transformer_en_de.decoding.engine import confidences, translate

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
    print(f"\nOut-of-depth flags (score below {LOW_SCORE}):\n")
    header = ["sentences", "count", "confidence range", "median", f"confidence < {LOW_SCORE}", "flagged by check_depth"]
    harness.print_table(header, rows)


if __name__ == "__main__":
    main()
