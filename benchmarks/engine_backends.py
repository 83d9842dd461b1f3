"""The engine's two backends, PyTorch and CTranslate2: speed and BLEU, and what sharing one process costs.

1. backends: `translate_corpus.py` on test_2016_flickr (the model's saved decoding: its beams and length penalty, the
   bound per sentence; batches of 64) with `--backend torch`, `--backend ctranslate2` and `--backend ctranslate2
   --int8`, each run in a process of its own, the three back to back in every round (a shared machine slows them
   alike); translation seconds from the run's record (the conversion, made once and cached, is not timed), BLEU
   against the references. Ratios are each round's, then their median.
2. one process: the engine with PyTorch (saved decoding, batches of 32) in a process where CTranslate2 is loaded and
   has translated, in these ways, each a process of its own, back to back:
   - alone: no CTranslate2 in the process (the reference);
   - in-process: `CTranslate2Backend(process=False)`, CTranslate2 in the same process, as it comes;
   - in-process, OMP_WAIT_POLICY=PASSIVE: the same with both OpenMP runtimes told not to spin while they wait;
   - worker: the engine's default, CTranslate2 in its own process (`transformer_en_de/decoding/ctranslate2_worker.py`).
   Each child times PyTorch and CTranslate2 alternately (`--repeats` times, the median).

    python -m benchmarks.engine_backends [--quick] [--threads 1] [--rounds 2] [--parts backends one-process]

The machine's CPU capability (`torch.backends.cpu.get_cpu_capability()`) is printed with the figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import DATA_DIR, ROOT, SHIPPED_DIR, json_from_child
from transformer_en_de.markdown import markdown_table

SPLIT = "test_2016_flickr"
SYSTEMS = {
    "PyTorch float32": ["--backend", "torch"],
    "CTranslate2 float32": ["--backend", "ctranslate2"],
    "CTranslate2 int8": ["--backend", "ctranslate2", "--int8"],
}
ONE_PROCESS = {
    "alone": {},
    "in-process": {},
    "in-process, OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "worker (the engine's default)": {},
}


def machine(threads: int) -> str:
    return (
        f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, {threads} thread(s), "
        f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPU(s) usable"
    )


def environment(threads: int, extra: dict | None = None) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env | (extra or {})


# ------------------------------------------------------------------------------------------------ 1. backends


def corpus_run(system: str, output: Path, threads: int, limit: int | None) -> dict:
    """`translate_corpus.py` with `system`'s flags in a process of its own: seconds, CPU seconds, BLEU."""
    from transformer_en_de.evaluation import corpus_scores

    command = [
        sys.executable,
        str(ROOT / "translate_corpus.py"),
        "--model",
        str(SHIPPED_DIR),
        "--input",
        str(DATA_DIR / f"{SPLIT}.en"),
        "--output",
        str(output),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--threads",
        str(threads),
        "--device",
        "cpu",
        *SYSTEMS[system],
    ] + (["--limit", str(limit)] if limit else [])
    subprocess.run(command, check=True, env=environment(threads), stderr=subprocess.DEVNULL)
    state = json.loads(output.with_name(f"{output.name}.progress.json").read_text(encoding="utf-8"))
    hypotheses = output.with_name(f"{output.name}.de").read_text(encoding="utf-8").splitlines()
    references = (DATA_DIR / f"{SPLIT}.de").read_text(encoding="utf-8").splitlines()[: len(hypotheses)]
    return {
        "seconds": state["seconds"],
        "cpu_seconds": state["cpu_seconds"],
        "sentences": state["lines_written"],
        "bleu": corpus_scores(hypotheses, references)["bleu"],
    }


def backends_part(args) -> None:
    runs: dict[str, list[dict]] = {system: [] for system in SYSTEMS}
    with tempfile.TemporaryDirectory() as scratch:
        for system in SYSTEMS:  # convert once, untimed: every timed run finds the conversion cached
            corpus_run(system, Path(scratch) / f"warm-{len(runs[system])}-{system.replace(' ', '_')}", args.threads, 8)
        for number in range(args.rounds):
            for system in SYSTEMS:
                output = Path(scratch) / f"{number}-{system.replace(' ', '_')}"
                runs[system].append(corpus_run(system, output, args.threads, args.limit))
                print(f"  round {number + 1}: {system} {runs[system][-1]}", file=sys.stderr, flush=True)
    base = runs["PyTorch float32"]
    print(
        f"\n# 1. translate_corpus.py on {SPLIT}, {base[0]['sentences']} sentences, saved decoding, "
        f"batches of 64; each system a process of its own, back to back, {args.rounds} round(s)"
    )
    rows = []
    for system, results in runs.items():
        ratios = [other["seconds"] / result["seconds"] for result, other in zip(results, base, strict=True)]
        cpu_ratio = statistics.median(
            other["cpu_seconds"] / result["cpu_seconds"] for result, other in zip(results, base, strict=True)
        )
        rate = statistics.median(result["sentences"] / result["seconds"] for result in results)
        per_round = ", ".join(f"{r:.2f}x" for r in ratios)
        median = f"**{statistics.median(ratios):.2f}x**"
        rows.append([system, f"{rate:.1f}", per_round, median, f"{cpu_ratio:.2f}x", f"{results[0]['bleu']:.2f}"])
    header = [
        "system",
        "sentences/s (median)",
        "speed / PyTorch float32, per round",
        "median",
        "same, per CPU-second",
        "BLEU",
    ]
    print(markdown_table(header, rows, "lrlrrr"))


