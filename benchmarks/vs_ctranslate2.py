"""Corpus decoding against CTranslate2: the same weights in the C++ engine of OpenNMT, our own converter.

Converts the shipped model (`transformer_en_de.ctranslate2_backend.convert`, float32), checks that CTranslate2 and
our model give the same greedy tokens on the first sentences, then translates test_2016_flickr (speed and BLEU
parity only; nothing is tuned on it) with beam 4:
- ours: the engine (`transformer_en_de.engine.translate`) with the model's saved defaults: beam 4, length penalty
  0.6, each sentence bounded by 1.5 x source tokens + 10; our beam search lets finished sentences leave the batch;
- ours, transformers' beam search: the same engine and settings with `model.drop_finished_sentences = False` (the
  ids must be identical to ours);
- generate(): what a Hub user runs, `model.generate(**tokenizer(batch, padding=True, return_tensors="pt"))` with
  the saved defaults, no project code in between (the same ids as the engine); and the same with int8 weights
  (`precision.int8_dynamic`, the opt-in);
- CTranslate2 float32: beam 4, length penalty 0.6, the longest allowed sentence of each batch as its bound.
Batch 1 goes sentence by sentence, batch 32 through the corpus sorted by source length (as the engine sorts it);
the systems alternate on every sentence or batch, so a background load slows all alike.
CTranslate2 runs in a process of its own: once it has run in a process, PyTorch's kernels there are 2-4x slower at
decoding sizes (see `CTranslate2Process`), which would count against ours.

Then the per-sentence bound on val: ours with it and without it (`max_new_tokens_ratio` huge: only the cap of
255 new tokens per batch, the bound before this one), sentences/s and BLEU.

    python -m benchmarks.vs_ctranslate2 [--quick] [--threads 1]

Needs `pip install ctranslate2` (not a dependency of the project).
"""

import copy
import dataclasses
import multiprocessing
import sys
import tempfile
import time

import torch

from benchmarks import harness
from modeling import TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer
from transformer_en_de import ctranslate2_backend
from transformer_en_de.engine import DecodingSettings, token_limits, translate
from transformer_en_de.evaluation import corpus_scores
from transformer_en_de.precision import int8_dynamic

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


@dataclasses.dataclass
class Result:
    hypotheses: list[list[str]]  # what translate_ids reads of a ctranslate2.TranslationResult


class CTranslate2Process:
    """A CTranslate2 translator in a process of its own, with the `translate_batch` that `translate_ids` calls.

    Once CTranslate2 has run in a process, PyTorch's kernels in that process stay 2-4x slower at the sizes of decoding
    (measured on an AMD EPYC with AVX-512, 2 threads: `F.linear` of 4 rows by a 1024 x 256 weight 80 -> 159 us,
    oneDNN's packed linear 31 -> 119 us, at 128 rows 499 -> 790 and 354 -> 421 us), even while it is idle; each
    library brings its own OpenMP runtime. In one process the comparison would be CTranslate2 against a slowed
    PyTorch. Its wall time is measured around the call (the pipe adds well under a millisecond); its CPU time is the
    child's own, added up in `cpu_seconds`."""

    def __init__(self, folder: str, threads: int):
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=serve_ctranslate2, args=(child, folder, threads), daemon=True)
        self.process.start()
        self.cpu_seconds = 0.0

    def translate_batch(self, sources: list[list[str]], **options) -> list[Result]:
        self.connection.send((sources, options))
        hypotheses, cpu_seconds = self.connection.recv()
        self.cpu_seconds += cpu_seconds
        return [Result([tokens]) for tokens in hypotheses]

    def close(self) -> None:
        self.connection.send(None)
        self.process.join(timeout=30)


def serve_ctranslate2(connection, folder: str, threads: int) -> None:
    """The child of `CTranslate2Process`: translates what it receives until it receives None."""
    translator = ctranslate2_backend.load(folder, threads=threads)
    while (request := connection.recv()) is not None:
        sources, options = request
        start = time.process_time()
        results = translator.translate_batch(sources, **options)
        connection.send(([result.hypotheses[0] for result in results], time.process_time() - start))


