"""Corpus decoding against CTranslate2: the same weights in the C++ engine of OpenNMT, our own converter.

Converts the shipped model (`decoding.ctranslate2_backend.convert`, float32), checks that CTranslate2 and
our model give the same greedy tokens on the first sentences, then translates test_2016_flickr (speed and BLEU
parity only; nothing is tuned on it) with the model's saved beams:
- ours: the engine (`decoding.engine.translate`) with the model's saved defaults: its beams, its length penalty,
  each sentence bounded by 1.5 x source tokens + 10; our beam search lets finished sentences leave the batch;
- ours, transformers' beam search: the same engine and settings with `model.drop_finished_sentences = False` (the
  ids must be identical to ours);
- generate(): what a Hub user runs, `model.generate(**tokenizer(batch, padding=True, return_tensors="pt"))` with
  the saved defaults, no project code in between (the same ids as the engine); and the same with int8 weights
  (`precision.int8_dynamic`, the opt-in);
- CTranslate2 float32: the engine with its CTranslate2 backend (`backends.CTranslate2Backend`): the same settings,
  the same bound per sentence; CTranslate2 runs in its worker process, so it never shares a process (and an OpenMP
  runtime) with PyTorch (`python -m benchmarks.engine_backends` measures what sharing one costs).
Batch 1 goes sentence by sentence, batch 32 through the corpus sorted by source length (as the engine sorts it);
the systems alternate on every sentence or batch, so a background load slows all alike. CTranslate2's CPU time is
its worker's.

Then the per-sentence bound on val: ours with it and without it (`max_new_tokens_ratio` huge: only the cap of
255 new tokens per batch, the bound before this one), sentences/s and BLEU.

    python -m benchmarks.vs_ctranslate2 [--quick] [--threads 1]

Needs `pip install ctranslate2` (not a dependency of the project).
"""

import copy
import sys
import tempfile

import torch

from benchmarks import harness
from modeling import TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer
from transformer_en_de.decoding import ctranslate2_backend
from transformer_en_de.decoding.backends import CTranslate2Backend
from transformer_en_de.decoding.engine import DecodingSettings, translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.evaluation import corpus_scores

CT2 = "CTranslate2 float32"
OURS = "ours (engine)"
PLAIN = "ours, transformers' beam search"
HUB = "generate() defaults"
HUB_INT8 = "generate() defaults, int8 weights"
NO_BOUND_RATIO = 1e6  # every limit is then the cap of max_new_tokens: the bound is off


def options(parser):
    parser.add_argument("--parity-sentences", type=int, default=100, help="sentences for the greedy parity check")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences of each split")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the corpus at batch 32 (median)")
    parser.add_argument("--batch1-sentences", type=int, default=None, help="batch 1 on the first N only (default all)")
    parser.add_argument("--skip-bound", action="store_true", help="leave out the bound on/off figures on val")


def check_greedy_parity(model, tokenizer, decoder, sources: list[str]) -> int:
    """CTranslate2 and our model must write the same greedy tokens: the converter maps every weight right."""
    settings = DecodingSettings(num_beams=1, max_new_tokens=100, max_new_tokens_ratio=NO_BOUND_RATIO)
    ours = translate(model, tokenizer, sources, settings).translations
    theirs = translate(model, tokenizer, sources, settings, backend=decoder).translations
    differ = [
        index
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True))
        if mine.generated_ids != other.generated_ids
    ]
    if differ:
        raise AssertionError(f"greedy tokens differ between CTranslate2 and our model on sentences {differ[:10]}")
    return len(sources)


