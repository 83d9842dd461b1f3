"""Where a decoding step's time goes: torch's operators by input shape (the profiler adds to what it measures: read
shares as where to look), and the time per step of the same layout at d_model 16, the Python around them.
`--cache` instead: generation with the key/value cache against none and a static one, random weights.
`--marian` instead: our model against MarianMT at opus-mt-en-de's size (random weights: it cannot be downloaded here;
every output is forced to one length, so speed does not depend on the weights); peak memory: a fresh process's peak
RSS over its RSS after the imports.

    python -m benchmarks.decode_profile [--batch-size 1] [--sentences 40] [--threads 1] [--cache [--quick]]
    python -m benchmarks.decode_profile --marian [--quick]
"""

import argparse
import json
import resource
import statistics
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import MarianConfig, MarianMTModel

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from tokenizer import load_tokenizer
from transformer_en_de.decoding import loading

PYTHON_PATH_STEPS, TOP_OPERATORS, MARIAN_BEAMS = 20, 12, 4
CACHES = {"cache": {}, "no cache": {"use_cache": False}, "static cache": {"cache_implementation": "static"}}
OURS, MARIAN = "ours", "MarianMT (opus-mt-en-de size)"
# Helsinki-NLP/opus-mt-en-de's config.json: its architecture, filled with random weights here.
OPUS_MT_EN_DE = """{"vocab_size": 58101, "decoder_vocab_size": 58101, "d_model": 512, "encoder_layers": 6,
    "decoder_layers": 6, "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048, "activation_function": "swish", "max_position_embeddings": 512, "scale_embedding": true,
    "share_encoder_decoder_embeddings": true, "pad_token_id": 58100, "eos_token_id": 0,
    "decoder_start_token_id": 58100}"""


def options(parser):
    parser.add_argument("--batch-size", type=int, help="sentences per generate() call (default 1; --marian 32)")
    parser.add_argument("--sentences", type=int, default=40, help="sentences of test_2016_flickr to profile")
    parser.add_argument("--cache", action="store_true", help="time generation with and without the cache instead")
    parser.add_argument("--marian", action="store_true", help="our model against MarianMT's size instead")
    parser.add_argument("--memory-of", choices=[OURS, MARIAN], help=argparse.SUPPRESS)
    parser.add_argument("--memory-folder", type=Path, help=argparse.SUPPRESS)


def operator_table(model, tokenizer, sources: list[str], batch_size: int) -> tuple[list[list], float]:
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
    for event in sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:TOP_OPERATORS]:
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
    with torch.inference_mode():
        timing = harness.alternate({"tiny": lambda: model.generate(source, **steps)}, rounds=10)["tiny"]
    return 1e3 * statistics.mean(timing.wall) / PYTHON_PATH_STEPS


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


def load(which: str):
    """Our shipped model, or MarianMT at opus-mt-en-de's size with random weights."""
    if which == OURS:
        return TransformerMTForConditionalGeneration.from_pretrained(harness.SHIPPED_DIR).eval()
    torch.manual_seed(0)
    return MarianMTModel(MarianConfig(**json.loads(OPUS_MT_EN_DE))).eval()


