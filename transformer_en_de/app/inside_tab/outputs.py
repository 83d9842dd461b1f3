"""The Inside tab's outputs in the page's order, drawn from a view; a visitor's text shown as text, never rendered. The
pictures (the positional encoding, sections 3.4 and 3.5; the attention weights, section 3.2) are laid out in inches
before anything is drawn: matplotlib's layout engines measure every label, which took most of a picture's time (3-5 s
for the tab's first pictures on one core)."""

import math
import warnings

import gradio as gr
import numpy as np
from matplotlib.figure import Figure

from transformer_en_de.inside import KINDS
from transformer_en_de.markdown import markdown_table

from ..text_checks import as_text

# One line per picture: what the paper says it is, in a visitor's words.
CAPTIONS = {
    "pieces": "Section 3.4: the model reads and writes BPE pieces, each an id in one vocabulary; one learned embedding "
    "matrix turns each id into a vector (ours shares it between English, German and the output layer).",
    "positions": "Section 3.5: attention alone does not see word order, so a fixed pattern of sines and cosines, one "
    "wavelength per dimension, is added to the vector of each position. Section 3.4: the embedding is first multiplied "
    "by √d_model; the bars compare the size of the two parts.",
    "encoder_self": "Section 3.2.3: in the encoder every English piece reads every English piece (self-attention); "
    "section 3.2.1: each column is a softmax over the pieces it reads, so it sums to 1.",
    "decoder_self": "Section 3.2.3: in the decoder each German piece reads only itself and the pieces before it (the "
    "mask sets the later ones to zero: the empty triangle), so it cannot look at words not yet written.",
    "cross": "Section 3.2.3: encoder-decoder attention: each German piece (queries) reads the English pieces (keys and "
    "values from the encoder's output); section 3.2.1: softmax(QKᵀ/√d_k), one column per German piece.",
    "heads": "Section 3.2.2: h heads attend side by side, each with its own projections, and often look at different "
    "things.",
    "beams": "Section 6.1: the paper decodes with beam search (4 beams, length penalty α = 0.6): at each step only the "
    "best few partial translations live on (one table: a row per step, a column per beam, best first); a finished one "
    "is scored by its log-probability divided by (its length)^α, so a higher α favours longer translations (the "
    "second table ranks them).",
}
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}
PICTURE = gr.Plot(render=False)  # what encodes a figure as the page's plots do (`rendered`)
# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")


def draw_inside(view: dict | None, kind, layer, head, count: int) -> list:  # in the page's order
    views = systems_of(view, count)
    pieces, beams = ([model_markdown(item, write) for item in views] for write in (format_pieces, format_beam_search))
    positions = [model_picture(item, plot_positions) for item in views]
    return [format_notices(view), *pieces, *positions, *draw_attention(view, kind, layer, head, count), *beams]


def draw_attention(view: dict | None, kind, layer, head, count: int) -> list:
    """Per model the attention picked (`layer` from 1, `head` from 1 or 0 for all; a value outside them draws the
    defaults), then its caption, or the view's line if it has none."""
    kind = kind if kind in KINDS else "cross"
    try:
        layer, head = int(layer) - 1, int(head) - 1 if int(head) > 0 else None
    except (TypeError, ValueError, OverflowError):
        layer, head = 0, None
    views = systems_of(view, count)
    attention = [model_picture(item, plot_attention_heads, kind, layer, head) for item in views]
    caption = CAPTIONS[kind] + (f" {CAPTIONS['heads']}" if head is None else "") if views[0] else format_notices(view)
    return [*attention, caption]


def systems_of(view: dict | None, count: int | None = None) -> list[dict]:  # ours first; `count` of them, {} if missing
    views = []
    if view and "model" in view:
        views = [{key: value for key, value in view.items() if key != "comparisons"}, *view.get("comparisons", [])]
    return views if count is None else (views + [{}] * count)[:count]


