"""The Inside tab's outputs in the page's order, drawn from a view; a visitor's text shown as text, never rendered."""

import gradio as gr

from transformer_en_de.inside import KINDS
from transformer_en_de.markdown import markdown_table

from ..text_checks import as_text
from .pictures import plot_attention_heads, plot_positions, rendered

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


def draw_inside(view: dict | None, kind, layer, head, count: int) -> list:
    """The notices, per model its pieces, its positional encoding, `draw_attention`'s, per model its beam search."""
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


def systems_of(view: dict | None, count: int | None = None) -> list[dict]:
    """The per-model views of a request's answer, ours first; `count` of them if given ({} for a missing one)."""
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
