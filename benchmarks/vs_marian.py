"""Our model against MarianMT at opus-mt-en-de's dimensions: latency, throughput, peak memory, parameters.

MarianMT cannot be downloaded here, so it is built with random weights at the real model's sizes (d_model 512,
6+6 layers, 8 heads, FFN 2048, SiLU, 58,101-token shared vocabulary, static sinusoidal positions); speed does not
depend on the weights once every output is forced to the same length (min_new_tokens = max_new_tokens). Its
inputs are random ids with the lengths our tokenizer gives the same sentences, since its SentencePiece model is
not available offline either. Both decode with the same number of beams, in float32, under inference mode.

Peak memory: each model runs in a fresh child process that loads it and translates one batch; the figure is that
process's peak resident set size (VmHWM) minus its RSS right after importing torch and transformers, so it holds
the weights (ours memory-mapped from safetensors, MarianMT's built in memory), activations and caches.

    python -m benchmarks.vs_marian [--quick]
"""

import json
import resource
import tempfile
from pathlib import Path

import torch
from transformers import MarianConfig, MarianMTModel

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration

MARIAN_NAME = "MarianMT (opus-mt-en-de size)"
OURS_NAME = "ours"


def opus_mt_en_de_config() -> MarianConfig:
    """The architecture of Helsinki-NLP/opus-mt-en-de (its config.json), to be filled with random weights."""
    return MarianConfig(
        vocab_size=58101,
        decoder_vocab_size=58101,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        max_position_embeddings=512,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=58100,
        eos_token_id=0,
        decoder_start_token_id=58100,
    )


def load_ours(config: TransformerMTConfig):
    """The shipped model if it is there, else `config` (the shipped size) with random weights."""
    if (harness.SHIPPED_DIR / "model.safetensors").is_file():
        return TransformerMTForConditionalGeneration.from_pretrained(harness.SHIPPED_DIR).eval()
    torch.manual_seed(0)
    return TransformerMTForConditionalGeneration(config).eval()


def load_marian():
    torch.manual_seed(0)
    return MarianMTModel(opus_mt_en_de_config()).eval()


def marian_inputs(our_inputs: dict[str, torch.Tensor], config: MarianConfig) -> dict[str, torch.Tensor]:
    """Random Marian ids with our sentences' lengths and padding, each sentence ending in </s>."""
    generator = torch.Generator().manual_seed(0)
    mask = our_inputs["attention_mask"]
    ids = torch.randint(1, config.vocab_size - 1, mask.shape, generator=generator)
    ids[torch.arange(mask.shape[0]), mask.sum(1) - 1] = config.eos_token_id
    return {"input_ids": ids.masked_fill(mask == 0, config.pad_token_id), "attention_mask": mask.clone()}


def translate(model, inputs, num_beams: int, new_tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(
            **inputs, num_beams=num_beams, do_sample=False, min_new_tokens=new_tokens, max_new_tokens=new_tokens
        )


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())  # shared tensors counted once


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def measure_memory(which: str, folder: Path, num_beams: int, new_tokens: int) -> None:
    """Child process: load one model, translate the saved batch, print the peak RSS increase as JSON."""
    baseline = rss_bytes()
    inputs = torch.load(folder / "inputs.pt")
    if which == "marian":
        model = load_marian()
        inputs = marian_inputs(inputs, model.config)
    else:
        model = load_ours(TransformerMTConfig.from_pretrained(folder))
    translate(model, inputs, num_beams, new_tokens)
    print(json.dumps({"peak": harness.peak_rss_bytes() - baseline}))


def memory_in_child(which: str, inputs: dict[str, torch.Tensor], config: TransformerMTConfig, args) -> dict[str, int]:
    """Run `measure_memory` in a fresh process, which has not trained a tokenizer or built the other model."""
    with tempfile.TemporaryDirectory() as folder:
        torch.save(dict(inputs), Path(folder) / "inputs.pt")
        config.save_pretrained(folder)
        return harness.json_from_child(
            __spec__.name,
            "--threads",
            str(args.threads),
            "--memory-of",
            which,
            "--memory-folder",
            folder,
            "--num-beams",
            str(args.num_beams),
            "--new-tokens",
            str(args.new_tokens),
        )


