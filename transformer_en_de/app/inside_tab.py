"""The Inside the Transformer tab and the `/inside` endpoint: a visitor's request, bounded like a translation, and the
pictures of what it returns.

`inside_request` follows the text's first sentence (cut to the sentence length the app translates) through our model
and each comparison model that returns its attention weights, inside a scheduler job with the request's budget and
deadline; the numbers come from `transformer_en_de.inside.inside_view`, the same for a learner in a notebook. A view
is bounded by construction: a sentence of more than `MAX_PIECES` pieces is refused before any model runs, the
translation ends at `MAX_PIECES`, and the answer is at most `MAX_VIEW_BYTES` of JSON (a model whose view would pass it
is shown as one line). The page redraws from a `ViewStore` on the server, its session keeping only the view's id. The
`plot_*` and `format_*` functions draw them, each picture with its line from the paper (`CAPTIONS`).
"""

import json
import math
import secrets
import threading
import time
import warnings
import zlib
from collections import OrderedDict

import gradio as gr
import numpy as np
from matplotlib.figure import Figure

from transformer_en_de.decoding.engine import DecodingPlan
from transformer_en_de.inside import KINDS, MAX_PIECES, inside_view, too_many_pieces

from .limits import Limits
from .scheduler import Busy, Cancelled
from .text_checks import InputError, as_text, check_decoding, read_text, split_long_sentence, split_sentences
from .translation import RequestContext, available, budget_plan, planned_for, request_job

# The work of an inside view against the engine's estimate of the same decoding, which the scheduler counts for a
# translation: transformers' beam search (every beam runs to the end, where ours lets a finished sentence leave), the
# recording, and one teacher-forced pass with the attention weights. `python -m benchmarks.inside_view` measures it
# on the shipped model: about 1.3x the engine's own time for the sentence (at most 1.5x), and about half the
# estimate, an upper bound; counted as 1.5x the estimate, so an inside view is never counted below a translation.
WORK_FACTOR = 1.5
# The most JSON an answer of /inside may be (`json.dumps`, which writes at least as many bytes as any encoder Gradio
# uses). Our model's weights and encodings at the piece bound are at most 1.17 MB (3 layers of 4 heads: 147,456
# weights at 7 bytes, 64 x 256 encodings at 8; tests/test_inside_bounds.py computes it), 1.3 MB with the search at 8
# beams. Beside it MarianMT's 6 layers of 8 heads are at most 0.3 MB for a median caption (15 pieces) and 1 MB at 30
# pieces (99% of captions are 33 or fewer); past about 35 a comparison model may be shown as one line instead.
MAX_VIEW_BYTES = 2_000_000
# The views the page redraws from (`ViewStore`): the latest 64, 32 MB of compressed JSON in all (JSON of weights
# compresses about 5x: our model's 1.3 MB view to 0.24 MB), each kept 15 minutes after its last use; one a session (its
# page redraws only its latest), so that a session asking for view after view never pushes out another's.
VIEWS_KEPT = 64
VIEW_STORE_BYTES = 32_000_000
VIEW_SECONDS = 900.0
PICTURE = gr.Plot(render=False)  # what encodes a figure as the page's plots do (`rendered`)
# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")

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
    "best few partial translations live on; a finished one is scored by its log-probability divided by "
    "(its length)^α, so a higher α favours longer translations.",
}
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}


# ------------------------------------------------------------------------------------------------ the request


def one_sentence(text, limits: Limits) -> tuple[str, list[str]]:
    """The sentence the view follows (the first of the text, at most `limits.max_sentence_words` words: a longer one
    is translated in parts on the Translate tab, and the view follows its first part) and the notices saying so."""
    notices = []
    text, _ = read_text(text, limits.max_input_chars)
    sentences, _ = split_sentences(text)
    if not sentences:
        return "", []
    if len(sentences) > 1:
        notices.append(f"The view follows one sentence: the first of the {len(sentences)} in the text.")
    parts = split_long_sentence(sentences[0], limits.max_sentence_words)
    if len(parts) > 1:
        notices.append(
            f"The sentence has {len(sentences[0].split())} words; the Translate tab translates it in parts of at most "
            f"{limits.max_sentence_words} words, and this view follows the first part."
        )
    return parts[0], notices


