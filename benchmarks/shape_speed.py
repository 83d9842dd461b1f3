"""Which encoder and decoder depths can clear the shipping rule's speed side, measured before any of them is trained.

The rule (a) of a model round asks a candidate to decode at least 1.3x as fast as the shipped model through
`generate()` at batch 32 and at batch 1 (`benchmarks.model_speed` measures two trained folders). What a decoding costs
depends on the shape and on how long each output is, hardly on what the weights say; but a shape with random weights
writes outputs of any length. So here every sentence's output is held to the length of the shipped model's own
translation of it (the end token forbidden before that length and forced at it, for every beam; the tokens themselves
are the model's own choice), and every model is timed that way.

Weights still move a timing by a few percent (random ones decode a little faster than trained ones, at the same
lengths), so each shape, built from the shipped model's config with random weights, is compared with the shipped
shape built the same way (the row `shipped shape, random weights`); a trained folder (`--candidate`) is compared with
the shipped model's own weights, which is the ratio `benchmarks.model_speed` gives but for the candidate's own output
lengths (a longer-writing model is slower free-running than held).

Each model runs in a process of its own, one after the other in every round; the median over rounds is printed.
Shapes are `ENCxDEC[:field=value,...]`, e.g. `6x1`, `12x2`, `6x1:d_ff=2048`; a field of the generation config rather
than the model's config sets that model's decoding (`6x2:num_beams=2`, `3x3:num_beams=2` for the shipped shape at two
beams), every output still held to the reference's lengths.

    OMP_NUM_THREADS=1 python -m benchmarks.shape_speed 6x1 6x2 8x1 12x1 12x2 --candidate runs/NAME --threads 1
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import harness
from modeling.length_bound import force_eos
from tokenizer import load_tokenizer

REFERENCE = "reference"  # the shipped model's own weights
SHIPPED_SHAPE = "shipped shape"  # its config, random weights: what the shapes are compared with


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
    """A logits processor that ends every beam of sentence i after exactly `new_tokens[i]` tokens (its `</s>`
    included): `</s>` is forbidden before, and the only choice at, that step. It narrows to a subset of the sentences
    (`select_sentences`) as the model's beam search lets finished sentences leave the batch."""

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
    """How many tokens each returned sequence wrote after its decoder prompt (one token), its `</s>` included (all of
    its row where it has none)."""
    ends = sequences[:, 1:] == eos_token_id
    return [int(row.int().argmax()) + 1 if row.any() else row.numel() for row in ends]


def load(spec: str, reference: str):
    """A model to time: the reference folder, a trained folder, or a shape of the reference's config (random weights,
    the same seed every time)."""
    from transformers import GenerationConfig

    from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration

    if spec == REFERENCE or Path(spec).is_dir():
        return TransformerMTForConditionalGeneration.from_pretrained(reference if spec == REFERENCE else spec).eval()
    config = TransformerMTConfig.from_pretrained(reference)
    # the shipped decoding, its beams and all, unless the spec says
    decoding = GenerationConfig.from_pretrained(reference)
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


def child(spec: str, reference: str, lengths_file: str, sentences: int, batch1: int, threads: int) -> dict:
    """One model's timings (in its own process); with no lengths file, the reference's own output lengths."""
    from transformers import AutoTokenizer, LogitsProcessorList

    torch.set_num_threads(threads)
    english, _ = harness.sample_sentences("val", sentences)
    tokenizer = AutoTokenizer.from_pretrained(reference, trust_remote_code=True)
    model = load(spec, reference)
    eos = model.generation_config.eos_token_id

    def generate(start: int, count: int, held: list[int] | None) -> list[int]:
        processors = LogitsProcessorList([HeldLength(torch.tensor(held[start : start + count]), eos)] if held else [])
        with torch.inference_mode():
            output = model.generate(
                **tokenizer(english[start : start + count], padding=True, return_tensors="pt"),
                logits_processor=processors,
            )
        return new_tokens_of(output, eos)

    if not lengths_file:
        return {"new_tokens": [n for start in range(0, sentences, 32) for n in generate(start, 32, None)]}
    held = json.loads(Path(lengths_file).read_text())
    figures, written = {"parameters": sum(p.numel() for p in model.parameters())}, []
    started = time.perf_counter()
    for start in range(0, sentences, 32):
        written += generate(start, 32, held)
    figures["batch 32"] = sentences / (time.perf_counter() - started)
    started = time.perf_counter()
    for start in range(batch1):
        written += generate(start, 1, held)
    figures["batch 1"] = batch1 / (time.perf_counter() - started)
    figures["lengths held"] = written == held + held[:batch1]
    return figures


