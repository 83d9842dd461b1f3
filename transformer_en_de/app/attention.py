"""Cross-attention of one translation (a teacher-forced pass over the generated ids) and its heatmap."""

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.figure import Figure

# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")


@dataclass
class AttentionMap:
    weights: np.ndarray  # (source tokens, generated tokens)
    source_tokens: list[str]
    generated_tokens: list[str]
    description: str  # which layer(s) and heads were averaged


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable token labels: word-initial pieces start with ▁ (SentencePiece's convention) for every tokenizer."""
    labels = []
    for token in tokenizer.convert_ids_to_tokens(ids):
        if token.startswith("▁") or token in tokenizer.all_special_tokens:
            labels.append(token)
            continue
        text = tokenizer.convert_tokens_to_string([token])  # byte-level pieces → text (" dog")
        labels.append("▁" + text[1:] if text.startswith(" ") else (text or token))
    return labels


def cross_attention_map(
    model, tokenizer, source_ids: list[int], generated_ids: list[int], layer: int | None = None
) -> AttentionMap:
    """Cross-attention of one translation, one column per generated token.

    Row i of the decoder reads generated_ids[: i + 1] and predicts generated_ids[i + 1]. `layer` None averages over
    layers and heads; an index (clamped to the model's layers) averages one layer's heads.
    """
    source = torch.tensor([source_ids])
    decoder_input = torch.tensor([generated_ids[:-1]])
    with torch.inference_mode():
        output = model(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            decoder_input_ids=decoder_input,
            output_attentions=True,
            use_cache=False,
        )
    stacked = torch.stack(output.cross_attentions)[:, 0]  # (layers, heads, generated, source)
    layers, heads = stacked.shape[:2]
    if layer is None:
        weights = stacked.mean(dim=(0, 1))
        description = f"mean of {layers} layers × {heads} heads"
    else:
        index = min(max(layer, 0), layers - 1)
        weights = stacked[index].mean(dim=0)
        description = f"layer {index + 1} of {layers}, mean of {heads} heads"
    return AttentionMap(
        weights=weights.T.float().numpy(),  # (source, generated)
        source_tokens=token_labels(tokenizer, source_ids),
        generated_tokens=token_labels(tokenizer, generated_ids[1:]),
        description=description,
    )


def plot_attention(attention: AttentionMap, title: str) -> Figure:
    """Heatmap with source tokens down the side and generated tokens along the bottom."""
    source_count, generated_count = attention.weights.shape
    # About a quarter inch per token, within what a half-page panel shows legibly.
    width = min(2.5 + 0.25 * generated_count, 12.0)
    height = min(1.5 + 0.25 * source_count, 10.0)
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(attention.weights, aspect="auto", cmap="viridis", vmin=0.0)
    axes.set_xticks(range(generated_count), attention.generated_tokens, rotation=90, fontsize=8)
    axes.set_yticks(range(source_count), attention.source_tokens, fontsize=8)
    axes.set_xlabel("generated tokens")
    axes.set_ylabel("source tokens")
    axes.set_title(f"{title}: {attention.description}", fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02)
    return figure
