"""average_checkpoints.py and training/checkpoints.py: the average is the mean of the weights, scored through
the engine into the one eval_results.json, with the run's commands and this one after them; --rescore re-measures."""

import json
import shlex
from pathlib import Path

import pytest
import torch
from conftest import DATA_DIR, ROOT, tiny_config

import average_checkpoints
from modeling import TransformerMTForConditionalGeneration
from transformer_en_de.decoding.engine import translate
from transformer_en_de.evaluation import read_eval_results, score_split, write_eval_results
from transformer_en_de.training.checkpoints import average_checkpoints as average
from transformer_en_de.training.checkpoints import candidate_sizes, complete_checkpoints

TRAIN_COMMAND = "python train.py --data_dir data --output_dir run"


def save_checkpoint(run_dir: Path, step: int, tokenizer, seed: int, complete: bool = True) -> Path:
    torch.manual_seed(seed)
    model = TransformerMTForConditionalGeneration(tiny_config(tokenizer))
    folder = run_dir / f"checkpoint-{step}"
    model.save_pretrained(folder)
    if complete:
        (folder / "trainer_state.json").write_text(
            json.dumps(
                {"log_history": [{"epoch": 1.0, "step": step, "eval_loss": 5.0, "eval_bleu": 1.0, "eval_chrf": 10.0}]}
            )
        )
    return folder


@pytest.fixture
def run_dir(tmp_path, tiny_tokenizer):
    """A run folder with its tokenizer, three complete checkpoints, one cut off while saving, and eval_results.json."""
    run = tmp_path / "run"
    for step, seed in ((10, 1), (20, 2), (30, 3)):
        save_checkpoint(run, step, tiny_tokenizer, seed)
    save_checkpoint(run, 40, tiny_tokenizer, 4, complete=False)
    tiny_tokenizer.save_pretrained(run)
    write_eval_results(
        run,
        num_parameters=1,
        decoding={},
        scores={},
        command=[TRAIN_COMMAND],
        training={"validation_curve": [{"epoch": 1.0, "step": 10, "loss": 5.0, "bleu": 1.0, "chrf": 10.0}]},
    )
    return run


