"""The app's functions with tiny local models: translation, figures, scores, heatmaps, files, bad input, offline."""

import csv
import io
import json
import time

import pytest
import torch
from matplotlib.figure import Figure
from tiny_marian import build_tiny_marian

import app
from transformer_en_de import evaluation as metrics

SENTENCE = "A dog runs in the park."


@pytest.fixture(scope="module")
def ours(app_model_dir):
    return app.load_our_translator(str(app_model_dir))


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return build_tiny_marian(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def marian(marian_dir):
    return app.load_translator(str(marian_dir), app.MARIAN_NAME, eager_attention=True)


def generate_directly(translator, sentence, num_beams, max_new_tokens):
    """The translation by calling generate() by hand, to compare the app against."""
    encoded = translator.tokenizer([sentence], return_tensors="pt")
    with torch.inference_mode():
        output = translator.model.generate(**encoded, num_beams=num_beams, do_sample=False,
                                           max_new_tokens=max_new_tokens)
    return translator.tokenizer.decode(output[0], skip_special_tokens=True).strip()


@pytest.mark.parametrize("decoding, beams", [("greedy", 1), ("beam search", 3)])
def test_both_systems_translate_like_generate(ours, marian, decoding, beams):
    result = app.translate_text(SENTENCE, decoding, 3, 12, ours=ours, marian=marian)

    assert result.message == "" and result.sentences == [SENTENCE]
    for output, translator in ((result.ours, ours), (result.marian, marian)):
        assert output.translation == generate_directly(translator, SENTENCE, beams, 12)
        assert output.seconds > 0
        assert 1 <= output.tokens_generated <= 12
        assert output.tokens_generated == len(output.run.generated_ids[0]) - 1
        assert output.num_parameters == translator.model.num_parameters()


def test_details_show_latency_tokens_and_parameters(ours, marian):
    result = app.translate_text(SENTENCE, "greedy", 1, 8, ours=ours, marian=marian)
    details = app.format_details(result.ours)

    assert f"{result.ours.seconds:.2f} s" in details
    assert f"**Tokens generated** {result.ours.tokens_generated}" in details
    assert f"{ours.model.num_parameters() / 1e6:.2f}M" in details


def test_reference_scores_are_sentence_bleu_and_chrf(ours, marian):
    reference = "Ein Hund rennt im Park."
    result = app.translate_text(SENTENCE, "beam search", 2, 10, reference, ours=ours, marian=marian)

    for output in (result.ours, result.marian):
        assert output.scores == metrics.sentence_scores(output.translation, reference)
        assert f"**chrF** {output.scores['chrf']:.2f}" in app.format_details(output)
    assert app.translate_text(SENTENCE, "greedy", 1, 5, "  ", ours=ours, marian=marian).ours.scores is None


def test_split_sentences_keeps_lines():
    sentences, separators = app.split_sentences("A dog runs. Two men work!\n\nIs it raining? \"Yes.\" It is")

    assert sentences == ["A dog runs.", "Two men work!", "Is it raining?", '"Yes."', "It is"]
    assert app.join_sentences(["1", "2", "3", "4", "5"], separators) == "1 2\n3 4 5"


def test_several_sentences_are_one_batch_joined_in_order(ours, marian):
    text = "A dog runs in the park. The cat sleeps.\nTwo men are working."
    result = app.translate_text(text, "greedy", 1, 6, ours=ours, marian=marian)

    assert result.sentences == ["A dog runs in the park.", "The cat sleeps.", "Two men are working."]
    for output in (result.ours, result.marian):
        parts = output.run.translations
        assert len(parts) == 3 and len(output.run.generated_ids) == 3
        assert output.translation == f"{parts[0]} {parts[1]}\n{parts[2]}".strip()
        assert output.tokens_generated == sum(len(ids) - 1 for ids in output.run.generated_ids)


@pytest.mark.parametrize("layer", [None, 0, 99])
def test_cross_attention_map_is_source_by_generated(ours, marian, layer):
    result = app.translate_text(SENTENCE, "greedy", 1, 7, ours=ours, marian=marian)

    for output, translator in ((result.ours, ours), (result.marian, marian)):
        source_ids, generated_ids = output.run.source_ids[0], output.run.generated_ids[0]
        attention = app.cross_attention_map(translator, source_ids, generated_ids, layer)

        generated = len(generated_ids) - 1  # the decoder start token is read, never generated
        assert attention.weights.shape == (len(source_ids), generated)
        assert len(attention.source_tokens) == len(source_ids) and len(attention.generated_tokens) == generated
        # Each generated token's attention over the source is a softmax, and so is any mean of them.
        assert torch.allclose(torch.from_numpy(attention.weights.sum(axis=0)), torch.ones(generated), atol=1e-5)
        layers = translator.num_layers
        expected = f"mean of {layers} layers" if layer is None else f"layer {min(layer, layers - 1) + 1} of {layers}"
        assert attention.description.startswith(expected)

        figure = app.plot_attention(attention, translator.name)
        axes = figure.axes[0]
        assert isinstance(figure, Figure)
        assert [label.get_text() for label in axes.get_yticklabels()] == attention.source_tokens
        assert [label.get_text() for label in axes.get_xticklabels()] == attention.generated_tokens


def test_token_labels_are_readable(ours):
    ids = ours.tokenizer("A dog runs.")["input_ids"]
    labels = app._token_labels(ours.tokenizer, ids)

    assert "".join(labels[:-1]).replace("▁", " ") == "A dog runs."
    assert labels[-1] == "</s>"


def test_long_input_is_cut_with_notices(ours, marian):
    text = "word " * 3_999 + "words"  # 20,000 characters, one "sentence"
    result = app.translate_text(text, "greedy", 1, 5, ours=ours, marian=marian)

    assert result.message == ""
    assert any("20,000 characters" in notice and "3,000" in notice for notice in result.notices)
    for output, translator in ((result.ours, ours), (result.marian, marian)):
        assert output.tokens_generated >= 1
        assert len(output.run.source_ids[0]) == translator.max_source_tokens
        assert any("cut to fit" in notice for notice in output.notices)
        assert "cut to fit" in app.format_details(output)


def test_max_new_tokens_beyond_positions_is_lowered_with_notice(ours, marian):
    result = app.translate_text(SENTENCE, "greedy", 1, 10_000, ours=ours, marian=marian)

    assert result.ours.tokens_generated <= ours.max_new_tokens
    assert any(f"at most {ours.max_new_tokens} tokens" in notice for notice in result.ours.notices)


@pytest.mark.parametrize("text", ["", "   \n\t  ", None])
def test_empty_text_asks_for_input(ours, marian, text):
    result = app.translate_text(text, ours=ours, marian=marian)

    assert "Type an English sentence" in result.message
    assert result.ours.translation == "" and result.marian.translation == ""


def test_unknown_decoding_is_a_message(ours, marian):
    result = app.translate_text(SENTENCE, "sampling", ours=ours, marian=marian)

    assert "decoding must be one of 'beam search', 'greedy'" in result.message


def test_emoji_and_other_scripts_translate_without_error(ours, marian):
    text = "A dog 🐕 runs. Собака бежит. 狗在跑。 كلب يجري. Straße ß „quotes“"
    result = app.translate_text(text, "beam search", 2, 8, ours=ours, marian=marian)

    assert result.message == ""
    assert len(result.sentences) == 5
    for output, translator in ((result.ours, ours), (result.marian, marian)):
        assert len(output.run.translations) == 5 and output.tokens_generated > 0
        attention = app.cross_attention_map(translator, output.run.source_ids[0], output.run.generated_ids[0])
        app.plot_attention(attention, translator.name).savefig(io.BytesIO(), format="png")  # labels render


# ------------------------------------------------------------------------------------------------ files


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_file_translations_and_corpus_scores(ours, marian, tmp_path):
    source = write(tmp_path / "source.txt", "A dog runs in the park.\n\nTwo men are working.\nThe cat sleeps.\n")
    reference = write(tmp_path / "reference.txt",
                      "Ein Hund rennt im Park.\n\nZwei Männer arbeiten.\nDie Katze schläft.\n")
    steps = []

    result = app.translate_file(source, reference, "greedy", 1, 8, ours=ours, marian=marian,
                                progress=lambda done, desc: steps.append(done))

    with open(result.path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert rows[0] == ["line", "source", app.OURS_NAME, app.MARIAN_NAME, "reference"]
    assert [row[1] for row in rows[1:]] == ["A dog runs in the park.", "", "Two men are working.", "The cat sleeps."]
    assert rows[2][2:4] == ["", ""]  # a blank line stays blank, so lines keep pairing up
    references = [row[4] for row in rows[1:]]
    for column, name in ((2, app.OURS_NAME), (3, app.MARIAN_NAME)):
        translations = [row[column] for row in rows[1:]]
        assert translations[0] == generate_directly(ours if column == 2 else marian, rows[1][1], 1, 8)
        assert result.scores[name] == metrics.corpus_scores(translations, references)
        assert f"{result.scores[name]['bleu']:.2f}" in result.summary
    assert steps[-1] == (2 * 3, 2 * 3)  # (sentences done, total) over both systems


def test_file_without_references_has_no_scores(ours, marian, tmp_path):
    source = write(tmp_path / "source.txt", "A dog runs.\nThe cat sleeps.\n")

    result = app.translate_file(source, None, "beam search", 2, 6, ours=ours, marian=marian)

    assert result.path and result.scores == {}
    assert "Upload a reference file" in result.summary


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "looks like a binary file"),
        ("Straße\n".encode("latin-1"), "is not UTF-8 text"),
        (b"\n  \n", "has no text"),
    ],
)
def test_unusable_source_file_is_a_message(ours, marian, tmp_path, content, expected):
    source = tmp_path / "upload.txt"
    source.write_bytes(content)

    result = app.translate_file(source, None, ours=ours, marian=marian)

    assert result.path is None and expected in result.summary


