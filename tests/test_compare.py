"""compare.py on a few lines of the real test set, with our tiny model and a tiny local MarianMT."""

import json
import time

import pytest
import torch
from conftest import DATA_DIR, ROOT, tiny_config
from huggingface_hub import constants
from tiny_marian import build_tiny_marian

import compare
from modeling import TransformerMTForConditionalGeneration
from transformer_en_de.comparison import fair_settings, score_system
from transformer_en_de.decoding import backends
from transformer_en_de.decoding.engine import translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.decoding.loading import load_model
from transformer_en_de.evaluation import corpus_scores

NUM_LINES = 6
SETTINGS = {"num_beams": 2, "max_new_tokens": 12, "batch_size": 4}
DECODING = fair_settings(**SETTINGS)
OFFLINE_HUB_ID = "Helsinki-NLP/opus-mt-en-de"
ROW_KEYS = {"model", "bleu", "chrf", "num_parameters", "seconds", "sentences_per_second", "error"}


@pytest.fixture
def offline(monkeypatch):
    """Offline mode whatever the environment says, so that no test ever downloads a real model."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="session")
def tiny_marian_dir(tmp_path_factory):
    return build_tiny_marian(tmp_path_factory.mktemp("tiny-marian"))


@pytest.fixture(scope="session")
def source_sensitive_model_dir(tiny_tokenizer, tmp_path_factory):
    """A tiny model of ours with wide random weights: unlike the 0.02 init, its output changes with the input."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5))
    folder = tmp_path_factory.mktemp("source-sensitive-model")
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def test_files():
    """(source file, reference file, sources, references) for the real test_2016_flickr set."""
    source, reference = DATA_DIR / "test_2016_flickr.en", DATA_DIR / "test_2016_flickr.de"
    assert source.is_file() and reference.is_file(), f"Multi30k test files are missing under {DATA_DIR}"
    sources = source.read_text(encoding="utf-8").splitlines()[:NUM_LINES]
    references = reference.read_text(encoding="utf-8").splitlines()[:NUM_LINES]
    return source, reference, sources, references


def run_cli(tmp_path, models, source, reference, *extra):
    output = tmp_path / "results" / "comparison.json"
    argv = ["--models", *map(str, models), "--source", str(source), "--reference", str(reference)]
    argv += ["--num_beams", str(SETTINGS["num_beams"]), "--max_new_tokens", str(SETTINGS["max_new_tokens"])]
    argv += ["--batch-size", str(SETTINGS["batch_size"]), "--limit", str(NUM_LINES), "--output", str(output), *extra]
    return compare.main(argv), output


def test_command_scores_both_models_and_writes_json_and_table(
    tmp_path, capsys, test_files, tiny_model_dir, tiny_marian_dir
):
    source, reference, sources, references = test_files
    code, output = run_cli(tmp_path, [tiny_model_dir, tiny_marian_dir], source, reference)

    assert code == 0
    comparison = json.loads(output.read_text(encoding="utf-8"))
    assert comparison["num_sentences"] == NUM_LINES and comparison["num_beams"] == SETTINGS["num_beams"]
    assert comparison["source_file"] == str(source) and comparison["reference_file"] == str(reference)
    assert [system["model"] for system in comparison["systems"]] == [str(tiny_model_dir), str(tiny_marian_dir)]

    for system in comparison["systems"]:
        assert set(system) == ROW_KEYS and system["error"] is None
        model, tokenizer = load_model(system["model"])
        hypotheses = translate(model, tokenizer, sources, DECODING).texts
        assert {"bleu": system["bleu"], "chrf": system["chrf"]} == corpus_scores(hypotheses, references)
        assert system["num_parameters"] == sum(parameter.numel() for parameter in model.parameters())
        assert system["seconds"] >= 0 and system["sentences_per_second"] > 0

    table = output.with_suffix(".md").read_text(encoding="utf-8")
    assert table in capsys.readouterr().out
    assert f"| {tiny_model_dir} | {comparison['systems'][0]['bleu']:.2f} |" in table
    assert f"| {tiny_marian_dir} | {comparison['systems'][1]['bleu']:.2f} |" in table


def test_int8_scores_every_model_with_dynamic_int8_weights(tmp_path, test_files, tiny_model_dir, tiny_marian_dir):
    source, reference, sources, references = test_files
    code, output = run_cli(tmp_path, [tiny_model_dir, tiny_marian_dir], source, reference, "--int8")

    assert code == 0
    comparison = json.loads(output.read_text(encoding="utf-8"))
    assert comparison["weights"] == "int8 dynamic"
    assert "int8 dynamic weights" in output.with_suffix(".md").read_text(encoding="utf-8")
    for system in comparison["systems"]:
        assert system["error"] is None
        model, tokenizer = load_model(system["model"])
        hypotheses = translate(int8_dynamic(model), tokenizer, sources, DECODING).texts
        assert {"bleu": system["bleu"], "chrf": system["chrf"]} == corpus_scores(hypotheses, references)


