"""Our model against MarianMT at opus-mt-en-de's dimensions: latency, throughput, peak memory, parameters.

MarianMT has random weights (it cannot be downloaded here): speed does not depend on the weights once every output
is forced to one length. Peak memory: a fresh process's peak RSS over its RSS after the imports.

    python -m benchmarks.vs_marian [--quick]
"""

import json
import resource
import tempfile
from pathlib import Path

import torch
from transformers import MarianConfig, MarianMTModel

from benchmarks import harness
from modeling import TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer

OURS, MARIAN = "ours", "marian"
NAMES = {OURS: "ours", MARIAN: "MarianMT (opus-mt-en-de size)"}
# Helsinki-NLP/opus-mt-en-de's config.json: its architecture, filled with random weights here.
OPUS_MT_EN_DE = """{"vocab_size": 58101, "decoder_vocab_size": 58101, "d_model": 512, "encoder_layers": 6,
    "decoder_layers": 6, "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048, "activation_function": "swish", "max_position_embeddings": 512, "scale_embedding": true,
    "share_encoder_decoder_embeddings": true, "pad_token_id": 58100, "eos_token_id": 0,
    "decoder_start_token_id": 58100}"""


def load(which: str):
    """Our shipped model, or MarianMT at opus-mt-en-de's size with random weights."""
    if which == OURS:
        return TransformerMTForConditionalGeneration.from_pretrained(harness.SHIPPED_DIR).eval()
    torch.manual_seed(0)
    return MarianMTModel(MarianConfig(**json.loads(OPUS_MT_EN_DE))).eval()


def inputs_for(model, our_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Ours for our model; for MarianMT random ids of the same lengths, each ending in </s>."""
    if not isinstance(model, MarianMTModel):
        return our_inputs
    config, mask = model.config, our_inputs["attention_mask"]
    ids = torch.randint(1, config.vocab_size - 1, mask.shape, generator=torch.Generator().manual_seed(0))
    ids[torch.arange(mask.shape[0]), mask.sum(1) - 1] = config.eos_token_id
    return {"input_ids": ids.masked_fill(mask == 0, config.pad_token_id), "attention_mask": mask.clone()}


def translate(model, inputs, args) -> torch.Tensor:
    with torch.inference_mode():
        length = dict(min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens)
        return model.generate(**inputs, num_beams=args.num_beams, do_sample=False, **length)


def memory_child(args) -> None:
    baseline = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    model = load(args.memory_of)
    translate(model, inputs_for(model, torch.load(args.memory_folder / "inputs.pt")), args)
    print(json.dumps({"peak": harness.peak_rss_bytes() - baseline}))


def options(parser):
    parser.add_argument("--num-beams", type=int, default=4, help="beams for both models (default 4, the paper's)")
    parser.add_argument("--new-tokens", type=int, default=20, help="tokens generated per sentence, both models")
    parser.add_argument("--batch-size", type=int, default=32, help="batch for the throughput and memory figures")
    parser.add_argument("--memory-of", choices=[OURS, MARIAN], help="(internal) measure one model's memory")
    parser.add_argument("--memory-folder", type=Path, help="(internal) where the parent left the inputs")


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.memory_of:
        memory_child(args)
        return
    tokenizer = load_tokenizer(harness.SHIPPED_DIR)
    models = {name: load(name) for name in (OURS, MARIAN)}
    english, _ = harness.sample_sentences("test_2016_flickr", args.batch_size)
    single_count, rounds = (4, 1) if args.quick else (8, 3)
    singles = [tokenizer(sentence, return_tensors="pt") for sentence in english[:single_count]]
    batch = tokenizer(english, padding=True, return_tensors="pt")

    def one_by_one(model):
        inputs = [inputs_for(model, single) for single in singles]
        return lambda: [translate(model, one, args) for one in inputs]

    def batched(model):
        inputs = inputs_for(model, batch)
        return lambda: translate(model, inputs, args)

    latency = harness.alternate({name: one_by_one(model) for name, model in models.items()}, rounds=rounds)
    throughput = harness.alternate({name: batched(m) for name, m in models.items()}, rounds, warmup=int(not args.quick))
    memory = {}
    with tempfile.TemporaryDirectory() as folder:
        torch.save(dict(batch), Path(folder) / "inputs.pt")
        for name in models:
            flags = ["--threads", str(args.threads), "--memory-of", name, "--memory-folder", folder, "--num-beams"]
            flags += [str(args.num_beams), "--new-tokens", str(args.new_tokens)]
            memory[name] = harness.json_from_child("benchmarks.vs_marian", *flags)["peak"]
    parameters = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}

    print(f"# Ours vs MarianMT ({harness.describe_machine(args.threads)}; our weights: models/transformer-en-de)")
    print(
        f"# float32, beam {args.num_beams}, {args.new_tokens} new tokens per sentence (forced), test_2016_flickr "
        f"sources; latency over {single_count} sentences one at a time, throughput on a batch of {args.batch_size}; "
        f"{rounds} rounds; memory: peak RSS of a fresh process (load + one batch) minus its RSS after imports"
    )
    rows = []
    for name in models:
        rows.append([NAMES[name], f"{parameters[name] / 1e6:.1f}M", f"{4 * parameters[name] / 2**20:.0f}"])
        rows[-1] += [f"{1000 * latency[name].seconds / single_count:.0f}"]
        rows[-1] += [f"{args.batch_size / throughput[name].seconds:.1f}", f"{memory[name] / 2**20:.0f}"]
    ratios = [parameters[MARIAN] / parameters[OURS]] * 2
    ratios += [latency[MARIAN].seconds / latency[OURS].seconds, throughput[MARIAN].seconds / throughput[OURS].seconds]
    rows.append(["ratio (MarianMT / ours)", *(f"{ratio:.1f}x" for ratio in ratios + [memory[MARIAN] / memory[OURS]])])
    header = ["model", "parameters", "float32 weights (MiB)", "ms per sentence (batch 1)"]
    harness.print_table(header + [f"sentences/s (batch {args.batch_size})", "peak RSS (MiB)"], rows)
    cpu_latency = latency[MARIAN].cpu_seconds / latency[OURS].cpu_seconds
    cpu_throughput = throughput[MARIAN].cpu_seconds / throughput[OURS].cpu_seconds
    print(f"CPU-time ratios (MarianMT / ours): latency {cpu_latency:.1f}x, batch throughput {cpu_throughput:.1f}x")


if __name__ == "__main__":
    main()