# ------------------------------------------------------------------------------------------------ 2. one process


def one_process_child(mode: str, count: int, repeats: int, threads: int) -> None:
    """In this process: PyTorch's engine timed beside CTranslate2 loaded as `mode` says; prints one JSON line."""
    torch.set_num_threads(threads)
    from transformer_en_de.decoding import backends
    from transformer_en_de.decoding.engine import DecodingSettings, translate
    from transformer_en_de.decoding.loading import load_model

    model, tokenizer = load_model(str(SHIPPED_DIR))
    sources = (DATA_DIR / f"{SPLIT}.en").read_text(encoding="utf-8").splitlines()[:count]
    settings = DecodingSettings(batch_size=32)
    decoder = None
    if mode != "alone":
        decoder = backends.load_backend(
            str(SHIPPED_DIR), model, tokenizer, threads=threads, process=mode.startswith("worker")
        )
    sides = {"PyTorch": None} | ({"CTranslate2": decoder} if decoder is not None else {})
    for backend in sides.values():
        translate(model, tokenizer, sources[:32], settings, backend=backend)  # warm-up; CTranslate2 has now run
    seconds = {name: [] for name in sides}
    cpu = {name: [] for name in sides}
    for _ in range(repeats):
        for name, backend in sides.items():
            started, cpu_started = time.perf_counter(), _cpu(backend)
            translate(model, tokenizer, sources, settings, backend=backend)
            seconds[name].append(time.perf_counter() - started)
            cpu[name].append(_cpu(backend) - cpu_started)
    print(
        json.dumps(
            {
                **{name: count / statistics.median(values) for name, values in seconds.items()},
                **{f"{name} cpu": count / statistics.median(values) for name, values in cpu.items()},
            }
        )
    )
    if decoder is not None:
        decoder.close()


def _cpu(backend) -> float:
    """CPU seconds of this process (every thread: an OpenMP runtime spinning here counts), and of the backend's
    worker process if it has one."""
    return time.process_time() + (backend.cpu_seconds() if backend is not None else 0.0)


def one_process_part(args) -> None:
    count = args.limit or (96 if args.quick else 320)
    rates: dict[str, list[dict]] = {mode: [] for mode in ONE_PROCESS}
    for number in range(args.rounds):
        for mode, extra in ONE_PROCESS.items():
            rates[mode].append(
                json_from_child(
                    "benchmarks.engine_backends",
                    "--child",
                    mode,
                    "--limit",
                    str(count),
                    "--repeats",
                    str(args.repeats),
                    "--threads",
                    str(args.threads),
                    env=environment(args.threads, extra),
                )
            )
            print(f"  round {number + 1}: {mode} {rates[mode][-1]}", file=sys.stderr, flush=True)
    alone = rates["alone"]
    print(
        f"\n# 2. The engine with PyTorch (saved decoding, batches of 32, {count} sentences of {SPLIT}) "
        f"beside CTranslate2; "
        f"each way a process of its own, back to back, {args.rounds} round(s) x {args.repeats} repeats"
    )
    print(
        "| CTranslate2 loaded | PyTorch sentences/s | PyTorch speed / alone (per round) | median | same, per "
        "CPU-second | CTranslate2 sentences/s (per CPU-second) |"
    )
    print("|---|---:|---|---:|---:|---:|")
    for mode, results in rates.items():
        ratios = [result["PyTorch"] / reference["PyTorch"] for result, reference in zip(results, alone, strict=True)]
        cpu_ratio = statistics.median(
            result["PyTorch cpu"] / reference["PyTorch cpu"] for result, reference in zip(results, alone, strict=True)
        )
        ours = statistics.median(result["PyTorch"] for result in results)
        theirs = (
            f"{statistics.median(r['CTranslate2'] for r in results):.1f} "
            f"({statistics.median(r['CTranslate2 cpu'] for r in results):.1f})"
            if mode != "alone"
            else "—"
        )
        print(
            f"| {mode} | {ours:.1f} | {', '.join(f'{r:.2f}x' for r in ratios)} | **{statistics.median(ratios):.2f}x**"
            f" | {cpu_ratio:.2f}x | {theirs} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test; figures are noisier)")
    parser.add_argument("--threads", type=int, default=1, help="threads for PyTorch and CTranslate2 (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every system back to back (default 2)")
    parser.add_argument("--repeats", type=int, default=2, help="one process: timings per side in each child")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--parts", nargs="+", choices=["backends", "one-process"], default=["backends", "one-process"])
    parser.add_argument("--child", choices=list(ONE_PROCESS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        one_process_child(args.child, args.limit, args.repeats, args.threads)
        return
    if not (SHIPPED_DIR / "model.safetensors").is_file():
        raise SystemExit(f"No trained model at {SHIPPED_DIR}: this benchmark needs the shipped weights.")
    if args.quick:
        args.limit, args.rounds, args.repeats = args.limit or 96, 1, 1
    print(f"# Engine backends: {machine(args.threads)}")
    if "backends" in args.parts:
        backends_part(args)
    if "one-process" in args.parts:
        one_process_part(args)


if __name__ == "__main__":
    main()
