"""Decoding speed of an earlier commit's model code against today's, as a Hub user runs it (`trust_remote_code`, a
worker outside the repository that imports nothing of the project), each in its own process, in turns every round.

    python -m benchmarks.code_versions --baseline bd87c05 [--baseline-kernels blas onednn] [--compiled]
        [--no-variants] [--threads 1] [--rounds 3] [--quick]
"""

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def options(parser):
    parser.add_argument("--baseline", required=True, help="the git revision whose modeling/ to compare against")
    parser.add_argument("--baseline-kernels", nargs="*", default=[], choices=["blas", "onednn"], help="its kernels")
    parser.add_argument("--compiled", action="store_true", help="also today's code, static cache, compiled forward")
    parser.add_argument("--no-variants", action="store_true", help="only the baseline and today's code")
    parser.add_argument("--rounds", type=int, default=3, help="turns of every system (the median is reported)")
    parser.add_argument("--batch1-sentences", type=int, default=60, help="sentences at batch 1")
    parser.add_argument("--batch32-sentences", type=int, default=256, help="sentences at batch 32")


def git(*arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def folder_with_code(destination: Path, revision: str | None) -> Path:
    """The shipped folder with modeling/ as it is (None) or as it was at `revision`."""
    shutil.copytree(ROOT / "models" / "transformer-en-de", destination, ignore=shutil.ignore_patterns("*.py"))
    names = git("ls-tree", "--name-only", revision, "modeling/").split() if revision else os.listdir(ROOT / "modeling")
    for name in (Path(name).name for name in names):
        if name.endswith(".py") and name != "__init__.py":
            code = git("show", f"{revision}:modeling/{name}") if revision else (ROOT / "modeling" / name).read_text()
            (destination / name).write_text(code)
    return destination


# Runs in the worker process: nothing of the project is imported there (only the folder's own code).
def worker(spec: dict) -> dict:
    import torch
    from transformers import AutoTokenizer, CompileConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    torch.set_num_threads(spec["threads"])
    folder = spec["folder"]
    model_class = get_class_from_dynamic_module("modeling_transformer_mt.TransformerMTForConditionalGeneration", folder)
    model = model_class.from_pretrained(folder).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    assert "modeling" not in sys.modules, "the project's modeling/ was imported"
    if spec.get("kernel"):
        kernel = next(module for name, module in sys.modules.items() if name.endswith(".linear_kernel"))
        kernel.PACKED_LINEAR = spec["kernel"] == "onednn"
    if spec.get("plain_beam_search"):
        model.drop_finished_sentences = False
    settings = {"cache_implementation": "static"} if spec.get("static") else {}
    if spec.get("compiled"):
        settings["compile_config"] = CompileConfig(fullgraph=True)
        settings["compile_config"]._compile_all_devices = True  # generate() compiles on accelerators only unless told
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batches = [tokenizer(texts, padding=True, return_tensors="pt") for texts in spec["batches"]]

    def run_all(batches):
        began = time.perf_counter()
        with torch.inference_mode():
            ids = [model.generate(**batch, **settings).tolist() for batch in batches]
        return time.perf_counter() - began, ids

    run_all(batches[:1])  # warm-up
    seconds, ids = run_all(batches)
    result = {}
    if spec.get("compiled"):  # the first pass compiled every shape; the second runs the compiled code
        result["compile s"] = round(seconds)
        seconds, ids_again = run_all(batches)
        assert ids_again == ids
    # A digest of the ids: the round's line on stderr stays short
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]
    return result | {"sentences/s": sum(map(len, spec["batches"])) / seconds, "ids": digest}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
        return
    from benchmarks import harness  # not in the worker: it imports the project
    from tokenizer import load_tokenizer

    args = harness.parse_args(__doc__.splitlines()[0], options)
    sources = harness.read_split("test_2016_flickr", "en")
    tokenizer = load_tokenizer(harness.SHIPPED_DIR)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        baseline = str(folder_with_code(scratch / "baseline", args.baseline))
        today = str(folder_with_code(scratch / "today", None))
        systems = [{"name": f"{args.baseline} (its default)", "folder": baseline}]
        systems += [{"name": f"{args.baseline}, {k}", "folder": baseline, "kernel": k} for k in args.baseline_kernels]
        systems.append({"name": "today", "folder": today})
        if not args.no_variants:
            systems.append({"name": "today, transformers' beam search", "folder": today, "plain_beam_search": True})
            systems.append({"name": "today, static cache", "folder": today, "static": True})
        if args.compiled:
            name = "today, static cache + compiled forward"
            systems.append({"name": name, "folder": today, "static": True, "compiled": True})
        # This file run as a script, outside the repository: the worker can import nothing of the project.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env |= dict(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", HF_MODULES_CACHE=str(scratch / "modules"))
        for batch_size, count in ((1, args.batch1_sentences), (32, args.batch32_sentences)):
            chosen = sources[: (8 if batch_size == 1 else 64) if args.quick else count]
            if batch_size > 1:
                chosen = sorted(chosen, key=lambda text: len(tokenizer(text)["input_ids"]), reverse=True)
            batches = [chosen[start : start + batch_size] for start in range(0, len(chosen), batch_size)]
            # The spec on the command line: one argument, under Linux's 128 KiB, for 1,000 sentences too
            specs = {
                s["name"]: ["--worker", json.dumps(dict(s, threads=args.threads, batches=batches))] for s in systems
            }
            envs = dict.fromkeys(specs, env)
            runs = harness.rounds_in_children(__file__, specs, 1 if args.quick else args.rounds, envs, cwd=scratch)
            first = systems[0]["name"]
            for name, results in runs.items():
                rate = statistics.median(result["sentences/s"] for result in results)
                speed = harness.paired_ratio(runs, name, first, "sentences/s")
                same_ids = results[0]["ids"] == runs[first][0]["ids"]
                rows.append(
                    [batch_size, len(chosen), name, f"{rate:.1f}", speed, same_ids, results[0].get("compile s", "")]
                )
    print(
        f"# generate() with the saved defaults, each system its own process; {harness.describe_machine(args.threads)}"
    )
    header = ["batch", "sentences", "system", "sent/s", "speed vs first (lowest-highest round)", "ids equal first's"]
    header.append("compile pass (s)")
    harness.print_table(header, rows)


if __name__ == "__main__":
    main()