def run_child(spec: str, args, lengths_file: str = "") -> dict:
    return harness.json_from_child(
        "benchmarks.shape_speed",
        spec,
        "--child",
        f"--reference={args.reference}",
        f"--lengths={lengths_file}",
        f"--sentences={args.sentences}",
        f"--batch1={args.batch1}",
        f"--threads={args.threads}",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="ENCxDEC[:field=value,...], e.g. 6x1 12x2 6x1:d_ff=2048")
    parser.add_argument("--reference", default=str(harness.SHIPPED_DIR), help="the shipped model's folder")
    parser.add_argument("--candidate", action="append", default=[], help="a trained folder timed beside the shapes")
    parser.add_argument("--sentences", type=int, default=256, help="val sentences in batches of 32")
    parser.add_argument("--batch1", type=int, default=96, help="the first of them, one at a time")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(
            json.dumps(child(args.shapes[0], args.reference, args.lengths, args.sentences, args.batch1, args.threads))
        )
        return
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
        # Its outputs are held to lengths counted in the reference's tokens: only the same tokens make them comparable.
        if load_tokenizer(folder).get_vocab() != load_tokenizer(args.reference).get_vocab():
            parser.error(f"--candidate {folder}: its tokenizer is not the reference's, so its output lengths differ")

    new_tokens = run_child(REFERENCE, args)["new_tokens"]
    specs = [REFERENCE, SHIPPED_SHAPE, *args.shapes, *args.candidate]
    runs = {spec: [] for spec in specs}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as lengths:
        lengths.write(json.dumps(new_tokens))
        lengths.flush()
        for _ in range(args.rounds):
            for spec in specs:
                runs[spec].append(run_child(spec, args, lengths.name))
    if not all(run["lengths held"] for done in runs.values() for run in done):
        raise SystemExit("an output was not held to the reference's length: the figures would not be comparable")

    paths = ["batch 32", "batch 1"]
    median = {
        spec: {path: statistics.median(run[path] for run in done) for path in paths} for spec, done in runs.items()
    }
    print(
        f"# generate() with the reference's decoding settings, each output held to the length of the reference's own "
        f"translation ({statistics.mean(new_tokens):.1f} tokens on average, </s> included); sentences per second on "
        f"val (first {args.sentences} in batches of 32; first {args.batch1} one at a time), median of {args.rounds} "
        f"rounds, each model in its own process"
    )
    rows = []
    for spec in specs:
        trained = spec == REFERENCE or spec in args.candidate
        name = f"{args.reference} (its weights)" if spec == REFERENCE else spec
        if spec == SHIPPED_SHAPE:
            name += ", random weights"
        base = REFERENCE if trained else SHIPPED_SHAPE
        figures = [
            cell
            for path in paths
            for cell in (f"{median[spec][path]:.1f}", harness.paired_ratio(runs, spec, base, path))
        ]
        rows.append([name, "trained" if trained else "random", f"{runs[spec][0]['parameters'] / 1e6:.2f}M", *figures])
    print(
        "# ratio: a trained model's to the shipped model's, a random shape's to the shipped shape's (random too); "
        "the median of the rounds' ratios (lowest-highest round)"
    )
    harness.print_table(["model", "weights", "parameters", "batch 32", "ratio", "batch 1", "ratio"], rows)
    print(f"# {harness.describe_machine(args.threads)}")


if __name__ == "__main__":
    main()
