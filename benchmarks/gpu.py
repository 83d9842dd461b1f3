"""GPU figures: training throughput against torch.nn.Transformer, the WMT14 base recipe's step time, generate() speed.

A section that fails is printed and the next one runs; on a CPU it is a smoke test.

    python -m benchmarks.gpu [--quick] [--sections 1,2,3] [--source test_2016_flickr.en] [--data multi30k-folder]
"""

import copy
import math
import os
import traceback
from functools import partial
from pathlib import Path

import torch
import transformers

from benchmarks import harness
from benchmarks.train_throughput import compare_steps
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer
from transformer_en_de import data
from transformer_en_de.decoding import loading
from transformer_en_de.training import precision
from transformer_en_de.training.loop import scored_loss

TEST_FILE = "test_2016_flickr.en"
STEPS = 100_000  # the paper's base run (docs/training.md)
ATTENTION = "sdpa"


def options(parser):
    parser.add_argument("--sections", default="1,2,3", help="comma-separated sections to run (default 1,2,3)")
    parser.add_argument("--source", type=Path, help=f"English for section 3 (default: Multi30k's {TEST_FILE})")
    parser.add_argument("--data", type=Path, help="Multi30k folder with train.en/train.de for section 1")
    parser.set_defaults(threads=len(os.sched_getaffinity(0)))


def section_training(args, device, bf16):
    tokenizer = load_tokenizer(harness.SHIPPED_DIR)
    sizes = (32, 128) if args.quick and device.type == "cpu" else (128, 512)
    rounds, count = (2, 2) if args.quick else (8, 4)
    batches = {size: harness.training_batches(tokenizer, size, count) for size in sizes}
    compare_steps(harness.shipped_config(), batches, device, bf16, rounds)


def section_base_recipe(args, device, bf16):
    config = TransformerMTConfig(vocab_size=37_000)  # the config's defaults are the paper's base model
    length = 27  # tokens a side: about 25 BPE tokens a sentence plus </s>, the documented average
    shrunk = args.quick or device.type != "cuda"
    sentences = 8 if shrunk else round(25_000 / length)
    rounds, warmup = (2, 1) if shrunk else (10, 2)
    peak = harness.matmul_peak(device, torch.bfloat16 if bf16 else torch.float32)
    generator = torch.Generator().manual_seed(0)

    def random_batch(size: int) -> dict:
        # Random ids past pad/bos/eos (0-2), no padding: a step's speed does not depend on which words it sees.
        source, target = (torch.randint(3, config.vocab_size, (size, length), generator=generator) for _ in range(2))
        batch = {"input_ids": source, "attention_mask": torch.ones_like(source), "labels": target}
        return {name: tensor.to(device) for name, tensor in batch.items()}

    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(config).to(device).train()
    optimizer = harness.adamw(model)
    accumulate = 1
    while True:  # the whole batch at once if it fits, else halve it and accumulate
        micro = math.ceil(sentences / accumulate)
        micro_batches = [random_batch(micro) for _ in range(accumulate)]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            step = harness.training_step(model, scored_loss, optimizer, micro_batches, bf16, accumulate)
            timing = harness.alternate({"base": step}, rounds=rounds, warmup=warmup)["base"]
            break
        except torch.cuda.OutOfMemoryError:
            if micro == 1:
                raise
        # Free the failed attempt outside the except block, whose traceback holds its tensors.
        micro_batches = step = None
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        accumulate *= 2
        print(f"out of memory: retrying with {accumulate} accumulated micro-batches")
    tokens = micro * accumulate * length
    flops = accumulate * harness.training_matmul_flops(config, micro, length, length)
    memory = f", peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB" if device.type == "cuda" else ""
    print(
        f"# base model: {sum(p.numel() for p in model.parameters()):,} parameters, dropout 0.1; {precision.name(bf16)},"
        f" AdamW, scored_loss; {tokens:,} source + {tokens:,} target tokens per step ({accumulate} x {micro} "
        f"sentences of {length} tokens a side){memory}; {rounds} rounds after {warmup} warm-up"
    )
    row = [harness.spread(timing.wall), f"{tokens / timing.seconds:,.0f}", f"{flops / timing.seconds / 1e12:.3g}"]
    row += [f"{flops / timing.seconds / peak:.1%}", f"{timing.seconds * STEPS / 3600:.1f}"]
    header = ["s/step: median [IQR]", "target tokens/s", "matmul TFLOP/s", "share of peak", f"{STEPS:,} steps, hours"]
    harness.print_table(header, [row])
    print("(the paper: 100,000 steps in about 12 hours on 8 P100 GPUs)")