def inside_request(
    text,
    decoding,
    num_beams,
    max_new_tokens,
    *,
    context: RequestContext,
) -> dict:
    """The inside view of the text's sentence for our model (its keys at the top level) and each comparison model
    (`comparisons`, one dict each, a `message` for one not loaded), with the request's `notices`; or only a
    `message` saying why there is none. Bounded like a translation: the same checks, plan and budget, one scheduler
    job of the estimated work, the search ended at the request's time limit; and by size: a sentence any model reads
    in more than `MAX_PIECES` pieces is refused before any model runs, the answer is at most `MAX_VIEW_BYTES`."""
    limits = context.limits
    try:
        settings = check_decoding(decoding, num_beams, max_new_tokens, limits)
        sentence, notices = one_sentence(text, limits)
    except InputError as error:
        return {"message": str(error), "notices": []}
    if not sentence:
        return {"message": "Type an English sentence to look inside the Transformer.", "notices": []}
    try:
        plan, seconds = budget_plan(context, [sentence], settings, limits.text)
        notices += list(plan.notices)
        systems = model_plans(context, plan)
        problems = [too_many_pieces(read, MAX_PIECES, translator.name) for _, translator, _, read in systems if read]
        if any(problems):
            return {"message": next(problem for problem in problems if problem), "notices": []}
        with request_job(context, WORK_FACTOR * seconds, limits.text, side=True) as job:
            views = [
                {"model": name, "message": why_not} if translator is None
                else inside_view(translator.model, translator.tokenizer, sentence, name=translator.name,
                                 plan=model_plan, deadline=job.hard_deadline, at_each_step=context.scheduler.checkpoint,
                                 max_pieces=MAX_PIECES)
                for name, translator, why_not, model_plan in systems
            ]  # fmt: skip
    except Busy as error:
        return {"message": str(error), "notices": []}
    except Cancelled:
        return {"message": "Cancelled: the page that asked for this view was closed.", "notices": []}
    if any(view.get("cut") for view in views):
        notices.append("The request reached its time limit: the search shown ended there.")
    if any(view.get("reached_bound") for view in views):
        notices.append(f"The view follows at most {MAX_PIECES} pieces of translation: the search shown ended there.")
    return within_bytes({"sentence": sentence, "notices": notices, "comparisons": []}, views)


def model_plans(context: RequestContext, plan: DecodingPlan) -> list[tuple]:
    """Per model on the page, (its name, its translator or None, the line saying why not, its plan of the request's
    sentence: the pieces it reads), made before any model runs; ours is the request's `plan`."""
    systems = []
    for number, system in enumerate(context.systems):
        translator, why_not = available(system)
        own = None if translator is None else plan if number == 0 else planned_for(translator, plan)
        systems.append((system.name, translator, why_not, own))
    return systems


def json_bytes(value) -> int:
    """Bytes of `value` as JSON."""
    return len(json.dumps(value))


def within_bytes(envelope: dict, views: list[dict]) -> dict:
    """The answer (`envelope` with ours at its top level and the others as its `comparisons`) in at most
    `MAX_VIEW_BYTES` of JSON: every model first counted as the line that would replace it (`too_big`), then each in
    turn, ours first, shown whole where the rest leaves room. A dict's or list's JSON is its parts' with ", " between,
    so the count is the answer's bytes, or a few more."""
    sizes = [json_bytes(view) for view in views]
    lines = [too_big(view, size) for view, size in zip(views, sizes, strict=True)]
    used = json_bytes(envelope) + sum(json_bytes(line) + 2 for line in lines)
    shown = []
    for view, size, line in zip(views, sizes, lines, strict=True):
        grown = size - json_bytes(line)
        fits = "message" in view or used + grown <= MAX_VIEW_BYTES
        used += grown if fits else 0
        shown.append(view if fits else line)
    return {**envelope, **shown[0], "comparisons": shown[1:]}


def too_big(view: dict, size: int) -> dict:
    """The line shown for a model whose view (`size` bytes of JSON) would take the answer past `MAX_VIEW_BYTES`."""
    return {
        "model": view["model"],
        "message": f"{view['model']}: this sentence's numbers ({size / 1e6:.1f} MB) would take the answer past its "
        f"bound of {MAX_VIEW_BYTES / 1e6:g} MB: look inside a shorter sentence to see them.",
    }


def systems_of(view: dict | None) -> list[dict]:
    """The per-model views of a request's result, ours first."""
    if not view or "model" not in view:
        return []
    return [{key: value for key, value in view.items() if key != "comparisons"}, *view.get("comparisons", [])]


