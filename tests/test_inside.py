"""The Inside tab's numbers against the model itself (the shipped model, and a tiny MarianMT), the `/inside` endpoint
of a real server against `/translate`, and the tab in a real Chromium."""

import math
import re
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, view_inside
from tiny_marian import build_tiny_marian

from transformer_en_de.app import translators
from transformer_en_de.app.inside_tab.outputs import (
    draw_inside,
    format_beam_search,
    plot_attention_heads,
    plot_positions,
    systems_of,
)
from transformer_en_de.app.inside_tab.view_request import inside_request
from transformer_en_de.app.serving.limits import Limits
from transformer_en_de.app.text_checks import as_text
from transformer_en_de.app.translation import RequestContext
from transformer_en_de.decoding.engine import DecodingSettings, plan_decoding, strip_generated, translate
from transformer_en_de.inside import DECIMALS, KINDS

SHIPPED = ROOT / "models" / "transformer-en-de"
SENTENCES = [
    "A man in a blue jacket is repairing a bicycle.",
    "Two young women in colourful dresses are dancing on a wooden stage in front of a small crowd at night.",
    "Where is the train station?",
]


@pytest.fixture(scope="module")
def ours(shipped_translator):
    return shipped_translator


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = build_tiny_marian(tmp_path_factory.mktemp("marian"))
    translator = translators.load_translator(str(folder), "opus-mt-en-de")
    translator.model.set_attn_implementation("eager")
    return translator


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """The deep-encoder, shallow-decoder shape (6 + 1 layers), made from the shipped model by its recipe."""
    folder = tmp_path_factory.mktemp("deep") / "six-plus-one"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "recipes" / "deep_shallow_init.py"),
            str(SHIPPED),
            str(folder),
            "--encoder_layers",
            "6",
            "--decoder_layers",
            "1",
        ],
        check=True,
        capture_output=True,
    )
    translator = translators.load_our_translator(str(folder))
    translator.model.set_attn_implementation("eager")
    return translator


def test_the_layer_choice_reaches_a_deep_encoders_last_layer(deep, ours):
    import gradio as gr

    from transformer_en_de.app.page.inside import attention_controls

    with gr.Blocks():
        _, deep_layers, _ = attention_controls([deep])
        _, both_layers, _ = attention_controls([ours, deep])
    assert [value for _, value in deep_layers.choices] == [1, 2, 3, 4, 5, 6]  # the encoder's six, not the decoder's one
    assert [value for _, value in both_layers.choices] == [1, 2, 3, 4, 5, 6]


@pytest.fixture(scope="module")
def views(ours):
    return [view_inside(ours, sentence, DecodingSettings(num_beams=4)) for sentence in SENTENCES]


@pytest.fixture(scope="module")
def deep_views(deep):
    return [view_inside(deep, sentence, DecodingSettings(num_beams=4)) for sentence in SENTENCES[:2]]


def attention_tensors(view: dict) -> dict[str, torch.Tensor]:
    return {kind: torch.tensor(view["attention"][kind]) for kind in KINDS}  # (layers, heads, query, key)


ROUNDED = 0.5 * 10**-DECIMALS + 1e-6  # how far a rounded encoding may be from its value


@pytest.mark.parametrize("shape", ["shipped", "6+1"])
def test_attention_has_every_layer_and_head_and_rows_sum_to_one(shape, request):
    translator, views = (
        request.getfixturevalue(name) for name in (("ours", "views") if shape == "shipped" else ("deep", "deep_views"))
    )
    config = translator.model.config
    assert (config.encoder_layers, config.decoder_layers) == ((3, 3) if shape == "shipped" else (6, 1))
    for view in views:
        sources, decoder = len(view["source_ids"]), len(view["target_ids"])  # the decoder reads <s> and all but </s>
        shapes = {
            "encoder_self": (config.encoder_layers, config.num_attention_heads, sources, sources),
            "decoder_self": (config.decoder_layers, config.num_attention_heads, decoder, decoder),
            "cross": (config.decoder_layers, config.num_attention_heads, decoder, sources),
        }
        for kind, weights in attention_tensors(view).items():
            assert tuple(weights.shape) == shapes[kind]
            assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-3)
            assert (weights >= 0).all()


def test_decoder_self_attention_is_zero_above_the_diagonal(views):
    for view in views:
        weights = attention_tensors(view)["decoder_self"]
        later = torch.ones(weights.shape[-2:], dtype=torch.bool).triu(diagonal=1)  # key after the query
        assert (weights[..., later] == 0).all()
        assert (weights[..., ~later] > 0).any()  # not all zero: the pieces before are read


