"""GPU figures: training throughput against torch.nn.Transformer, the WMT14 base recipe's step time, generate() speed.

Sections (`--sections 1,2,3`, default all; an error in one is printed and the next one still runs):
1. A training step of the shipped size on real Multi30k batches of 128 and 512 sentences (one GPU is underused by
   128): ours, the step train.py takes (`transformer_en_de.training.loop.scored_loss`), against `torch.nn.Transformer`
   wired the same way (`benchmarks.train_throughput.TorchTransformerMT`, checked to compute the same loss), both in
   bf16 autocast where the device has native bf16, attention through SDPA. Target tokens/s, the ratio, and the matmul
   FLOP/s achieved (`benchmarks.train_flops.training_matmul_flops`, the same count for both models) as a share of
   the dense matmul peak measured in the same run (the best of several 8192^3 `torch.matmul`s).
2. The WMT14 base recipe of docs/training.md (d_model 512, 6+6 layers, 8 heads, d_ff 2048, vocabulary 37,000):
   one optimizer step on this one GPU at about 25,000 source + 25,000 target tokens (random tokens, 27 a side;
   gradient accumulation only if the batch does not fit), its median time and the hours 100,000 steps take.
3. `generate()` of the shipped model (models/transformer-en-de) with float32 and bf16 weights and the saved
   generation defaults (its beams), on the first sentences of test_2016_flickr.en: batch 32 sorted by length and
   batch 1, sentences/s; and whether CTranslate2 with CUDA is usable here.

Timing: a warm-up, then timed rounds (harness.alternate), each ending in `torch.cuda.synchronize()`; medians.
Without a CUDA GPU it runs on the CPU and says so, for smoke tests; `--quick` shrinks every section.

    python -m benchmarks.gpu [--quick] [--sections 1,2,3] [--source test_2016_flickr.en] [--data multi30k-folder]
"""

import copy
import functools
import math
import os
import time
import traceback
from pathlib import Path

import torch
import transformers

from benchmarks import harness
from benchmarks.train_flops import training_matmul_flops
from benchmarks.train_throughput import TorchTransformerMT, adamw, check_same_function, training_step
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from transformer_en_de import data
from transformer_en_de.decoding import loading
from transformer_en_de.training import precision
from transformer_en_de.training.loop import scored_loss

TEST_FILE = "test_2016_flickr.en"
STEPS = 100_000  # the paper's base run (docs/training.md)


