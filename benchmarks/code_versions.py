"""Decoding speed of an earlier commit's model code against today's, as a Hub user runs it, each in its own process.

Copies of the shipped folder are written to a temporary directory: one with `modeling/` as it was at `--baseline`
(any git revision), one with today's. Each system below runs in a Python process of its own (`--worker`), which
loads its folder with the code in that folder, as `trust_remote_code` loads it from the Hub, and translates
test_2016_flickr with `generate()` and the saved defaults (its beams, the per-sentence bound) at batch 1 and at batch 32
(sorted by length). The processes take turns, round after round, so that a background load slows all alike; the
table gives sentences/s (the median round), the ratio to the first system and whether the ids equal its ids.

Systems: the baseline as it runs by default, and, where its code has a choice of kernel for linear layers
(`linear_kernel.py`), with `--baseline-kernels` each of them; today's code; today's with transformers' beam search
instead of ours (`drop_finished_sentences = False`); today's with a static cache; and with `--compiled`, today's with
a static cache and the forward compiled by generate() (`compile_config`, inductor, fullgraph): the warm-up and a first
pass over the batches compile (the first pass's time is given apart), its speed is a second pass over the same
batches.

    python -m benchmarks.code_versions --baseline bd87c05 [--baseline-kernels blas onednn] [--compiled]
        [--no-variants] [--threads 1] [--rounds 3] [--quick]
"""

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
SHIPPED_DIR = ROOT / "models" / "transformer-en-de"


