"""The engine's two backends, PyTorch and CTranslate2 (our converter): speed, BLEU, and what one process costs.

`--parts`: in-turns (systems in turns at batch 1 and 32 in this process, CTranslate2 once it writes our greedy
tokens), precision (bf16 / int8 weights against float32, passing within 0.3 BLEU),
backends (the engine with each, a process each), one-process (PyTorch beside CTranslate2 loaded in various ways),
device (`generate()` on the GPU where there is one, float32 and bf16 weights, and whether CTranslate2 could run there).

    python -m benchmarks.engine_backends [--quick] [--threads 1] [--rounds 2] [--parts PART ...]
"""

import argparse
import copy
import json
import os
import statistics
from functools import partial

import torch

from benchmarks import harness
from transformer_en_de.decoding import backends
from transformer_en_de.decoding.engine import DecodingSettings, translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.decoding.loading import load_model
from transformer_en_de.evaluation import corpus_scores

SPLIT = "test_2016_flickr"
CT2, OURS, PLAIN, HUB = "CTranslate2 float32", "ours (engine)", "ours, transformers' beam search", "generate()"
MAX_BLEU_DROP = 0.3
MODULE = "benchmarks.engine_backends"
# Each child: the backends it loads together ({name: load_backend's options, or None for PyTorch}), timed in turns.
BACKENDS = {
    "PyTorch float32": {"PyTorch": None},
    "CTranslate2 float32": {"CTranslate2": {}},
    "CTranslate2 int8": {"CTranslate2": {"int8": True}},
}
PASSIVE = "in-process, OMP_WAIT_POLICY=PASSIVE"
ONE_PROCESS = {
    "alone": {"PyTorch": None},
    "in-process": {"PyTorch": None, "CTranslate2": {"process": False}},
    PASSIVE: {"PyTorch": None, "CTranslate2": {"process": False}},
    "worker (the engine's default)": {"PyTorch": None, "CTranslate2": {}},
}
CHILDREN = BACKENDS | ONE_PROCESS


def options(parser):
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every system (in-turns: passes at batch 32)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--batch1-sentences", type=int, default=None, help="in-turns: batch 1 on the first N only")
    parser.add_argument("--parts", nargs="+", choices=["in-turns", "precision", "backends", "one-process", "device"])
    parser.add_argument("--child", choices=CHILDREN, help=argparse.SUPPRESS)
    parser.set_defaults(threads=1, parts=["backends", "one-process"])


def engine(model, tokenizer, batch_size: int, backend=None):
    settings = DecodingSettings(batch_size=batch_size)
    return lambda sources: translate(model, tokenizer, sources, settings, backend=backend).texts


def hub_user(model, tokenizer, batch_size: int):
    return lambda sources: [text.strip() for text in harness.generate_all(model, tokenizer, sources, batch_size)]


def in_turns(runners: dict, sources: list[str], rounds: int, other_cpu: dict | None = None):
    """(texts, timings) of the runners in turns on `sources`; `other_cpu`: a runner's worker's CPU seconds."""
    texts = {}
    sides = {name: lambda name=name, run=run: texts.update({name: run(sources)}) for name, run in runners.items()}
    return texts, harness.alternate(sides, rounds, warmup=0, other_cpu=other_cpu)