def test_reference_with_other_line_count_is_a_message(ours, marian, tmp_path):
    source = write(tmp_path / "source.txt", "A dog runs.\nThe cat sleeps.\nTwo men work.\n")
    reference = write(tmp_path / "reference.txt", "Ein Hund rennt.\nDie Katze schläft.\n")

    result = app.translate_file(source, reference, ours=ours, marian=marian)

    assert result.path is None
    assert "reference file has 2 lines but the English file has 3" in result.summary


def test_missing_upload_is_a_message(ours, marian):
    assert "Upload the English file first" in app.translate_file(None, ours=ours, marian=marian).summary


# ------------------------------------------------------------------------------------------------ MarianMT offline


def test_marian_offline_panel_says_so_and_ours_still_translates(ours, tmp_path):
    started = time.monotonic()
    marian = app.BackgroundModel(app.DEFAULT_MARIAN_MODEL, app.MARIAN_NAME, cache_dir=str(tmp_path / "empty-cache"))
    assert marian.wait(timeout=60)

    assert time.monotonic() - started < 30  # HF_HUB_OFFLINE=1: fails fast instead of retrying the Hub
    assert marian.translator is None
    assert "offline (HF_HUB_OFFLINE=1)" in marian.error and app.DEFAULT_MARIAN_MODEL in marian.error
    result = app.translate_text(SENTENCE, "greedy", 1, 5, ours=ours, marian=marian)
    assert result.ours.translation == generate_directly(ours, SENTENCE, 1, 5)
    assert result.marian.translation == "" and result.marian.message == marian.error
    assert app.format_details(result.marian) == f"⚠️ {marian.error}"
    assert marian.status() == marian.error


