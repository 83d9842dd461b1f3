"""Training throughput (target tokens/s): our model against torch.nn.Transformer wired the same way.

One step = forward + label-smoothed loss + backward + AdamW step on the CPU, in the precision train.py picks here
(bf16 autocast only where bf16 is native; `--precision` to choose), on real Multi30k batches. "ours" is the step
train.py takes (`transformer_en_de.training.loop.scored_loss`: the output projection on real target tokens only);
"ours, every position projected" computes the same loss from the model's full logits, padding too, like the reference.
The reference is `torch.nn.Transformer` with the same sizes, post-norm layers (no extra final LayerNorm),
the same dropouts, one embedding shared by source, target and the output projection, sinusoidal positions on scaled
embeddings, and the same loss; it gets the masks our model gets from the training collator (source padding, causal
target). Before timing, the script gives it our weights and checks that both compute the same loss.

    python -m benchmarks.train_throughput [--quick] [--precision auto|bf16|float32]
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import harness
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy, shift_tokens_right, sinusoidal_table
from transformer_en_de.training import precision
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
        encoder_layer = nn.TransformerEncoderLayer(**layer_options)
        decoder_layer = nn.TransformerDecoderLayer(**layer_options)
        encoder = nn.TransformerEncoder(encoder_layer, config.encoder_layers, enable_nested_tensor=False)
        decoder = nn.TransformerDecoder(decoder_layer, config.decoder_layers)
        # torch uses one dropout rate everywhere; ours separates attention and activation dropout: match them.
        for layer in list(encoder.layers) + list(decoder.layers):
            layer.dropout.p = config.activation_dropout
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = config.attention_dropout
        self.transformer = nn.Transformer(
            d_model=config.d_model,
            nhead=config.num_attention_heads,
            custom_encoder=encoder,
            custom_decoder=decoder,
            batch_first=True,
        )
        self.embed_scale = math.sqrt(config.d_model)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.shared(ids) * self.embed_scale + self.positions[: ids.shape[1]])  # (B, T, d)

    def forward(self, input_ids, attention_mask, labels):
        decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        source_padding = attention_mask == 0  # (B, S), True where padded
        target_length = decoder_input_ids.shape[1]
        hidden_states = self.transformer(
            self.embed(input_ids),
            self.embed(decoder_input_ids),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(target_length),
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
def copy_weights(ours: TransformerMTForConditionalGeneration, reference: TorchTransformerMT) -> None:
    """Give the reference our weights (q, k, v stacked into torch's in_proj), so the two can be checked equal."""

    def attention(theirs, mine):
        theirs.in_proj_weight.copy_(torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mine.q_proj.bias, mine.k_proj.bias, mine.v_proj.bias]))
        theirs.out_proj.load_state_dict(mine.out_proj.state_dict())

    def feed_forward(theirs, mine):
        theirs.linear1.load_state_dict(mine.fc1.state_dict())
        theirs.linear2.load_state_dict(mine.fc2.state_dict())

    reference.shared.weight.copy_(ours.model.shared.weight)
    for theirs, mine in zip(reference.transformer.encoder.layers, ours.model.encoder.layers, strict=True):
        attention(theirs.self_attn, mine.self_attn)
        theirs.norm1.load_state_dict(mine.self_attn_norm.state_dict())
        theirs.norm2.load_state_dict(mine.feed_forward_norm.state_dict())
        feed_forward(theirs, mine.feed_forward)
    for theirs, mine in zip(reference.transformer.decoder.layers, ours.model.decoder.layers, strict=True):
        attention(theirs.self_attn, mine.self_attn)
        attention(theirs.multihead_attn, mine.cross_attn)
        theirs.norm1.load_state_dict(mine.self_attn_norm.state_dict())
        theirs.norm2.load_state_dict(mine.cross_attn_norm.state_dict())
        theirs.norm3.load_state_dict(mine.feed_forward_norm.state_dict())
        feed_forward(theirs, mine.feed_forward)


def check_same_function(ours, reference, batch) -> None:
    """With the same weights and no dropout the two must compute the same loss: the comparison is like for like."""
    copy_weights(ours, reference)
    ours.eval(), reference.eval()
    with torch.no_grad():
        mine, theirs = full_projection_loss(ours, batch), reference(**batch)
    ours.train(), reference.train()
    if not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
        raise AssertionError(f"the reference is not wired like our model: loss {theirs.item()} vs {mine.item()}")


def full_projection_loss(model, batch) -> torch.Tensor:
    """train.py's label-smoothed loss from the logits of every position (the model's own `loss` is unsmoothed)."""
    return label_smoothed_cross_entropy(model(**batch).logits, batch["labels"], model.config.label_smoothing)


def training_step(model, loss_of, optimizer, batches, bf16: bool, accumulate: int = 1):
    """A call trains on `batches`, one optimizer step per `accumulate` of them (gradients summed over the
    micro-batches), in bf16 autocast on the model's device when `bf16`. On a GPU it waits for the queued kernels at
    the end, so that a timer around the call measures the work done, not the work launched."""
    device = next(model.parameters()).device

    def step():
        for index, batch in enumerate(batches, start=1):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_of(model, batch)
            (loss / accumulate).backward()
            if index % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        harness.synchronize(device)

    return step


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)


def main():
    args, config, rounds, batches = harness.training_setup(__doc__.splitlines()[0])
    target_tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)

    torch.manual_seed(0)
    ours = TransformerMTForConditionalGeneration(config).train()
    torch.manual_seed(0)
    reference = TorchTransformerMT(config).train()
    check_same_function(ours, reference, batches[0])

    torch.manual_seed(0)
    ours_forward = TransformerMTForConditionalGeneration(config).train()
    timings = harness.alternate(
        {
            "ours": training_step(ours, scored_loss, adamw(ours), batches, args.bf16),
            "ours, every position projected": training_step(
                ours_forward, full_projection_loss, adamw(ours_forward), batches, args.bf16
            ),
            "torch.nn.Transformer": training_step(
                reference, lambda model, batch: model(**batch), adamw(reference), batches, args.bf16
            ),
        },
        rounds=rounds,
        warmup=1,
    )
    models = {"ours": ours, "ours, every position projected": ours_forward, "torch.nn.Transformer": reference}
    parameters = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
    print(f"# Training throughput ({harness.describe_machine(args.threads)}; config: {harness.config_source()})")
    print(
        f"# d_model {config.d_model}, {config.encoder_layers}+{config.decoder_layers} layers, "
        f"{config.num_attention_heads} heads, d_ff {config.d_ff}, vocab {config.vocab_size}, dropout {config.dropout}, "
        f"attention dropout {config.attention_dropout}; {precision.name(args.bf16)}, AdamW; "
        f"{len(batches)} batches of {args.batch_size} Multi30k pairs ({target_tokens} target tokens) per round, "
        f"{rounds} rounds"
    )
    harness.print_table(
        ["model", "parameters", "wall s/round: median [IQR]", "CPU s/round", "target tokens/s"],
        [
            [
                name,
                f"{parameters[name]:,}",
                harness.spread(t.wall),
                f"{t.cpu_seconds:.3g}",
                f"{target_tokens / t.seconds:,.0f}",
            ]
            for name, t in timings.items()
        ],
    )
    theirs_t = timings["torch.nn.Transformer"]
    for name in ("ours", "ours, every position projected"):
        print(
            f"ratio {name} / torch.nn.Transformer (throughput): {theirs_t.seconds / timings[name].seconds:.2f}x wall, "
            f"{theirs_t.cpu_seconds / timings[name].cpu_seconds:.2f}x CPU time"
        )


if __name__ == "__main__":
    main()
