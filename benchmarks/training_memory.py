"""Peak memory of a training run's start that prepares the mix (reads, mixes, tokenizes) against a second start
that reads the tokenized mix the first one kept: each `train.py` in a process of its own, one step, one thread.
The default mix is task 1 twice, teacher-big and the tagged back-translation (528,000 pairs an epoch).

    python -m benchmarks.training_memory [--mix CORPUS ...] [--start MODEL_FOLDER]
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

DISTILL = harness.DATA_DIR.parent / "multi30k-distill"
DEFAULT_MIX = [str(DISTILL / "teacher-big"), f"{DISTILL / 'bt-beam'}:tagged"]
ONE_STEP = """--train_weight 2 --case_augmentation 0.4 --max_tokens 4300 --max_steps 1 --save_strategy no
    --eval_strategy no --average_last 0 --load_best_model_at_end false --disable_tqdm true""".split()


def peak_rss_of_run(command: list[str], env: dict) -> tuple[int, float]:
    """(peak RSS in bytes, seconds) of a child process."""
    started, peak = time.time(), 0
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, cwd=harness.ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        while process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError):  # it has just exited (a zombie's status has no VmHWM)
                peak = max(peak, harness.peak_rss_bytes(process.pid))
            time.sleep(0.2)
        if process.returncode:
            output.seek(0)
            sys.exit(f"train.py failed ({process.returncode}):\n{output.read()[-3000:]}")
    return peak, time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", nargs="+", default=DEFAULT_MIX, help="--extra_train corpora (PREFIX[:tagged])")
    parser.add_argument("--start", default=str(harness.SHIPPED_DIR), help="model folder to train")
    parser.add_argument("--data_dir", default=str(harness.DATA_DIR))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, TRANSFORMER_MT_CACHE=f"{scratch}/cache", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        rows, peaks = [], []
        for number, start in enumerate(("first start (prepares the mix)", "second start (reads it)")):
            # The same tokenizer both times (part of the kept mix's fingerprint), another output folder.
            command = [sys.executable, "train.py", "--model_name_or_path", args.start, "--tokenizer_name", args.start]
            command += ["--data_dir", args.data_dir, "--extra_train", *args.mix, "--test_split", "", *ONE_STEP]
            peak, seconds = peak_rss_of_run(command + ["--output_dir", str(Path(scratch) / f"run-{number}")], env)
            peaks.append(peak / 2**30)
            rows.append([start, f"{peaks[-1]:.2f}", f"{seconds:.0f}"])
            print(f"{start}: peak {peaks[-1]:.2f} GiB in {seconds:.0f} s", flush=True)
    print(f"\n{harness.describe_machine(1)}; mix: task 1 x2 + {' '.join(Path(m).name for m in args.mix)}")
    harness.print_table(["train.py", "peak RSS (GiB)", "seconds"], rows)
    first, second = peaks
    print(f"\nthe first start holds {first / second:.2f}x the second's peak ({first - second:+.2f} GiB)")


if __name__ == "__main__":
    main()