def test_marian_loading_status_then_ready(marian_dir):
    marian = app.BackgroundModel(str(marian_dir), app.MARIAN_NAME)
    first = marian.status()
    assert marian.wait(timeout=60)

    assert "loading" in first or "ready" in first
    assert marian.status().startswith(f"{app.MARIAN_NAME} ready: {marian_dir}")


# ------------------------------------------------------------------------------------------------ start-up, comparison


def test_missing_model_folder_fails_at_start_with_the_path(tmp_path):
    missing = tmp_path / "no-model-here"

    with pytest.raises(app.ModelUnavailableError, match="No model folder at .*no-model-here.*train.py"):
        app.build_demo(str(missing), "unused/marian")
    with pytest.raises(SystemExit) as exit_info:
        app.main(["--model", str(missing)])
    assert str(missing) in str(exit_info.value.code) and "TRANSFORMER_MT_MODEL" in str(exit_info.value.code)


def test_folder_without_config_is_not_a_model(tmp_path):
    with pytest.raises(app.ModelUnavailableError, match="no config.json"):
        app.load_our_translator(str(tmp_path))


def test_default_model_is_the_folder_beside_the_app():
    assert app.resolve_our_model(None) == str(app.APP_DIR / "models" / "transformer-en-de")
    assert app.resolve_our_model("someone/transformer-en-de") == "someone/transformer-en-de"