# ------------------------------------------------------------------------------------------------ the pictures


def format_notices(view: dict | None) -> str:
    if not view:
        return ""
    lines = ([view["message"]] if view.get("message") else []) + view.get("notices", [])
    return "\n\n".join(f"⚠️ {as_text(line)}" for line in lines)


def format_pieces(view: dict) -> str:
    """The source and target pieces with their ids, as Markdown (pieces shown as text: a visitor's text is never
    rendered)."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"

    def row(label: str, pieces: list[str], ids: list[int]) -> str:
        cells = " · ".join(f"{as_text(piece)} ({number})" for piece, number in zip(pieces, ids, strict=True))
        return f"**{label}** {cells}"

    return "\n\n".join(
        [
            f"**{as_text(view['model'])}**",
            row("English pieces (ids)", view["source_tokens"], view["source_ids"]),
            row("German pieces (ids)", view["target_tokens"], view["target_ids"]),
        ]
    )


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


def format_beam_search(view: dict) -> str:
    """The search step by step and the finished hypotheses before and after the length penalty, as Markdown."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"
    alpha = view["length_penalty"]
    lines = [f"**{as_text(view['model'])}**: {view['num_beams']} beam{'s' if view['num_beams'] > 1 else ''}, length "
             f"penalty α = {alpha:g}. Score: the sum of the log-probabilities of the pieces so far."]  # fmt: skip
    for step in view["beam_steps"]:
        lines.append(f"**Step {step['step']}**")
        rows = ["| beam | text so far | score | next pieces (probability) |", "|---|---|---|---|"]
        for number, beam in enumerate(step["beams"], start=1):
            choices = ", ".join(f"{as_text(item['piece'])} {item['probability']:.0%}" for item in beam["next"])
            rows.append(f"| {number} | {as_text(beam['text']) or '(start)'} | {beam['score']:.2f} | {choices} |")
        lines.append("\n".join(rows))
        if step["finished"]:
            ended = ", ".join(f"#{rank}" for rank in step["finished"])
            lines.append(f"Finished here (ending with `</s>`): hypothesis {ended} below.")
    lines.append("**Finished hypotheses**, in the order the search ranks them (log-probability ÷ pieces^α):")
    rows = [
        "| # | translation | pieces | log-probability | its rank | ÷ pieces^α |",
        "|---|---|---|---|---|---|",
    ]
    for item in view["finished"]:
        mark = " ✔ chosen" if item["rank"] == 1 else ""
        log_probability = "" if item["log_probability"] is None else f"{item['log_probability']:.3f}"
        normalised = "" if item["length_normalised"] is None else f"{item['length_normalised']:.3g}"
        rows.append(
            f"| {item['rank']}{mark} | {as_text(item['text'])} | {item['step']} | {log_probability} | "
            f"{item['rank_without_penalty']} | {normalised} |"
        )
    lines.append("\n".join(rows))
    reordered = any(item["rank"] != item["rank_without_penalty"] for item in view["finished"])
    lines.append(
        "The length penalty reordered the finished hypotheses." if reordered
        else "The length penalty kept the order of the log-probabilities."
    )  # fmt: skip
    return "\n\n".join(lines)


def draw_inside(view: dict | None, kind, layer, head, count: int) -> list:
    """The tab's outputs for `count` models: the notices, then per model its pieces and positional encoding, then
    `draw_attention`'s, then per model its beam search. A model with nothing to draw has its pictures hidden."""
    views = padded(view, count)
    pieces = [format_pieces(item) if item else "" for item in views]
    positions = [shown(plot_positions(item) if item and not item.get("message") else None) for item in views]
    beams = [format_beam_search(item) if item else "" for item in views]
    return [format_notices(view), *pieces, *positions, *draw_attention(view, kind, layer, head, count), *beams]


def draw_attention(view: dict | None, kind, layer, head, count: int) -> list:
    """Per model the attention picked by the page's controls, as sent (`kind`, `layer` from 1, `head` from 1 or 0 for
    all: anything else draws cross-attention, layer 1, all heads), then its caption; for a view with nothing to draw
    (`EXPIRED`, a refused sentence) the caption is its line."""
    kind = kind if kind in KINDS else "cross"
    try:
        layer, head = int(layer) - 1, int(head) - 1 if int(head) > 0 else None
    except (TypeError, ValueError, OverflowError):
        layer, head = 0, None
    views = padded(view, count)
    attention = [shown(plot_attention_heads(item, kind, layer, head) if item else None) for item in views]
    caption = CAPTIONS[kind] + (f" {CAPTIONS['heads']}" if head is None else "") if views[0] else format_notices(view)
    return [*attention, caption]


