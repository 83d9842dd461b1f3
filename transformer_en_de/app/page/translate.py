"""The page's top and its Translate tab: the introduction, the decoding controls both tabs share, the text in, a panel
per model, the examples."""

import gradio as gr

from ..text_checks import DECODINGS, decoding_defaults
from ..translation import NO_PRETRAINED
from ..translators import display_id, models_beside

# An everyday sentence the shipped model is out of its depth on and says so (tests/test_out_of_depth.py)
EVERYDAY_EXAMPLE = ["How much does this cost?", "Wie viel kostet das?"]
# Sentences and references written for this app (not taken from Multi30k); the everyday one last.
EXAMPLES = [
    ["A man in a blue jacket is repairing a bicycle.", "Ein Mann in einer blauen Jacke repariert ein Fahrrad."],
    ["Two dogs are playing in the snow.", "Zwei Hunde spielen im Schnee."],
    ["A little girl eats an ice cream on a bench.", "Ein kleines Mädchen isst auf einer Bank ein Eis."],
    ["Several people wait at a bus stop. It is raining.", "Mehrere Leute warten an einer Bushaltestelle. Es regnet."],
    ["An old woman sells vegetables at a market.", "Eine alte Frau verkauft Gemüse auf einem Markt."],
    EVERYDAY_EXAMPLE,
]

INTRO = """# English → German: {title}
Our model is the Transformer of *Attention Is All You Need*, written from scratch and trained on **29,000 English
descriptions of photos** and their German translations (Multi30k): *"Two dogs are playing in the snow."* It translates
sentences like those well, and little else: on everyday sentences (try the last example) it writes fluent nonsense, and
its **confidence** (how probable the model finds its own words, and how much the English reads like a photo
description) drops; the page then says so. {comparison} Every model translates the same input with the same settings,
through the same code."""


def page_title(comparisons: list) -> str:
    """What the page sets our model beside: "pretrained models" only where one is known to be (never a folder)."""
    beside = models_beside(comparisons)
    return f"our Transformer beside {beside} models" if beside else "our Transformer"


def intro_text(comparisons: list) -> str:
    """The introduction, saying what the models beside ours (on the page or still loading) learned from, where known."""
    present = [model for model in comparisons if model.translator is not None or not model.done]
    pretrained = [model.name for model in present if model.pretrained]
    others = [model.name for model in present if not model.pretrained]
    lines = [] if present else [NO_PRETRAINED]
    if pretrained:
        lines.append(f"The pretrained {models(pretrained)} beside it learned from millions of sentences of every kind.")
    if others:
        one = len(others) == 1
        lines.append(
            f"The {'other ' if pretrained else ''}{models(others)} beside it {'is' if one else 'are'} not "
            f"{'a known pretrained model' if one else 'known pretrained models'}: what {'it' if one else 'they'} "
            "learned from, this page cannot say."
        )
    return INTRO.format(title=page_title(present), comparison=" ".join(lines))


def models(names: list[str]) -> str:
    """'model (`a`)' or 'models (`a`, `b`)'."""
    return f"model{'s' if len(names) > 1 else ''} ({', '.join(f'`{name}`' for name in names)})"


def decoding_controls(app) -> list:
    """Decoding, beams and maximum new tokens, shared by both tabs; they start at what our model decodes with."""
    decoding, beams, tokens = decoding_defaults(app.ours.model, app.limits)
    whole = dict(step=1, precision=0, min_width=240)  # precision 0: the API types both as `int`
    with gr.Row():
        return [
            gr.Radio(list(DECODINGS), value=decoding, label="Decoding", min_width=240),
            gr.Slider(1, app.limits.max_beams, value=beams, label="Beams (beam search)", **whole),
            gr.Slider(1, app.limits.max_new_tokens, value=tokens, label="Maximum new tokens", **whole),
        ]


def translate_tab(app, controls: list, intro: gr.Markdown) -> gr.Textbox:
    """Text in, a panel per model, the examples; returns the English text box. `app`: app.py's `TranslationApp`."""
    with gr.Row():  # side by side on a wide screen, one above the other on a phone
        text = gr.Textbox(
            label="English",
            lines=4,
            placeholder="Type one or more English sentences.",
            elem_id="english",
            min_width=320,
        )
        reference = gr.Textbox(
            "", label="Reference translation (optional, German)", lines=4, elem_id="reference", min_width=320
        )
    button = gr.Button("Translate", variant="primary", elem_id="translate")
    notice = gr.Markdown(label="Notice", elem_id="notice", latex_delimiters=[])
    panels, statuses, columns = model_panels(app.systems)
    label = "Examples (with references; the last is an everyday sentence)"
    gr.Examples(EXAMPLES, [text, reference], label=label, cache_examples=False, elem_id="examples")
    gr.Markdown("How each model reads the sentence and chooses its words: the *Inside the Transformer* tab.")
    app.serving.work(button.click, app.translate, [text, *controls, reference], [*panels, notice], api_name="translate")
    timer = gr.Timer(1.0, active=bool(app.comparisons))
    polled = [*statuses, *columns, intro, timer]
    timer.tick(app.poll_models, None, polled, api_visibility="private", queue=False, show_progress="hidden")
    return text


def model_panels(systems: list) -> tuple[list, list, list]:
    """A column per model (translation, details); a comparison model's status line, the rest hidden while it fails."""
    panels, statuses, columns = [], [], []
    with gr.Row(equal_height=False):
        for number, system in enumerate(systems):
            with gr.Column(min_width=300):
                if number:
                    statuses.append(gr.Markdown(system.status(), elem_id=f"status-{number}"))
                with gr.Column(visible=not system.failed) as column:
                    gr.Markdown(f"### {system.name}\n`{display_id(system.model_id)}`")
                    # Each output named for its model: the API lists them by these labels
                    panels += [
                        gr.Textbox(
                            label=f"German ({system.name})", lines=4, interactive=False, elem_id=f"translation-{number}"
                        ),
                        gr.Markdown(label=f"{system.name} details", elem_id=f"details-{number}", latex_delimiters=[]),
                    ]
                columns += [column] if number else []
    return panels, statuses, columns