@pytest.fixture
def data_dir(tmp_path):
    """The first 6 sentences of the real validation and test files."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("val", "test_2016_flickr"):
        for lang in ("en", "de"):
            lines = (DATA_DIR / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:6]
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_complete_checkpoints_are_sorted_by_step_and_skip_partial_ones(run_dir):
    assert [path.name for path in complete_checkpoints(run_dir)] == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]


def test_candidate_sizes():
    assert candidate_sizes(10, 20) == [1, 2, 5, 10]
    assert candidate_sizes(7, 20) == [1, 2, 5, 7]
    assert candidate_sizes(10, 3) == [1, 2, 3]  # no more than the run kept
    assert candidate_sizes(1, 5) == [1]


def test_average_is_the_mean_of_the_weights(run_dir):
    paths = complete_checkpoints(run_dir)
    averaged = average(paths).state_dict()
    states = [TransformerMTForConditionalGeneration.from_pretrained(path).state_dict() for path in paths]
    for name, tensor in averaged.items():
        if tensor.is_floating_point():
            expected = torch.stack([state[name] for state in states]).mean(dim=0)
            assert torch.allclose(tensor, expected, atol=1e-7), name


def test_average_restores_the_translation_defaults(run_dir):
    model = average(complete_checkpoints(run_dir)[:2])
    assert model.config.use_cache is True
    assert model.generation_config.num_beams == 4 and model.generation_config.max_new_tokens_ratio == 1.5


def test_a_run_started_with_fewer_beams_averages_into_a_model_that_keeps_them(run_dir):
    # A checkpoint as the Trainer writes one for a model started with 2 beams: the model config's fields mixed in.
    checkpoints = complete_checkpoints(run_dir)[:2]
    for checkpoint in checkpoints:
        generation = json.loads((checkpoint / "generation_config.json").read_text())
        generation.update(
            _from_model_config=False,
            num_beams=2,
            length_penalty=1.0,
            early_stopping=True,
            max_new_tokens_ratio=1.5,
            max_new_tokens_offset=10,
            dropout=0.1,
            label_smoothing=0.1,
        )
        (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    generation = average(checkpoints).generation_config
    assert (generation.num_beams, generation.length_penalty, generation.early_stopping) == (2, 1.0, True)
    assert generation.max_new_tokens_offset == 10 and not hasattr(generation, "label_smoothing")


def test_cli_scores_through_the_engine_and_appends_its_command(run_dir, data_dir, tmp_path):
    output_dir = tmp_path / "averaged"
    argv = [
        str(run_dir / "checkpoint-20"),
        str(run_dir / "checkpoint-30"),
        "--output_dir",
        str(output_dir),
        "--data_dir",
        str(data_dir),
    ]
    assert average_checkpoints.main(argv) == 0
    results = read_eval_results(output_dir)
    assert results["command"] == [TRAIN_COMMAND, "python average_checkpoints.py " + " ".join(argv)]
    assert results["training"]["averaged_checkpoints"] == ["checkpoint-20", "checkpoint-30"]
    assert results["training"]["validation_curve"][0]["step"] == 10  # carried over from the run
    generation = json.loads((output_dir / "generation_config.json").read_text())
    for name in ("num_beams", "length_penalty", "max_new_tokens_ratio", "max_new_tokens_offset"):
        assert results["decoding"][name] == generation[name], name

    model = TransformerMTForConditionalGeneration.from_pretrained(output_dir)
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(output_dir)
    for split in ("val", "test_2016_flickr"):
        sources = (data_dir / f"{split}.en").read_text(encoding="utf-8").splitlines()
        references = (data_dir / f"{split}.de").read_text(encoding="utf-8").splitlines()
        assert results["scores"][split] == score_split(translate(model, tokenizer, sources).texts, references)
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert TRAIN_COMMAND in card and "checkpoint-20, checkpoint-30" in card


def test_a_soup_of_two_runs_names_each_checkpoint_with_its_run(run_dir, data_dir, tmp_path, tiny_tokenizer):
    # A fork of the run with its own command and data, averaged with the run at the same step: the two "checkpoint-20"
    # are told apart, both commands and the fork's data are kept, and neither run's validation curve is given as this
    # model's.
    fork = tmp_path / "fork"
    save_checkpoint(fork, 20, tiny_tokenizer, seed=5)
    fork_command = "python train.py --data_dir data --output_dir fork --resume_from_checkpoint last"
    fork_corpus = {"name": "teacher-translations", "pairs": 12, "weight": 1.0, "tag": None}
    write_eval_results(
        fork,
        num_parameters=1,
        decoding={},
        scores={},
        command=[TRAIN_COMMAND, fork_command],
        training={"validation_curve": [{"epoch": 1.0, "step": 20, "loss": 4.0, "bleu": 2.0}], "corpora": [fork_corpus]},
    )
    output_dir = tmp_path / "soup"
    argv = [
        str(run_dir / "checkpoint-20"),
        str(fork / "checkpoint-20"),
        "--output_dir",
        str(output_dir),
        "--data_dir",
        str(data_dir),
        "--test_split",
        "",
    ]
    assert average_checkpoints.main(argv) == 0
    results = read_eval_results(output_dir)
    assert results["training"]["averaged_checkpoints"] == ["run/checkpoint-20", "fork/checkpoint-20"]
    assert results["command"] == [TRAIN_COMMAND, fork_command, "python average_checkpoints.py " + shlex.join(argv)]
    assert "validation_curve" not in results["training"]
    assert results["training"]["corpora"] == [fork_corpus]  # the run itself recorded none
    assert "run/checkpoint-20, fork/checkpoint-20" in (output_dir / "README.md").read_text(encoding="utf-8")
    expected = average([run_dir / "checkpoint-20", fork / "checkpoint-20"]).state_dict()
    saved = TransformerMTForConditionalGeneration.from_pretrained(output_dir).state_dict()
    assert all(torch.equal(saved[name], expected[name]) for name in expected)


def test_average_last_saves_the_best_candidate_on_validation_only(run_dir, data_dir, tmp_path):
    output_dir = tmp_path / "chosen"
    argv = [
        str(run_dir),
        "--average_last",
        "2",
        "--output_dir",
        str(output_dir),
        "--data_dir",
        str(data_dir),
        "--test_split",
        "",
    ]
    assert average_checkpoints.main(argv) == 0
    results = read_eval_results(output_dir)
    training = results["training"]
    candidates = {candidate["name"]: candidate for candidate in training["average_candidates"]}
    assert candidates["last 1"]["checkpoints"] == ["checkpoint-30"]
    assert candidates["last 2"]["checkpoints"] == ["checkpoint-20", "checkpoint-30"]
    chosen = candidates[training["chosen_average"]]
    assert chosen["validation"]["bleu"] == max(c["validation"]["bleu"] for c in candidates.values())
    assert training["averaged_checkpoints"] == chosen["checkpoints"]
    assert set(results["scores"]) == {"val"}  # test is not scored while choosing
    expected = average([run_dir / name for name in chosen["checkpoints"]]).state_dict()
    saved = TransformerMTForConditionalGeneration.from_pretrained(output_dir).state_dict()
    assert all(torch.equal(saved[name], expected[name]) for name in expected)
    from tokenizer import load_tokenizer

    sources = (data_dir / "val.en").read_text(encoding="utf-8").splitlines()
    references = (data_dir / "val.de").read_text(encoding="utf-8").splitlines()
    model = TransformerMTForConditionalGeneration.from_pretrained(output_dir)
    assert results["scores"]["val"] == score_split(
        translate(model, load_tokenizer(output_dir), sources).texts, references
    )
    assert results["command"] == [TRAIN_COMMAND, "python average_checkpoints.py " + " ".join(argv[:-1]) + " ''"]


def test_rescore_keeps_commands_and_training_and_measures_again(run_dir, data_dir, tmp_path):
    output_dir = tmp_path / "averaged"
    assert (
        average_checkpoints.main(
            [str(run_dir / "checkpoint-10"), "--output-dir", str(output_dir), "--data_dir", str(data_dir)]
        )
        == 0
    )
    measured = read_eval_results(output_dir)
    stale = json.loads(json.dumps(measured))
    stale["scores"]["val"]["bleu"] = stale["scores"]["test_2016_flickr"]["bleu"] = 99.0
    write_eval_results(
        output_dir, **{key: stale[key] for key in ("num_parameters", "decoding", "scores", "command", "training")}
    )
    assert average_checkpoints.main(["--rescore", str(output_dir), "--data_dir", str(data_dir)]) == 0
    assert read_eval_results(output_dir) == measured


def test_rescore_without_eval_results_is_a_clear_error(tmp_path, data_dir, capsys):
    (tmp_path / "empty").mkdir()
    assert average_checkpoints.main(["--rescore", str(tmp_path / "empty"), "--data_dir", str(data_dir)]) == 2
    assert "has no eval_results.json" in capsys.readouterr().err


def test_scripts_do_not_import_each_other():
    for script in ("average_checkpoints.py", "train.py"):
        text = (ROOT / script).read_text(encoding="utf-8")
        for other in ("compare", "publish", "train", "average_checkpoints", "app"):
            assert f"import {other}\n" not in text and f"from {other} import" not in text, (script, other)


def pickle_weights_only(checkpoint: Path) -> None:
    """The checkpoint's weights as a pytorch_model.bin (a pickle) instead of model.safetensors."""
    torch.save(
        TransformerMTForConditionalGeneration.from_pretrained(checkpoint).state_dict(), checkpoint / "pytorch_model.bin"
    )
    (checkpoint / "model.safetensors").unlink()


