"""Training throughput (target tokens/s) of our model against torch.nn.Transformer wired the same way (checked to
compute our loss with our weights), and the matmul FLOP/s of each as a share of this device's measured peak, on the
GPU where there is one. `--distillation`: round 7's 6+1 student with and without a teacher. `--base-recipe`: one
optimizer step of the paper's WMT14 base model at about 25,000 target tokens. `--memory`: the peak RSS of a `train.py`
start that prepares the mix (reads, mixes, tokenizes) against a second start that reads the mix the first one kept,
each a process of its own, one step, one thread; the default mix is task 1 twice, teacher-big and the tagged
back-translation (528,000 pairs an epoch).

    python -m benchmarks.train_throughput [--quick] [--threads 1] [--batch-size 128 ...] [--distillation]
    python -m benchmarks.train_throughput --base-recipe [--quick]
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

STEPS = 100_000  # the paper's base run (docs/training.md)


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


def training_batches(tokenizer, batch_size: int, count: int) -> list[dict[str, torch.Tensor]]:
    """`count` batches as the Trainer's group_by_length sampler cuts a megabatch of 50 sorted by length, longest to
    shortest, pads -100 in the labels."""
    per_megabatch = 50
    english, german = harness.sample_sentences("train", batch_size * per_megabatch)
    lengths = [len(ids) for ids in tokenizer(english)["input_ids"]]
    order = sorted(range(len(english)), key=lambda index: -lengths[index])
    batches = []
    for k in range(count):
        pick = round(k * (per_megabatch - 1) / max(count - 1, 1))
        chosen = order[pick * batch_size : (pick + 1) * batch_size]
        source = tokenizer([english[i] for i in chosen], padding=True, return_tensors="pt")
        target = tokenizer(text_target=[german[i] for i in chosen], padding=True, return_tensors="pt")
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
        batches.append({"input_ids": source["input_ids"], "attention_mask": source["attention_mask"], "labels": labels})
    return batches


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(model, loss_of, optimizer, batches, bf16: bool, accumulate: int = 1):
    device = next(model.parameters()).device

    def step():
        for index, batch in enumerate(batches, start=1):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_of(model, batch)
            (loss / accumulate).backward()
            if index % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        synchronize(device)

    return step


def training_matmul_flops(config, batch_size: int, source_length: int, target_length: int):
    """Matmul FLOPs of a forward + backward (3x the forward) over a padded batch, causal attention counted in full;
    softmax, norms, the loss and AdamW not counted: a floor on the work done."""
    d, d_ff, encoder, decoder = config.d_model, config.d_ff, config.encoder_layers, config.decoder_layers
    source_tokens, target_tokens = batch_size * source_length, batch_size * target_length
    projections = source_tokens * (encoder * (4 * d * d + 2 * d * d_ff) + decoder * 2 * d * d)  # cross-attn K, V
    projections += target_tokens * (decoder * (6 * d * d + 2 * d * d_ff) + d * config.vocab_size)
    attention = encoder * source_length**2 + decoder * (target_length + source_length) * target_length
    return 3 * (2 * projections + 4 * d * batch_size * attention)


def matmul_peak(device: torch.device, bf16: bool) -> float:
    """The dense peak in FLOP/s: the best of 12 timings of large square matmuls."""
    size, per_timing = (8192, 10) if device.type == "cuda" else (2048, 1)
    dtype = torch.bfloat16 if bf16 else torch.float32
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))

    def matmuls():
        for _ in range(per_timing):
            a @ b
        synchronize(device)

    return 2 * size**3 * per_timing / min(harness.alternate({"matmul": matmuls}, rounds=12)["matmul"].wall)


def compare_steps(sides_of, reference: str, batches_of: dict, device, bf16: bool, rounds: int, config=None) -> None:
    """Each side's step (`sides_of(batches)`: name -> (model, loss function)) against `reference`'s, on the batches of
    each size (size -> batches); with `config`, its matmul FLOP/s as a share of this device's measured peak."""
    if config:
        peak = matmul_peak(device, bf16)
        print(f"# measured dense matmul peak: {peak / 1e9:,.0f} GFLOP/s")
    print(f"# {precision.name(bf16)}, AdamW, {rounds} rounds")
    rows, lines = [], []
    for size, batches in batches_of.items():
        sides = sides_of(batches)
        device_batches = [{key: tensor.to(device) for key, tensor in batch.items()} for batch in batches]
        steps = {
            name: training_step(model.to(device), loss_of, adamw(model), device_batches, bf16)
            for name, (model, loss_of) in sides.items()
        }
        timings = harness.alternate(steps, rounds=rounds, warmup=1)
        tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)
        shapes = [(batch["input_ids"].shape[1], batch["labels"].shape[1]) for batch in batches]
        flops = sum(training_matmul_flops(config, size, *shape) for shape in shapes) if config else 0
        base = timings[reference]
        for name, t in timings.items():
            rows.append([f"{len(batches)} x {size}", name, f"{sum(p.numel() for p in sides[name][0].parameters()):,}"])
            rows[-1] += [harness.spread(t.wall), f"{t.cpu_seconds:.3g}", f"{tokens / t.seconds:,.0f}"]
            rows[-1] += [f"{flops / t.seconds / 1e9:,.0f}", f"{flops / t.seconds / peak:.1%}"] if config else ["", ""]
            if name != reference:
                lines.append(f"{name} / {reference}, batch {size}: throughput {base.seconds / t.seconds:.2f}x wall, ")
                lines[-1] += (
                    f"{base.cpu_seconds / t.cpu_seconds:.2f}x CPU time; time a step {t.seconds / base.seconds:.2f}x"
                )
        del sides, steps
        if device.type == "cuda":
            torch.cuda.empty_cache()
    header = ["batches", "model", "parameters", "wall s/round: median [IQR]", "CPU s/round", "target tokens/s"]
    harness.print_table(header + ["matmul GFLOP/s", "share of peak"], rows)
    print("\n".join(lines))


