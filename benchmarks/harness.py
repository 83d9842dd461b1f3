"""What the benchmarks share. Both sides of a comparison alternate A, B, A, B, ... on the same inputs (or each in a
process of its own, round after round), so that a background load slows both alike: absolute times drift, ratios hold.
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
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_en_de import data
from transformer_en_de.markdown import markdown_table
from transformer_en_de.training import precision

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT.parent / "shared" / "data" / "multi30k"
SHIPPED_DIR = ROOT / "models" / "transformer-en-de"


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    global DATA_DIR
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test; figures are noisier)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default %(default)s)")
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="the Multi30k folder (default %(default)s)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    DATA_DIR = args.data
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def read_split(split: str, language: str) -> list[str]:
    path = DATA_DIR / f"{split}.{language}"
    if not path.is_file():
        raise SystemExit(f"Multi30k not found: expected {path} (the benchmarks read the data beside the repository).")
    return data.read_lines(path)


def sample_sentences(split: str, count: int) -> tuple[list[str], list[str]]:
    """`count` random (English, German) pairs of a Multi30k split, the same ones on every run."""
    english, german = read_split(split, "en"), read_split(split, "de")
    chosen = random.Random(0).sample(range(len(english)), count)
    return [english[i] for i in chosen], [german[i] for i in chosen]


# modeling/ is imported where it is used: hub_user reads Multi30k here and must never import it.
def shipped_config(**overrides):
    from modeling import TransformerMTConfig

    return TransformerMTConfig.from_pretrained(SHIPPED_DIR, **overrides)


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


# ------------------------------------------------------------------------------------------------------------ timing


@dataclass
class Timings:
    """Wall-clock and CPU seconds per call: on a shared machine other processes stretch wall time, not CPU time."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return median(self.wall)

    @property
    def cpu_seconds(self) -> float:
        return median(self.cpu)

    def time(self, run: Callable[[], object], other_cpu: Callable[[], float] = lambda: 0.0):
        """`run()` timed; `other_cpu`: the CPU seconds of a process that works for it."""
        wall, cpu = time.perf_counter(), time.process_time() + other_cpu()
        result = run()
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() + other_cpu() - cpu)
        return result


def alternate(
    sides: dict[str, Callable[[], object]], rounds: int, warmup: int = 1, other_cpu=None
) -> dict[str, Timings]:
    """Each side once a round, in turns; `other_cpu`: {side: CPU seconds of a process that works for it}."""
    for _ in range(warmup):
        for run in sides.values():
            run()
    timings = {name: Timings() for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            timings[name].time(run, (other_cpu or {}).get(name, lambda: 0.0))
    return timings


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """Median with the interquartile range, as text: noisy machines deserve error bars."""
    if len(values) < 4:
        return f"{median(values):.4g}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{median(values):.4g} [{q1:.4g}, {q3:.4g}]"


def json_from_child(module: str, *arguments: str, env: dict | None = None, cwd: Path = ROOT) -> dict:
    """The JSON object that `python -m module arguments...` (or the file `module`) prints last, in a process of its
    own (no model, allocator or thread pool of this one); a child that fails stops the benchmark with its stderr."""
    command = [sys.executable, *(["-m", module] if cwd == ROOT else [module]), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    if done.returncode:
        raise SystemExit(f"{module} {' '.join(arguments)}: exit {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rounds_in_children(module: str, specs: dict[str, list[str]], rounds: int, envs: dict | None = None, cwd=ROOT):
    """Each spec's child (`module` with its arguments, in `envs`' environment for it) once a round, for `rounds`
    rounds: {name: [each round's JSON]}."""
    runs = {name: [] for name in specs}
    for number in range(rounds):
        for name, arguments in specs.items():
            runs[name].append(json_from_child(module, *arguments, env=(envs or {}).get(name), cwd=cwd))
            print(f"  round {number + 1}: {name} {runs[name][-1]}", file=sys.stderr, flush=True)
    return runs


def paired_ratio(runs: dict[str, list[dict]], model: str, base: str, figure: str) -> str:
    """`model`'s `figure` over `base`'s, round by round: the median, and the lowest-highest round's."""
    ratios = [mine[figure] / theirs[figure] for mine, theirs in zip(runs[model], runs[base], strict=True)]
    text = f"{median(ratios):.2f}x"
    return text if len(ratios) < 2 else f"{text} ({min(ratios):.2f}-{max(ratios):.2f})"


def print_table(header: list[str], rows: list[list[object]]) -> None:
    print(markdown_table(header, rows))


def describe_machine(threads: int, device: torch.device = torch.device("cpu")) -> str:
    cpus = f"{threads} thread(s), {os.cpu_count()} CPU(s) visible"
    return f"torch {torch.__version__}, {cpus}, {precision.describe(use_cpu=device.type == 'cpu')}"


def peak_rss_bytes(pid: int | str = "self") -> int:
    """A process's peak RSS so far (VmHWM; ru_maxrss carries the parent's peak across fork+exec)."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")
