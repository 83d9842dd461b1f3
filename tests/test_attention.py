"""The heatmap as a visitor sees it: the whole title inside the figure, no special tokens among the labels."""

import io

import numpy as np
import pytest
from conftest import ROOT
from matplotlib.backends.backend_agg import FigureCanvasAgg

from transformer_en_de.app.attention import AttentionMap, cross_attention_map, plot_attention
from transformer_en_de.engine import DecodingSettings, translate
from transformer_en_de.hub import load_model

SHIPPED = ROOT / "models" / "transformer-en-de"


@pytest.fixture(scope="module")
def shipped():
    return load_model(str(SHIPPED))


def rendered(figure):
    """The figure drawn as gradio draws it (a PNG of the whole canvas), and its title."""
    figure.savefig(io.BytesIO(), format="png")
    return figure, figure.get_suptitle()


def assert_title_inside(figure):
    title = figure._suptitle.get_window_extent(FigureCanvasAgg(figure).get_renderer())
    box = figure.bbox
    assert box.x0 <= title.x0 and title.x1 <= box.x1 and box.y0 <= title.y0 and title.y1 <= box.y1, (title, box)


def tick_labels(figure) -> tuple[list[str], list[str]]:
    axes = figure.axes[0]
    sources, generated = axes.get_yticklabels(), axes.get_xticklabels()
    return [label.get_text() for label in sources], [label.get_text() for label in generated]


@pytest.mark.parametrize("max_new_tokens", [3, 60])
def test_shipped_model_heatmap_keeps_its_title_and_hides_special_tokens(shipped, max_new_tokens):
    model, tokenizer = shipped
    settings = DecodingSettings(num_beams=4, max_new_tokens=max_new_tokens)
    (item,) = translate(model, tokenizer, ["Hello, how are you doing today, my friend?"], settings).translations
    attention = cross_attention_map(model, tokenizer, item.source_ids, item.generated_ids)
    assert "</s>" in attention.source_tokens  # the map has them; the figure leaves them out

    figure, title = rendered(plot_attention(attention, "transformer-en-de (ours)"))

    assert_title_inside(figure)
    assert " ".join(title.split()) == f"transformer-en-de (ours): {attention.description}"
    sources, generated = tick_labels(figure)
    assert sources and generated
    assert not set(sources + generated) & set(tokenizer.all_special_tokens)
    assert sources == [token for token in attention.source_tokens if token != "</s>"]


@pytest.mark.parametrize("generated_count", [1, 2, 5, 20, 60])
@pytest.mark.parametrize(
    "name",
    ["ours", "Helsinki-NLP/opus-mt-en-de", "Helsinki-NLP/opus-mt-en-de@0123456789abcdef0123456789abcdef01234567"],
)
def test_title_is_wrapped_inside_any_figure(generated_count, name):
    attention = AttentionMap(
        weights=np.full((4, generated_count), 0.25),
        source_tokens=["▁A", "▁dog", ".", "</s>"],
        generated_tokens=[f"▁w{i}" for i in range(generated_count)],
        description="layer 6 of 6, mean of 8 heads",
        special_tokens=frozenset({"</s>", "<pad>"}),
    )

    figure, title = rendered(plot_attention(attention, name))

    assert_title_inside(figure)
    assert "".join(title.split()) == "".join(f"{name}: {attention.description}".split())  # every character kept


def test_an_empty_translation_draws_its_end_unlabelled(shipped):
    """With one new token the engine ends the sentence at once: only `</s>` is generated, drawn without its label."""
    model, tokenizer = shipped
    settings = DecodingSettings(num_beams=1, max_new_tokens=1)
    (item,) = translate(model, tokenizer, ["Hi!"], settings).translations
    attention = cross_attention_map(model, tokenizer, item.source_ids, item.generated_ids)
    assert attention.generated_tokens == ["</s>"]

    figure, _ = rendered(plot_attention(attention, "ours"))

    assert tick_labels(figure) == ([token for token in attention.source_tokens if token != "</s>"], [])
    assert figure.axes[0].get_xlabel() == "generated tokens: none (an empty translation)"
    assert figure.axes[0].get_images()[0].get_array().shape == (len(attention.source_tokens) - 1, 1)