def against_torch(config, batches) -> dict:
    """Ours (both losses) and torch.nn.Transformer, checked to compute the same loss."""
    models = {}
    for name in ("torch.nn.Transformer", "ours", "ours, every position projected"):
        torch.manual_seed(0)
        models[name] = (TorchTransformerMT if name.startswith("torch") else Ours)(config).train()
    check_same_function(models["ours"], models["torch.nn.Transformer"], batches[0])  # on the CPU, before moving
    losses = {"ours": scored_loss, "ours, every position projected": full_projection_loss}
    return {name: (model, losses.get(name, lambda m, batch: m(**batch))) for name, model in models.items()}


def with_teacher(teacher: Teacher, batches) -> dict:
    """Round 7's 6+1 student alone and learning from `teacher`'s distributions as well."""
    config = harness.shipped_config(encoder_layers=6, decoder_layers=1, dropout=0.1)
    losses = {"student alone": scored_loss, "student + teacher": partial(scored_loss, teacher=teacher)}
    sides = {}
    for name, loss_of in losses.items():
        torch.manual_seed(0)
        sides[name] = (Ours(config).train(), loss_of)
    return sides


def base_recipe(device: torch.device, bf16: bool, quick: bool) -> None:
    """One optimizer step of the paper's base model; where the batch does not fit, halves of it accumulated."""
    config = TransformerMTConfig(vocab_size=37_000)  # the config's defaults are the paper's base model
    length = 27  # tokens a side: about 25 BPE tokens a sentence plus </s>, the documented average
    shrunk = quick or device.type != "cuda"
    sentences = 8 if shrunk else round(25_000 / length)
    rounds, warmup = (2, 1) if shrunk else (10, 2)
    peak = matmul_peak(device, bf16)
    generator = torch.Generator().manual_seed(0)

    def random_batch(size: int) -> dict:
        # Random ids past pad/bos/eos (0-2), no padding: a step's speed does not depend on which words it sees.
        source, target = (torch.randint(3, config.vocab_size, (size, length), generator=generator) for _ in range(2))
        batch = {"input_ids": source, "attention_mask": torch.ones_like(source), "labels": target}
        return {name: tensor.to(device) for name, tensor in batch.items()}

    torch.manual_seed(0)
    model = Ours(config).to(device).train()
    optimizer = adamw(model)
    accumulate = 1
    while True:
        micro = math.ceil(sentences / accumulate)
        micro_batches = [random_batch(micro) for _ in range(accumulate)]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            step = training_step(model, scored_loss, optimizer, micro_batches, bf16, accumulate)
            timing = harness.alternate({"base": step}, rounds=rounds, warmup=warmup)["base"]
            break
        except torch.cuda.OutOfMemoryError:
            if micro == 1:
                raise
        # Free the failed attempt outside the except block, whose traceback holds its tensors.
        micro_batches = step = None
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        accumulate *= 2
        print(f"out of memory: retrying with {accumulate} accumulated micro-batches")
    tokens = micro * accumulate * length
    flops = accumulate * training_matmul_flops(config, micro, length, length)
    memory = f", peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB" if device.type == "cuda" else ""
    print(
        f"# base model: {sum(p.numel() for p in model.parameters()):,} parameters, dropout 0.1; {precision.name(bf16)},"
        f" AdamW, scored_loss; {tokens:,} source + {tokens:,} target tokens per step ({accumulate} x {micro} "
        f"sentences of {length} tokens a side){memory}; {rounds} rounds after {warmup} warm-up"
    )
    row = [harness.spread(timing.wall), f"{tokens / timing.seconds:,.0f}", f"{flops / timing.seconds / 1e12:.3g}"]
    row += [f"{flops / timing.seconds / peak:.1%}", f"{timing.seconds * STEPS / 3600:.1f}"]
    header = ["s/step: median [IQR]", "target tokens/s", "matmul TFLOP/s", "share of peak", f"{STEPS:,} steps, hours"]
    harness.print_table(header, [row])
    print("(the paper: 100,000 steps in about 12 hours on 8 P100 GPUs)")


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
    parser.add_argument("--batch-size", type=int, nargs="+", default=[128], help="sentences per batch (training: 128)")
    parser.add_argument("--distillation", action="store_true", help="a student with and without a teacher instead")
    parser.add_argument("--base-recipe", action="store_true", help="the paper's base model's step instead")
    parser.add_argument("--memory", action="store_true", help="the peak memory of two train.py starts instead")
    parser.add_argument("--mix", nargs="+", help="--memory: the --extra_train corpora (PREFIX[:tagged])")
    parser.set_defaults(mix=[str(DISTILL / "teacher-big"), f"{DISTILL / 'bt-beam'}:tagged"])


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.memory:
        return start_memory(args.mix)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = precision.native_bf16(use_cpu=device.type == "cpu")  # what train.py picks: bf16 autocast where native
    print(f"# Training throughput ({harness.describe_machine(args.threads, device)})")
    if args.base_recipe:
        return base_recipe(device, bf16, args.quick)
    rounds, count = (3, 2) if args.quick else (8, 4)
    tokenizer = load_tokenizer(harness.SHIPPED_DIR)
    batches = {size: training_batches(tokenizer, size, count) for size in args.batch_size}
    config = harness.shipped_config()
    print(
        f"# d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, "
        f"{config.num_attention_heads} heads, d_ff {config.d_ff}, vocab {config.vocab_size}, dropout {config.dropout}"
    )
    if args.distillation:
        teacher = Ours.from_pretrained(harness.SHIPPED_DIR).to(device).eval().requires_grad_(False)
        print("# word-level distillation: student 6+1, teacher the shipped model")
        sides_of = partial(with_teacher, Teacher(teacher, 0.5, "shipped"))
        compare_steps(sides_of, "student alone", batches, device, bf16, rounds)
    else:
        compare_steps(partial(against_torch, config), "torch.nn.Transformer", batches, device, bf16, rounds, config)


if __name__ == "__main__":
    main()