def test_a_checkpoint_with_pickle_weights_only_is_one_line_with_the_conversion(run_dir, data_dir, tmp_path, capsys):
    checkpoint = run_dir / "checkpoint-30"
    pickle_weights_only(checkpoint)
    conversion = f"from_pretrained('{checkpoint}', use_safetensors=False).save_pretrained('{checkpoint}')"
    for argv in (
        [str(run_dir / "checkpoint-20"), str(checkpoint), "--output_dir", str(tmp_path / "averaged")],
        [str(run_dir), "--average_last", "2", "--output_dir", str(tmp_path / "chosen"), "--data_dir", str(data_dir)],
        ["--rescore", str(checkpoint), "--data_dir", str(data_dir)],
    ):
        (checkpoint / "eval_results.json").write_text((run_dir / "eval_results.json").read_text())  # for --rescore
        assert average_checkpoints.main(argv) == 2
        printed = capsys.readouterr().err
        error = printed.strip().splitlines()[-1]  # after the loading bar of a checkpoint loaded before, if any
        assert "Traceback" not in printed
        assert error.startswith(f"error: {checkpoint} has only PyTorch pickle weights (pytorch_model.bin)")
        assert conversion in error and "\n" not in error
    assert not (tmp_path / "averaged").exists() and not (tmp_path / "chosen").exists()
