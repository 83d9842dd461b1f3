"""Where a decoding step's time goes: torch's operators by input shape (the profiler adds to what it measures: read
shares as where to look), and the time per step of the same layout at d_model 16, the Python around them.
`--cache` instead: generation with the key/value cache against none and a static one, random weights.

    python -m benchmarks.decode_profile [--batch-size 1] [--sentences 40] [--top 12] [--threads 1] [--cache [--quick]]
"""

import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults

PYTHON_PATH_STEPS = 20
CACHES = {"cache": {}, "no cache": {"use_cache": False}, "static cache": {"cache_implementation": "static"}}


def options(parser):
    parser.add_argument("--batch-size", type=int, default=1, help="sentences per generate() call")
    parser.add_argument("--sentences", type=int, default=40, help="sentences of test_2016_flickr to profile")
    parser.add_argument("--top", type=int, default=12, help="operators to list")
    parser.add_argument("--cache", action="store_true", help="time generation with and without the cache instead")
    parser.add_argument("--new-tokens", type=int, default=32, help="--cache: tokens generated per output")


def operator_table(model, tokenizer, sources: list[str], batch_size: int, top: int) -> tuple[list[list], float]:
    """The operators with the most self time as rows, and the profile's total self time in seconds."""
    sources = sorted(sources, key=lambda text: len(tokenizer(text)["input_ids"])) if batch_size > 1 else sources
    chunks = [sources[i : i + batch_size] for i in range(0, len(sources), batch_size)]
    batches = [tokenizer(chunk, padding=True, return_tensors="pt") for chunk in chunks]
    with torch.inference_mode():
        model.generate(**batches[0])  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiled:
            for batch in batches:
                model.generate(**batch)
    events = [event for event in profiled.key_averages(group_by_input_shape=True) if event.self_cpu_time_total > 0]
    total = sum(event.self_cpu_time_total for event in events)
    rows = []
    for event in sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:top]:
        per_call, share = event.self_cpu_time_total / event.count, event.self_cpu_time_total / total
        rows.append([event.key, str(event.input_shapes)[:60], event.count, f"{per_call:.1f}", f"{share:.1%}"])
    return rows, total / 1e6


def python_path_step_ms(layout: TransformerMTConfig, batch_size: int, source_length: int = 15) -> float:
    """Milliseconds per decoding step of `generate()` with a model of this layout whose products are tiny."""
    config = TransformerMTConfig(**{**layout.to_dict(), "d_model": 16, "d_ff": 16, "vocab_size": 64})
    model = TransformerMTForConditionalGeneration(config).eval()
    set_translation_defaults(model.generation_config, config)
    source = torch.randint(3, 64, (batch_size, source_length))
    steps = dict(min_new_tokens=PYTHON_PATH_STEPS, max_new_tokens=PYTHON_PATH_STEPS)
    rounds = 10
    with torch.inference_mode():
        model.generate(source, **steps)  # warm-up
        began = time.perf_counter()
        for _ in range(rounds):
            model.generate(source, **steps)
    return 1e3 * (time.perf_counter() - began) / rounds / PYTHON_PATH_STEPS


def cache_table(args, tokenizer) -> None:
    model = TransformerMTForConditionalGeneration(harness.shipped_config()).eval()
    english, _ = harness.sample_sentences("test_2016_flickr", 64)
    rounds = 2 if args.quick else 4
    rows = []
    for batch_size, num_beams in [(1, 1), (64, 4)] if args.quick else [(1, 1), (1, 4), (64, 1), (64, 4)]:
        inputs = tokenizer(english[:batch_size], padding=True, return_tensors="pt")
        settings = dict(num_beams=num_beams, min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens)
        outputs = {}

        def generate(name, inputs=inputs, settings=settings, outputs=outputs):
            with torch.inference_mode():
                outputs[name] = model.generate(**inputs, **settings, **CACHES[name])

        sides = {name: lambda name=name: generate(name) for name in CACHES}
        timings = harness.alternate(sides, rounds=rounds if batch_size == 1 else max(rounds - 2, 1), warmup=0)
        if not all(torch.equal(outputs["cache"], ids) for ids in outputs.values()):
            raise AssertionError(f"batch {batch_size}, beams {num_beams}: ids differ with and without the cache")
        cached, uncached, static = timings["cache"], timings["no cache"], timings["static cache"]
        rows.append([batch_size, "greedy" if num_beams == 1 else f"beam {num_beams}", harness.spread(cached.wall)])
        rows[-1] += [harness.spread(uncached.wall), f"{uncached.seconds / cached.seconds:.2f}x"]
        rows[-1] += [f"{uncached.cpu_seconds / cached.cpu_seconds:.2f}x", f"{cached.seconds / static.seconds:.2f}x"]
    print(
        f"# with and without the cache: random weights of the shipped size, {args.new_tokens} new tokens per output, "
        f"{rounds} rounds at batch 1, {max(rounds - 2, 1)} at 64; the same ids every way"
    )
    header = ["batch", "decoding", "cache: wall s", "no cache: wall s", "speed-up (wall)", "speed-up (CPU)"]
    harness.print_table(header + ["static cache vs dynamic (wall)"], rows)


def main():
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0], options)
    if args.cache:
        cache_table(args, tokenizer)
        return
    print("torch's float32 products: " + ("MKL" if torch.backends.mkl.is_available() else "not MKL (another BLAS)"))
    sources = harness.read_split("test_2016_flickr", "en")[: args.sentences]
    rows, total = operator_table(model, tokenizer, sources, args.batch_size, args.top)
    print(f"\n# generate() on {len(sources)} sentences at batch {args.batch_size}, by self time (total {total:.2f} s)")
    harness.print_table(["operator", "input shapes", "calls", "µs per call", "share"], rows)
    print(
        f"\n# the same layout with d_model 16: {python_path_step_ms(model.config, args.batch_size):.2f} ms per "
        f"decoding step at batch {args.batch_size}, beam {model.generation_config.num_beams}"
    )


if __name__ == "__main__":
    main()
