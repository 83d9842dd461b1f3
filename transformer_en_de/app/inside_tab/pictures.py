"""The Inside tab's matplotlib pictures: the positional encoding beside the lengths of the scaled embedding and of the
encoding (sections 3.4 and 3.5), and the attention weights of one head or of every head of a layer (section 3.2),
laid out in inches before anything is drawn; and `rendered`, which encodes a picture as the page's plots show it."""

import math
import warnings

import gradio as gr
import numpy as np
from matplotlib.figure import Figure

from .captions import KIND_TITLES

PICTURE = gr.Plot(render=False)  # what encodes a figure as the page's plots do (`rendered`)
# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")

# The pictures are laid out in inches before anything is drawn: matplotlib's layout engines measure every label of a
# figure to place it, which took most of a picture's time (3-5 s for the tab's first pictures on one core).
CELL = 0.17  # inches per token row or column: room for one 7-point label
FONT = 7  # points, of the token labels
MAX_WIDTH = 20.0  # inches of heatmap cells in one figure; more tokens get smaller cells (and labels)


def label_inches(labels: list[str], fontsize: float) -> float:
    """Room for the longest label, in inches: DejaVu Sans (matplotlib's font) averages about 0.6 em a character, and
    0.7 leaves room for wide ones, so no label is measured."""
    return 0.7 * fontsize / 72 * max((len(label) for label in labels), default=1)


def title_inches(title: str) -> float:
    """The width of a figure that holds its 10-point title on one line (about 0.6 em a character in running text),
    with a margin on either side."""
    return 0.2 + 0.6 * 10 / 72 * len(title)


def cell_and_font(columns: int, rows: int) -> tuple[float, float]:
    """(inches per cell, label points) for a grid of `columns` x `rows` cells: CELL, smaller past MAX_WIDTH."""
    cell = min(CELL, MAX_WIDTH / max(columns, 1), MAX_WIDTH / max(rows, 1))
    return cell, min(FONT, max(4.0, 0.8 * 72 * cell))


def inches_to_figure(figure: Figure, left: float, bottom: float, width: float, height: float) -> list[float]:
    """A box given in inches from the figure's lower left corner, as the fractions `add_axes` takes."""
    figure_width, figure_height = figure.get_size_inches()
    return [left / figure_width, bottom / figure_height, width / figure_width, height / figure_height]


def plot_positions(view: dict) -> Figure | None:
    """The positional encoding over source positions x dimensions and, on the same rows, the length of the scaled
    embedding and of the encoding added at each position."""
    table = np.asarray(view.get("positional_encoding") or [])
    if not table.size:
        return None
    labels = [f"{n} {label}" for n, label in enumerate(view["source_tokens"])]
    cell, font = cell_and_font(1, len(labels))
    left, heat, bars, top, bottom = 0.4 + label_inches(labels, font), 5.0, 2.0, 0.75, 0.55
    rows = cell * len(labels)
    title = f"{view['model']}: positional encoding added at each position"
    width = max(left + heat + 1.0 + bars + 0.35, title_inches(title))  # room for the last number under the bars
    figure = Figure(figsize=(width, top + max(rows, 1.0) + bottom), dpi=100)
    base = bottom + max(rows, 1.0) - rows  # a short sentence's rows sit under the title
    axes = figure.add_axes(inches_to_figure(figure, left, base, heat, rows))
    image = axes.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
    axes.set_yticks(range(len(labels)), labels, fontsize=font)
    axes.set_xlabel(f"dimension (0 … {table.shape[1] - 1})", fontsize=8)
    axes.set_ylabel("source position", fontsize=8)
    axes.tick_params(axis="x", labelsize=7)
    figure.colorbar(image, cax=figure.add_axes(inches_to_figure(figure, left + heat + 0.1, base, 0.12, rows)))
    lengths = figure.add_axes(inches_to_figure(figure, left + heat + 1.0, base, bars, rows), sharey=axes)
    positions = np.arange(len(labels))
    scale = view["embed_scale"]
    lengths.barh(positions - 0.2, view["embedding_norms"], height=0.4, label=f"embedding × √d_model ({scale:.1f})")
    lengths.barh(positions + 0.2, view["positional_norms"], height=0.4, label="positional encoding")
    lengths.tick_params(axis="y", labelleft=False)
    lengths.tick_params(axis="x", labelsize=7)
    lengths.set_xlabel("length (L2)", fontsize=8)
    figure.legend(loc="upper right", fontsize=7, ncols=1, frameon=False)
    figure.text(0.1 / width, 1 - 0.12 / figure.get_size_inches()[1], title, fontsize=10, va="top")
    return figure


