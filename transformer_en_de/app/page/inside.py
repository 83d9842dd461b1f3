"""The Inside the Transformer tab's layout and wiring (issue 35); what it shows is worked out in `app/inside_tab/`."""

import gradio as gr

from transformer_en_de.inside import KINDS

from ..inside_tab.outputs import CAPTIONS, KIND_TITLES


def inside_tab(app, controls: list, text: gr.Textbox) -> None:  # `text`: the English box
    gr.Markdown(
        "What each part of the paper does with **your sentence** (the first one in the English box of the Translate "
        "tab, decoded with the settings above), for our model and for each comparison model that returns its "
        "attention weights. Nothing here is computed until you ask."
    )
    button = gr.Button("Look inside", variant="primary", elem_id="inside-run")
    notice = gr.Markdown(elem_id="inside-notice")
    count = len(app.systems)
    pieces = side_by_side(gr.Markdown, "pieces", count, f"### The pieces\n{CAPTIONS['pieces']}")
    positions = side_by_side(gr.Plot, "positions", count, f"### Positional encoding\n{CAPTIONS['positions']}")
    kind, layer, head = attention_controls(app.systems)
    attention = side_by_side(gr.Plot, "attention", count)
    caption = gr.Markdown(elem_id="inside-attention-caption")
    beams = side_by_side(gr.Markdown, "beams", count, f"### Beam search, step by step\n{CAPTIONS['beams']}")
    # The endpoint's answer (hidden, emptied once drawn), and the id of the server's copy the pictures are drawn from
    numbers, view_id = gr.JSON(label="Inside view", visible=False), gr.State()
    chosen = [view_id, kind, layer, head]  # as sent: one outside the choices draws the defaults (no Gradio traceback)
    inside = app.serving.work(
        button.click, app.inside, [text, *controls], [numbers, view_id], api_name="inside", side=True
    )
    pictures = [notice, *pieces, *positions, *attention, caption, *beams, numbers]
    app.serving.work(inside.then, app.draw_inside, chosen, pictures, api_visibility="private", side=True)
    for control in (kind, layer, head):
        app.serving.work(
            control.input, app.draw_inside_attention, chosen, [*attention, caption], api_visibility="private", side=True
        )


def side_by_side(component, name: str, count: int, heading: str = "") -> list:  # one `component` a model, in a row
    if heading:
        gr.Markdown(heading)
    with gr.Row():
        return [component(show_label=False, elem_id=f"inside-{name}-{n}", min_width=300) for n in range(count)]


def attention_controls(systems: list) -> tuple[gr.Radio, gr.Dropdown, gr.Dropdown]:
    """The kind of attention, layer and head to draw, up to the most layers and heads of any model."""
    gr.Markdown("### Attention")
    layers, heads = (max(sizes) for sizes in zip(*(model_sizes(system) for system in systems), strict=True))
    kinds = [(KIND_TITLES[kind], kind) for kind in KINDS]
    layer_choices = [(f"layer {n}", n) for n in range(1, layers + 1)]
    head_choices = [("all heads", 0)] + [(f"head {n}", n) for n in range(1, heads + 1)]
    with gr.Row():
        kind = gr.Radio(kinds, value="cross", label="Attention", elem_id="inside-kind", min_width=240)
        layer = gr.Dropdown(layer_choices, value=1, label="Layer", elem_id="inside-layer")
        head = gr.Dropdown(head_choices, value=0, label="Head", elem_id="inside-head")
    return kind, layer, head


def model_sizes(system) -> tuple[int, int]:  # (layers, heads); MarianMT's (6, 8) for a model still loading
    translator = system.translator
    if translator is None:
        return 6, 8
    return translator.num_layers, getattr(translator.model.config, "num_attention_heads", None) or 1
