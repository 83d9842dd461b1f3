"""transformer_en_de/publishing/model_card.py: the card is built from the folder's eval_results.json (the one shape)."""

import pytest
from conftest import ROOT, tiny_config
from huggingface_hub import ModelCard

from transformer_en_de.evaluation import read_eval_results, write_eval_results
from transformer_en_de.publishing.model_card import write_model_card

SCORE = {"bleu": 30.5, "chrf": 55.25, "num_sentences": 1000, "bleu_signature": "nrefs:1|bleu", "chrf_signature": "c"}


def write_results(folder, languages=("en", "de"), **training):
    write_eval_results(
        folder,
        num_parameters=7577600,
        languages=languages,
        decoding={
            "num_beams": 4,
            "length_penalty": 0.6,
            "max_new_tokens": 255,
            "max_new_tokens_ratio": 1.5,
            "max_new_tokens_offset": 10,
            "batch_size": 32,
        },
        scores={"val": dict(SCORE, bleu=31.0, num_sentences=1014), "test_2016_flickr": SCORE},
        command=["python train.py --output_dir run", "python average_checkpoints.py run/checkpoint-1"],
        training={"validation_split": "val", **training},
    )


def model_index_metrics(card: ModelCard) -> list[tuple[str, str, float]]:
    return [
        (entry["dataset"]["name"], metric["type"], metric["value"])
        for entry in card.data.to_dict()["model-index"][0]["results"]
        for metric in entry["metrics"]
    ]


def test_card_reports_the_test_split_in_the_metadata_and_every_split_in_the_text(tmp_path, tiny_tokenizer):
    write_results(tmp_path)
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))
    assert model_index_metrics(card) == [
        ("Multi30k (test_2016_flickr)", "bleu", 30.5),
        ("Multi30k (test_2016_flickr)", "chrf", 55.25),
    ]  # never validation
    assert "| val (validation) | 1014 | 31.0 | 55.25 |" in card.text
    assert "| test_2016_flickr | 1000 | 30.5 | 55.25 |" in card.text
    assert "at most 1.5 × source tokens + 10 new tokens" in card.text
    assert "python train.py --output_dir run\npython average_checkpoints.py run/checkpoint-1" in card.text
    assert "English→German (en→de)" in card.text and card.data.language == ["en", "de"]


def test_reverse_direction_card_says_de_to_en(tmp_path, tiny_tokenizer):
    write_results(tmp_path, languages=("de", "en"))
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))
    assert "A German→English (de→en) Transformer" in card.text and "English→German" not in card.text
    assert card.data.language == ["de", "en"]
    assert card.data.to_dict()["model-index"][0]["results"][0]["dataset"]["config"] == "de-en"
    assert "opus-mt-de-en" in card.text


def test_card_lists_the_average_candidates_and_marks_the_chosen_one(tmp_path, tiny_tokenizer):
    candidates = [
        {"name": "last 1", "checkpoints": ["checkpoint-30"], "validation": {"bleu": 30.0, "chrf": 55.0}},
        {
            "name": "last 2",
            "checkpoints": ["checkpoint-20", "checkpoint-30"],
            "validation": {"bleu": 31.0, "chrf": 56.0},
        },
    ]
    write_results(
        tmp_path,
        average_candidates=candidates,
        chosen_average="last 2",
        averaged_checkpoints=["checkpoint-20", "checkpoint-30"],
    )
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))
    assert "| last 2 ✓ | checkpoint-20, checkpoint-30 | 31.0 | 56.0 |" in card.text
    assert "| last 1 | checkpoint-30 | 30.0 | 55.0 |" in card.text
    assert "then averaging\nthe weights of checkpoints checkpoint-20, checkpoint-30" in card.text


