"""The engine's two backends, PyTorch and CTranslate2 (our converter): speed, BLEU, and what one process costs.

`--parts`: in-turns (systems alternating on every sentence or batch of 32 in this process, CTranslate2 once it writes
our greedy tokens; the bound on and off), precision (bf16 / int8 weights against float32, passing within 0.3 BLEU),
backends (`translate_corpus.py`, a process each), one-process (PyTorch beside CTranslate2 loaded in various ways).

    python -m benchmarks.engine_backends [--quick] [--threads 1] [--rounds 2] [--parts PART ...]
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

from benchmarks import harness
from benchmarks.hub_user import generate_all
from transformer_en_de.decoding import backends, ctranslate2_backend
from transformer_en_de.decoding.engine import DecodingSettings, translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.decoding.loading import load_model
from transformer_en_de.evaluation import corpus_scores

SPLIT = "test_2016_flickr"
CT2, OURS, PLAIN, HUB = "CTranslate2 float32", "ours (engine)", "ours, transformers' beam search", "generate()"
MAX_BLEU_DROP = 0.3
NO_BOUND = DecodingSettings(max_new_tokens_ratio=1e6)  # every limit is then the cap of max_new_tokens
MODULE = "benchmarks.engine_backends"
SYSTEMS = {
    "PyTorch float32": ["--backend", "torch"],
    "CTranslate2 float32": ["--backend", "ctranslate2"],
    "CTranslate2 int8": ["--backend", "ctranslate2", "--int8"],
}
PASSIVE = "in-process, OMP_WAIT_POLICY=PASSIVE"
ONE_PROCESS = ["alone", "in-process", PASSIVE, "worker (the engine's default)"]


def options(parser):
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every system (in-turns: passes at batch 32)")
    parser.add_argument("--repeats", type=int, default=2, help="one process: timings per side in each child")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--batch1-sentences", type=int, default=None, help="in-turns: batch 1 on the first N only")
    parser.add_argument("--skip-bound", action="store_true", help="in-turns: leave out the bound on/off on val")
    parser.add_argument("--parts", nargs="+", choices=["in-turns", "precision", "backends", "one-process"])
    parser.add_argument("--child", choices=ONE_PROCESS, help=argparse.SUPPRESS)
    parser.set_defaults(threads=1, parts=["backends", "one-process"])


def in_turns(runners: dict, tokenizer, sources: list[str], batch_size: int, rounds: int, other_cpu: dict):
    """(texts, timings): the runners alternating on every length-sorted chunk; `other_cpu` (name -> function) adds the
    CPU seconds of a runner's worker process."""
    lengths = [len(ids) for ids in tokenizer(sources)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda index: lengths[index], reverse=True)
    chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    texts = {name: [""] * len(sources) for name in runners}
    totals = {name: harness.Timings() for name in runners}
    for _ in range(rounds):
        spent = {name: harness.Timings() for name in runners}
        for chunk in chunks:
            for name, run in runners.items():
                chunk_sources = [sources[index] for index in chunk]
                timed = spent[name].time(partial(run, chunk_sources), other_cpu.get(name, lambda: 0.0))
                for index, text in zip(chunk, timed, strict=True):
                    texts[name][index] = text
        for name, timings in spent.items():
            totals[name].wall.append(sum(timings.wall))
            totals[name].cpu.append(sum(timings.cpu))
    return texts, totals


def engine(model, tokenizer, backend=None, settings=DecodingSettings()):
    return lambda chunk: translate(model, tokenizer, chunk, settings, backend=backend).texts


def hub_user(model, tokenizer):
    return lambda chunk: [text.strip() for text in generate_all(model, tokenizer, chunk)]