def check_greedy_parity(model, tokenizer, translator, sources: list[str]) -> int:
    """CTranslate2 and our model must write the same greedy tokens: the converter maps every weight right."""
    ids = tokenizer(sources)["input_ids"]
    cap = 100
    theirs = ctranslate2_backend.translate_ids(translator, tokenizer, ids, beam_size=1, max_decoding_length=cap)
    settings = DecodingSettings(num_beams=1, max_new_tokens=cap, max_new_tokens_ratio=NO_BOUND_RATIO)
    ours = translate(model, tokenizer, sources, settings).translations
    eos = model.config.eos_token_id
    # Ours counts the </s> it forces at the cap as a new token, CTranslate2 does not: compare cap - 1 tokens.
    differ = [
        index
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True))
        if [token for token in mine.generated_ids[1:] if token != eos][: cap - 1] != other[: cap - 1]
    ]
    if differ:
        raise AssertionError(f"greedy tokens differ between CTranslate2 and our model on sentences {differ[:10]}")
    return len(sources)


def ctranslate2_batch(translator, tokenizer, model, sentences: list[str], batch_size: int) -> list[str]:
    """CTranslate2 beam 4 over `sentences` in length-sorted batches, bounded per batch like the engine's longest."""
    limits = token_limits(model, tokenizer, sentences)
    ids = tokenizer(sentences)["input_ids"]
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]), reverse=True)
    texts = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        outputs = ctranslate2_backend.translate_ids(
            translator,
            tokenizer,
            [ids[index] for index in chosen],
            beam_size=model.generation_config.num_beams,
            length_penalty=model.generation_config.length_penalty,
            max_decoding_length=max(limits[index] for index in chosen),
        )
        for index, output in zip(chosen, outputs, strict=True):
            texts[index] = tokenizer.decode(output, skip_special_tokens=True).strip()
    return texts


def corpus_run(systems: dict, sources: list[str], batch_size: int, rounds: int):
    """Each system over `sources` in length-sorted chunks of `batch_size`, alternating on every chunk. A system that
    runs in another process (`systems["processes"]`: name -> its `cpu_seconds` counter) adds that process's CPU time."""
    lengths = [len(ids) for ids in systems["tokenizer"](sources)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda index: lengths[index], reverse=True)
    chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    runners = systems["runners"]
    texts = {name: [""] * len(sources) for name in runners}
    totals = {name: harness.Timings() for name in runners}
    for process in systems.get("processes", {}).values():
        process.cpu_seconds = 0.0  # what it did before (warm-up, parity check) is not this run's
    for _ in range(rounds):
        seconds = dict.fromkeys(runners, 0.0)
        cpu = dict.fromkeys(runners, 0.0)
        for number, chunk in enumerate(chunks):
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
            for name, process in systems.get("processes", {}).items():
                cpu[name] += process.cpu_seconds
                process.cpu_seconds = 0.0
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
        translator = CTranslate2Process(folder, threads=args.threads)
        checked = check_greedy_parity(model, tokenizer, translator, sources[: args.parity_sentences])

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
            return ctranslate2_batch(translator, tokenizer, model, chunk, batch_size)

        results = {}
        common = {CT2: theirs, HUB: hub_user(model), HUB_INT8: hub_user(int8_model), OURS: ours(model)}
        for batch_size, runners in ((1, common), (32, common | {PLAIN: ours(plain_model)})):
            rounds = args.rounds if batch_size > 1 else 1
            theirs(sources[:batch_size], batch_size), ours(model)(sources[:batch_size], batch_size)  # warm-up
            corpus = sources[: args.batch1_sentences] if batch_size == 1 else sources
            systems = {"tokenizer": tokenizer, "runners": runners, "processes": {CT2: translator}}
            results[batch_size] = corpus_run(systems, corpus, batch_size, rounds)
        translator.close()

    print(f"# Ours vs CTranslate2 {harness.describe_machine(args.threads)}; model: models/transformer-en-de")
    print(
        f"# greedy parity: same tokens on {checked} sentences. test_2016_flickr, {len(sources)} sentences, beam 4, "
        "length penalty 0.6; ours: the engine with the model's defaults (bound 1.5 x source + 10 per sentence); "
        "CTranslate2: the batch's longest bound; systems alternate on every sentence / batch"
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
    print(f"# The per-sentence bound: ours on val, {len(val_sources)} sentences, beam 4, batches of 32")
    rows = []
    for name in bounded:
        scores = corpus_scores(texts[name], val_references)
        rows.append([name, f"{len(val_sources) / timings[name].seconds:.1f}", f"{scores['bleu']:.2f}"])
    harness.print_table(["decoding", "sentences/s", "BLEU"], rows)


if __name__ == "__main__":
    main()
