"""Which encoder and decoder depths can clear the shipping rule's speed side (1.3x the shipped model's through
`generate()`, batch 32 and 1), measured before any of them is trained: random weights, every output held to the length
of the shipped model's own translation. `--free-running`: trained folders as a Hub user runs them, and CTranslate2.

    OMP_NUM_THREADS=1 python -m benchmarks.shape_speed 6x1 6x2 8x1 12x1 12x2 --candidate runs/NAME --threads 1
    OMP_NUM_THREADS=1 python -m benchmarks.shape_speed --free-running --candidate runs/NAME --threads 1
"""

import argparse
import json
import statistics
from functools import partial
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig, LogitsProcessorList

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.length_bound import force_eos
from tokenizer import load_tokenizer
from transformer_en_de.decoding.backends import load_backend
from transformer_en_de.decoding.engine import DecodingSettings, translate

MODULE = "benchmarks.shape_speed"
REFERENCE = "reference"  # the shipped model's own weights
SHIPPED_SHAPE = "shipped shape"  # its config, random weights: what the shapes are compared with
PATHS = ["batch 32", "batch 1"]


def parse_shape(shape: str) -> dict:
    """`ENCxDEC[:field=value,...]` as config fields, e.g. `6x1:d_ff=2048` -> encoder 6, decoder 1, d_ff 2048."""
    depths, _, rest = shape.partition(":")
    try:
        encoder, decoder = (int(layers) for layers in depths.lower().split("x"))
        fields = {"encoder_layers": encoder, "decoder_layers": decoder}
        for item in filter(None, rest.split(",")):
            name, value = item.split("=")
            fields[name] = json.loads(value)
    except ValueError as error:
        raise ValueError(f"{shape!r}: a shape is ENCxDEC[:field=value,...], e.g. 6x1 or 6x1:d_ff=2048") from error
    return fields