def inputs_for(model, our_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Ours for our model; for MarianMT random ids of the same lengths, each ending in </s>."""
    if not isinstance(model, MarianMTModel):
        return our_inputs
    config, mask = model.config, our_inputs["attention_mask"]
    ids = torch.randint(1, config.vocab_size - 1, mask.shape, generator=torch.Generator().manual_seed(0))
    ids[torch.arange(mask.shape[0]), mask.sum(1) - 1] = config.eos_token_id
    return {"input_ids": ids.masked_fill(mask == 0, config.pad_token_id), "attention_mask": mask.clone()}


def forced_length(model, inputs, args) -> torch.Tensor:
    with torch.inference_mode():
        length = dict(min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens)
        return model.generate(**inputs, num_beams=MARIAN_BEAMS, do_sample=False, **length)


def marian_memory_child(args) -> None:
    baseline = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    model = load(args.memory_of)
    forced_length(model, inputs_for(model, torch.load(args.memory_folder / "inputs.pt")), args)
    print(json.dumps({"peak": harness.peak_rss_bytes() - baseline}))


def against_marian(args, tokenizer) -> None:
    models = {name: load(name) for name in (OURS, MARIAN)}
    english, _ = harness.sample_sentences("test_2016_flickr", args.batch_size)
    single_count, rounds = (4, 1) if args.quick else (8, 3)
    singles = [tokenizer(sentence, return_tensors="pt") for sentence in english[:single_count]]
    batch = tokenizer(english, padding=True, return_tensors="pt")

    def one_by_one(model):
        inputs = [inputs_for(model, single) for single in singles]
        return lambda: [forced_length(model, one, args) for one in inputs]

    def batched(model):
        inputs = inputs_for(model, batch)
        return lambda: forced_length(model, inputs, args)

    latency = harness.alternate({name: one_by_one(model) for name, model in models.items()}, rounds=rounds)
    throughput = harness.alternate({name: batched(m) for name, m in models.items()}, rounds, warmup=int(not args.quick))
    memory = {}
    with tempfile.TemporaryDirectory() as folder:
        torch.save(dict(batch), Path(folder) / "inputs.pt")
        for name in models:
            flags = ["--threads", str(args.threads), "--marian", "--memory-of", name, "--memory-folder", folder]
            memory[name] = harness.json_from_child("benchmarks.decode_profile", *flags)["peak"]
    parameters = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
    print(
        f"# Ours (shipped) vs MarianMT: float32, beam {MARIAN_BEAMS}, {args.new_tokens} new tokens a sentence "
        f"(forced), test_2016_flickr sources; latency over {single_count} sentences one at a time, throughput on a "
        f"batch of {args.batch_size}; {rounds} rounds; memory: peak RSS of a fresh process (load + one batch) minus "
        "its RSS after imports"
    )
    rows = []
    for name in models:
        rows.append([name, f"{parameters[name] / 1e6:.1f}M", f"{4 * parameters[name] / 2**20:.0f}"])
        rows[-1] += [f"{1000 * latency[name].seconds / single_count:.0f}"]
        rows[-1] += [f"{args.batch_size / throughput[name].seconds:.1f}", f"{memory[name] / 2**20:.0f}"]
    ratios = [parameters[MARIAN] / parameters[OURS]] * 2
    ratios += [latency[MARIAN].seconds / latency[OURS].seconds, throughput[MARIAN].seconds / throughput[OURS].seconds]
    rows.append(["ratio (MarianMT / ours)", *(f"{ratio:.1f}x" for ratio in ratios + [memory[MARIAN] / memory[OURS]])])
    header = ["model", "parameters", "float32 weights (MiB)", "ms per sentence (batch 1)"]
    harness.print_table(header + [f"sentences/s (batch {args.batch_size})", "peak RSS (MiB)"], rows)
    cpu_latency = latency[MARIAN].cpu_seconds / latency[OURS].cpu_seconds
    cpu_throughput = throughput[MARIAN].cpu_seconds / throughput[OURS].cpu_seconds
    print(f"CPU-time ratios (MarianMT / ours): latency {cpu_latency:.1f}x, batch throughput {cpu_throughput:.1f}x")


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    args.new_tokens = 20 if args.marian else 32
    args.batch_size = args.batch_size or (32 if args.marian else 1)
    if args.memory_of:
        marian_memory_child(args)
        return
    print(harness.describe_machine(args.threads))
    if args.cache or args.marian:
        (against_marian if args.marian else cache_table)(args, load_tokenizer(harness.SHIPPED_DIR))
        return
    model, tokenizer = loading.load_model(str(harness.SHIPPED_DIR))
    print("torch's float32 products: " + ("MKL" if torch.backends.mkl.is_available() else "not MKL (another BLAS)"))
    sources = harness.read_split("test_2016_flickr", "en")[: args.sentences]
    rows, total = operator_table(model, tokenizer, sources, args.batch_size)
    print(f"\n# generate() on {len(sources)} sentences at batch {args.batch_size}, by self time (total {total:.2f} s)")
    harness.print_table(["operator", "input shapes", "calls", "µs per call", "share"], rows)
    print(
        f"\n# the same layout with d_model 16: {python_path_step_ms(model.config, args.batch_size):.2f} ms per "
        f"decoding step at batch {args.batch_size}, beam {model.generation_config.num_beams}"
    )


if __name__ == "__main__":
    main()