def model_picture(view: dict, plot, *choice) -> gr.Plot:  # hidden when there is nothing to draw
    figure = plot(view, *choice) if view and not view.get("message") else None
    return gr.Plot(value=rendered(figure), visible=figure is not None)


def model_markdown(view: dict, write) -> str:  # or why the model has no view
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"
    return write(view) if view else ""


def format_notices(view: dict | None) -> str:  # why there is no view, and the request's notices
    lines = ([view["message"]] if view.get("message") else []) + view.get("notices", []) if view else []
    return "\n\n".join(f"⚠️ {as_text(line)}" for line in lines)


def format_pieces(view: dict) -> str:
    rows = [f"**{as_text(view['model'])}**"]
    for language, side in (("English", "source"), ("German", "target")):
        pairs = zip(view[f"{side}_tokens"], view[f"{side}_ids"], strict=True)
        pieces = " · ".join(f"{as_text(piece)} ({number})" for piece, number in pairs)
        rows.append(f"**{language} pieces (ids)** {pieces}")
    return "\n\n".join(rows)


def format_beam_search(view: dict) -> str:
    """The search, a row a step and a column a live beam, each finished hypothesis marked where it ended; then the
    finished hypotheses in the search's order, each with its rank by log-probability alone."""
    beams, finished = view["num_beams"], view["finished"]
    intro = (
        f"**{as_text(view['model'])}**: {beams} beam{'s' if beams > 1 else ''}, length penalty α = "
        f"{view['length_penalty']:g}. A row per step: the live beams, best first, each with its text so far and its "
        "score (the sum of the log-probabilities of its pieces); → `</s>` **#n**: the beam ends there, as finished "
        "hypothesis #n below (✔ the translation)."
    )
    by_rank = {item["rank"]: item for item in finished}
    rows = [search_row(step, [by_rank[rank] for rank in step["finished"]], beams) for step in view["beam_steps"]]
    search = markdown_table(["step", *(f"beam {number}" for number in range(1, beams + 1))], rows, "r" + "l" * beams)
    ranked = [
        [
            f"{item['rank']}{' ✔ chosen' if item['rank'] == 1 else ''}",
            as_text(item["text"]),
            item["step"],
            "" if item["log_probability"] is None else f"{item['log_probability']:.3f}",
            item["rank_without_penalty"],
            "" if item["length_normalised"] is None else f"{item['length_normalised']:.3g}",
        ]
        for item in finished
    ]
    header = ["#", "translation", "pieces", "log-probability", "its rank", "÷ pieces^α"]
    reordered = any(item["rank"] != item["rank_without_penalty"] for item in finished)
    penalty = "reordered the finished hypotheses" if reordered else "kept the order of the log-probabilities"
    title = "**Finished hypotheses**, in the order the search ranks them (log-probability ÷ pieces^α):"
    return "\n\n".join(
        [intro, search, title, markdown_table(header, ranked, "rlrrrr"), f"The length penalty {penalty}."]
    )


def search_row(step: dict, ended: list[dict], beams: int) -> list[str]:
    """One step: its number, then `beams` cells; a hypothesis that ended here marked in the beam it extends (or, none
    should, beside the number)."""
    cells = []
    for beam in step["beams"]:
        extended = [item for item in ended if item["pieces"][:-1] == beam["pieces"]]
        cell = f"{as_text(beam['text']) or '(start)'} ({beam['score']:.2f})"
        cells.append(" ".join([cell, *(ended_mark(item) for item in extended)]))
        ended = [item for item in ended if item not in extended]
    number = " ".join([str(step["step"]), *(ended_mark(item) for item in ended)])
    return [number, *cells, *[""] * (beams - len(cells))]


def ended_mark(item: dict) -> str:  # the last piece: `</s>`, or where the search was cut
    return f"→ {as_text(item['pieces'][-1])} **#{item['rank']}**{' ✔' if item['rank'] == 1 else ''}"


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
