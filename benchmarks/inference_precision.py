"""Lower-precision inference on the CPU: BLEU/chrF on test_2016_flickr and speed, against float32.

Variants of one trained model, all decoding the same sentences with the same settings through the one engine
(`transformer_en_de.decoding.engine.translate`: the model's saved decoding and its per-sentence length bound):
- float32: the model as loaded;
- bf16 weights: `model.to(torch.bfloat16)` (half the bytes to read per step);
- int8 dynamic: `torch.ao.quantization.quantize_dynamic` of every `nn.Linear` (int8 weights, activations
  quantized per batch);
- int8 dynamic, float32 output layer: the same for every layer but the output projection over the vocabulary.
(bf16 autocast was measured too: slower than bf16 weights, at a similar BLEU.)
A variant is worth offering only if its BLEU is within 0.3 of float32. Batches are alternated across variants
(each batch of sentences is translated by every variant in turn), so a background load slows all alike.

    python -m benchmarks.inference_precision [--quick] [--model models/transformer-en-de]
"""

import copy
import sys
from pathlib import Path

import torch

from benchmarks import harness
from modeling import TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer
from transformer_en_de.decoding.engine import DecodingSettings, translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.evaluation import corpus_scores

MAX_BLEU_DROP = 0.3


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="a saved model folder")
    parser.add_argument("--tokenizer", type=Path, default=None, help="tokenizer folder (default: the model's)")
    parser.add_argument("--num-beams", type=int, default=None, help="default: the model's (4)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="a cap besides the bound (default: the model's)"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N test sentences")


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"No trained model at {args.model}: this benchmark needs real weights (train one first).")
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    model = TransformerMTForConditionalGeneration.from_pretrained(args.model).eval()
    variants = {
        "float32": model,
        "bf16 weights": copy.deepcopy(model).to(torch.bfloat16),
        "int8 dynamic": int8_dynamic(model),
        "int8 dynamic, float32 output layer": int8_dynamic(model, keep_output_layer=True),
    }
    sources = harness.read_split("test_2016_flickr", "en")
    references = harness.read_split("test_2016_flickr", "de")
    limit = 160 if args.quick else args.limit
    if limit:
        sources, references = sources[:limit], references[:limit]

    settings = DecodingSettings(
        num_beams=args.num_beams, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size
    )
    translations = {name: [] for name in variants}
    timings = {name: harness.Timings() for name in variants}
    for start in range(0, len(sources), args.batch_size):
        chunk = sources[start : start + args.batch_size]
        step = harness.alternate(
            {
                name: lambda variant=variant, name=name, chunk=chunk: translations[name].extend(
                    translate(variant, tokenizer, chunk, settings).texts
                )
                for name, variant in variants.items()
            },
            rounds=1,
            warmup=0,
        )
        for name, timing in step.items():
            timings[name].wall += timing.wall
            timings[name].cpu += timing.cpu
        done = start + len(chunk)
        print(f"{done}/{len(sources)} sentences, {sum(sum(t.wall) for t in timings.values()):.0f} s", file=sys.stderr)

    print(f"# Inference precision ({harness.describe_machine(args.threads)}; model: {args.model})")
    print(
        f"# test_2016_flickr, {len(sources)} sentences, beam {args.num_beams or model.generation_config.num_beams}, "
        f"max_new_tokens {args.max_new_tokens or model.generation_config.max_new_tokens} and the per-sentence bound, "
        f"batches of {args.batch_size}; "
        f"BLEU/chrF: cased sacreBLEU; a variant passes if BLEU drops by at most {MAX_BLEU_DROP}"
    )
    baseline = corpus_scores(translations["float32"], references)
    base_seconds, base_cpu = sum(timings["float32"].wall), sum(timings["float32"].cpu)
    rows = []
    for name in variants:
        scores = corpus_scores(translations[name], references)
        seconds, cpu = sum(timings[name].wall), sum(timings[name].cpu)
        change = scores["bleu"] - baseline["bleu"]
        rows.append(
            [
                name,
                f"{scores['bleu']:.2f}",
                f"{scores['chrf']:.2f}",
                f"{change:+.2f}",
                f"{len(sources) / seconds:.1f}",
                f"{base_seconds / seconds:.2f}x",
                f"{base_cpu / cpu:.2f}x",
                "yes" if -change <= MAX_BLEU_DROP else "no",
            ]
        )
    harness.print_table(
        ["variant", "BLEU", "chrF", "BLEU vs float32", "sentences/s", "speed-up (wall)", "speed-up (CPU)", "passes"],
        rows,
    )


if __name__ == "__main__":
    main()