def padded(view: dict | None, count: int) -> list[dict]:
    """The per-model views of `view`, `count` of them ({} for a model with none)."""
    return (systems_of(view) + [{} for _ in range(count)])[:count]


def shown(figure: Figure | None) -> gr.Plot:
    """A plot's new value, rendered (`rendered`), hidden when there is nothing to draw (a comparison model not on the
    page)."""
    return gr.Plot(value=rendered(figure), visible=figure is not None)


def rendered(figure: Figure | None):
    """The picture as the page's plots show it (a PNG), encoded now, in the request's turn: Gradio would encode a
    figure after the callback, in the event loop every visitor's connection waits on (one returned inside a `gr.Plot`
    update twice: once when the update is made, again from its arguments)."""
    return PICTURE.postprocess(figure)


# ------------------------------------------------------------------------------------------------ the page's views


EXPIRED = {
    "message": f"This view is no longer kept (the server keeps the latest {VIEWS_KEPT}, each {VIEW_SECONDS / 60:g} "
    "minutes after its last use): press Look inside again.",
    "notices": [],
}


class ViewStore:
    """The views the page redraws from (another kind, layer or head needs no model run), on the server under random
    ids: a session keeps only its id. One view per session (its latest), at most `max_views` views and `max_bytes` of
    compressed JSON in all, the least recently used dropped first, each dropped `seconds` after its last use; `get` of
    a dropped one is `EXPIRED`."""

    def __init__(self, max_views: int = VIEWS_KEPT, max_bytes: int = VIEW_STORE_BYTES,
                 seconds: float = VIEW_SECONDS, clock=time.monotonic):  # fmt: skip
        self.max_views, self.max_bytes, self.seconds, self.clock = max_views, max_bytes, seconds, clock
        self.views: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # id -> (compressed JSON, last use)
        self.latest: dict[str, str] = {}  # session -> the id of its view
        self.bytes = 0
        self.lock = threading.Lock()

    def put(self, view: dict, session: str | None = None) -> str:
        """Keep `view` (at most `MAX_VIEW_BYTES` of JSON: `inside_request`'s answer) in place of the session's earlier
        one; returns its id."""
        data = zlib.compress(json.dumps(view).encode(), 1)
        view_id = secrets.token_urlsafe(16)
        with self.lock:
            earlier = self.latest.pop(session, None) if session is not None else None
            if earlier in self.views:
                self.bytes -= len(self.views.pop(earlier)[0])
            if session is not None:
                self.latest[session] = view_id
            self.views[view_id] = (data, self.clock())
            self.bytes += len(data)
            self.drop_old()
        return view_id

    def get(self, view_id: str | None) -> dict | None:
        """The view kept under `view_id` (its time starts again); None for none (nothing looked at yet), `EXPIRED`
        for one no longer kept."""
        if not view_id:
            return None
        with self.lock:
            self.drop_old()
            if view_id not in self.views:
                return EXPIRED
            data, _ = self.views.pop(view_id)
            self.views[view_id] = (data, self.clock())  # the most recently used: last
        return json.loads(zlib.decompress(data))

    def drop_old(self) -> None:
        """Drop the least recently used views while over a bound, then those unused for `seconds` (the lock held)."""
        now = self.clock()
        while self.views:
            _, (data, used) = next(iter(self.views.items()))
            if len(self.views) <= self.max_views and self.bytes <= self.max_bytes and now - used <= self.seconds:
                return
            self.views.popitem(last=False)
            self.bytes -= len(data)
            if len(self.latest) > self.max_views:  # sessions whose views are gone, forgotten
                self.latest = {session: kept for session, kept in self.latest.items() if kept in self.views}


__all__ = [
    "CAPTIONS",
    "EXPIRED",
    "KIND_TITLES",
    "MAX_VIEW_BYTES",
    "ViewStore",
    "draw_attention",
    "draw_inside",
    "format_beam_search",
    "format_notices",
    "format_pieces",
    "inside_request",
    "plot_attention_heads",
    "plot_positions",
    "systems_of",
]
