"""Generation with the key/value cache against without it, and a static cache against the dynamic one: same ids, speed.

Without the cache every step re-runs the decoder over the whole prefix; with it a step runs one new position
against cached self-attention keys/values and cross-attention keys/values computed once per source. transformers'
static cache (`cache_implementation="static"`) allocates every position up front, so that a compiled forward sees
the same shapes at every step; uncompiled, it attends over all the allocated positions. A model with
random weights never emits a confident end-of-sequence, so every output is forced to the same length
(min_new_tokens = max_new_tokens) and both sides do the same number of steps.

    python -m benchmarks.generation_cache [--quick]
"""

import torch

from benchmarks import harness
from modeling import TransformerMTForConditionalGeneration


def main():
    args = harness.parse_args(
        __doc__.splitlines()[0],
        lambda parser: parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per output"),
    )
    tokenizer = harness.benchmark_tokenizer()
    model = TransformerMTForConditionalGeneration(harness.shipped_config(tokenizer)).eval()
    config = model.config
    english, _ = harness.sample_sentences("test_2016_flickr", 64)
    settings = [(1, 1), (1, 4), (64, 1), (64, 4)] if not args.quick else [(1, 1), (64, 4)]
    rounds = 2 if args.quick else 4

    rows = []
    for batch_size, num_beams in settings:
        inputs = tokenizer(english[:batch_size], padding=True, return_tensors="pt")

        outputs = {}

        def generate(use_cache, static=False, inputs=inputs, num_beams=num_beams, outputs=outputs):
            with torch.inference_mode():
                outputs["static" if static else use_cache] = model.generate(
                    **inputs,
                    num_beams=num_beams,
                    do_sample=False,
                    min_new_tokens=args.new_tokens,
                    max_new_tokens=args.new_tokens,
                    use_cache=use_cache,
                    **({"cache_implementation": "static"} if static else {}),
                )

        timings = harness.alternate(
            {
                "cache": lambda: generate(True),
                "no cache": lambda: generate(False),
                "static cache": lambda: generate(True, static=True),
            },
            rounds=rounds if batch_size == 1 else max(rounds - 2, 1),
            warmup=0,
        )
        if not torch.equal(outputs[True], outputs[False]) or not torch.equal(outputs[True], outputs["static"]):
            raise AssertionError(f"batch {batch_size}, beams {num_beams}: ids differ with and without the cache")
        cached, uncached, static = timings["cache"], timings["no cache"], timings["static cache"]
        ratio = uncached.seconds / cached.seconds
        decoding = "greedy" if num_beams == 1 else f"beam {num_beams}"
        rows.append(
            [
                batch_size,
                decoding,
                harness.spread(cached.wall),
                harness.spread(uncached.wall),
                f"{ratio:.2f}x",
                f"{uncached.cpu_seconds / cached.cpu_seconds:.2f}x",
                f"{cached.seconds / static.seconds:.2f}x",
                "yes",
            ]
        )

    print(
        f"# Generation with and without the cache ({harness.describe_machine(args.threads)}; "
        f"config: {harness.config_source()}; random weights)"
    )
    print(
        f"# d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, fp32, "
        f"{args.new_tokens} new tokens per output, test_2016_flickr sources, {rounds} rounds at batch 1, "
        f"{max(rounds - 2, 1)} at batch 64"
    )
    harness.print_table(
        [
            "batch",
            "decoding",
            "cache: wall s",
            "no cache: wall s",
            "speed-up (wall)",
            "speed-up (CPU)",
            "static cache vs dynamic (wall)",
            "same ids",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