def test_positional_encoding_is_the_papers_formula(views, ours):
    d_model = ours.model.config.d_model
    for view in views:
        table = view["positional_encoding"]
        assert len(table) == len(view["source_ids"]) and all(len(row) == d_model for row in table)
        for pos, row in enumerate(table):
            for i in range(d_model // 2):
                angle = pos / 10000 ** (2 * i / d_model)
                assert row[2 * i] == pytest.approx(math.sin(angle), abs=ROUNDED)
                assert row[2 * i + 1] == pytest.approx(math.cos(angle), abs=ROUNDED)


def test_embedding_and_encoding_lengths_are_those_of_the_parts_added(views, ours):
    encoder = ours.model.get_encoder()
    view = views[0]
    ids = torch.tensor(view["source_ids"])
    with torch.inference_mode():
        scaled = encoder.embed_tokens(ids) * math.sqrt(ours.model.config.d_model)
    assert view["embed_scale"] == pytest.approx(math.sqrt(ours.model.config.d_model))
    assert view["embedding_norms"] == pytest.approx(scaled.norm(dim=-1).tolist(), rel=1e-5)
    # |PE(pos)|² = Σ sin² + cos² over d_model/2 pairs.
    assert view["positional_norms"] == pytest.approx([math.sqrt(ours.model.config.d_model / 2)] * len(ids), rel=1e-5)


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_the_traced_search_chooses_what_generate_and_the_engine_choose(ours, num_beams):
    settings = DecodingSettings(num_beams=num_beams, max_new_tokens=255, batch_size=8)
    for sentence in SENTENCES:
        view = view_inside(ours, sentence, settings)
        run = translate(ours.model, ours.tokenizer, [sentence], settings)
        plan = plan_decoding(ours.model, ours.tokenizer, [sentence], settings)
        config = plan.generation_config
        config.max_new_tokens = plan.limits[0]
        source = torch.tensor([plan.source_ids[0]])
        generated = ours.model.generate(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            generation_config=config,
            max_new_tokens_ratio=plan.bound[0],
            max_new_tokens_offset=plan.bound[1],
        )[0].tolist()
        assert [generated[0], *view["target_ids"]] == strip_generated(
            generated, config.pad_token_id, config.eos_token_id
        )
        assert view["target_ids"] == run.translations[0].generated_ids[1:]
        assert view["translation"] == run.texts[0]
        assert view["finished"][0]["ids"] == [generated[0], *view["target_ids"]]


def test_beam_scores_are_the_searchs_own(ours):
    """The scores read from the recorded steps, divided by pieces^α, are the scores generate() ranks its finished
    hypotheses by (`sequences_scores`), in its order; some sentence shows the penalty reordering them."""
    settings = DecodingSettings(num_beams=4)
    reordered = False
    for sentence in SENTENCES:
        view = view_inside(ours, sentence, settings)
        plan = plan_decoding(ours.model, ours.tokenizer, [sentence], settings)
        config = plan.generation_config
        config.max_new_tokens = plan.limits[0]
        config.return_dict_in_generate, config.output_scores, config.num_return_sequences = True, True, 4
        source = torch.tensor([plan.source_ids[0]])
        output = ours.model.generate(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            generation_config=config,
            max_new_tokens_ratio=plan.bound[0],
            max_new_tokens_offset=plan.bound[1],
        )
        assert [item["length_normalised"] for item in view["finished"]] == pytest.approx(
            output.sequences_scores.tolist(), rel=1e-4
        )
        reordered |= any(item["rank"] != item["rank_without_penalty"] for item in view["finished"])
        # Each step's live beams: the first step holds the prompt alone, each later beam extends one of the step before.
        steps = view["beam_steps"]
        assert [beam["text"] for beam in steps[0]["beams"]] == [""]
        for before, after in zip(steps, steps[1:], strict=False):
            assert 1 <= len(after["beams"]) <= 4
            texts = {tuple(beam["pieces"]) for beam in before["beams"]}
            assert all(tuple(beam["pieces"][:-1]) in texts for beam in after["beams"])
            assert all(0 < item["probability"] <= 1 for beam in after["beams"] for item in beam["next"])
        assert sum(len(step["finished"]) for step in steps) == len(view["finished"])
    assert reordered, "with length penalty 4.0, some finished hypotheses should change places"


def test_a_comparison_model_shows_its_own_tensors(marian):
    view = view_inside(marian, "A dog runs in the park.", DecodingSettings(num_beams=2, max_new_tokens=20))
    run = translate(
        marian.model, marian.tokenizer, ["A dog runs in the park."], DecodingSettings(num_beams=2, max_new_tokens=20)
    )
    assert view["target_ids"] == run.translations[0].generated_ids[1:]
    for kind, weights in attention_tensors(view).items():
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-3), kind
    later = torch.ones(attention_tensors(view)["decoder_self"].shape[-2:], dtype=torch.bool).triu(diagonal=1)
    assert (attention_tensors(view)["decoder_self"][..., later] == 0).all()
    # MarianMT's table: the sines of every dimension pair first, then the cosines.
    d_model = marian.model.config.d_model
    for pos, row in enumerate(view["positional_encoding"]):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert row[i] == pytest.approx(math.sin(angle), abs=ROUNDED)
            assert row[d_model // 2 + i] == pytest.approx(math.cos(angle), abs=ROUNDED)


def test_a_learner_looks_inside_a_model_loaded_with_from_pretrained():
    """No app object: the model and tokenizer as a notebook loads them, the module docstring's three lines; the view's
    translation is what the model's own generate() writes with its saved settings."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from transformer_en_de.inside import inside_view

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(SHIPPED, trust_remote_code=True).eval()
    model.set_attn_implementation("eager")
    sentence = "Two dogs are playing in the snow."
    view = inside_view(model, tokenizer, sentence)
    written = model.generate(**tokenizer(sentence, return_tensors="pt"))[0]
    assert view["model"] == type(model).__name__
    assert view["translation"] == tokenizer.decode(written, skip_special_tokens=True).strip()
    assert len(view["attention"]["cross"]) == model.config.decoder_layers


def test_a_request_follows_one_bounded_sentence_and_says_so(ours):
    limits = Limits()
    long = " ".join(["A dog runs in the park"] * 10) + ". The cat sleeps."
    view = inside_request(long, "beam search", 4, 255, context=RequestContext(ours, limits=limits))
    assert len(view["sentence"].split()) <= limits.max_sentence_words
    assert any("first of the 2" in notice for notice in view["notices"])
    assert any("in parts" in notice for notice in view["notices"])


def test_a_request_shows_every_model_and_draws_each(ours, marian):
    text = "A dog runs in the park. The cat sleeps."
    view = inside_request(text, "beam search", 4, 255, context=RequestContext(ours, [marian]))
    assert view["sentence"] == "A dog runs in the park."
    assert [item["model"] for item in systems_of(view)] == [ours.name, marian.name]
    pictures = draw_inside(view, "decoder_self", 1, 0, 2)
    assert len(pictures) == 1 + 2 * 4 + 1  # notices; pieces, positions, attention, beams per model; caption
    assert "triangle" in pictures[1 + 2 * 3]


def test_the_beam_search_is_one_table_a_row_a_step_a_column_a_beam(ours, marian):
    """Each model's search as one table: a row per recorded step, a column per beam, each cell its beam's text and
    score, each finished hypothesis marked once, in the cell of the beam it ended at its step; the finished ones ranked
    in a second table."""

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]  # a visitor's "|" comes escaped

    view = inside_request("A dog runs in the park.", "beam search", 4, 255, context=RequestContext(ours, [marian]))
    for model in systems_of(view):
        drawn = format_beam_search(model)
        tables = [block.splitlines() for block in drawn.split("\n\n") if block.startswith("|")]
        assert len(tables) == 2, drawn
        (header, _, *rows), finished = [[cells(line) for line in table] for table in tables]
        assert header == ["step", *(f"beam {number}" for number in range(1, model["num_beams"] + 1))]
        assert [row[0] for row in rows] == [str(step["step"]) for step in model["beam_steps"]]
        for row, step in zip(rows, model["beam_steps"], strict=True):
            beams = row[1:]
            assert len(beams) == model["num_beams"] and not any(beams[len(step["beams"]) :])
            for cell, beam in zip(beams, step["beams"], strict=False):
                assert cell.startswith(f"{as_text(beam['text']) or '(start)'} ({beam['score']:.2f})"), cell
            marked = [int(rank) for cell in beams for rank in re.findall(r"\*\*#(\d+)\*\*", cell)]
            assert sorted(marked) == sorted(step["finished"]), (row, step["finished"])
        assert sum(len(step["finished"]) for step in model["beam_steps"]) == len(model["finished"]) > 0
        assert [row[1] for row in finished[2:]] == [as_text(item["text"]) for item in model["finished"]]


def test_the_pictures_keep_every_label_inside_and_apart(views, deep_views, marian, ours):
    """The layout is fixed before drawing (no layout engine measures the labels), so check what one would: everything
    drawn (each panel with its tick labels, axis labels and title; the legend; the figure's title) lies inside its
    figure, and no panel's labels run into another panel's heatmap."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    marian_view = view_inside(marian, "A dog runs in the park.", DecodingSettings(num_beams=2, max_new_tokens=20))
    long = view_inside(ours, " ".join(["The old fisherman repairs his colourful nets"] * 4), DecodingSettings())
    for view in [*views, *deep_views, marian_view, long]:
        figures = [plot_positions(view)]
        # the first and the last layer of each kind: a deep encoder's sixth, a one-layer decoder's only one
        last = {kind: len(view["attention"][kind]) - 1 for kind in KINDS}
        figures += [
            plot_attention_heads(view, kind, layer, head)
            for kind in KINDS
            for layer in {0, last[kind]}
            for head in (None, 0)
        ]
        for kind in KINDS:
            title = plot_attention_heads(view, kind, 99, None).texts[0].get_text()
            assert f"layer {last[kind] + 1} of {last[kind] + 1}," in title, title  # a layer past them: the last
        for figure in figures:
            renderer = FigureCanvasAgg(figure).get_renderer()
            figure.draw(renderer)
            drawn = [axes.get_tightbbox(renderer) for axes in figure.axes]
            drawn += [artist.get_window_extent(renderer) for artist in [*figure.texts, *figure.legends]]
            inside_figure = figure.bbox.padded(1)
            for box in drawn:
                assert inside_figure.containsx(box.x0) and inside_figure.containsx(box.x1), (view["model"], box)
                assert inside_figure.containsy(box.y0) and inside_figure.containsy(box.y1), (view["model"], box)
            heatmaps = [axes for axes in figure.axes if axes.images and axes.get_label() != "<colorbar>"]
            for axes in heatmaps:
                labelled = axes.get_tightbbox(renderer)
                assert not any(labelled.overlaps(other.get_window_extent()) for other in heatmaps if other is not axes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", "Type an English sentence"), ("\ud800", "lone surrogate"), (12, "must be a string")],
)
def test_bad_input_is_a_message(ours, text, expected):
    view = inside_request(text, "beam search", 4, 255, context=RequestContext(ours))
    assert expected in view["message"] and "source_tokens" not in view


# ------------------------------------------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python app.py` with the shipped model alone, on a free loopback port."""
    from test_app_server import app_process

    with app_process(SHIPPED, tmp_path_factory.mktemp("server")) as (port, _):
        yield f"http://127.0.0.1:{port}/"


@pytest.mark.slow
def test_the_inside_endpoint_gives_the_translate_endpoints_translation(server):
    from gradio_client import Client

    client = Client(server, verbose=False)
    for sentence in SENTENCES:
        started = time.monotonic()
        view = client.predict(sentence, api_name="/inside")
        assert time.monotonic() - started < 30
        translation = client.predict(sentence, "beam search", 4, 255, "", api_name="/translate")[0]
        assert view["translation"] == translation
        assert set(view["attention"]) == {"encoder_self", "decoder_self", "cross"}
        assert view["beam_steps"] and all("beams" in step for step in view["beam_steps"])
        assert len(view["positional_encoding"]) == len(view["source_tokens"])
    assert "Type an English sentence" in client.predict("   ", api_name="/inside")["message"]


@pytest.mark.slow
@pytest.mark.browser
def test_the_tab_shows_every_picture_in_chromium(server, browser):
    from test_browser import SCREENSHOT

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server)
    page.locator("#english textarea").fill(SENTENCES[0])
    page.get_by_role("tab", name="Inside the Transformer").click()
    page.locator("#inside-run").click()
    for picture in ("positions", "attention"):
        page.locator(f"#inside-{picture}-0 img").wait_for(timeout=60_000)
        assert page.locator(f"#inside-{picture}-0 img").bounding_box()["height"] > 100
    assert "▁jacket" in page.locator("#inside-pieces-0").inner_text()
    assert "Finished hypotheses" in page.locator("#inside-beams-0").inner_text()
    assert "Section 3.2.3" in page.locator("#inside-attention-caption").inner_text()
    # Decoder self-attention of one head: a new picture and the caption of the mask.
    before = page.locator("#inside-attention-0 img").get_attribute("src")
    page.locator("#inside-kind").get_by_text("decoder self-attention").click()
    page.wait_for_function(
        "before => document.querySelector('#inside-attention-0 img')?.getAttribute('src') !== before",
        arg=before,
        timeout=30_000,
    )
    page.locator("#inside-attention-caption").get_by_text("triangle").wait_for(timeout=30_000)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT.with_name("inside.png")), full_page=True)
    assert errors == []
    page.close()
