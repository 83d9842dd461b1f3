"""Decoding speed of the model code of an earlier commit against today's, on the same weights, in one process.

Two copies of the shipped folder are written to a temporary directory: one with `modeling/` as it was at
`--baseline` (any git revision), one with today's. Each loads with the code in its folder, as a Hub user's
`trust_remote_code` loads it (the Auto classes would pick the classes this project registers, today's, for both), and
translate test_2016_flickr with `generate()` and the saved defaults, alternating on every
batch, at batch 1 and at batch 32 (sorted by length). Prints sentences/s, the speed-up and whether the ids are
identical.

    python -m benchmarks.code_versions --baseline 633ac73 [--threads 2] [--quick]
"""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from benchmarks import harness


def options(parser):
    parser.add_argument("--baseline", required=True, help="the git revision whose modeling/ to compare against")
    parser.add_argument("--batch1-sentences", type=int, default=100, help="sentences at batch 1")
    parser.add_argument("--batch32-sentences", type=int, default=480, help="sentences at batch 32")


def folder_with_code(destination: Path, revision: str | None) -> Path:
    """The shipped folder with modeling/ as it is (None) or as it was at `revision`."""
    shutil.copytree(harness.SHIPPED_DIR, destination)
    for path in (harness.ROOT / "modeling").glob("*.py"):
        if path.name == "__init__.py":
            continue
        if revision is None:
            shutil.copy(path, destination / path.name)
            continue
        shown = subprocess.run(
            ["git", "show", f"{revision}:modeling/{path.name}"], cwd=harness.ROOT, capture_output=True, text=True
        )
        if shown.returncode != 0:
            (destination / path.name).unlink(missing_ok=True)  # the file did not exist then
            continue
        (destination / path.name).write_text(shown.stdout)
    return destination


def model_in(folder: Path):
    """The model of `folder`, built by the modeling code in `folder` (its `auto_map`)."""
    model_class = get_class_from_dynamic_module("modeling_transformer_mt.TransformerMTForConditionalGeneration", folder)
    model = model_class.from_pretrained(folder).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    return model


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    sources = harness.read_split("test_2016_flickr", "en")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folders = {
            f"modeling/ at {args.baseline}": folder_with_code(Path(scratch) / "baseline", args.baseline),
            "modeling/ today": folder_with_code(Path(scratch) / "today", None),
        }
        tokenizer = AutoTokenizer.from_pretrained(folders["modeling/ today"], trust_remote_code=True)
        models = {name: model_in(folder) for name, folder in folders.items()}
        warm_up = tokenizer(sources[:2], padding=True, return_tensors="pt")
        for model in models.values():
            with torch.inference_mode():
                model.generate(**warm_up)
        for batch_size, count in ((1, args.batch1_sentences), (32, args.batch32_sentences)):
            chosen = sources[: 12 if args.quick else count]
            if batch_size > 1:
                chosen = sorted(chosen, key=lambda text: len(tokenizer(text)["input_ids"]), reverse=True)
            seconds = dict.fromkeys(models, 0.0)
            outputs = {name: [] for name in models}
            for start in range(0, len(chosen), batch_size):
                batch = tokenizer(chosen[start : start + batch_size], padding=True, return_tensors="pt")
                for name, model in models.items():
                    began = time.perf_counter()
                    with torch.inference_mode():
                        outputs[name].append(model.generate(**batch))
                    seconds[name] += time.perf_counter() - began
            baseline, today = models
            identical = all(torch.equal(old, new) for old, new in zip(outputs[baseline], outputs[today], strict=True))
            speeds = [f"{len(chosen) / seconds[name]:.1f}" for name in (baseline, today)]
            rows.append([batch_size, len(chosen), *speeds, f"{seconds[baseline] / seconds[today]:.2f}x", identical])
    print(f"# generate() with the saved defaults, {harness.describe_machine(args.threads)}")
    harness.print_table(
        ["batch", "sentences", f"{baseline} (sent/s)", f"{today} (sent/s)", "speed-up", "identical ids"], rows
    )


if __name__ == "__main__":
    main()