def section_generate(args, device, bf16):
    sentences = data.read_lines(args.source)
    batched_count, single_count = (32, 4) if args.quick else (256, 32)
    rounds = 2 if args.quick else 3
    model, tokenizer = loading.load_model(str(harness.SHIPPED_DIR), device)
    model.set_attn_implementation(ATTENTION)  # transformers' default where torch has it, named for the figures
    variants = {"float32": model, "bf16 weights": copy.deepcopy(model).to(torch.bfloat16)}
    settings = model.generation_config
    print(
        f"# generate() with the saved defaults ({ATTENTION} attention): beam "
        f"{settings.num_beams}, length penalty {settings.length_penalty} and the per-sentence bound; first sentences "
        f"of {args.source}; {rounds} rounds after a warm-up pass"
    )
    rows = []
    for batch_size, count in ((32, batched_count), (1, single_count)):
        runs = {
            name: partial(harness.generate_all, v, tokenizer, sentences[:count], batch_size)
            for name, v in variants.items()
        }
        timings = harness.alternate(runs, rounds, warmup=1)  # the decoded text waits for the GPU
        rows += [
            [batch_size, count, name, harness.spread(t.wall), f"{count / t.seconds:.1f}"] for name, t in timings.items()
        ]
    harness.print_table(["batch", "sentences", "weights", "s/pass: median", "sentences/s"], rows)
    try:
        import ctranslate2  # not a dependency of the project: only say whether it would run here

        gpus = ctranslate2.get_cuda_device_count()
        types = f", compute types {sorted(ctranslate2.get_supported_compute_types('cuda'))}" if gpus else ""
        print(f"CTranslate2 {ctranslate2.__version__}: {gpus} CUDA device(s){types}")
    except Exception as error:  # ImportError when missing; a broken CUDA runtime raises others
        print(f"CTranslate2: not usable ({type(error).__name__}: {error})")


SECTIONS = {
    "1": ("Training step, shipped size: ours vs torch.nn.Transformer", section_training),
    "2": ("WMT14 base recipe: one optimizer step at about 25,000 target tokens", section_base_recipe),
    "3": ("generate() speed of the shipped model", section_generate),
}


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
        f"transformers {transformers.__version__}; {args.threads} CPU thread(s)"
    )
    # Multi30k: --data, else beside the repository, beside --source, or gpu-data/ (a lent GPU has no shared folder).
    shared = harness.DATA_DIR
    folders = (
        [args.data] if args.data else [shared, args.source and args.source.parent, harness.ROOT / "gpu-data/multi30k"]
    )
    harness.DATA_DIR = next((f for f in folders if f and (f / "train.en").is_file()), folders[0])
    if args.source is None:
        args.source = shared / TEST_FILE if (shared / TEST_FILE).is_file() else harness.DATA_DIR / TEST_FILE
    for key in args.sections.split(","):
        title, run = SECTIONS[key.strip()]
        print(f"\n## {key.strip()}. {title}")
        try:
            run(args, device, bf16)
        except (Exception, SystemExit) as error:  # read_split exits on missing data: lose a section, not all
            traceback.print_exc()
            print(f"section {key.strip()} failed: {type(error).__name__}: {error}")
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