def options(parser):
    parser.add_argument("--sections", default="1,2,3", help="comma-separated sections to run (default 1,2,3)")
    parser.add_argument(
        "--source",
        type=Path,
        help=f"English sentences for section 3 (default: {TEST_FILE} of Multi30k beside the repository)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="Multi30k folder with train.en/train.de for section 1 (default: "
        "beside the repository, else beside --source, else gpu-data/multi30k)",
    )
    # CPU threads matter little when a GPU computes; default: the cores this process may use (1 under taskset -c 1).
    parser.set_defaults(threads=len(os.sched_getaffinity(0)))


@functools.cache
def matmul_peak(device_type: str, dtype: torch.dtype) -> tuple[float, str]:
    """(FLOP/s, what was run): the best of several large square matmuls, the dense peak the training figures are a
    share of (train_flops.matmul_peak is the CPU's: no device, no synchronisation). Measured once per run."""
    size = 8192 if device_type == "cuda" else 1024
    a, b = (torch.randn(size, size, dtype=dtype, device=device_type) for _ in range(2))
    per_timing = 10 if device_type == "cuda" else 1  # several products per timer read: launch and sync costs vanish
    best = math.inf
    for _ in range(12):  # the first rounds also warm up (kernel choice, clocks); the best is the peak
        harness.synchronize(a.device)
        start = time.perf_counter()
        for _ in range(per_timing):
            a @ b
        harness.synchronize(a.device)
        best = min(best, (time.perf_counter() - start) / per_timing)
    return 2 * size**3 / best, f"{str(dtype).removeprefix('torch.')} matmul {size}^3"


def peak_line(device: torch.device, bf16: bool) -> float:
    # The peak in the precision the step computes in: bf16 where autocast runs, else float32 (this CPU's fallback).
    peak, what = matmul_peak(device.type, torch.bfloat16 if bf16 else torch.float32)
    print(f"measured dense peak ({what}, best of 12): {peak / 1e12:.3g} TFLOP/s")
    return peak


def to_device(batch: dict, device: torch.device) -> dict:
    return {name: tensor.to(device) for name, tensor in batch.items()}


def section_training(args, device, bf16):
    tokenizer = harness.benchmark_tokenizer()
    config = harness.shipped_config(tokenizer)
    sizes = (32, 128) if args.quick and device.type == "cpu" else (128, 512)
    rounds, count = (2, 2) if args.quick else (8, 4)
    peak = peak_line(device, bf16)
    if sizes[-1] != 512:
        print("NOTE: shrunk (--quick on the CPU): batches of 32 and 128 sentences instead of 128 and 512")
    print(
        f"# shipped size ({harness.config_source()}): d_model {config.d_model}, {config.encoder_layers}+"
        f"{config.decoder_layers} layers, {config.num_attention_heads} heads, d_ff {config.d_ff}, vocab "
        f"{config.vocab_size}; {precision.name(bf16)}, AdamW; {count} Multi30k batches ({harness.DATA_DIR}) per "
        f"round, {rounds} rounds after a warm-up"
    )
    print(
        "# matmul FLOPs as train_flops counts them (every padded position projected onto the vocabulary), the same "
        "count for both models: ours projects real target tokens only, so its share is work-equivalent"
    )
    rows, ratios = [], []
    for batch_size in sizes:
        batches = harness.training_batches(tokenizer, batch_size, count)
        torch.manual_seed(0)
        ours = TransformerMTForConditionalGeneration(config).train()
        torch.manual_seed(0)
        reference = TorchTransformerMT(config).train()
        check_same_function(ours, reference, batches[0])  # on the CPU before moving: the comparison is like for like
        # TorchTransformerMT makes its causal mask on the CPU; on the GPU that is harmless: with tgt_is_causal and no
        # target padding mask, nn.MultiheadAttention drops the mask and passes is_causal to SDPA instead.
        ours.to(device)
        reference.to(device)
        device_batches = [to_device(batch, device) for batch in batches]
        target_tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)
        flops = sum(
            training_matmul_flops(config, batch_size, batch["input_ids"].shape[1], batch["labels"].shape[1])
            for batch in batches
        )
        timings = harness.alternate(
            {
                "ours (scored_loss)": training_step(ours, scored_loss, adamw(ours), device_batches, bf16),
                "torch.nn.Transformer": training_step(
                    reference, lambda model, batch: model(**batch), adamw(reference), device_batches, bf16
                ),
            },
            rounds=rounds,
            warmup=1,
        )
        for name, t in timings.items():
            rows.append(
                [
                    batch_size,
                    name,
                    f"{t.seconds / count * 1e3:.1f}",
                    f"{target_tokens / t.seconds:,.0f}",
                    f"{flops / t.seconds / 1e12:.3g}",
                    f"{flops / t.seconds / peak:.1%}",
                ]
            )
        ratios.append((batch_size, timings["torch.nn.Transformer"].seconds / timings["ours (scored_loss)"].seconds))
        del ours, reference, device_batches
        if device.type == "cuda":
            torch.cuda.empty_cache()
    harness.print_table(
        [
            "sentences/batch",
            "model",
            "ms/step (median round / steps)",
            "target tokens/s",
            "matmul TFLOP/s",
            "share of peak",
        ],
        rows,
    )
    for batch_size, ratio in ratios:
        print(f"ratio ours / torch.nn.Transformer (throughput), batch {batch_size}: {ratio:.2f}x")
    # The model sets `_attn_implementation` when it is built ("sdpa" by default; "eager" is the written-out one).
    print(
        f"attention: ours `_attn_implementation` = {config._attn_implementation!r} (transformers' SDPA function, "
        "F.scaled_dot_product_attention); torch.nn.Transformer: nn.MultiheadAttention with need_weights=False, "
        "which calls F.scaled_dot_product_attention"
    )