def test_comparison_table_reads_both_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "eval_results.json").write_text(json.dumps({
        "test_2016_flickr": {"bleu": 36.51, "chrf": 62.3, "num_sentences": 1000, "num_beams": 4},
        "validation": {"bleu": 38.0, "chrf": 64.0},
        "num_parameters": 44_000_000,
    }))
    comparison = tmp_path / "comparison.json"
    comparison.write_text(json.dumps({
        "source_file": "data/test_2016_flickr.en", "reference_file": "data/test_2016_flickr.de",
        "num_sentences": 1000, "num_beams": 4,
        "systems": [
            {"model": "models/transformer-en-de", "bleu": 36.5, "chrf": 62.3, "num_parameters": 44_000_000,
             "seconds": 50.0, "sentences_per_second": 20.0, "error": None},
            {"model": "Helsinki-NLP/opus-mt-en-de", "bleu": None, "chrf": None, "num_parameters": None,
             "seconds": None, "sentences_per_second": None, "error": "offline"},
        ],
    }))

    summary, rows = app.comparison_table(str(model), comparison)

    assert [row[:5] for row in rows] == [
        [f"{app.OURS_NAME}, eval_results.json", "test_2016_flickr", "1,000", "36.51", "62.30"],
        [f"{app.OURS_NAME}, eval_results.json", "validation", "", "38.00", "64.00"],
        ["models/transformer-en-de", "test_2016_flickr", "1,000", "36.50", "62.30"],
        ["Helsinki-NLP/opus-mt-en-de", "test_2016_flickr", "1,000", "", ""],
    ]
    assert rows[0][5] == "44.00M" and rows[2][6] == "20.0" and rows[3][7] == "offline"
    assert "1000 sentences" in summary


def test_comparison_table_absent_or_broken_is_a_plain_message(tmp_path):
    summary, rows = app.comparison_table(str(tmp_path), tmp_path / "missing.json")
    assert rows == [] and "No corpus-level results yet" in summary

    (tmp_path / "broken.json").write_text("{not json")
    summary, rows = app.comparison_table(str(tmp_path), tmp_path / "broken.json")
    assert rows == [] and "broken.json could not be read" in summary

    (tmp_path / "list.json").write_text("[1, 2]")
    summary, rows = app.comparison_table(str(tmp_path), tmp_path / "list.json")
    assert rows == [] and "list.json is not a JSON object" in summary


def test_demo_has_the_named_endpoints(ours, marian_dir):
    demo = app.build_demo(ours.reference, str(marian_dir))

    api_names = {fn.api_name for fn in demo.fns.values() if fn.api_visibility == "public"}
    assert {"translate", "translate_file", "comparison", "marian_status"} <= api_names