def options(parser):
    parser.add_argument("--baseline", required=True, help="the git revision whose modeling/ to compare against")
    parser.add_argument(
        "--baseline-kernels",
        nargs="*",
        default=[],
        choices=["blas", "onednn"],
        help="also run the baseline with each of these kernels of its linear_kernel.py",
    )
    parser.add_argument("--compiled", action="store_true", help="also today's code, static cache, compiled forward")
    parser.add_argument(
        "--no-variants",
        action="store_true",
        help="only the baseline and today's code (not transformers' beam search, not the static cache)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="turns of every system (the median is reported)")
    parser.add_argument("--batch1-sentences", type=int, default=60, help="sentences at batch 1")
    parser.add_argument("--batch32-sentences", type=int, default=256, help="sentences at batch 32")


def folder_with_code(destination: Path, revision: str | None) -> Path:
    """The shipped folder with the code of modeling/ as it is (None) or as it was at `revision`."""
    shutil.copytree(SHIPPED_DIR, destination)
    for path in destination.glob("*.py"):
        path.unlink()
    if revision is None:
        names = [path.name for path in (ROOT / "modeling").glob("*.py")]
    else:
        listed = subprocess.run(
            ["git", "ls-tree", "--name-only", revision, "modeling/"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        names = [Path(line).name for line in listed.stdout.split()]
    for name in names:
        if name == "__init__.py":
            continue
        if revision is None:
            shutil.copy(ROOT / "modeling" / name, destination / name)
        else:
            shown = subprocess.run(
                ["git", "show", f"{revision}:modeling/{name}"], cwd=ROOT, capture_output=True, text=True, check=True
            )
            (destination / name).write_text(shown.stdout)
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
    settings = {}
    if spec.get("transformers_beam_search"):
        model.drop_finished_sentences = False
    if spec.get("static"):
        settings["cache_implementation"] = "static"
    if spec.get("compiled"):
        settings["compile_config"] = CompileConfig(fullgraph=True)
        settings["compile_config"]._compile_all_devices = True  # generate() compiles on accelerators only unless told
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batches = [tokenizer(texts, padding=True, return_tensors="pt") for texts in spec["batches"]]

    def run_all():
        began, ids = time.perf_counter(), []
        with torch.inference_mode():
            for batch in batches:
                ids.append(model.generate(**batch, **settings).tolist())
        return time.perf_counter() - began, ids

    with torch.inference_mode():
        model.generate(**batches[0], **settings)  # warm-up
    first_seconds, ids = run_all()
    result = {"seconds": first_seconds, "ids": ids}
    if spec.get("compiled"):  # the first pass compiled every shape; the second runs the compiled code
        result["compile_pass_seconds"] = first_seconds
        result["seconds"], ids_again = run_all()
        assert ids_again == ids
    return result


def run_worker(spec: dict, scratch: Path) -> dict:
    spec_file = scratch / "spec.json"
    spec_file.write_text(json.dumps(spec))
    # This file run as a script, outside the repository: the worker can import nothing of the project.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", HF_MODULES_CACHE=str(scratch / "modules"))
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(spec_file)], cwd=scratch, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"worker {spec['name']} failed:\n{done.stderr[-3000:]}")
    return json.loads(spec_file.with_suffix(".result.json").read_text())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        spec_file = Path(sys.argv[2])
        spec_file.with_suffix(".result.json").write_text(json.dumps(worker(json.loads(spec_file.read_text()))))
        return
    from benchmarks import harness  # not in the worker: it imports the project

    args = harness.parse_args(__doc__.splitlines()[0], options)
    sources = harness.read_split("test_2016_flickr", "en")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        baseline_folder = folder_with_code(scratch / "baseline", args.baseline)
        today_folder = folder_with_code(scratch / "today", None)
        systems = [{"name": f"{args.baseline} (its default)", "folder": str(baseline_folder)}]
        systems += [
            {"name": f"{args.baseline}, {kernel}", "folder": str(baseline_folder), "kernel": kernel}
            for kernel in args.baseline_kernels
        ]
        systems.append({"name": "today", "folder": str(today_folder)})
        if not args.no_variants:
            systems += [
                {
                    "name": "today, transformers' beam search",
                    "folder": str(today_folder),
                    "transformers_beam_search": True,
                },
                {"name": "today, static cache", "folder": str(today_folder), "static": True},
            ]
        if args.compiled:
            systems.append(
                {
                    "name": "today, static cache + compiled forward",
                    "folder": str(today_folder),
                    "static": True,
                    "compiled": True,
                }
            )
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(today_folder)
        rows = []
        for batch_size, count in ((1, args.batch1_sentences), (32, args.batch32_sentences)):
            chosen = sources[: (8 if batch_size == 1 else 64) if args.quick else count]
            if batch_size > 1:
                chosen = sorted(chosen, key=lambda text: len(tokenizer(text)["input_ids"]), reverse=True)
            batches = [chosen[start : start + batch_size] for start in range(0, len(chosen), batch_size)]
            seconds = {system["name"]: [] for system in systems}
            ids, compile_seconds = {}, {}
            for _ in range(1 if args.quick else args.rounds):
                for system in systems:
                    if system.get("compiled") and system["name"] in ids:
                        continue  # compiled once: its second pass is the measurement
                    result = run_worker(dict(system, threads=args.threads, batches=batches), scratch)
                    seconds[system["name"]].append(result["seconds"])
                    ids[system["name"]] = result["ids"]
                    if "compile_pass_seconds" in result:
                        compile_seconds[system["name"]] = result["compile_pass_seconds"]
            reference = systems[0]["name"]
            for system in systems:
                name = system["name"]
                median = statistics.median(seconds[name])
                rows.append(
                    [
                        batch_size,
                        len(chosen),
                        name,
                        f"{len(chosen) / median:.1f}",
                        f"{statistics.median(seconds[reference]) / median:.2f}x",
                        ids[name] == ids[reference],
                        f"{compile_seconds[name]:.0f} s" if name in compile_seconds else "",
                    ]
                )
    print(
        f"# generate() with the saved defaults, each system in its own process, "
        f"{harness.describe_machine(args.threads)}"
    )
    harness.print_table(
        ["batch", "sentences", "system", "sent/s", "speed vs first", "ids equal first's", "compile pass"], rows
    )


if __name__ == "__main__":
    main()