def corpus_run(systems: dict, sources: list[str], batch_size: int, rounds: int):
    """Each system over `sources` in length-sorted chunks of `batch_size`, alternating on every chunk. A system that
    runs in another process (`systems["processes"]`: name -> its backend) adds that process's CPU time."""
    lengths = [len(ids) for ids in systems["tokenizer"](sources)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda index: lengths[index], reverse=True)
    chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    runners = systems["runners"]
    texts = {name: [""] * len(sources) for name in runners}
    totals = {name: harness.Timings() for name in runners}
    processes = systems.get("processes", {})
    for _ in range(rounds):
        seconds = dict.fromkeys(runners, 0.0)
        cpu = dict.fromkeys(runners, 0.0)
        for number, chunk in enumerate(chunks):
            before = {name: process.cpu_seconds() for name, process in processes.items()}
            chunk_sources = [sources[index] for index in chunk]
            outputs = {}
            step = harness.alternate(
                {
                    name: lambda run=run, name=name, chunk=chunk_sources, outputs=outputs: outputs.__setitem__(
                        name, run(chunk, batch_size)
                    )
                    for name, run in runners.items()
                },
                rounds=1,
                warmup=0,
            )
            for name in runners:
                seconds[name] += step[name].wall[0]
                cpu[name] += step[name].cpu[0]
                for index, text in zip(chunk, outputs[name], strict=True):
                    texts[name][index] = text
            for name, process in processes.items():
                cpu[name] += process.cpu_seconds() - before[name]
            if number % 20 == 19:
                print(f"  batch {batch_size}: {number + 1}/{len(chunks)} chunks", file=sys.stderr)
        for name in runners:
            totals[name].wall.append(seconds[name])
            totals[name].cpu.append(cpu[name])
    return texts, totals


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if not (harness.SHIPPED_DIR / "model.safetensors").is_file():
        raise SystemExit(f"No trained model at {harness.SHIPPED_DIR}: this benchmark needs the shipped weights.")
    tokenizer = load_tokenizer(harness.SHIPPED_DIR)
    model = TransformerMTForConditionalGeneration.from_pretrained(harness.SHIPPED_DIR).eval()
    plain_model = copy.deepcopy(model)
    plain_model.drop_finished_sentences = False
    int8_model = int8_dynamic(model)
    limit = 96 if args.quick and args.limit is None else args.limit
    sources = harness.read_split("test_2016_flickr", "en")[:limit]
    references = harness.read_split("test_2016_flickr", "de")[:limit]

    with tempfile.TemporaryDirectory() as folder:
        ctranslate2_backend.convert(model, tokenizer, folder)
        decoder = CTranslate2Backend(folder, tokenizer, threads=args.threads)
        checked = check_greedy_parity(model, tokenizer, decoder, sources[: args.parity_sentences])

        def ours(model):
            return lambda chunk, batch_size: (
                translate(model, tokenizer, chunk, DecodingSettings(batch_size=batch_size)).texts
            )

        def hub_user(model):
            def run(chunk, batch_size):
                with torch.inference_mode():
                    generated = model.generate(**tokenizer(chunk, padding=True, return_tensors="pt"))
                return [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]

            return run

        def theirs(chunk, batch_size):
            return translate(model, tokenizer, chunk, DecodingSettings(batch_size=batch_size), backend=decoder).texts

        results = {}
        common = {CT2: theirs, HUB: hub_user(model), HUB_INT8: hub_user(int8_model), OURS: ours(model)}
        for batch_size, runners in ((1, common), (32, common | {PLAIN: ours(plain_model)})):
            rounds = args.rounds if batch_size > 1 else 1
            theirs(sources[:batch_size], batch_size), ours(model)(sources[:batch_size], batch_size)  # warm-up
            corpus = sources[: args.batch1_sentences] if batch_size == 1 else sources
            systems = {"tokenizer": tokenizer, "runners": runners, "processes": {CT2: decoder}}
            results[batch_size] = corpus_run(systems, corpus, batch_size, rounds)
        decoder.close()

    print(f"# Ours vs CTranslate2 {harness.describe_machine(args.threads)}; model: models/transformer-en-de")
    print(
        f"# greedy parity: same tokens on {checked} sentences. test_2016_flickr, {len(sources)} sentences, beam "
        f"{model.generation_config.num_beams}, length penalty {model.generation_config.length_penalty}; the engine "
        "with the model's defaults (bound 1.5 x source + 10 per sentence) with each backend; systems alternate on "
        "every sentence / batch"
    )
    rows = []
    for batch_size, (texts, timings) in results.items():
        count = len(texts[CT2])
        for name in timings:
            scores = corpus_scores(texts[name], references[:count])
            rows.append(
                [
                    batch_size,
                    f"{name}, {count} sentences",
                    f"{count / timings[name].seconds:.1f}",
                    f"{timings[name].seconds / timings[CT2].seconds:.2f}x",
                    f"{timings[name].cpu_seconds / timings[CT2].cpu_seconds:.2f}x",
                    f"{scores['bleu']:.2f}",
                ]
            )
    harness.print_table(
        ["batch", "system", "sentences/s", "CTranslate2 speed / this (wall)", "same, CPU time", "BLEU"], rows
    )
    texts32 = results[32][0]
    print(f"ours and transformers' beam search give identical translations: {texts32[OURS] == texts32[PLAIN]}")
    print(f"generate() and the engine give identical translations: {texts32[HUB] == texts32[OURS]}")

    if args.skip_bound:
        return
    val_sources = harness.read_split("val", "en")[:limit]
    val_references = harness.read_split("val", "de")[:limit]
    bounded = {
        "bound 1.5 x source + 10 (default)": DecodingSettings(),
        "no bound (cap of 255 new tokens per batch)": DecodingSettings(max_new_tokens_ratio=NO_BOUND_RATIO),
    }
    texts, timings = corpus_run(
        {
            "tokenizer": tokenizer,
            "runners": {
                name: lambda chunk, batch_size, settings=settings: translate(model, tokenizer, chunk, settings).texts
                for name, settings in bounded.items()
            },
        },
        val_sources,
        32,
        1,
    )
    beams = model.generation_config.num_beams
    print(f"# The per-sentence bound: ours on val, {len(val_sources)} sentences, {beams} beams, batches of 32")
    rows = []
    for name in bounded:
        scores = corpus_scores(texts[name], val_references)
        rows.append([name, f"{len(val_sources) / timings[name].seconds:.1f}", f"{scores['bleu']:.2f}"])
    harness.print_table(["decoding", "sentences/s", "BLEU"], rows)


if __name__ == "__main__":
    main()
