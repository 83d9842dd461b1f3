"""What every benchmark shares: threads, the shipped-size config, real Multi30k batches, and A/B timing.

The benchmarks are a package run from the repository root (`python -m benchmarks.NAME`), which puts the
project's `modeling`, `tokenizer` and `transformer_en_de` on the import path: nothing is installed. The package's
`__init__` sets the Hub offline before any of them is imported.

Both sides of a comparison run in one process on the same inputs, alternating A, B, A, B, ... after a warm-up,
so that a background load on the machine slows both alike: absolute times drift, the ratio holds.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from tokenizer import config_token_fields, load_tokenizer, train_tokenizer
from transformer_en_de import data
from transformer_en_de.decoding import loading
from transformer_en_de.markdown import markdown_table
from transformer_en_de.training import precision

ROOT = Path(__file__).resolve().parent.parent

DATA_DIR = ROOT.parent / "shared" / "data" / "multi30k"
SHIPPED_DIR = ROOT / "models" / "transformer-en-de"

# The shipped size, for when the shipped folder is not there (its config.json is read when it is).
SHIPPED_SIZE = dict(
    d_model=256,
    encoder_layers=3,
    decoder_layers=3,
    num_attention_heads=4,
    d_ff=1024,
    dropout=0.3,
    attention_dropout=0.1,
)


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test; figures are noisier)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2, all cores)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def model_under_test(
    description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> tuple[argparse.Namespace, object, object]:
    """The flags (with `--model`, a folder; default the shipped one; and the benchmark's own `extra`), the machine
    printed, the model and tokenizer loaded as the app and the scripts load them."""

    def options(parser):
        parser.add_argument("--model", default=str(SHIPPED_DIR), help="a model folder")
        if extra is not None:
            extra(parser)

    args = parse_args(description, options)
    print(describe_machine(args.threads))
    model, tokenizer = loading.load_model(args.model)
    return args, model, tokenizer


def read_split(split: str, language: str) -> list[str]:
    """A Multi30k file beside the repository, read as every script reads it (`data.read_lines`)."""
    path = DATA_DIR / f"{split}.{language}"
    if not path.is_file():
        raise SystemExit(f"Multi30k not found: expected {path} (the benchmarks read the data beside the repository).")
    return data.read_lines(path)


def benchmark_tokenizer():
    """The shipped model's tokenizer if there is one, else the same recipe trained here (about 2 s)."""
    if (SHIPPED_DIR / "tokenizer.json").is_file():
        return load_tokenizer(SHIPPED_DIR)
    return train_tokenizer(files=[DATA_DIR / "train.en", DATA_DIR / "train.de"], vocab_size=8000)


def shipped_config(tokenizer=None, **overrides) -> TransformerMTConfig:
    """The shipped model's config if it exists, else the shipped size with the tokenizer's special ids."""
    if (SHIPPED_DIR / "config.json").is_file():
        config = TransformerMTConfig.from_pretrained(SHIPPED_DIR)
        for name, value in overrides.items():
            setattr(config, name, value)
        return config
    settings = dict(SHIPPED_SIZE, vocab_size=8000)
    if tokenizer is not None:
        settings.update(config_token_fields(tokenizer))
    settings.update(overrides)
    return TransformerMTConfig(**settings)


def config_source() -> str:
    return str(SHIPPED_DIR / "config.json") if (SHIPPED_DIR / "config.json").is_file() else "default shipped size"


def model_folder_to_serve(model: Path, scratch: Path) -> tuple[Path, str]:
    """(folder, description): `model` if it is a saved model folder, else a random-weight model of the shipped size
    saved into `scratch` (speed does not depend on the weights)."""
    if (model / "config.json").is_file():
        return model, str(model)
    folder = scratch / "model"
    tokenizer = benchmark_tokenizer()
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(shipped_config(tokenizer))
    set_translation_defaults(model.generation_config, model.config)  # the translation defaults the folder is saved with
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, "random weights, shipped size"


def sample_sentences(split: str, count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`count` random sentence pairs (English, German) of a Multi30k split, the same ones on every run."""
    english, german = read_split(split, "en"), read_split(split, "de")
    chosen = random.Random(seed).sample(range(len(english)), count)
    return [english[i] for i in chosen], [german[i] for i in chosen]


def training_setup(description: str):
    """Arguments, shipped-size config, rounds and real Multi30k batches for a training benchmark."""

    def training_flags(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=128, help="sentences per batch (the training run uses 128)"
        )
        parser.add_argument(
            "--precision",
            choices=["auto", "bf16", "float32"],
            default="auto",
            help="auto (default): what train.py picks on this machine, bf16 autocast only where bf16 is native",
        )

    args = parse_args(description, training_flags)
    args.bf16 = args.precision == "bf16" or (args.precision == "auto" and precision.native_bf16(use_cpu=True))
    tokenizer = benchmark_tokenizer()
    config = shipped_config(tokenizer)
    rounds, batches_per_round = (3, 2) if args.quick else (8, 4)
    batches = training_batches(tokenizer, args.batch_size, batches_per_round)
    return args, config, rounds, batches


def training_batches(tokenizer, batch_size: int, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """`count` training batches as the training run sees them: grouped by length, padded per batch, pads -100.

    Like the Trainer's group_by_length sampler: a random megabatch of 50 batches is sorted by source length and
    cut into batches; `count` of them, evenly spread from the longest to the shortest, are returned.
    """
    per_megabatch = 50
    english, german = sample_sentences("train", batch_size * per_megabatch, seed)
    lengths = [len(ids) for ids in tokenizer(english)["input_ids"]]
    order = sorted(range(len(english)), key=lambda index: -lengths[index])
    picks = [round(k * (per_megabatch - 1) / max(count - 1, 1)) for k in range(count)]
    batches = []
    for pick in picks:
        chosen = order[pick * batch_size : (pick + 1) * batch_size]
        source = tokenizer([english[i] for i in chosen], padding=True, return_tensors="pt")
        target = tokenizer(text_target=[german[i] for i in chosen], padding=True, return_tensors="pt")
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
        batches.append({"input_ids": source["input_ids"], "attention_mask": source["attention_mask"], "labels": labels})
    return batches


def alternate(sides: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, "Timings"]:
    """Time each side round-robin (A, B, A, B, ...) after `warmup` untimed rounds."""
    for _ in range(warmup):
        for run in sides.values():
            run()
    timings = {name: Timings() for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            timings[name].wall.append(time.perf_counter() - wall)
            timings[name].cpu.append(time.process_time() - cpu)
    return timings


class Timings:
    """Wall-clock and process CPU seconds per call.

    Wall time is the figure; CPU time is the cross-check on a shared machine: other processes stretch wall time
    but not the CPU time this process spends (with one thread; with more, idle threads spinning count too).
    """

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @property
    def seconds(self) -> float:
        return median(self.wall)

    @property
    def cpu_seconds(self) -> float:
        return median(self.cpu)


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """Median with the interquartile range, as text: noisy machines deserve error bars."""
    if len(values) < 4:
        return f"{median(values):.4g}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{median(values):.4g} [{q1:.4g}, {q3:.4g}]"


def json_from_child(module: str, *arguments: str, env: dict | None = None) -> dict:
    """Run `python -m module arguments...` from the repository root in a process of its own (nothing of this one: no
    model, allocator state or thread pool) and return the JSON object its last line of output prints. A child that
    fails stops the benchmark with the last line it wrote to stderr."""
    done = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SystemExit(f"{module} {' '.join(arguments)}: exit {done.returncode}: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def paired_ratio(runs: dict[str, list[dict]], model: str, base: str, figure: str) -> str:
    """`model`'s `figure` over `base`'s, round by round (each round runs both, one after the other, so a slow
    stretch of the machine slows both alike), as text: the median, and the lowest and highest round's when there are
    several, which say how far one round's ratio can be trusted."""
    ratios = [mine[figure] / theirs[figure] for mine, theirs in zip(runs[model], runs[base], strict=True)]
    text = f"{median(ratios):.2f}x"
    return text if len(ratios) < 2 else f"{text} ({min(ratios):.2f}-{max(ratios):.2f})"


def print_table(header: list[str], rows: list[list[object]]) -> None:
    """A Markdown table on stdout, ready for the README."""
    print(markdown_table(header, rows))


def synchronize(device: torch.device) -> None:
    """Wait for a GPU's queued kernels: they run asynchronously, so a timer read before this measures the launches."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_machine(threads: int) -> str:
    return (
        f"torch {torch.__version__}, {threads} thread(s), {os.cpu_count()} CPU(s) visible, "
        f"{precision.describe(use_cpu=True)}"
    )


def peak_rss_bytes(pid: int | str = "self") -> int:
    """A process's peak RSS so far (VmHWM; this process by default). Not ru_maxrss: that one carries over the
    parent's peak across fork+exec. OSError once the process has exited."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")