def in_turns_part(args) -> None:
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    plain_model = copy.deepcopy(model)
    plain_model.drop_finished_sentences = False
    sources, references = harness.read_split(SPLIT, "en")[: args.limit], harness.read_split(SPLIT, "de")
    with tempfile.TemporaryDirectory() as folder:
        ctranslate2_backend.convert(model, tokenizer, folder)
        decoder = backends.CTranslate2Backend(folder, tokenizer, threads=args.threads)
        greedy = DecodingSettings(num_beams=1, max_new_tokens=100, max_new_tokens_ratio=1e6)
        runs = [translate(model, tokenizer, sources[:100], greedy, backend=b).translations for b in (None, decoder)]
        ours, theirs = ([translation.generated_ids for translation in run] for run in runs)
        if ours != theirs:  # the converter maps every weight right, or the figures compare different models
            raise AssertionError("greedy tokens differ between CTranslate2 and our model")
        runners = {CT2: engine(model, tokenizer, decoder), HUB: hub_user(model, tokenizer)}
        runners |= {f"{HUB}, int8 weights": hub_user(int8_dynamic(model), tokenizer), OURS: engine(model, tokenizer)}
        rows, outputs = [], {}
        for batch_size in (1, 32):
            if batch_size == 32:
                runners[PLAIN] = engine(plain_model, tokenizer)
            corpus = sources[: args.batch1_sentences] if batch_size == 1 else sources
            for name in (CT2, OURS):
                runners[name](corpus[:batch_size])  # warm-up
            rounds = args.rounds if batch_size > 1 else 1
            texts, timings = in_turns(runners, tokenizer, corpus, batch_size, rounds, {CT2: decoder.cpu_seconds})
            outputs[batch_size] = texts
            for name, t in timings.items():
                bleu = corpus_scores(texts[name], references[: len(corpus)])["bleu"]
                ratios = [t.seconds / timings[CT2].seconds, t.cpu_seconds / timings[CT2].cpu_seconds]
                rows.append([batch_size, f"{name}, {len(corpus)} sentences", f"{len(corpus) / t.seconds:.1f}"])
                rows[-1] += [f"{ratio:.2f}x" for ratio in ratios] + [f"{bleu:.2f}"]
        decoder.close()
    print(
        f"\n# in turns: the same greedy tokens on 100 sentences; {SPLIT}, {len(sources)} sentences, the saved decoding "
        f"(beam {model.generation_config.num_beams}); systems alternate on every sentence / batch"
    )
    header = ["batch", "system", "sentences/s", "CTranslate2 speed / this (wall)", "same, CPU time", "BLEU"]
    harness.print_table(header, rows)
    print(f"ours and transformers' beam search give identical translations: {outputs[32][OURS] == outputs[32][PLAIN]}")
    print(f"generate() and the engine give identical translations: {outputs[32][HUB] == outputs[32][OURS]}")
    if args.skip_bound:
        return
    val, val_references = harness.read_split("val", "en")[: args.limit], harness.read_split("val", "de")
    bounded = {
        "bound 1.5 x source + 10 (default)": engine(model, tokenizer),
        "no bound (cap of 255 new tokens)": engine(model, tokenizer, settings=NO_BOUND),
    }
    texts, timings = in_turns(bounded, tokenizer, val, 32, 1, {})
    print(f"\n# The per-sentence bound: ours on val, {len(val)} sentences, batches of 32")
    rows = [
        [n, f"{len(val) / t.seconds:.1f}", f"{corpus_scores(texts[n], val_references[: len(val)])['bleu']:.2f}"]
        for n, t in timings.items()
    ]
    harness.print_table(["decoding", "sentences/s", "BLEU"], rows)


def precision_part(args) -> None:
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    variants = {"float32": model, "bf16 weights": copy.deepcopy(model).to(torch.bfloat16)}
    variants["int8 dynamic"] = int8_dynamic(model)
    variants["int8 dynamic, float32 output layer"] = int8_dynamic(model, keep_output_layer=True)
    sources, references = harness.read_split(SPLIT, "en")[: args.limit], harness.read_split(SPLIT, "de")[: args.limit]
    runners = {name: engine(variant, tokenizer) for name, variant in variants.items()}
    texts, timings = in_turns(runners, tokenizer, sources, 32, 1, {})
    scores = {name: corpus_scores(texts[name], references) for name in variants}
    base = timings["float32"]
    print(f"\n# precision: the engine on {SPLIT}, {len(sources)} sentences, saved decoding, batches of 32")
    rows = []
    for name, t in timings.items():
        change = scores[name]["bleu"] - scores["float32"]["bleu"]
        rows.append([name, f"{scores[name]['bleu']:.2f}", f"{scores[name]['chrf']:.2f}", f"{change:+.2f}"])
        rows[-1] += [f"{len(sources) / t.seconds:.1f}", f"{base.seconds / t.seconds:.2f}x"]
        rows[-1] += [f"{base.cpu_seconds / t.cpu_seconds:.2f}x", "yes" if -change <= MAX_BLEU_DROP else "no"]
    header = ["variant", "BLEU", "chrF", "BLEU vs float32", "sentences/s", "speed-up (wall)", "speed-up (CPU)"]
    harness.print_table(header + ["passes"], rows)


def corpus_run(system: str, output: Path, threads: int, limit: int | None) -> dict:
    """`translate_corpus.py` with `system`'s flags in a process of its own: its record (seconds) and BLEU."""
    command = [sys.executable, "translate_corpus.py", "--model", str(harness.SHIPPED_DIR), "--output", str(output)]
    command += ["--input", str(harness.DATA_DIR / f"{SPLIT}.en"), "--source_lang", "en", "--target_lang", "de"]
    command += ["--threads", str(threads), "--device", "cpu", *SYSTEMS[system]]
    command += ["--limit", str(limit)] if limit else []
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run(command, check=True, cwd=harness.ROOT, env=env, stderr=subprocess.DEVNULL)
    record = json.loads(output.with_name(f"{output.name}.progress.json").read_text(encoding="utf-8"))
    hypotheses = output.with_name(f"{output.name}.de").read_text(encoding="utf-8").splitlines()
    references = harness.read_split(SPLIT, "de")[: len(hypotheses)]
    return record | {"bleu": corpus_scores(hypotheses, references)["bleu"]}


