"""Training throughput (target tokens/s) of our model against torch.nn.Transformer wired the same way (checked to
compute our loss with our weights), and the matmul FLOP/s of each as a share of this device's measured peak.
`--distillation`: round 7's 6+1 student with and without a teacher. `--memory`: the peak RSS of a `train.py` start
that prepares the mix (reads, mixes, tokenizes) against a second start that reads the mix the first one kept, each a
process of its own, one step, one thread; the default mix is task 1 twice, teacher-big and the tagged back-translation
(528,000 pairs an epoch).

    python -m benchmarks.train_throughput [--quick] [--threads 1] [--batch-size 128] [--distillation]
    python -m benchmarks.train_throughput --memory [--mix CORPUS ...]
"""

import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import harness
from modeling import TransformerMTConfig
from modeling import TransformerMTForConditionalGeneration as Ours
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy, shift_tokens_right, sinusoidal_table
from tokenizer import load_tokenizer
from transformer_en_de.training import precision
from transformer_en_de.training.distillation import Teacher
from transformer_en_de.training.loop import scored_loss


class TorchTransformerMT(nn.Module):
    """`torch.nn.Transformer` with shared embeddings, a tied output projection and sinusoidal positions."""

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.register_buffer("positions", sinusoidal_table(config.max_position_embeddings, config.d_model))
        self.dropout = nn.Dropout(config.dropout)
        layer_options = dict(
            d_model=config.d_model,
            nhead=config.num_attention_heads,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            layer_norm_eps=config.layer_norm_eps,
            batch_first=True,
            norm_first=config.norm_placement == "pre",
        )
        encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**layer_options), config.encoder_layers, enable_nested_tensor=False
        )
        decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer_options), config.decoder_layers)
        # torch uses one dropout rate everywhere; ours separates attention and activation dropout: match them.
        for layer in list(encoder.layers) + list(decoder.layers):
            layer.dropout.p = config.activation_dropout
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = config.attention_dropout
        self.transformer = nn.Transformer(
            config.d_model, config.num_attention_heads, custom_encoder=encoder, custom_decoder=decoder, batch_first=True
        )
        self.embed_scale = math.sqrt(config.d_model)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.shared(ids) * self.embed_scale + self.positions[: ids.shape[1]])  # (B, T, d)

    def forward(self, input_ids, attention_mask, labels):
        decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        source_padding = attention_mask == 0  # (B, S), True where padded
        # With tgt_is_causal and no target padding mask, MultiheadAttention drops this mask (made on the CPU) for SDPA.
        hidden_states = self.transformer(
            self.embed(input_ids),
            self.embed(decoder_input_ids),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(decoder_input_ids.shape[1]),
            src_key_padding_mask=source_padding,
            memory_key_padding_mask=source_padding,
            tgt_is_causal=True,
        )
        logits = F.linear(hidden_states, self.shared.weight)  # tied output projection, (B, T, vocab)
        return F.cross_entropy(
            logits.float().view(-1, logits.shape[-1]),
            labels.view(-1),
            ignore_index=-100,
            label_smoothing=self.config.label_smoothing,
        )


@torch.no_grad()
def copy_weights(ours: Ours, reference: TorchTransformerMT) -> None:
    """Give the reference our weights (q, k, v stacked into torch's in_proj)."""

    def attention(theirs, mine):
        theirs.in_proj_weight.copy_(torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mine.q_proj.bias, mine.k_proj.bias, mine.v_proj.bias]))
        theirs.out_proj.load_state_dict(mine.out_proj.state_dict())

    def norms_and_feed_forward(theirs, mine, norms):
        for number, name in enumerate(norms, start=1):
            getattr(theirs, f"norm{number}").load_state_dict(getattr(mine, name).state_dict())
        theirs.linear1.load_state_dict(mine.feed_forward.fc1.state_dict())
        theirs.linear2.load_state_dict(mine.feed_forward.fc2.state_dict())

    reference.shared.weight.copy_(ours.model.shared.weight)
    for theirs, mine in zip(reference.transformer.encoder.layers, ours.model.encoder.layers, strict=True):
        attention(theirs.self_attn, mine.self_attn)
        norms_and_feed_forward(theirs, mine, ["self_attn_norm", "feed_forward_norm"])
    for theirs, mine in zip(reference.transformer.decoder.layers, ours.model.decoder.layers, strict=True):
        attention(theirs.self_attn, mine.self_attn)
        attention(theirs.multihead_attn, mine.cross_attn)
        norms_and_feed_forward(theirs, mine, ["self_attn_norm", "cross_attn_norm", "feed_forward_norm"])


