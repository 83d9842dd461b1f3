"""The Inside tab's pictures: the positional encoding (sections 3.4, 3.5) and the attention weights (section 3.2), laid
out in inches before anything is drawn: matplotlib's layout engines measure every label, which took most of a
picture's time (3-5 s for the tab's first pictures on one core)."""

import math
import warnings

import gradio as gr
import numpy as np
from matplotlib.figure import Figure

KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}
PICTURE = gr.Plot(render=False)  # what encodes a figure as the page's plots do (`rendered`)
# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")


def label_inches(labels: list[str], points: float) -> float:
    """Room for the longest label: DejaVu Sans averages about 0.6 em a character, 0.7 leaves room for wide ones."""
    return 0.7 * points / 72 * max((len(label) for label in labels), default=1)


def cell_and_font(columns: int, rows: int) -> tuple[float, float]:
    """(inches per cell, label points): 0.17 inches, room for a 7-point label, smaller past 20 inches of cells."""
    cell = min(0.17, 20.0 / max(columns, 1), 20.0 / max(rows, 1))
    return cell, min(7, max(4.0, 0.8 * 72 * cell))


def titled_figure(title: str, width: float, height: float, title_top: float) -> Figure:
    """A figure at least as wide as its 10-point title on one line."""
    width = max(width, 0.2 + 0.6 * 10 / 72 * len(title))
    figure = Figure(figsize=(width, height), dpi=100)
    figure.text(0.1 / width, 1 - title_top / height, title, fontsize=10, va="top")
    return figure


def add_axes(figure: Figure, left: float, bottom: float, width: float, height: float, **options):  # in inches
    figure_width, figure_height = figure.get_size_inches()
    return figure.add_axes(
        [left / figure_width, bottom / figure_height, width / figure_width, height / figure_height], **options
    )


def plot_positions(view: dict) -> Figure | None:
    """The positional encoding over positions x dimensions and, on the same rows, the lengths of the parts added."""
    table = np.asarray(view.get("positional_encoding") or [])
    if not table.size:
        return None
    labels = [f"{n} {label}" for n, label in enumerate(view["source_tokens"])]
    cell, font = cell_and_font(1, len(labels))
    left, heat, bars, top, bottom = 0.4 + label_inches(labels, font), 5.0, 2.0, 0.75, 0.55
    rows = cell * len(labels)
    title = f"{view['model']}: positional encoding added at each position"
    # room for the last number under the bars
    figure = titled_figure(title, left + heat + 1.0 + bars + 0.35, top + max(rows, 1.0) + bottom, 0.12)
    base = bottom + max(rows, 1.0) - rows  # a short sentence's rows sit under the title
    axes = add_axes(figure, left, base, heat, rows)
    image = axes.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
    axes.set_yticks(range(len(labels)), labels, fontsize=font)
    axes.set_xlabel(f"dimension (0 … {table.shape[1] - 1})", fontsize=8)
    axes.set_ylabel("source position", fontsize=8)
    axes.tick_params(axis="x", labelsize=7)
    figure.colorbar(image, cax=add_axes(figure, left + heat + 0.1, base, 0.12, rows))
    lengths = add_axes(figure, left + heat + 1.0, base, bars, rows, sharey=axes)
    positions = np.arange(len(labels))
    scale = view["embed_scale"]
    lengths.barh(positions - 0.2, view["embedding_norms"], height=0.4, label=f"embedding × √d_model ({scale:.1f})")
    lengths.barh(positions + 0.2, view["positional_norms"], height=0.4, label="positional encoding")
    lengths.tick_params(labelleft=False, labelsize=7)
    lengths.set_xlabel("length (L2)", fontsize=8)
    figure.legend(loc="upper right", fontsize=7, ncols=1, frameon=False)
    return figure


def plot_attention_heads(view: dict, kind: str, layer: int, head: int | None) -> Figure:
    """One head's weights, or every head of the layer in rows of four. A layer or head past the model's own is its last
    (the controls go as far as the largest model on the page)."""
    weights = view["attention"][kind]
    layers, heads = len(weights), len(weights[0])
    layer, head = min(max(layer, 0), layers - 1), None if head is None else min(max(head, 0), heads - 1)
    source, decoder = view["source_tokens"], view["decoder_tokens"]
    queries, keys, xlabel, ylabel = {
        "encoder_self": (source, source, "source tokens (reading)", "source tokens (read)"),
        "decoder_self": (decoder, decoder, "generated tokens (reading)", "generated tokens (read)"),
        "cross": (decoder, source, "generated tokens", "source tokens"),
    }[kind]
    shown = [head] if head is not None else list(range(heads))
    matrices = [np.asarray(weights[layer][number]).T for number in shown]  # (keys, queries)
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
    figure = titled_figure(title, panels + 0.85, height, 0.08)  # the colour bar and its numbers right of the panels
    top = max(float(matrix.max()) for matrix in matrices)
    for index, (number, matrix) in enumerate(zip(shown, matrices, strict=True)):
        row, column = divmod(index, columns)
        bottom = height - 0.35 - (row + 1) * (above + panel_height + under) + under
        axes = add_axes(figure, left + column * (panel_width + gap), bottom, panel_width, panel_height)
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
            colour_bar = (panels + 0.1, bottom, 0.12, panel_height)
    figure.colorbar(image, cax=add_axes(figure, *colour_bar))
    return figure


def rendered(figure: Figure | None):
    """The picture encoded now, in the request's turn: Gradio would encode it after the callback, in the event loop
    every visitor's connection waits on (twice, for one inside a `gr.Plot`)."""
    return PICTURE.postprocess(figure)