def in_turns_part(args) -> None:
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    plain_model = copy.deepcopy(model)
    plain_model.drop_finished_sentences = False
    sources, references = harness.read_split(SPLIT, "en")[: args.limit], harness.read_split(SPLIT, "de")
    decoder = backends.load_backend(str(harness.SHIPPED_DIR), model, tokenizer, threads=args.threads)
    greedy = DecodingSettings(num_beams=1, max_new_tokens=100, max_new_tokens_ratio=1e6)
    runs = [translate(model, tokenizer, sources[:100], greedy, backend=b).translations for b in (None, decoder)]
    ours, theirs = ([translation.generated_ids for translation in run] for run in runs)
    if ours != theirs:  # the converter maps every weight right, or the figures compare different models
        raise AssertionError("greedy tokens differ between CTranslate2 and our model")
    rows, outputs, int8_model = [], {}, int8_dynamic(model)
    for batch_size in (1, 32):
        runners = {CT2: engine(model, tokenizer, batch_size, decoder), HUB: hub_user(model, tokenizer, batch_size)}
        runners[f"{HUB}, int8 weights"] = hub_user(int8_model, tokenizer, batch_size)
        runners[OURS] = engine(model, tokenizer, batch_size)
        if batch_size == 32:
            runners[PLAIN] = engine(plain_model, tokenizer, batch_size)
        corpus = sources[: args.batch1_sentences] if batch_size == 1 else sources
        for name in (CT2, OURS):
            runners[name](corpus[:batch_size])  # warm-up
        rounds = args.rounds if batch_size > 1 else 1
        texts, timings = in_turns(runners, corpus, rounds, {CT2: decoder.cpu_seconds})
        outputs[batch_size] = texts
        for name, t in timings.items():
            bleu = corpus_scores(texts[name], references[: len(corpus)])["bleu"]
            ratios = [t.seconds / timings[CT2].seconds, t.cpu_seconds / timings[CT2].cpu_seconds]
            rows.append([batch_size, f"{name}, {len(corpus)} sentences", f"{len(corpus) / t.seconds:.1f}"])
            rows[-1] += [f"{ratio:.2f}x" for ratio in ratios] + [f"{bleu:.2f}"]
    decoder.close()
    print(
        f"\n# in turns: the same greedy tokens on 100 sentences; {SPLIT}, {len(sources)} sentences, the saved decoding "
        f"(beam {model.generation_config.num_beams}); systems in turns"
    )
    header = ["batch", "system", "sentences/s", "CTranslate2 speed / this (wall)", "same, CPU time", "BLEU"]
    harness.print_table(header, rows)
    print(f"ours and transformers' beam search give identical translations: {outputs[32][OURS] == outputs[32][PLAIN]}")
    print(f"generate() and the engine give identical translations: {outputs[32][HUB] == outputs[32][OURS]}")


def precision_part(args) -> None:
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    variants = {"float32": model, "bf16 weights": copy.deepcopy(model).to(torch.bfloat16)}
    variants["int8 dynamic"] = int8_dynamic(model)
    variants["int8 dynamic, float32 output layer"] = int8_dynamic(model, keep_output_layer=True)
    sources, references = harness.read_split(SPLIT, "en")[: args.limit], harness.read_split(SPLIT, "de")[: args.limit]
    texts, timings = in_turns({name: engine(variant, tokenizer, 32) for name, variant in variants.items()}, sources, 1)
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


def device_part(args) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer = load_model(str(harness.SHIPPED_DIR), device)
    model.set_attn_implementation("sdpa")  # transformers' default where torch has it, named for the figures
    variants = {"float32": model, "bf16 weights": copy.deepcopy(model).to(torch.bfloat16)}
    sources = harness.read_split(SPLIT, "en")
    rows = []
    for batch_size, count in ((32, 32 if args.quick else 256), (1, 4 if args.quick else 32)):
        runs = {name: partial(hub_user(v, tokenizer, batch_size), sources[:count]) for name, v in variants.items()}
        for name, t in harness.alternate(runs, args.rounds).items():  # the decoded text waits for the GPU
            rows.append([batch_size, count, name, harness.spread(t.wall), f"{count / t.seconds:.1f}"])
    print(
        f"\n# {HUB} on {device} with the saved defaults (sdpa attention): beam {model.generation_config.num_beams}, "
        f"first sentences of {SPLIT}, {args.rounds} round(s) after a warm-up"
    )
    harness.print_table(["batch", "sentences", "weights", "s/pass: median", "sentences/s"], rows)
    try:
        import ctranslate2  # only whether it would run here

        gpus = ctranslate2.get_cuda_device_count()
        types = f", compute types {sorted(ctranslate2.get_supported_compute_types('cuda'))}" if gpus else ""
        print(f"CTranslate2 {ctranslate2.__version__}: {gpus} CUDA device(s){types}")
    except Exception as error:  # ImportError when missing; a broken CUDA runtime raises others
        print(f"CTranslate2: not usable ({type(error).__name__}: {error})")


