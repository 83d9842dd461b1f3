"""Two model folders decoding the same validation sentences: what the shipping rule compares (a candidate ships only if
it decodes at least as fast as the shipped model).

Each model runs in a process of its own, one after the other in every round (a shared machine slows both alike): its
`generate()` with the saved defaults, as a Hub user calls it (`model.generate(**tokenizer(batch, padding=True))`), in
batches of 32 over the first `--sentences` val sentences and one by one over the first `--batch1` of them, then the
engine's CTranslate2 path (`--backend ctranslate2`, converted once and cached, not timed) in batches of 32. It prints
sentences per second per model and path, the median over rounds, and the candidate's ratio to the reference.

    OMP_NUM_THREADS=1 python -m benchmarks.model_speed models/transformer-en-de runs/candidate --threads 1
"""

import argparse
import json
import statistics
import time

from benchmarks import harness


def child(folder: str, sentences: int, batch1: int, threads: int) -> dict:
    """The timings of one model (run in its own process)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from transformer_en_de.decoding.backends import load_backend
    from transformer_en_de.decoding.engine import DecodingSettings, translate

    torch.set_num_threads(threads)
    english, _ = harness.sample_sentences("val", sentences)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)

    def generate(batch: list[str]) -> None:
        with torch.inference_mode():
            model.generate(**tokenizer(batch, padding=True, return_tensors="pt"))

    figures = {}
    started = time.perf_counter()
    for start in range(0, len(english), 32):
        generate(english[start : start + 32])
    figures["generate(), batch 32"] = len(english) / (time.perf_counter() - started)
    started = time.perf_counter()
    for sentence in english[:batch1]:
        generate([sentence])
    figures["generate(), batch 1"] = batch1 / (time.perf_counter() - started)
    backend = load_backend(folder, model, tokenizer, threads=threads)
    translate(model, tokenizer, english[:8], DecodingSettings(batch_size=32), backend=backend)  # warm-up
    started = time.perf_counter()
    translate(model, tokenizer, english, DecodingSettings(batch_size=32), backend=backend)
    figures["CTranslate2 (engine), batch 32"] = len(english) / (time.perf_counter() - started)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="the shipped model's folder")
    parser.add_argument("candidate", help="the candidate's folder")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch1", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.candidate, args.sentences, args.batch1, args.threads)))
        return
    runs = {args.reference: [], args.candidate: []}
    for _ in range(args.rounds):
        for folder in runs:
            runs[folder].append(
                harness.json_from_child(
                    "benchmarks.model_speed",
                    "-",
                    folder,
                    "--child",
                    f"--sentences={args.sentences}",
                    f"--batch1={args.batch1}",
                    f"--threads={args.threads}",
                )
            )
    paths = list(runs[args.reference][0])
    median = {
        folder: {path: statistics.median(run[path] for run in done) for path in paths} for folder, done in runs.items()
    }
    print(
        f"# sentences per second on val (first {args.sentences}; batch 1: first {args.batch1}), median of "
        f"{args.rounds} rounds, {args.threads} thread(s), each model in its own process"
    )
    harness.print_table(
        ["path", args.reference, args.candidate, "ratio (lowest-highest round)"],
        [
            [
                path,
                f"{median[args.reference][path]:.1f}",
                f"{median[args.candidate][path]:.1f}",
                harness.paired_ratio(runs, args.candidate, args.reference, path),
            ]
            for path in paths
        ],
    )
    print(f"# {harness.describe_machine(args.threads)}")


if __name__ == "__main__":
    main()