def full_projection_loss(model, batch) -> torch.Tensor:
    """The label-smoothed loss from every position's logits, as the reference computes it (train.py's `scored_loss`
    projects the real target tokens only; the model's own `loss` is unsmoothed)."""
    return label_smoothed_cross_entropy(model(**batch).logits, batch["labels"], model.config.label_smoothing)


def check_same_function(ours, reference, batch) -> None:
    """With the same weights and no dropout the two must compute the same loss, or the comparison is not fair."""
    copy_weights(ours, reference)
    ours.eval(), reference.eval()
    with torch.no_grad():
        mine, theirs = full_projection_loss(ours, batch), reference(**batch)
    ours.train(), reference.train()
    if not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
        raise AssertionError(f"the reference is not wired like our model: loss {theirs.item()} vs {mine.item()}")


def step_table(sides: dict, batches: list, device, bf16: bool, rounds: int, reference: str, peak: float, config=None):
    """Rows and ratio-to-`reference` lines of each side's step (name -> (model, loss function)); with `config`, its
    matmul FLOP/s as a share of `peak`."""
    device_batches = [{key: tensor.to(device) for key, tensor in batch.items()} for batch in batches]
    steps = {}
    for name, (model, loss_of) in sides.items():
        model.to(device)
        steps[name] = harness.training_step(model, loss_of, harness.adamw(model), device_batches, bf16)
    timings = harness.alternate(steps, rounds=rounds, warmup=1)
    tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)
    size = batches[0]["input_ids"].shape[0]
    shapes = [(batch["input_ids"].shape[1], batch["labels"].shape[1]) for batch in batches]
    flops = sum(harness.training_matmul_flops(config, size, *shape) for shape in shapes) if config else 0
    rows, lines, base = [], [], timings[reference]
    for name, t in timings.items():
        rows.append([f"{len(batches)} x {size}", name, f"{sum(p.numel() for p in sides[name][0].parameters()):,}"])
        rows[-1] += [harness.spread(t.wall), f"{t.cpu_seconds:.3g}", f"{tokens / t.seconds:,.0f}"]
        rows[-1] += [f"{flops / t.seconds / 1e9:,.0f}", f"{flops / t.seconds / peak:.1%}"] if config else ["", ""]
        if name != reference:
            lines.append(f"{name} / {reference}, batch {size}: throughput {base.seconds / t.seconds:.2f}x wall, ")
            lines[-1] += (
                f"{base.cpu_seconds / t.cpu_seconds:.2f}x CPU time; time a step {t.seconds / base.seconds:.2f}x"
            )
    return rows, lines


def compare_steps(config, batches_of: dict, device: torch.device, bf16: bool, rounds: int) -> None:
    """Ours (both losses) against torch.nn.Transformer on the batches of each size (size -> batches)."""
    peak = harness.matmul_peak(device, torch.bfloat16 if bf16 else torch.float32)
    print(f"# measured dense matmul peak: {peak / 1e9:,.0f} GFLOP/s; {precision.name(bf16)}, AdamW, {rounds} rounds")
    rows, lines = [], []
    for batches in batches_of.values():
        models = {}
        for name in ("torch.nn.Transformer", "ours", "ours, every position projected"):
            torch.manual_seed(0)
            models[name] = (TorchTransformerMT if name.startswith("torch") else Ours)(config).train()
        check_same_function(models["ours"], models["torch.nn.Transformer"], batches[0])  # on the CPU, before moving
        losses = {"ours": scored_loss, "ours, every position projected": full_projection_loss}
        sides = {name: (model, losses.get(name, lambda m, batch: m(**batch))) for name, model in models.items()}
        table = step_table(sides, batches, device, bf16, rounds, "torch.nn.Transformer", peak, config)
        rows, lines = rows + table[0], lines + table[1]
        del models, sides
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print_steps(rows, lines)


def print_steps(rows, lines):
    header = ["batches", "model", "parameters", "wall s/round: median [IQR]", "CPU s/round", "target tokens/s"]
    harness.print_table(header + ["matmul GFLOP/s", "share of peak"], rows)
    print("\n".join(lines))