def test_card_says_when_one_checkpoint_beat_every_average(tmp_path, tiny_tokenizer):
    candidates = [
        {"name": "last 1", "checkpoints": ["checkpoint-30"], "validation": {"bleu": 31.5, "chrf": 55.0}},
        {
            "name": "last 2",
            "checkpoints": ["checkpoint-20", "checkpoint-30"],
            "validation": {"bleu": 31.0, "chrf": 56.0},
        },
    ]
    write_results(
        tmp_path, average_candidates=candidates, chosen_average="last 1", averaged_checkpoints=["checkpoint-30"]
    )
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))
    assert "keeping checkpoint-30 alone: it scored higher on validation BLEU than the averages" in card.text
    assert "averaging\nthe weights" not in card.text


def test_card_of_a_deep_encoder_and_shallow_decoder_says_why_and_what_it_measured(tmp_path, tiny_tokenizer):
    speed = {
        "reference": "the 3 + 3 model shipped before (4 beams)",
        "cpu": "AMD EPYC, AVX512",
        "batch_32": 1.63,
        "batch_1": 1.44,
        "command": "python -m benchmarks.shape_speed --free-running --candidate new --threads 1",
    }
    write_results(tmp_path, speed=speed)
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer, encoder_layers=6, decoder_layers=1))
    assert "| layers (encoder + decoder) | 6 + 1 |" in card.text
    assert "Why 6 + 1: a deep encoder and a shallow decoder (Kasai et al. 2021)" in card.text
    assert "the decoder here has one layer." in card.text
    assert "1.63× the sentences a second of the 3 + 3 model shipped before (4 beams)" in card.text
    assert "1.44× one sentence at a time" in card.text and "(AMD EPYC, AVX512)" in card.text
    assert "`python -m benchmarks.shape_speed --free-running --candidate new --threads 1`" in card.text
    assert "@inproceedings{kasai2021deep," in card.text

    # without a measurement the card still says why, and claims no speed
    write_results(tmp_path)
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer, encoder_layers=6, decoder_layers=2))
    assert (
        "Why 6 + 2:" in card.text
        and "the decoder here has 2 layers." in card.text
        and "×" not in card.text.split("## Results")[0].split("Why 6 + 2")[1]
    )


def test_card_of_the_papers_even_split_gives_no_shape_paragraph(tmp_path, tiny_tokenizer):
    write_results(tmp_path)
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer, encoder_layers=3, decoder_layers=3))
    assert "| layers (encoder + decoder) | 3 + 3 |" in card.text
    assert "Why 3 + 3" not in card.text and "kasai2021deep" not in card.text


def test_card_of_a_greedy_model_says_greedy_not_one_beam(tmp_path, tiny_tokenizer):
    write_eval_results(
        tmp_path,
        num_parameters=1,
        decoding={
            "num_beams": 1,
            "length_penalty": 1.0,
            "max_new_tokens": 255,
            "max_new_tokens_ratio": 1.5,
            "max_new_tokens_offset": 10,
        },
        scores={"val": dict(SCORE, num_sentences=1014)},
        command=["python train.py"],
        training={},
    )
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))
    assert "translated with the model's own decoding (greedy, at most 1.5" in card.text
    assert "`generate()` defaults to greedy search" in card.text and "`num_beams=4` for beam search" in card.text
    assert "1 beams" not in card.text and "beam 1," not in card.text


def test_card_without_eval_results_is_a_clear_error(tmp_path, tiny_tokenizer):
    with pytest.raises(FileNotFoundError, match="No eval_results.json"):
        write_model_card(tmp_path, config=tiny_config(tiny_tokenizer))