def section_base_recipe(args, device, bf16):
    config = TransformerMTConfig(vocab_size=37_000)  # the config's defaults are the paper's base model
    length = 27  # tokens a side: about 25 BPE tokens a sentence plus </s>, the documented average
    shrunk = args.quick or device.type != "cuda"
    sentences = 8 if shrunk else round(25_000 / length)  # 926 sentences: 25,002 source and 25,002 target tokens
    rounds, warmup = (2, 1) if shrunk else (10, 2)
    peak = peak_line(device, bf16)
    if shrunk:
        print(
            f"NOTE: shrunk ({'--quick' if args.quick else 'no CUDA GPU'}): {sentences} sentences a step instead of "
            f"{round(25_000 / length)}; the hours below are not the recipe's"
        )
    generator = torch.Generator().manual_seed(0)

    def random_batch(size: int) -> dict:
        # Random ids past pad/bos/eos (0-2), no padding: a step's speed does not depend on which words it sees.
        source, target = (torch.randint(3, config.vocab_size, (size, length), generator=generator) for _ in range(2))
        return to_device({"input_ids": source, "attention_mask": torch.ones_like(source), "labels": target}, device)

    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(config).to(device).train()
    optimizer = adamw(model)
    parameters = sum(p.numel() for p in model.parameters())
    accumulate = 1
    while True:  # the whole batch at once if it fits (it should on an 80 GB GPU), else halve it and accumulate
        micro = math.ceil(sentences / accumulate)
        micro_batches = [random_batch(micro) for _ in range(accumulate)]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            step = training_step(model, scored_loss, optimizer, micro_batches, bf16, accumulate)
            timing = harness.alternate({"base": step}, rounds=rounds, warmup=warmup)["base"]
            break
        except torch.cuda.OutOfMemoryError:
            if micro == 1:
                raise
        # Out of memory: free the failed attempt (outside the except block, whose traceback holds its tensors).
        micro_batches = step = None
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        accumulate *= 2
        print(f"out of memory: retrying with {accumulate} accumulated micro-batches")
    tokens = micro * accumulate * length
    flops = accumulate * training_matmul_flops(config, micro, length, length)
    memory = f", peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB" if device.type == "cuda" else ""
    print(
        f"# base model: {parameters:,} parameters, d_model 512, 6+6 layers, 8 heads, d_ff 2048, vocab 37,000, "
        f"dropout 0.1; {precision.name(bf16)}, AdamW, scored_loss; {tokens:,} source + {tokens:,} target tokens per "
        f"step ({accumulate} x {micro} sentences of {length} tokens a side){memory}; {rounds} rounds after "
        f"{warmup} warm-up"
    )
    harness.print_table(
        ["s/step: median [IQR]", "target tokens/s", "matmul TFLOP/s", "share of peak", f"{STEPS:,} steps, hours"],
        [
            [
                harness.spread(timing.wall),
                f"{tokens / timing.seconds:,.0f}",
                f"{flops / timing.seconds / 1e12:.3g}",
                f"{flops / timing.seconds / peak:.1%}",
                f"{timing.seconds * STEPS / 3600:.1f}",
            ]
        ],
    )
    print("(the paper: 100,000 steps in about 12 hours on 8 P100 GPUs)")