def backends_part(args) -> None:
    runs = {system: [] for system in SYSTEMS}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(-1, args.rounds):  # round -1 converts once, untimed: every timed run finds it cached
            for system in SYSTEMS:
                output = Path(scratch) / f"{number}-{system.replace(' ', '_')}"
                done = corpus_run(system, output, args.threads, args.limit if number >= 0 else 8)
                if number >= 0:
                    runs[system].append(done | {"sentences/s": done["lines_written"] / done["seconds"]})
                    runs[system][-1]["per CPU-second"] = done["lines_written"] / done["cpu_seconds"]
                    print(f"  round {number + 1}: {system} {done['seconds']} s", file=sys.stderr)
    base = runs["PyTorch float32"]
    print(
        f"\n# backends: translate_corpus.py on {SPLIT}, {base[0]['lines_written']} sentences, saved decoding, "
        f"batches of 64; each system a process of its own, back to back, {args.rounds} round(s)"
    )
    rows = []
    for system, results in runs.items():
        rate = statistics.median(result["sentences/s"] for result in results)
        figures = [
            harness.paired_ratio(runs, system, "PyTorch float32", key) for key in ("sentences/s", "per CPU-second")
        ]
        rows.append([system, f"{rate:.1f}", *figures, f"{results[0]['bleu']:.2f}"])
    header = [
        "system",
        "sentences/s (median)",
        "speed / PyTorch float32 (lowest-highest round)",
        "same, per CPU-second",
    ]
    harness.print_table(header + ["BLEU"], rows)


def one_process_child(mode: str, count: int, repeats: int, threads: int) -> None:
    """PyTorch's engine timed beside CTranslate2 loaded as `mode` says, in this process: one JSON line."""
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    sources = harness.read_split(SPLIT, "en")[:count]
    settings = DecodingSettings(batch_size=32)
    sides = {"PyTorch": None}
    if mode != "alone":
        worker = mode.startswith("worker")
        folder = str(harness.SHIPPED_DIR)
        sides["CTranslate2"] = backends.load_backend(folder, model, tokenizer, threads=threads, process=worker)
    for backend in sides.values():
        translate(model, tokenizer, sources[:32], settings, backend=backend)  # warm-up; CTranslate2 has now run
    timings = {name: harness.Timings() for name in sides}
    for _ in range(repeats):
        for name, backend in sides.items():
            # CPU seconds of this process (an OpenMP runtime spinning here counts) and of the backend's worker
            other_cpu = backend.cpu_seconds if backend is not None else lambda: 0.0
            timings[name].time(lambda b=backend: translate(model, tokenizer, sources, settings, backend=b), other_cpu)
    rates = {name: count / t.seconds for name, t in timings.items()}
    print(json.dumps(rates | {f"{name} cpu": count / t.cpu_seconds for name, t in timings.items()}))
    if mode != "alone":
        sides["CTranslate2"].close()


def one_process_part(args) -> None:
    count = args.limit or (96 if args.quick else 320)
    flags = ["--limit", str(count), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    envs = {mode: env | ({"OMP_WAIT_POLICY": "PASSIVE"} if mode == PASSIVE else {}) for mode in ONE_PROCESS}
    rates = harness.rounds_in_children(
        MODULE, {mode: ["--child", mode, *flags] for mode in ONE_PROCESS}, args.rounds, envs
    )
    print(
        f"\n# one process: the engine with PyTorch (batches of 32, {count} sentences of {SPLIT}) beside CTranslate2; "
        f"each way a process of its own, back to back, {args.rounds} round(s) x {args.repeats} repeats"
    )
    rows = []
    for mode, results in rates.items():
        theirs = "—"
        if mode != "alone":
            theirs = f"{statistics.median(r['CTranslate2'] for r in results):.1f} "
            theirs += f"({statistics.median(r['CTranslate2 cpu'] for r in results):.1f})"
        figures = [harness.paired_ratio(rates, mode, "alone", key) for key in ("PyTorch", "PyTorch cpu")]
        rows.append([mode, f"{statistics.median(r['PyTorch'] for r in results):.1f}", *figures, theirs])
    header = ["CTranslate2 loaded", "PyTorch sentences/s", "PyTorch speed / alone (lowest-highest round)"]
    harness.print_table(header + ["same, per CPU-second", "CTranslate2 sentences/s (per CPU-second)"], rows)


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.child:
        one_process_child(args.child, args.limit, args.repeats, args.threads)
        return
    if args.quick:
        args.limit, args.rounds, args.repeats = args.limit or 96, 1, 1
    print(f"# Engine backends: {harness.describe_machine(args.threads)}")
    parts = {"in-turns": in_turns_part, "precision": precision_part, "backends": backends_part}
    parts["one-process"] = one_process_part
    for part in args.parts:
        parts[part](args)


if __name__ == "__main__":
    main()
