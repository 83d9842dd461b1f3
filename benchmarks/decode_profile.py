"""Where a decoding step's time goes: torch's operators by input shape, and the Python around them.

1. The shipped model's `generate()` with its saved defaults (its beams, the per-sentence bound) on the first sentences
   of test_2016_flickr, at `--batch-size` (sorted by length when above 1), under `torch.profiler` with shapes
   recorded: the operators with the most self time, each with its calls, time per call and share of the profile.
2. The cost of one step outside the operators: a model of the same layout (layers, heads, the same search) with
   d_model 16, d_ff 16 and a vocabulary of 64, where the products take next to nothing, decodes 20 tokens per
   sentence at the same batch size; its time per step is that of the module path (transformers' cache objects,
   masks, output records, module calls) and of the beam search's bookkeeping.

The profiler adds to what it measures: one sentence at a time its total matches the wall time, but in batches of 32
it puts the log-softmax over the vocabulary at several times what the same call takes in a plain run (0.78 ms for
128 rows, timed around the call). Read the shares as where to look, and time an operator alone before acting on it.

    python -m benchmarks.decode_profile [--batch-size 1] [--sentences 40] [--top 12] [--threads 1]
"""

import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults

PYTHON_PATH_STEPS = 20


def options(parser):
    parser.add_argument("--batch-size", type=int, default=1, help="sentences per generate() call")
    parser.add_argument("--sentences", type=int, default=40, help="sentences of test_2016_flickr to profile")
    parser.add_argument("--top", type=int, default=12, help="operators to list")


def operator_table(model, tokenizer, sources: list[str], batch_size: int, top: int) -> tuple[list[list], float]:
    """The operators with the most self time (name, input shapes, calls, µs per call, share) and the profile's
    total self time in seconds."""
    if batch_size > 1:
        sources = sorted(sources, key=lambda text: len(tokenizer(text)["input_ids"]))
    batches = [
        tokenizer(sources[i : i + batch_size], padding=True, return_tensors="pt")
        for i in range(0, len(sources), batch_size)
    ]
    with torch.inference_mode():
        model.generate(**batches[0])  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiled:
            for batch in batches:
                model.generate(**batch)
    events = [event for event in profiled.key_averages(group_by_input_shape=True) if event.self_cpu_time_total > 0]
    total = sum(event.self_cpu_time_total for event in events)
    events.sort(key=lambda event: event.self_cpu_time_total, reverse=True)
    rows = [
        [
            event.key,
            str(event.input_shapes)[:60],
            event.count,
            f"{event.self_cpu_time_total / event.count:.1f}",
            f"{100 * event.self_cpu_time_total / total:.1f}%",
        ]
        for event in events[:top]
    ]
    return rows, total / 1e6


def python_path_step_ms(layout: TransformerMTConfig, batch_size: int, source_length: int = 15) -> float:
    """Milliseconds per decoding step of `generate()` (the translation defaults' beams) with a model of this layout
    whose products are tiny."""
    config = TransformerMTConfig(**{**layout.to_dict(), "d_model": 16, "d_ff": 16, "vocab_size": 64})
    model = TransformerMTForConditionalGeneration(config).eval()
    set_translation_defaults(model.generation_config, config)
    source = torch.randint(3, 64, (batch_size, source_length))
    steps = dict(min_new_tokens=PYTHON_PATH_STEPS, max_new_tokens=PYTHON_PATH_STEPS)
    with torch.inference_mode():
        model.generate(source, **steps)  # warm-up
        rounds, began = 10, time.perf_counter()
        for _ in range(rounds):
            model.generate(source, **steps)
        seconds = (time.perf_counter() - began) / rounds
    return 1e3 * seconds / PYTHON_PATH_STEPS


def main():
    args, model, tokenizer = harness.model_under_test(__doc__.splitlines()[0], options)
    print("torch's float32 products: " + ("MKL" if torch.backends.mkl.is_available() else "not MKL (another BLAS)"))
    sources = harness.read_split("test_2016_flickr", "en")[: args.sentences]
    rows, total = operator_table(model, tokenizer, sources, args.batch_size, args.top)
    print(
        f"\n# generate() on {len(sources)} sentences at batch {args.batch_size}: operators by self time "
        f"(profiled total {total:.2f} s)"
    )
    harness.print_table(["operator", "input shapes", "calls", "µs per call", "share"], rows)
    step_ms = python_path_step_ms(model.config, args.batch_size)
    print(
        f"\n# the same layout with d_model 16 (the products next to nothing): {step_ms:.2f} ms per decoding step "
        f"at batch {args.batch_size}, beam {model.generation_config.num_beams}"
    )


if __name__ == "__main__":
    main()