def section_generate(args, device, bf16):
    source = args.source
    sentences = data.read_lines(source)
    batched_count, single_count = (32, 4) if args.quick else (256, 32)
    rounds = 2 if args.quick else 3
    model, tokenizer = loading.load_model(str(harness.SHIPPED_DIR), device)
    variants = {"float32": model, "bf16 weights": copy.deepcopy(model).to(torch.bfloat16)}
    settings = model.generation_config
    print(
        f"# {harness.SHIPPED_DIR.name} ({model.config._attn_implementation} attention), generate() with the saved "
        f"defaults: beam {settings.num_beams}, length penalty {settings.length_penalty}, max_new_tokens "
        f"{settings.max_new_tokens} and the per-sentence bound; first sentences of {source}; "
        f"{rounds} rounds after a warm-up pass"
    )
    if device.type == "cpu" and not precision.native_bf16(use_cpu=True):
        print("NOTE: this CPU has no native bf16: the bf16 weights are emulated, not a figure to use")
    # Batch 32 goes through the sentences sorted by source length (as the engine sorts them), batch 1 one by one.
    by_length = sorted(sentences[:batched_count], key=lambda text: len(tokenizer(text)["input_ids"]))
    runs = {
        32: [by_length[i : i + 32] for i in range(0, len(by_length), 32)],
        1: [[text] for text in sentences[:single_count]],
    }

    def decode(variant, chunks):
        def run():
            with torch.inference_mode():
                for chunk in chunks:  # what a Hub user runs: the tokenizer, then generate() with the saved defaults
                    variant.generate(**tokenizer(chunk, padding=True, return_tensors="pt").to(device))
            harness.synchronize(device)

        return run

    rows = []
    for batch_size, chunks in runs.items():
        count = sum(len(chunk) for chunk in chunks)
        timings = harness.alternate({name: decode(v, chunks) for name, v in variants.items()}, rounds, warmup=1)
        rows += [
            [batch_size, count, name, harness.spread(t.wall), f"{count / t.seconds:.1f}"] for name, t in timings.items()
        ]
    harness.print_table(["batch", "sentences", "weights", "s/pass: median", "sentences/s"], rows)
    try:
        import ctranslate2  # not a dependency of the project: only say whether it would run here

        gpus = ctranslate2.get_cuda_device_count()
        types = f", compute types {sorted(ctranslate2.get_supported_compute_types('cuda'))}" if gpus else ""
        print(
            f"CTranslate2 {ctranslate2.__version__}: {gpus} CUDA device(s){types} -> "
            f"{'usable with CUDA' if gpus else 'not usable with CUDA here'}"
        )
    except Exception as error:  # ImportError when missing; a broken CUDA runtime raises others
        print(f"CTranslate2: not usable ({type(error).__name__}: {error})")


SECTIONS = {
    "1": ("Training step, shipped size: ours vs torch.nn.Transformer", section_training),
    "2": ("WMT14 base recipe: one optimizer step at about 25,000 target tokens", section_base_recipe),
    "3": ("generate() speed of the shipped model", section_generate),
}


def multi30k_folder(args) -> Path:
    """The first folder with Multi30k's train.en: --data, beside the repository, beside --source, gpu-data/."""
    candidates = (
        [args.data]
        if args.data
        else [harness.DATA_DIR, args.source.parent if args.source else None, harness.ROOT / "gpu-data" / "multi30k"]
    )
    return next((folder for folder in candidates if folder and (folder / "train.en").is_file()), candidates[0])


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    bf16 = precision.native_bf16(use_cpu=not cuda)  # what train.py picks on this device
    if not cuda:
        print("NOTE: torch.cuda.is_available() is False: running on the CPU. These are NOT GPU figures (smoke test).")
    memory = f", {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB" if cuda else ""
    print(
        f"# {precision.describe(use_cpu=not cuda)}{memory}; torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {transformers.__version__}; {args.threads} CPU thread(s); precision: {precision.name(bf16)}"
        f"{'; --quick' if args.quick else ''}"
    )
    folder = multi30k_folder(args)
    if args.source is None:  # test_2016_flickr beside the repository, else in the folder the training data is in
        default = harness.DATA_DIR / TEST_FILE
        args.source = default if default.is_file() else folder / TEST_FILE
    harness.DATA_DIR = folder  # read by harness.read_split, which section 1's batches come from
    for key in args.sections.split(","):
        title, run = SECTIONS[key.strip()]
        print(f"\n## {key.strip()}. {title}")
        try:
            run(args, device, bf16)
        except (Exception, SystemExit) as error:  # harness.read_split exits on missing data: lose a section, not all
            traceback.print_exc()
            print(f"section {key.strip()} failed: {type(error).__name__}: {error}")
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
