"""The Inside the Transformer tab (issue 35): the English box's first sentence inside every model, computed when
asked: pieces, positional encoding, attention of each kind, layer and head, the beam search; each picture with its line
from the paper. What it shows is worked out in `app/inside_tab/`."""

import gradio as gr

from transformer_en_de.inside import KINDS

from ..inside_tab.captions import CAPTIONS, KIND_TITLES


def inside_tab(app, controls: list, text: gr.Textbox) -> None:
    """The tab, wired to `app.inside`, `app.draw_inside` and `app.draw_inside_attention` (`app`: app.py's
    `TranslationApp`; `text`: the Translate tab's English box)."""
    gr.Markdown(
        "What each part of the paper does with **your sentence** (the first one in the English box of the Translate "
        "tab, decoded with the settings above), for our model and for each comparison model that returns its "
        "attention weights. Nothing here is computed until you ask."
    )
    button = gr.Button("Look inside", variant="primary", elem_id="inside-run")
    notice = gr.Markdown(elem_id="inside-notice")
    columns = range(len(app.systems))
    gr.Markdown(f"### The pieces\n{CAPTIONS['pieces']}")
    with gr.Row(equal_height=False):
        pieces = [gr.Markdown(elem_id=f"inside-pieces-{n}", min_width=300) for n in columns]
    gr.Markdown(f"### Positional encoding\n{CAPTIONS['positions']}")
    with gr.Row():
        positions = [gr.Plot(show_label=False, elem_id=f"inside-positions-{n}", min_width=300) for n in columns]
    gr.Markdown("### Attention")
    kind, layer, head = attention_controls(app.systems)
    with gr.Row():
        attention = [gr.Plot(show_label=False, elem_id=f"inside-attention-{n}", min_width=300) for n in columns]
    caption = gr.Markdown(elem_id="inside-attention-caption")
    gr.Markdown(f"### Beam search, step by step\n{CAPTIONS['beams']}")
    with gr.Row(equal_height=False):
        beams = [gr.Markdown(elem_id=f"inside-beams-{n}", min_width=300) for n in columns]
    # The endpoint's answer (not shown: the pictures are; emptied once they are drawn), and the id of the server's copy
    # the pictures are drawn from (app.views: bounded, expiring).
    numbers, view_id = gr.JSON(label="Inside view", visible=False), gr.State()
    pictures = [notice, *pieces, *positions, *attention, caption, *beams]
    chosen = [view_id, kind, layer, head]
    inside = app.serving.work(
        button.click, app.inside, [text, *controls], [numbers, view_id], api_name="inside", side=True
    )
    # The controls' values as sent (`Serving.work`: no preprocessing): one outside their choices draws the defaults
    # (`draw_attention`), where Gradio's check would fail the call with a traceback in the log.
    app.serving.work(inside.then, app.draw_inside, chosen, [*pictures, numbers], api_visibility="private", side=True)
    for control in (kind, layer, head):
        app.serving.work(
            control.input, app.draw_inside_attention, chosen, [*attention, caption], api_visibility="private", side=True
        )


def attention_controls(systems: list) -> tuple[gr.Radio, gr.Dropdown, gr.Dropdown]:
    """The kind of attention, the layer and the head to draw, up to the most layers and heads of any model."""
    layers, heads = (max(sizes) for sizes in zip(*(system_sizes(system) for system in systems), strict=True))
    with gr.Row():
        kind = gr.Radio(
            [(KIND_TITLES[k], k) for k in KINDS], value="cross", label="Attention", elem_id="inside-kind", min_width=240
        )
        layer = gr.Dropdown(
            [(f"layer {n}", n) for n in range(1, layers + 1)], value=1, label="Layer", elem_id="inside-layer"
        )
        head = gr.Dropdown(
            [("all heads", 0)] + [(f"head {n}", n) for n in range(1, heads + 1)],
            value=0,
            label="Head",
            elem_id="inside-head",
        )
    return kind, layer, head


def system_sizes(system) -> tuple[int, int]:
    """(layers, heads) of a model on the page; MarianMT's (6, 8) for a comparison model still loading."""
    translator = getattr(system, "translator", system)
    if translator is None:
        return 6, 8
    config = translator.model.config
    heads = [getattr(config, name, None) for name in ("num_attention_heads", "decoder_attention_heads", "num_heads")]
    return translator.num_layers, next((number for number in heads if number), 1)