def child(name: str, count: int | None, threads: int, repeats: int) -> None:
    """The engine with each of `name`'s backends, loaded together in this process, timed in turns: one JSON line."""
    model, tokenizer = load_model(str(harness.SHIPPED_DIR))
    sources, references = (harness.read_split(SPLIT, language)[:count] for language in ("en", "de"))
    folder = str(harness.SHIPPED_DIR)
    sides = {
        side: how if how is None else backends.load_backend(folder, model, tokenizer, threads=threads, **how)
        for side, how in CHILDREN[name].items()
    }
    runners = {side: engine(model, tokenizer, 64 if name in BACKENDS else 32, b) for side, b in sides.items()}
    for run in runners.values():
        run(sources[:32])  # warm-up; CTranslate2 has now run
    # CPU seconds of this process (an OpenMP runtime spinning here counts) and of the backend's worker
    texts, timings = in_turns(runners, sources, repeats, {side: b.cpu_seconds for side, b in sides.items() if b})
    figures = {}
    for number, (side, t) in enumerate(timings.items()):
        prefix = f"{side} " if number else ""  # the first side's figures are the run's
        rates = {"sentences/s": t.seconds, "per CPU-second": t.cpu_seconds}
        figures |= {prefix + key: len(sources) / seconds for key, seconds in rates.items()}
        figures[f"{prefix}BLEU"] = corpus_scores(texts[side], references)["bleu"]
    for backend in filter(None, sides.values()):
        backend.close()
    print(json.dumps(figures))


def in_children(args, names: dict, base: str, count: int | None) -> tuple[dict, list[list]]:
    """Each of `names`' children once a round, back to back: their runs, and a row each of the first system's
    sentences/s and its speed per round against `base`'s."""
    flags = ["--threads", str(args.threads), "--data", str(harness.DATA_DIR), *(["--quick"] * args.quick)]
    flags += ["--limit", str(count)] if count else []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    envs = {name: env | ({"OMP_WAIT_POLICY": "PASSIVE"} if name == PASSIVE else {}) for name in names}
    runs = harness.rounds_in_children(MODULE, {name: ["--child", name, *flags] for name in names}, args.rounds, envs)
    rows = []
    for name, results in runs.items():
        figures = [harness.paired_ratio(runs, name, base, key) for key in ("sentences/s", "per CPU-second")]
        rows.append([name, f"{statistics.median(r['sentences/s'] for r in results):.1f}", *figures])
    return runs, rows


def backends_part(args) -> None:
    runs, rows = in_children(args, BACKENDS, "PyTorch float32", args.limit)
    for row, results in zip(rows, runs.values(), strict=True):
        row.append(f"{results[0]['BLEU']:.2f}")
    print(
        f"\n# backends: the engine on {SPLIT}, {args.limit or 'all'} sentences, saved decoding, batches of 64; each "
        f"system a process of its own, back to back, {args.rounds} round(s)"
    )
    header = ["system", "sentences/s (median)", "speed / PyTorch float32 (lowest-highest round)"]
    harness.print_table(header + ["same, per CPU-second", "BLEU"], rows)


def one_process_part(args) -> None:
    count = args.limit or (96 if args.quick else 320)
    runs, rows = in_children(args, ONE_PROCESS, "alone", count)
    for row, results in zip(rows, runs.values(), strict=True):
        theirs = [
            statistics.median(r.get(f"CTranslate2 {key}", 0) for r in results)
            for key in ("sentences/s", "per CPU-second")
        ]
        row.append(f"{theirs[0]:.1f} ({theirs[1]:.1f})" if theirs[0] else "—")
    print(
        f"\n# one process: the engine with PyTorch (batches of 32, {count} sentences of {SPLIT}) beside CTranslate2; "
        f"each way a process of its own, back to back, {args.rounds} round(s) x {1 if args.quick else 2} repeats"
    )
    header = ["CTranslate2 loaded", "PyTorch sentences/s", "PyTorch speed / alone (lowest-highest round)"]
    harness.print_table(header + ["same, per CPU-second", "CTranslate2 sentences/s (per CPU-second)"], rows)


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.child:
        child(args.child, args.limit, args.threads, repeats=1 if args.quick or args.child in BACKENDS else 2)
        return
    if args.quick:
        args.limit, args.rounds = args.limit or 96, 1
    print(f"# Engine backends: {harness.describe_machine(args.threads)}")
    parts = {"in-turns": in_turns_part, "precision": precision_part, "backends": backends_part}
    parts |= {"one-process": one_process_part, "device": device_part}
    for part in args.parts:
        parts[part](args)


if __name__ == "__main__":
    main()