def test_ctranslate2_backend_scores_every_model_as_the_torch_backend(
    tmp_path, test_files, source_sensitive_model_dir, tiny_marian_dir, monkeypatch
):
    """Ours through our converter, MarianMT through CTranslate2's: greedy, the scores of the torch backend."""
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv(backends.CACHE_VARIABLE, str(tmp_path / "cache"))
    source, reference, sources, references = test_files
    models = [source_sensitive_model_dir, tiny_marian_dir]
    code, output = run_cli(tmp_path, models, source, reference, "--backend", "ctranslate2", "--num_beams", "1")

    assert code == 0
    comparison = json.loads(output.read_text(encoding="utf-8"))
    assert comparison["backend"] == "CTranslate2 float32"
    assert "decoded by CTranslate2 float32" in output.with_suffix(".md").read_text(encoding="utf-8")
    greedy = fair_settings(**(SETTINGS | {"num_beams": 1}))
    for system in comparison["systems"]:
        assert system["error"] is None
        model, tokenizer = load_model(system["model"])
        hypotheses = translate(model, tokenizer, sources, greedy).texts
        assert {"bleu": system["bleu"], "chrf": system["chrf"]} == corpus_scores(hypotheses, references)

    code, output = run_cli(tmp_path / "int8", models, source, reference, "--backend", "ctranslate2", "--int8")
    comparison = json.loads(output.read_text(encoding="utf-8"))
    assert code == 0 and comparison["backend"] == "CTranslate2 int8"
    assert [system["error"] for system in comparison["systems"]] == [None, None]


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_translate_keeps_input_order(which, test_files, source_sensitive_model_dir, tiny_marian_dir):
    model, tokenizer = load_model(str(source_sensitive_model_dir if which == "ours" else tiny_marian_dir))
    sources = test_files[2]
    alone = fair_settings(num_beams=1, max_new_tokens=12, batch_size=1)
    one_by_one = [translate(model, tokenizer, [sentence], alone).texts[0] for sentence in sources]
    batched = translate(model, tokenizer, sources, fair_settings(num_beams=1, max_new_tokens=12)).texts
    assert batched == one_by_one
    assert len(set(batched)) > 2  # different sentences get different outputs, so a mix-up would show


def test_score_system_row_matches_its_translations(test_files, tiny_marian_dir):
    _, _, sources, references = test_files
    row = score_system(str(tiny_marian_dir), sources, references, DECODING)
    assert row["error"] is None and len(row["translations"]) == NUM_LINES
    assert {"bleu": row["bleu"], "chrf": row["chrf"]} == corpus_scores(row["translations"], references)


def test_offline_hub_id_gets_an_error_row_fast_and_others_are_scored(offline, tmp_path, test_files, tiny_model_dir):
    source, reference, sources, references = test_files
    started = time.perf_counter()
    row = score_system(OFFLINE_HUB_ID, sources, references, DECODING)
    assert time.perf_counter() - started < 10
    assert row["bleu"] is None and row["num_parameters"] is None
    assert row["error"].startswith("could not be loaded: the Hugging Face Hub is unreachable (offline)")

    code, output = run_cli(tmp_path, [OFFLINE_HUB_ID, tiny_model_dir], source, reference)
    assert code == 0
    hub_row, ours = json.loads(output.read_text(encoding="utf-8"))["systems"]
    assert hub_row["model"] == OFFLINE_HUB_ID and hub_row["error"] == row["error"] and hub_row["chrf"] is None
    assert ours["error"] is None and ours["bleu"] is not None
    assert row["error"] in output.with_suffix(".md").read_text(encoding="utf-8")


def test_no_model_scored_is_a_failure_that_writes_nothing(offline, tmp_path, capsys, test_files):
    source, reference, _, _ = test_files
    code, output = run_cli(tmp_path, [OFFLINE_HUB_ID, tmp_path / "no-such-model"], source, reference)
    assert code != 0
    assert not output.exists()
    err = capsys.readouterr()
    assert "no model could be scored" in err.err
    assert "there is no model folder at" in err.out


def test_missing_source_file_is_named(tmp_path, capsys, test_files, tiny_model_dir):
    _, reference, _, _ = test_files
    missing = tmp_path / "missing.en"
    code, output = run_cli(tmp_path, [tiny_model_dir], missing, reference)
    assert code != 0 and not output.exists()
    assert str(missing) in capsys.readouterr().err


def test_unequal_line_counts_name_both_files(tmp_path, capsys, test_files, tiny_model_dir):
    _, _, sources, references = test_files
    source, reference = tmp_path / "short.en", tmp_path / "long.de"
    source.write_text("\n".join(sources[:3]) + "\n", encoding="utf-8")
    reference.write_text("\n".join(references) + "\n", encoding="utf-8")
    code, output = run_cli(tmp_path, [tiny_model_dir], source, reference)
    assert code != 0 and not output.exists()
    message = capsys.readouterr().err
    assert str(source) in message and str(reference) in message


def test_unwritable_output_is_one_line_before_any_scoring(tmp_path, capsys, test_files, tiny_model_dir):
    source, reference, _, _ = test_files
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    output = blocker / "comparison.json"
    started = time.perf_counter()
    code = compare.main(
        [
            "--models",
            str(tiny_model_dir),
            "--source",
            str(source),
            "--reference",
            str(reference),
            "--output",
            str(output),
        ]
    )
    assert code == 2 and time.perf_counter() - started < 5  # refused before the model is loaded or anything scored
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"error: --output {output} cannot be written") and "\n" not in message


def test_help_gives_every_flag_and_the_beams_the_stored_comparison_ran_with(capsys):
    with pytest.raises(SystemExit):
        compare.main(["--help"])
    flags = " ".join(capsys.readouterr().out.split())
    stored = json.loads((ROOT / "results" / "comparison_test_2016_flickr.json").read_text(encoding="utf-8"))
    saved = json.loads((ROOT / "models" / "transformer-en-de" / "generation_config.json").read_text(encoding="utf-8"))
    assert stored["num_beams"] == saved["num_beams"]
    assert f"(default: {saved['num_beams']}, the shipped model's)" in flags
    assert "sorted by length (default: 32)" in flags and "the OFFSET of that bound (default: 10)" in flags