def options(parser):
    parser.add_argument("--num-beams", type=int, default=4, help="beams for both models (default 4, the paper's)")
    parser.add_argument("--new-tokens", type=int, default=20, help="tokens generated per sentence, both models")
    parser.add_argument("--batch-size", type=int, default=32, help="batch for the throughput and memory figures")
    parser.add_argument("--memory-of", choices=["ours", "marian"], help="(internal) measure one model's memory")
    parser.add_argument("--memory-folder", type=Path, help="(internal) where the parent left inputs and config")


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.memory_of:
        measure_memory(args.memory_of, args.memory_folder, args.num_beams, args.new_tokens)
        return
    tokenizer = harness.benchmark_tokenizer()
    ours, marian = load_ours(harness.shipped_config(tokenizer)), load_marian()
    english, _ = harness.sample_sentences("test_2016_flickr", args.batch_size)
    single_count = 4 if args.quick else 8
    rounds = 1 if args.quick else 3

    singles = [tokenizer(sentence, return_tensors="pt") for sentence in english[:single_count]]
    marian_singles = [marian_inputs(inputs, marian.config) for inputs in singles]
    batch = tokenizer(english, padding=True, return_tensors="pt")
    marian_batch = marian_inputs(batch, marian.config)

    def one_by_one(model, inputs_list):
        return lambda: [translate(model, inputs, args.num_beams, args.new_tokens) for inputs in inputs_list]

    latency = harness.alternate(
        {OURS_NAME: one_by_one(ours, singles), MARIAN_NAME: one_by_one(marian, marian_singles)},
        rounds=rounds,
        warmup=1,
    )
    throughput = harness.alternate(
        {
            OURS_NAME: lambda: translate(ours, batch, args.num_beams, args.new_tokens),
            MARIAN_NAME: lambda: translate(marian, marian_batch, args.num_beams, args.new_tokens),
        },
        rounds=rounds,
        warmup=1 if not args.quick else 0,
    )
    memory = {
        name: memory_in_child(which, batch, ours.config, args)
        for name, which in ((OURS_NAME, "ours"), (MARIAN_NAME, "marian"))
    }
    parameters = {OURS_NAME: parameter_count(ours), MARIAN_NAME: parameter_count(marian)}

    source = "models/transformer-en-de" if (harness.SHIPPED_DIR / "model.safetensors").is_file() else "random"
    print(f"# Ours vs MarianMT ({harness.describe_machine(args.threads)}; our weights: {source})")
    print(
        f"# float32, beam {args.num_beams}, {args.new_tokens} new tokens per sentence (forced), test_2016_flickr "
        f"sources; latency over {single_count} sentences one at a time, throughput on a batch of {args.batch_size}; "
        f"{rounds} rounds; memory: peak RSS of a fresh process (load + one batch of {args.batch_size}) minus its "
        f"RSS after imports"
    )
    rows = []
    for name in (OURS_NAME, MARIAN_NAME):
        rows.append(
            [
                name,
                f"{parameters[name] / 1e6:.1f}M",
                f"{4 * parameters[name] / 2**20:.0f}",
                f"{1000 * latency[name].seconds / single_count:.0f}",
                f"{args.batch_size / throughput[name].seconds:.1f}",
                f"{memory[name]['peak'] / 2**20:.0f}",
            ]
        )
    rows.append(
        [
            "ratio (MarianMT / ours)",
            f"{parameters[MARIAN_NAME] / parameters[OURS_NAME]:.1f}x",
            f"{parameters[MARIAN_NAME] / parameters[OURS_NAME]:.1f}x",
            f"{latency[MARIAN_NAME].seconds / latency[OURS_NAME].seconds:.1f}x",
            f"{throughput[MARIAN_NAME].seconds / throughput[OURS_NAME].seconds:.1f}x",
            f"{memory[MARIAN_NAME]['peak'] / memory[OURS_NAME]['peak']:.1f}x",
        ]
    )
    harness.print_table(
        [
            "model",
            "parameters",
            "float32 weights (MiB)",
            "ms per sentence (batch 1)",
            f"sentences/s (batch {args.batch_size})",
            "peak RSS (MiB)",
        ],
        rows,
    )
    cpu_latency = latency[MARIAN_NAME].cpu_seconds / latency[OURS_NAME].cpu_seconds
    cpu_throughput = throughput[MARIAN_NAME].cpu_seconds / throughput[OURS_NAME].cpu_seconds
    print(f"CPU-time ratios (MarianMT / ours): latency {cpu_latency:.1f}x, batch throughput {cpu_throughput:.1f}x")


if __name__ == "__main__":
    main()