def chosen_layer_and_head(view: dict, kind: str, layer: int, head: int | None) -> tuple[int, int | None, int, int]:
    """(layer, head or None for all, layers, heads) within the model's own sizes: a layer or head past them is its
    last (the controls go as far as the largest model on the page)."""
    weights = view["attention"][kind]
    layers, heads = len(weights), len(weights[0])
    return min(max(layer, 0), layers - 1), None if head is None else min(max(head, 0), heads - 1), layers, heads


def attention_axes(view: dict, kind: str) -> tuple[list[str], list[str], str, str]:
    """(query labels, key labels, x label, y label): queries along the bottom, the pieces they read down the side."""
    source, decoder = view["source_tokens"], view["decoder_tokens"]
    if kind == "encoder_self":
        return source, source, "source tokens (reading)", "source tokens (read)"
    if kind == "decoder_self":
        return decoder, decoder, "generated tokens (reading)", "generated tokens (read)"
    return decoder, source, "generated tokens", "source tokens"


def plot_attention_heads(view: dict, kind: str, layer: int, head: int | None) -> Figure | None:
    """One head's weights, or every head of the layer in rows of four: viridis from 0 to the largest weight shown,
    queries along the bottom and the pieces they read down the side; the side's labels once per row of heads."""
    if view.get("message"):
        return None
    layer, head, layers, heads = chosen_layer_and_head(view, kind, layer, head)
    queries, keys, xlabel, ylabel = attention_axes(view, kind)
    shown = [head] if head is not None else list(range(heads))
    matrices = [np.asarray(view["attention"][kind][layer][number]).T for number in shown]  # (keys, queries)
    columns = min(len(shown), 4)
    rows = math.ceil(len(shown) / columns)
    cell, font = cell_and_font(columns * len(queries), rows * len(keys))
    panel_width, panel_height = cell * len(queries), cell * len(keys)
    # A narrow panel (a short translation) has an axis label wider than itself: the gap takes what spills over, so
    # that neighbouring labels neither meet each other nor run into the next heatmap.
    gap = max(0.15, label_inches([xlabel], 8) - panel_width + 0.1)
    left = 0.4 + label_inches(keys, font)
    under = 0.45 + label_inches(queries, font)  # each row's query labels and axis label
    above = 0.25  # each panel's "head n"
    panels = left + columns * panel_width + (columns - 1) * gap
    height = 0.35 + rows * (above + panel_height + under)
    which = f"head {head + 1} of {heads}" if head is not None else f"all {heads} heads"
    title = f"{view['model']}: {KIND_TITLES[kind]}, layer {layer + 1} of {layers}, {which}"
    width = max(panels + 0.85, title_inches(title))  # the colour bar and its numbers right of the panels
    figure = Figure(figsize=(width, height), dpi=100)
    top = max(float(matrix.max()) for matrix in matrices)
    for index, (number, matrix) in enumerate(zip(shown, matrices, strict=True)):
        row, column = divmod(index, columns)
        bottom = height - 0.35 - (row + 1) * (above + panel_height + under) + under
        axes = figure.add_axes(
            inches_to_figure(figure, left + column * (panel_width + gap), bottom, panel_width, panel_height)
        )
        image = axes.imshow(matrix, aspect="auto", cmap="viridis", vmin=0.0, vmax=top, interpolation="nearest")
        axes.set_xticks(range(len(queries)), queries, rotation=90, fontsize=font)
        axes.set_xlabel(xlabel, fontsize=8)
        axes.set_title(f"head {number + 1}", fontsize=9, pad=3)
        if column == 0:
            axes.set_yticks(range(len(keys)), keys, fontsize=font)
            axes.set_ylabel(ylabel, fontsize=8)
        else:
            axes.set_yticks([])
        if index == 0:
            bar = inches_to_figure(figure, panels + 0.1, bottom, 0.12, panel_height)
    figure.colorbar(image, cax=figure.add_axes(bar))
    figure.text(0.1 / width, 1 - 0.08 / height, title, fontsize=10, va="top")
    return figure


def rendered(figure: Figure | None):
    """The picture as the page's plots show it (a PNG), encoded now, in the request's turn: Gradio would encode a
    figure after the callback, in the event loop every visitor's connection waits on (one returned inside a `gr.Plot`
    update twice: once when the update is made, again from its arguments)."""
    return PICTURE.postprocess(figure)


__all__ = ["plot_attention_heads", "plot_positions", "rendered"]