class HeldLength:
    """Ends every beam of sentence i after exactly `new_tokens[i]` tokens, `</s>` included; `select_sentences` follows
    the beam search as finished sentences leave the batch."""

    def __init__(self, new_tokens: torch.Tensor, eos_token_id: int, prompt_length: int | None = None):
        self.new_tokens, self.eos_token_id, self.prompt_length = new_tokens, eos_token_id, prompt_length

    def select_sentences(self, sentences: torch.Tensor) -> "HeldLength":
        return HeldLength(self.new_tokens[sentences], self.eos_token_id, self.prompt_length)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        generated = input_ids.shape[1] - self.prompt_length
        rows = self.new_tokens.repeat_interleave(input_ids.shape[0] // self.new_tokens.shape[0])
        scores = force_eos(scores, rows <= generated + 1, self.eos_token_id)  # this token is the sentence's last
        scores[rows > generated + 1, self.eos_token_id] = -float("inf")
        return scores


def new_tokens_of(sequences: torch.Tensor, eos_token_id: int) -> list[int]:
    """Tokens each sequence wrote after its one-token prompt, `</s>` included (its whole row where it has none)."""
    ends = sequences[:, 1:] == eos_token_id
    return [int(row.int().argmax()) + 1 if row.any() else row.numel() for row in ends]


def load(spec: str, reference: str):
    """The reference folder, a trained folder, or a shape of the reference's config (random weights, seed 0)."""
    if spec == REFERENCE or Path(spec).is_dir():
        return TransformerMTForConditionalGeneration.from_pretrained(reference if spec == REFERENCE else spec).eval()
    config = TransformerMTConfig.from_pretrained(reference)
    decoding = GenerationConfig.from_pretrained(reference)  # the shipped decoding unless the spec says
    for name, value in ({} if spec == SHIPPED_SHAPE else parse_shape(spec)).items():
        if hasattr(config, name):
            setattr(config, name, value)
        elif hasattr(decoding, name):
            setattr(decoding, name, value)
        else:
            raise SystemExit(f"{spec!r}: neither the config nor the generation config has a field {name!r}")
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(config).eval()
    model.generation_config = decoding
    return model


def free_running(args) -> dict:
    english, _ = harness.sample_sentences("val", args.sentences)
    folder = args.shapes[0]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    backend = load_backend(folder, model, tokenizer, threads=args.threads)
    settings = DecodingSettings(batch_size=32)
    translate(model, tokenizer, english[:8], settings, backend=backend)  # warm-up

    def generate(batches: list[list[str]]) -> None:
        with torch.inference_mode():
            for batch in batches:
                model.generate(**tokenizer(batch, padding=True, return_tensors="pt"))

    paths = {
        "generate(), batch 32": lambda: generate([english[i : i + 32] for i in range(0, len(english), 32)]),
        "generate(), batch 1": lambda: generate([[sentence] for sentence in english[: args.batch1]]),
        "CTranslate2 (engine), batch 32": partial(translate, model, tokenizer, english, settings, backend=backend),
    }
    timings = harness.alternate(paths, rounds=1, warmup=0)
    return {path: (args.batch1 if path.endswith("batch 1") else len(english)) / timings[path].seconds for path in paths}


def child(args) -> dict:
    """One model's timings; with no lengths given, the reference's own output lengths."""
    torch.set_num_threads(args.threads)
    if args.free_running:
        return free_running(args)
    english, _ = harness.sample_sentences("val", args.sentences)
    tokenizer = AutoTokenizer.from_pretrained(args.reference, trust_remote_code=True)
    model = load(args.shapes[0], args.reference)
    eos = model.generation_config.eos_token_id

    def generate(start: int, count: int, held: list[int] | None) -> list[int]:
        processors = LogitsProcessorList([HeldLength(torch.tensor(held[start : start + count]), eos)] if held else [])
        inputs = tokenizer(english[start : start + count], padding=True, return_tensors="pt")
        with torch.inference_mode():
            return new_tokens_of(model.generate(**inputs, logits_processor=processors), eos)

    if not args.lengths:
        return {"new_tokens": [n for start in range(0, args.sentences, 32) for n in generate(start, 32, None)]}
    held = json.loads(args.lengths)
    figures, written = {"parameters": sum(p.numel() for p in model.parameters())}, []
    for path, starts, size in (("batch 32", range(0, args.sentences, 32), 32), ("batch 1", range(args.batch1), 1)):
        timing = harness.Timings()
        written += timing.time(lambda starts=starts, size=size: [n for s in starts for n in generate(s, size, held)])
        figures[path] = len(starts) * size / timing.seconds
    figures["lengths held"] = written == held + held[: args.batch1]
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", help="ENCxDEC[:field=value,...], e.g. 6x1 12x2 6x1:d_ff=2048")
    parser.add_argument("--candidate", action="append", default=[], help="a trained folder timed beside the shapes")
    parser.add_argument("--sentences", type=int, default=256, help="val sentences in batches of 32")
    parser.add_argument("--batch1", type=int, help="the first of them, one at a time (96; free-running 64)")
    parser.add_argument("--free-running", action="store_true", help="trained folders as they run, and CTranslate2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.reference = str(harness.SHIPPED_DIR)
    args.batch1 = args.batch1 or (64 if args.free_running else 96)
    if args.child:
        print(json.dumps(child(args)))
        return
    if not args.shapes and not args.candidate or args.free_running and args.shapes:
        parser.error("give shapes (ENCxDEC) or --candidate folders (only folders with --free-running)")
    if args.sentences % 32 or not 0 < args.batch1 <= args.sentences:
        parser.error("--sentences must be a multiple of 32 and --batch1 at most --sentences")
    for shape in args.shapes:
        try:
            parse_shape(shape)  # a typo fails here, not after the first round
        except ValueError as error:
            parser.error(str(error))
    for folder in args.candidate:
        if not (Path(folder) / "config.json").is_file():
            parser.error(f"--candidate {folder}: not a model folder (no config.json)")
        # Held to lengths counted in the reference's tokens: only the same tokens make them comparable.
        if not args.free_running and load_tokenizer(folder).get_vocab() != load_tokenizer(args.reference).get_vocab():
            parser.error(f"--candidate {folder}: its tokenizer is not the reference's, so its output lengths differ")
    flags = [f"--sentences={args.sentences}", f"--batch1={args.batch1}", "--child", f"--threads={args.threads}"]
    print(
        f"# sentences/s on val (first {args.sentences}; batch 1: first {args.batch1}), median of {args.rounds} rounds"
    )
    if args.free_running:
        folders = [args.reference, *args.candidate]
        runs = harness.rounds_in_children(MODULE, {f: [f, *flags, "--free-running"] for f in folders}, args.rounds)
        rows = []
        for path in runs[args.reference][0]:
            rows.append([path] + [f"{statistics.median(run[path] for run in runs[folder]):.1f}" for folder in folders])
            rows[-1] += [harness.paired_ratio(runs, folder, args.reference, path) for folder in args.candidate]
        harness.print_table(["path", *folders, *(f"ratio {f} (lowest-highest round)" for f in args.candidate)], rows)
    else:
        held_lengths(args, flags)
    print(f"# {harness.describe_machine(args.threads)}")


def held_lengths(args, flags: list[str]) -> None:
    new_tokens = harness.json_from_child(MODULE, REFERENCE, *flags)["new_tokens"]
    specs = [REFERENCE, SHIPPED_SHAPE, *args.shapes, *args.candidate]
    children = {spec: [spec, *flags, f"--lengths={json.dumps(new_tokens)}"] for spec in specs}
    runs = harness.rounds_in_children(MODULE, children, args.rounds)
    if not all(run["lengths held"] for done in runs.values() for run in done):
        raise SystemExit("an output was not held to the reference's length: the figures would not be comparable")

    print(
        f"# generate() with the reference's decoding, each output held to the length of the reference's own "
        f"translation ({statistics.mean(new_tokens):.1f} tokens on average, </s> included)"
    )
    rows = []
    for spec in specs:
        trained = spec == REFERENCE or spec in args.candidate
        name = {REFERENCE: f"{args.reference} (its weights)", SHIPPED_SHAPE: f"{spec}, random weights"}.get(spec, spec)
        base = REFERENCE if trained else SHIPPED_SHAPE
        figures = []
        for path in PATHS:
            figures += [f"{statistics.median(run[path] for run in runs[spec]):.1f}"]
            figures += [harness.paired_ratio(runs, spec, base, path)]
        rows.append([name, "trained" if trained else "random", f"{runs[spec][0]['parameters'] / 1e6:.2f}M", *figures])
    print("# ratio: a trained model's to the shipped model's, a random shape's to the shipped shape's (lowest-highest)")
    harness.print_table(["model", "weights", "parameters", "batch 32", "ratio", "batch 1", "ratio"], rows)


if __name__ == "__main__":
    main()
