"""The Inside tab's outputs, in the order the page lists them, drawn from a view (`view_request.inside_request`'s
answer, or the store's `EXPIRED`): the notices, each model's pieces, positional encoding, attention and beam search.
A model with nothing to draw has its pictures hidden."""

import gradio as gr
from matplotlib.figure import Figure

from transformer_en_de.inside import KINDS

from .captions import CAPTIONS
from .markdown import format_beam_search, format_notices, format_pieces
from .pictures import plot_attention_heads, plot_positions, rendered
from .view_request import systems_of


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


__all__ = ["draw_attention", "draw_inside"]
