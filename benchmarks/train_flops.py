"""Achieved training FLOP/s of our model against this machine's measured matmul peak in the precision it trains in.

Matmul FLOPs are counted analytically over the padded batch (what the CPU actually multiplies):

    forward = 2 * [ S * (N_enc * (4 d^2 + 2 d d_ff) + N_dec * 2 d^2)          # encoder; cross-attention K, V
                  + T * (N_dec * (6 d^2 + 2 d d_ff) + d V) ]                   # decoder; tied output projection
            + 4 d * B * (N_enc * s^2 + N_dec * (t^2 + t s))                     # QK^T and AV of every attention
    training step = 3 * forward                                                 # backward: 2x the forward

with B sentences, s / t the padded source / target lengths, S = B s and T = B t tokens, d = d_model, V the
vocabulary. Causal attention is counted in full, and embeddings, softmax, LayerNorm, dropout, the loss and AdamW
are not counted (they are not matmuls), so this is a floor on the work done. The peak is the best of several large
`torch.matmul`s on the same threads, in bf16 where training runs in bf16 autocast, else in float32.

    python -m benchmarks.train_flops [--quick]
"""

import time

import torch

from benchmarks import harness
from benchmarks.train_throughput import adamw, training_step
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from transformer_en_de.training import precision


def training_matmul_flops(config: TransformerMTConfig, batch_size: int, source_length: int, target_length: int):
    """Matmul FLOPs of one forward + backward pass over a padded batch (the formula in the module docstring)."""
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    source_tokens, target_tokens = batch_size * source_length, batch_size * target_length
    projections = source_tokens * (
        config.encoder_layers * (4 * d * d + 2 * d * d_ff) + config.decoder_layers * 2 * d * d
    ) + target_tokens * (config.decoder_layers * (6 * d * d + 2 * d * d_ff) + d * vocab)
    attention = (
        4
        * d
        * batch_size
        * (
            config.encoder_layers * source_length**2
            + config.decoder_layers * (target_length**2 + target_length * source_length)
        )
    )
    return 3 * (2 * projections + attention)


def matmul_peak(dtype: torch.dtype, size: int, repeats: int) -> float:
    """Best FLOP/s of `repeats` (size x size) @ (size x size) products."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up: first calls pick kernels and touch memory
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def main():
    args, config, rounds, batches = harness.training_setup(__doc__.splitlines()[0])
    flops_per_round = sum(
        training_matmul_flops(config, args.batch_size, batch["input_ids"].shape[1], batch["labels"].shape[1])
        for batch in batches
    )
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(config).train()
    step = training_step(model, lambda model, batch: model(**batch).loss, adamw(model), batches, args.bf16)
    timings = harness.alternate({"ours": step}, rounds=rounds, warmup=1)["ours"]

    repeats = 3 if args.quick else 10
    peak_bf16 = matmul_peak(torch.bfloat16, 4096, repeats)
    peak_fp32 = matmul_peak(torch.float32, 2048, repeats)
    peak, peak_name = (peak_bf16, "bf16") if args.bf16 else (peak_fp32, "fp32")
    achieved = flops_per_round / timings.seconds

    print(f"# Training FLOP/s ({harness.describe_machine(args.threads)}; config: {harness.config_source()})")
    print(
        f"# d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, d_ff {config.d_ff}, "
        f"vocab {config.vocab_size}; {precision.name(args.bf16)}, AdamW; {len(batches)} batches of "
        f"{args.batch_size} Multi30k pairs per round ({flops_per_round / 1e9:.1f} GFLOP of matmuls), {rounds} rounds"
    )
    harness.print_table(
        ["figure", "GFLOP/s"],
        [
            ["achieved in training (matmul FLOPs / wall time)", f"{achieved / 1e9:.0f}"],
            ["measured bf16 matmul peak (4096^3)", f"{peak_bf16 / 1e9:.0f}"],
            ["measured fp32 matmul peak (2048^3)", f"{peak_fp32 / 1e9:.0f}"],
        ],
    )
    print(f"utilisation of the {peak_name} peak (the precision trained in): {achieved / peak:.1%}")


if __name__ == "__main__":
    main()