def distillation(bf16: bool, batches, rounds) -> None:
    teacher = Teacher(Ours.from_pretrained(harness.SHIPPED_DIR).eval().requires_grad_(False), 0.5, "shipped")
    config = harness.shipped_config(encoder_layers=6, decoder_layers=1, dropout=0.1)
    losses = {"student alone": scored_loss, "student + teacher": partial(scored_loss, teacher=teacher)}
    sides = {}
    for name, loss_of in losses.items():
        torch.manual_seed(0)
        sides[name] = (Ours(config).train(), loss_of)
    print(f"# word-level distillation: student 6+1, teacher the shipped model; {precision.name(bf16)}, AdamW")
    print_steps(*step_table(sides, batches, torch.device("cpu"), bf16, rounds, "student alone", 1.0))


DISTILL = harness.DATA_DIR.parent / "multi30k-distill"
ONE_STEP = """--train_weight 2 --case_augmentation 0.4 --max_tokens 4300 --max_steps 1 --save_strategy no
    --eval_strategy no --average_last 0 --load_best_model_at_end false --disable_tqdm true""".split()


def peak_rss_of_run(command: list[str], env: dict) -> tuple[int, float]:
    """(peak RSS in bytes, seconds) of a child process."""
    started, peak = time.time(), 0
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, cwd=harness.ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        while process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError):  # it has just exited (a zombie's status has no VmHWM)
                peak = max(peak, harness.peak_rss_bytes(process.pid))
            time.sleep(0.2)
        if process.returncode:
            output.seek(0)
            sys.exit(f"train.py failed ({process.returncode}):\n{output.read()[-3000:]}")
    return peak, time.time() - started


def start_memory(mix: list[str]) -> None:
    start = str(harness.SHIPPED_DIR)
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, TRANSFORMER_MT_CACHE=f"{scratch}/cache", OMP_NUM_THREADS="1")
        rows, peaks = [], []
        for number, name in enumerate(("first start (prepares the mix)", "second start (reads it)")):
            # The same tokenizer both times (part of the kept mix's fingerprint), another output folder.
            command = [sys.executable, "train.py", "--model_name_or_path", start, "--tokenizer_name", start]
            command += ["--data_dir", str(harness.DATA_DIR), "--extra_train", *mix, "--test_split", "", *ONE_STEP]
            peak, seconds = peak_rss_of_run(command + ["--output_dir", str(Path(scratch) / f"run-{number}")], env)
            peaks.append(peak / 2**30)
            rows.append([name, f"{peaks[-1]:.2f}", f"{seconds:.0f}"])
            print(f"{name}: peak {peaks[-1]:.2f} GiB in {seconds:.0f} s", flush=True)
    print(f"\n{harness.describe_machine(1)}; mix: task 1 x2 + {' '.join(Path(m).name for m in mix)}")
    harness.print_table(["train.py", "peak RSS (GiB)", "seconds"], rows)
    first, second = peaks
    print(f"\nthe first start holds {first / second:.2f}x the second's peak ({first - second:+.2f} GiB)")


def options(parser):
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per batch (training uses 128)")
    parser.add_argument("--distillation", action="store_true", help="a student with and without a teacher instead")
    parser.add_argument("--memory", action="store_true", help="the peak memory of two train.py starts instead")
    parser.add_argument("--mix", nargs="+", help="--memory: the --extra_train corpora (PREFIX[:tagged])")
    parser.set_defaults(mix=[str(DISTILL / "teacher-big"), f"{DISTILL / 'bt-beam'}:tagged"])


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.memory:
        start_memory(args.mix)
        return
    bf16 = precision.native_bf16(use_cpu=True)  # what train.py picks here: bf16 autocast only where it is native
    rounds, count = (3, 2) if args.quick else (8, 4)
    batches = harness.training_batches(load_tokenizer(harness.SHIPPED_DIR), args.batch_size, count)
    config = harness.shipped_config()
    print(f"# Training throughput ({harness.describe_machine(args.threads)})")
    print(
        f"# d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, "
        f"{config.num_attention_heads} heads, d_ff {config.d_ff}, vocab {config.vocab_size}, dropout {config.dropout}"
    )
    if args.distillation:
        distillation(bf16, batches, rounds)
    else:
        compare_steps(config, {args.batch_size: batches}, torch.device("cpu"), bf16, rounds)


if __name__ == "__main__":
    main()
