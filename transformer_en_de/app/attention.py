"""Cross-attention of one translation (a teacher-forced pass over the generated ids) and its heatmap."""

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")


@dataclass
class AttentionMap:
    weights: np.ndarray  # (source tokens, generated tokens)
    source_tokens: list[str]
    generated_tokens: list[str]
    description: str  # which layer(s) and heads were averaged
    special_tokens: frozenset[str] = frozenset()  # labels of the tokenizer's special tokens (</s>, <pad>, ...)


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
        special_tokens=frozenset(tokenizer.all_special_tokens),
    )


TITLE_SHARE = 0.94  # of the figure's width: the title's lines keep a margin at either edge


def plot_attention(attention: AttentionMap, title: str) -> Figure:
    """Heatmap with source tokens down the side and generated tokens along the bottom; the special tokens (`</s>`, ...)
    are left out, and the title is wrapped to the figure's width."""
    rows = shown(attention.source_tokens, attention.special_tokens)
    columns = shown(attention.generated_tokens, attention.special_tokens)
    # An empty translation (nothing but `</s>`) keeps its cells, unlabelled, rather than drawing an empty plot.
    weights = attention.weights[
        np.ix_(rows or range(len(attention.source_tokens)), columns or range(len(attention.generated_tokens)))
    ]
    # About a quarter inch per token, within what a half-page panel shows legibly.
    width = min(2.5 + 0.25 * weights.shape[1], 12.0)
    height = min(1.5 + 0.25 * weights.shape[0], 10.0)
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(figure)  # a renderer to measure the title with (gradio saves the figure as PNG anyway)
    axes = figure.add_subplot()
    image = axes.imshow(weights, aspect="auto", cmap="viridis", vmin=0.0)
    axes.set_xticks(range(len(columns)), [attention.generated_tokens[i] for i in columns], rotation=90, fontsize=8)
    axes.set_yticks(range(len(rows)), [attention.source_tokens[i] for i in rows], fontsize=8)
    axes.set_xlabel("generated tokens" if columns else "generated tokens: none (an empty translation)")
    axes.set_ylabel("source tokens")
    heading, renderer, room = figure.suptitle("", fontsize=10), canvas.get_renderer(), TITLE_SHARE * figure.bbox.width
    lines = wrapped(heading, renderer, room, f"{title}: {attention.description}")
    if len(lines) > 1:  # the model's name on a line of its own, then what was averaged
        lines = wrapped(heading, renderer, room, f"{title}:") + wrapped(heading, renderer, room, attention.description)
    heading.set_text("\n".join(lines))
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02)
    return figure


def shown(labels: list[str], special: frozenset[str]) -> list[int]:
    """The positions of the labels that are not special tokens."""
    return [index for index, label in enumerate(labels) if label not in special]


def wrapped(artist, renderer, width: float, text: str) -> list[str]:
    """The text's words in lines no wider than `width` pixels as `artist` (a matplotlib Text) draws them; a word wider
    than that is cut across lines."""

    def fits(line: str) -> bool:
        artist.set_text(line)
        return artist.get_window_extent(renderer).width <= width

    lines: list[str] = []
    for word in text.split():
        if lines and fits(f"{lines[-1]} {word}"):
            lines[-1] = f"{lines[-1]} {word}"
            continue
        while not fits(word) and len(word) > 1:  # the longest head of the word that fits takes a line of its own
            cut = next(end for end in range(len(word) - 1, 0, -1) if fits(word[:end]) or end == 1)
            lines.append(word[:cut])
            word = word[cut:]
        lines.append(word)
    return lines