def test_shipped_eval_results_are_the_one_shape():
    results = read_eval_results(ROOT / "models" / "transformer-en-de")
    assert set(results["scores"]) == {"val", "test_2016_flickr"}
    assert results["decoding"]["max_new_tokens_ratio"] == 1.5 and results["decoding"]["max_new_tokens_offset"] == 10
    commands = [command for command in results["command"] if not command.startswith("#")]  # "#": a remark
    scripts = [command.split()[1] for command in commands]
    # every step is a script of this repository: the teachers' translations, the training, the averaging last
    assert all((ROOT / script).is_file() for script in scripts) and "train.py" in scripts
    assert scripts[-1] == "average_checkpoints.py"
    # the averaged checkpoints are the chosen candidate, and a validation curve, if kept, reaches the last of them
    training = results["training"]
    chosen = next(c for c in training["average_candidates"] if c["name"] == training["chosen_average"])
    assert chosen["checkpoints"] == training["averaged_checkpoints"]
    assert chosen["validation"]["bleu"] == max(c["validation"]["bleu"] for c in training["average_candidates"])
    # The candidates were scored with the decoding of the run; a decoding chosen later on val (the length penalty,
    # in the commands) is kept only where it scores higher.
    assert results["scores"]["val"]["bleu"] >= chosen["validation"]["bleu"]
    if training["validation_curve"]:
        last_step = int(training["averaged_checkpoints"][-1].removeprefix("checkpoint-"))
        assert training["validation_curve"][-1]["step"] == last_step


def test_card_for_the_hub_names_the_repo_and_never_the_local_folder(tmp_path, tiny_tokenizer):
    write_results(tmp_path)
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer), hub_model_id="tester/tiny-en-de")
    saved = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert card.data.to_dict()["model-index"][0]["name"] == "tester/tiny-en-de"
    assert 'model_id = "tester/tiny-en-de"' in saved
    assert str(tmp_path) not in saved
    assert card.data.datasets == ["bentrevett/multi30k"]
    assert "https://huggingface.co/datasets/bentrevett/multi30k" in saved
    assert "`transformers>=5.10.4,<6`" in saved and "no `translation` pipeline" in saved
    assert "@inproceedings{vaswani2017attention," in saved and "@inproceedings{elliott2016multi30k," in saved


def test_local_card_names_the_folder_not_its_path(tmp_path, tiny_tokenizer):
    folder = tmp_path / "my-run"
    folder.mkdir()
    write_results(folder)
    card = write_model_card(folder, config=tiny_config(tiny_tokenizer))
    assert 'model_id = "my-run"' in card.text and str(tmp_path) not in card.text


def test_card_of_a_hub_dataset_names_it_and_cites_it(tmp_path, tiny_tokenizer):
    dataset = {"name": "wmt14", "config": "de-en", "validation_split": "validation", "test_split": "test"}
    corpora = [{"name": "wmt14", "pairs": 4508785, "weight": 1.0, "tag": None}]
    write_eval_results(
        tmp_path,
        num_parameters=60_000_000,
        decoding={
            "num_beams": 4,
            "length_penalty": 0.6,
            "max_new_tokens": 255,
            "max_new_tokens_ratio": 1.5,
            "max_new_tokens_offset": 10,
        },
        scores={"validation": dict(SCORE, num_sentences=3000), "test": dict(SCORE, num_sentences=3003)},
        command=["torchrun --nproc_per_node 8 train.py --dataset_name wmt14"],
        training={"validation_split": "validation", "dataset": dataset, "corpora": corpora},
    )
    card = write_model_card(tmp_path, config=tiny_config(tiny_tokenizer), hub_model_id="tester/base-wmt14")
    assert card.data.datasets == ["wmt14"] and card.data.license == "other"
    assert model_index_metrics(card) == [("wmt14 de-en (test)", "bleu", 30.5), ("wmt14 de-en (test)", "chrf", 55.25)]
    assert card.data.to_dict()["model-index"][0]["results"][0]["dataset"]["type"] == "wmt14"
    assert "[wmt14](https://huggingface.co/datasets/wmt14) (configuration `de-en`)" in card.text
    assert "4,508,785 pairs" in card.text
    assert "@inproceedings{bojar2014findings," in card.text and "elliott2016" not in card.text
    assert "Multi30k" not in card.text and "non-commercial" not in card.text
