"""train.py end to end on slices of the real Multi30k files: it learns, writes a Hub-ready folder with a card and the
one eval_results.json, pushes it, resumes after a kill, averages its last checkpoints, mixes corpora (tagged
back-translation, case variants), trains the reverse direction, fine-tunes a trained model, and refuses bad data and
bad set-ups with errors that name the fix, before training."""

import dataclasses
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import DATA_DIR, ROOT
from huggingface_hub import ModelCard, constants
from loopback_hub import LoopbackHub

import train
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer
from transformer_en_de.decoding.engine import translate
from transformer_en_de.evaluation import read_eval_results
from transformer_en_de.training import dataset as training_data
from transformer_en_de.training import precision
from transformer_en_de.training.dataset import load_training_set, prepare_tokenizer, tokenize_pairs
from transformer_en_de.training.loop import resolve_resume

TOKEN = "hf_loopback_write_token"
TINY_MODEL_FLAGS = [
    "--vocab_size",
    "300",
    "--d_model",
    "32",
    "--encoder_layers",
    "1",
    "--decoder_layers",
    "1",
    "--num_attention_heads",
    "4",
    "--d_ff",
    "64",
    "--dropout",
    "0.0",
    "--max_position_embeddings",
    "64",
    "--max_source_length",
    "64",
    "--max_target_length",
    "64",
]


def tiny_run_flags(data_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(output_dir),
        "--max_train_samples",
        "96",
        "--max_eval_samples",
        "8",
        "--max_test_samples",
        "8",
        "--per_device_train_batch_size",
        "16",
        "--per_device_eval_batch_size",
        "8",
        "--generation_num_beams",
        "2",
        "--warmup_steps",
        "4",
        "--learning_rate",
        "3e-3",
        "--logging_steps",
        "2",
        "--disable_tqdm",
        "true",
        *TINY_MODEL_FLAGS,
        *extra,
    ]


def folder_files(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file() and not path.relative_to(folder).parts[0].startswith("checkpoint-")
    }


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One tiny run on the real data, pushed to a loopback Hub at the end."""
    assert DATA_DIR.is_dir(), f"Multi30k is missing at {DATA_DIR}"
    output_dir = tmp_path_factory.mktemp("run") / "out"
    with LoopbackHub(token=TOKEN) as hub, pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "ENDPOINT", hub.endpoint)
        flags = tiny_run_flags(
            DATA_DIR,
            output_dir,
            "--num_train_epochs",
            "6",
            "--push_to_hub",
            "true",
            "--hub_model_id",
            "tester/tiny-en-de",
            "--hub_token",
            TOKEN,
        )
        results = train.main(flags)
        uploaded = hub.files("tester/tiny-en-de", repo_type="model")
    return output_dir, results, uploaded


@pytest.mark.slow
def test_training_loss_falls(trained_run):
    output_dir, _, _ = trained_run
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = json.loads((checkpoints[-1] / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    assert len(losses) >= 4
    assert losses[-1] < losses[0] - 1.0, losses


@pytest.mark.slow
def test_output_folder_is_hub_ready(trained_run):
    output_dir, results, _ = trained_run
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "README.md",
        "eval_results.json",
        "modeling_transformer_mt.py",
        "configuration_transformer_mt.py",
    ):
        assert (output_dir / name).is_file(), name
    config = json.loads((output_dir / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_transformer_mt.")
    saved = read_eval_results(output_dir)  # the one shape, checked
    assert saved == results
    assert set(saved["scores"]) == {"val", "test_2016_flickr"}
    assert saved["scores"]["val"]["num_sentences"] == 8 and saved["scores"]["test_2016_flickr"]["num_sentences"] == 8
    assert saved["languages"] == {"source": "en", "target": "de"}
    generation = json.loads((output_dir / "generation_config.json").read_text())
    for name in ("num_beams", "length_penalty", "max_new_tokens", "max_new_tokens_ratio", "max_new_tokens_offset"):
        assert saved["decoding"][name] == generation[name], name
    assert len(saved["command"]) == 1 and saved["command"][0].startswith("python train.py ")
    assert "--push_to_hub" in saved["command"][0]
    training = saved["training"]
    assert training["trained_steps"] == {"from": 0, "to": 36}
    assert [point["epoch"] for point in training["validation_curve"]] == [1, 2, 3, 4, 5, 6]
    assert training["best_checkpoint"].startswith("checkpoint-")


@pytest.mark.slow
def test_model_card_carries_the_metrics(trained_run):
    output_dir, results, _ = trained_run
    card = ModelCard.load(output_dir / "README.md")
    metrics = {
        metric["type"]: metric["value"]
        for entry in card.data.to_dict()["model-index"][0]["results"]
        for metric in entry["metrics"]
    }
    test = results["scores"]["test_2016_flickr"]
    assert metrics == {"bleu": test["bleu"], "chrf": test["chrf"]}  # the test split only, never validation
    assert "English→German" in card.text
    assert "python train.py" in card.text and "--max_train_samples 96" in card.text
    assert "non-commercial" in card.text


@pytest.mark.slow
def test_output_folder_loads_in_a_fresh_process(trained_run, tmp_path):
    output_dir, _, _ = trained_run
    script = (
        "import json, sys\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        "folder = sys.argv[1]\n"
        "tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)\n"
        "batch = tokenizer(['A man is riding a bike.'], return_tensors='pt')\n"
        "ids = model.generate(**batch, num_beams=4, max_new_tokens=12)\n"
        "print(json.dumps({'class': type(model).__module__, 'ids': ids.tolist()}))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    done = subprocess.run(
        [sys.executable, "-c", script, str(output_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["class"].startswith("transformers_modules.")
    assert loaded["ids"][0][0] == 1  # decoding starts at the decoder start token


@pytest.mark.slow
def test_test_translations_are_the_saved_models_in_file_order(trained_run):
    """The scored translations are the saved folder's through the engine, with its own decoding, in file order."""
    output_dir, results, _ = trained_run
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    sources = (DATA_DIR / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:8]
    references = (DATA_DIR / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:8]
    expected = translate(model, tokenizer, sources).texts
    saved = (output_dir / "translations.test_2016_flickr.de").read_text(encoding="utf-8")
    assert saved == "\n".join(expected) + "\n"  # a barely trained model may emit newlines: compare the whole file
    from transformer_en_de.evaluation import score_split

    assert results["scores"]["test_2016_flickr"] == score_split(expected, references)


@pytest.mark.slow
def test_push_uploads_the_folder(trained_run):
    output_dir, _, uploaded = trained_run
    assert uploaded == folder_files(output_dir)


@pytest.mark.slow
def test_pushed_card_names_the_hub_repo_and_no_local_path(trained_run):
    output_dir, _, uploaded = trained_run
    readme = uploaded["README.md"].decode("utf-8")
    assert 'model_id = "tester/tiny-en-de"' in readme
    assert "name: tester/tiny-en-de" in readme  # model-index
    # The folder is named nowhere but in the training command as it was typed (the test typed absolute paths).
    outside_command = [line for line in readme.splitlines() if not line.startswith("python train.py ")]
    assert not [line for line in outside_command if str(output_dir.parent) in line]
    assert "- bentrevett/multi30k" in readme  # the dataset by its Hub id


def test_push_offline_fails_clearly(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    from transformer_en_de.publishing.push import PublishError, push_folder

    started = time.time()
    with pytest.raises(PublishError, match="offline"):
        push_folder(folder, "tester/model")
    assert time.time() - started < 10


def write_pair(folder: Path, split: str, sources: list[str], targets: list[str]) -> None:
    (folder / f"{split}.en").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    (folder / f"{split}.de").write_text("".join(line + "\n" for line in targets), encoding="utf-8")


@pytest.fixture
def small_corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    pairs = [("A dog runs.", "Ein Hund rennt."), ("Two men work.", "Zwei Männer arbeiten.")] * 8
    for split in ("train", "val", "test_2016_flickr"):
        write_pair(folder, split, [s for s, _ in pairs], [t for _, t in pairs])
    return folder


def test_unequal_line_counts_name_both_files(small_corpus, tmp_path):
    (small_corpus / "train.de").write_text("Ein Hund rennt.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"train\.en has 16 lines but .*train\.de has 1"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out"))


def test_missing_file_is_named(small_corpus, tmp_path):
    (small_corpus / "val.de").unlink()
    with pytest.raises(SystemExit, match=r"Missing data file: .*val\.de"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out"))


def test_empty_and_placeholder_lines_are_dropped_and_counted(small_corpus, tmp_path, capsys):
    sources = ["A dog runs.", "", "Two men work.", "A cat sleeps."] * 4
    targets = ["Ein Hund rennt.", "Leer.", "Zwei Männer arbeiten.", "@@"] * 4
    write_pair(small_corpus, "train", sources, targets)
    flags = ["--num_train_epochs", "1", "--test_split", "", "--max_train_samples", "6"]
    train.main(tiny_run_flags(small_corpus, tmp_path / "out", *flags))
    printed = capsys.readouterr().out
    assert "train: kept 8 pairs, dropped 8 (4 empty side, 4 placeholder" in printed
    assert "[data] training on 6 pairs an epoch" in printed  # what --max_train_samples leaves


def test_resume_without_checkpoint_is_a_clear_error(small_corpus, tmp_path):
    with pytest.raises(SystemExit, match="no complete checkpoint"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out", "--resume_from_checkpoint", "last"))


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(tmp_path):
    """Kill a real training process after its first checkpoint; the resumed run continues at that step."""
    output_dir = tmp_path / "out"
    flags = tiny_run_flags(
        DATA_DIR,
        output_dir,
        "--num_train_epochs",
        "10",
        "--save_strategy",
        "steps",
        "--save_steps",
        "6",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--test_split",
        "",
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while not (output_dir / "checkpoint-6" / "trainer_state.json").is_file():
            assert process.poll() is None, "training ended before its first checkpoint"
            assert time.time() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    # trainer_state.json is the last file a checkpoint writes: folders without it were cut off mid-save. Leave them
    # there, and add one more for certain: `last` resumes from the newest complete checkpoint.
    complete = [path for path in output_dir.glob("checkpoint-*") if (path / "trainer_state.json").is_file()]
    killed_at = max(int(path.name.split("-")[1]) for path in complete)
    assert killed_at < 54, "the run finished instead of being killed"
    partial = output_dir / f"checkpoint-{killed_at + 6}"
    partial.mkdir(exist_ok=True)
    shutil.copy(output_dir / f"checkpoint-{killed_at}" / "config.json", partial / "config.json")
    (partial / "trainer_state.json").unlink(missing_ok=True)

    results = train.main([*flags, "--resume_from_checkpoint", "last"])
    # 96 pairs / 16 per batch * 10 epochs
    assert results["training"]["trained_steps"] == {"from": killed_at, "to": 60}
    final = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert final.name == "checkpoint-60"


def logged_rates(run_folder: Path) -> dict[int, float]:
    state = json.loads((run_folder / "checkpoint-12" / "trainer_state.json").read_text())
    return {entry["step"]: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}


def test_a_resumed_run_goes_on_at_the_learning_rate_its_command_asks(tmp_path, capsys):
    """The Trainer restores the schedule's peak from the checkpoint; a resume that asks another peak gets it, on the
    same schedule from the same step, and one that asks the same peak goes on exactly as the run would have."""

    def run_flags(output_dir: Path, *extra: str) -> list[str]:
        return tiny_run_flags(
            DATA_DIR,
            output_dir,
            "--max_steps",
            "12",
            "--save_steps",
            "6",
            "--eval_strategy",
            "no",
            "--load_best_model_at_end",
            "false",
            "--test_split",
            "",
            "--lr_scheduler_type",
            "inverse_sqrt",
            *extra,
        )

    train.main(run_flags(tmp_path / "first"))
    straight = logged_rates(tmp_path / "first")
    assert straight[8] != straight[10] != straight[12]  # the rate decays over the resumed steps
    for name, rate in (("same", "3e-3"), ("halved", "1.5e-3")):
        output_dir = tmp_path / name  # the first run as it stood at step 6
        shutil.copytree(tmp_path / "first", output_dir, ignore=shutil.ignore_patterns("checkpoint-12"))
        capsys.readouterr()
        results = train.main(run_flags(output_dir, "--learning_rate", rate, "--resume_from_checkpoint", "last"))
        resumed = logged_rates(output_dir)
        printed = capsys.readouterr().out
        if name == "same":
            assert resumed == straight
            assert "learning rate:" not in printed and "learning_rate_changed" not in results["training"]
        else:
            assert resumed[6] == pytest.approx(straight[6])  # logged before the resume, kept in the checkpoint
            for step in (8, 10, 12):
                assert resumed[step] == pytest.approx(straight[step] / 2, rel=1e-6)
            assert "peaks at 0.003, the command asks 0.0015" in printed
            assert results["training"]["learning_rate_changed"] == {
                "at_step": 6,
                "peak_before": 3e-3,
                "peak_after": 1.5e-3,
            }


def test_resume_last_skips_a_checkpoint_cut_off_while_saving(tmp_path):
    for step, complete in ((6, True), (12, True), (18, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    assert resolve_resume("last", tmp_path) == str(tmp_path / "checkpoint-12")


def test_resume_last_passes_over_a_checkpoint_with_truncated_weights(tmp_path, capsys):
    for step in (6, 12):
        folder = tmp_path / f"checkpoint-{step}"
        TransformerMTForConditionalGeneration(
            TransformerMTConfig(
                vocab_size=300,
                d_model=32,
                encoder_layers=1,
                decoder_layers=1,
                num_attention_heads=4,
                d_ff=64,
            )
        ).save_pretrained(folder)
        (folder / "trainer_state.json").write_text("{}")
    weights = tmp_path / "checkpoint-12" / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)  # what a full disk leaves
    assert resolve_resume("last", tmp_path) == str(tmp_path / "checkpoint-6")
    assert f"passing over {tmp_path / 'checkpoint-12'}: model.safetensors is damaged" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"checkpoint-12: model.safetensors is damaged"):
        resolve_resume(str(tmp_path / "checkpoint-12"), tmp_path)


def test_help_starts_with_a_description_and_shows_the_recipe_defaults():
    help_text = subprocess.run(
        [sys.executable, "train.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    ).stdout
    usage, description = help_text.split("\n\n")[:2]
    assert usage.count("\n") == 0 and description.startswith("Train the Transformer on Multi30k")

    def entry(flag: str) -> str:
        start = help_text.index(f"  --{flag} ")
        return " ".join(help_text[start : help_text.index("\n  --", start + 1)].split())

    assert "(default: 20.0)" in entry("num_train_epochs")  # the recipe, not the Trainer's 3
    assert "(default: 128)" in entry("per_device_train_batch_size")
    assert "(default: inverse_sqrt)" in entry("lr_scheduler_type")
    assert "d_model^-0.5 * warmup_steps^-0.5" in entry("learning_rate")
    assert "(default: epoch" not in entry("eval_strategy") and "Default: epoch" in entry("eval_strategy")
    assert "P_drop" in entry("dropout") and "(default: 0.1)" in entry("dropout")  # the config's doc and default
    # Trainer flags whose default or use train.py changes say train.py's, not the Trainer's words.
    assert entry("metric_for_best_model").endswith("(default: bleu)") and "'loss'" in entry("metric_for_best_model")
    assert "Defaults to 'loss'" not in entry("metric_for_best_model")
    assert entry("train_sampling_strategy").endswith("(default: group_by_length)")
    assert "'random' (default)" not in entry("train_sampling_strategy")
    assert "'last'" in entry("resume_from_checkpoint") and "Not directly used" not in entry("resume_from_checkpoint")
    assert entry("eval_steps").endswith("Default: --save_steps.")  # not the Trainer's logging_steps
    assert entry("no_load_best_model_at_end") == "--no_load_best_model_at_end Sets --load_best_model_at_end to false."

    # Short: the project's flags and the recipe's; the Trainer's other flags behind --help-all, which lists them all.
    assert help_text.count("\n") < 250 and "--fsdp" not in help_text and "--help-all" in help_text
    assert "--d-model" not in help_text  # one spelling each (the dashed one still works)
    for shown in ("output_dir", "max_tokens", "average_last", "case_augmentation", "extra_train", "max_steps", "seed"):
        assert f"  --{shown} " in help_text
    assert "d_model 256, 3+3 layers" in help_text and "recipes/distill_gpu.sh" in help_text  # the shipped model
    everything = subprocess.run(
        [sys.executable, "train.py", "--help-all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    ).stdout
    assert "  --fsdp " in everything and "(default: 20.0)" in everything
    assert everything.count("\n") > 2 * help_text.count("\n")


def test_unwritable_output_dir_is_one_line_before_any_work(small_corpus, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit) as refused:
        train.main(tiny_run_flags(small_corpus, blocker / "out"))
    message = str(refused.value)
    assert message.startswith(f"error: --output_dir {blocker / 'out'} cannot be written") and "\n" not in message


@pytest.mark.slow
def test_a_run_is_never_overwritten_by_accident_and_resumes_past_a_damaged_checkpoint(tmp_path, capsys, caplog):
    output_dir = tmp_path / "out"
    flags = tiny_run_flags(
        DATA_DIR,
        output_dir,
        "--num_train_epochs",
        "2",
        "--logging_steps",
        "50",
        "--max_tokens",
        "400",
        "--test_split",
        "",
    )
    with caplog.at_level(logging.WARNING):
        first = train.main(flags)
    assert "missing keys" not in caplog.text  # the tied embedding's aliases come back by tying, not worth a warning
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert len(checkpoints) == 2
    history = json.loads((checkpoints[-1] / "trainer_state.json").read_text())["log_history"]
    steps = first["training"]["trained_steps"]["to"]
    assert len([entry for entry in history if "loss" in entry]) >= min(10, steps)  # a short run logs its loss
    # Batches of at most 400 padded tokens: several to a 96-pair epoch, not 96 / 16 = 6 of 16 pairs.
    assert steps == 2 * int(checkpoints[0].name.split("-")[1]) and steps > 2 * 6

    weights = (output_dir / "model.safetensors").read_bytes()
    with pytest.raises(
        SystemExit,
        match=r"--output_dir .*out is not empty.*--resume_from_checkpoint last.*"
        r"--overwrite_output_dir",
    ):
        train.main(flags)
    assert (output_dir / "model.safetensors").read_bytes() == weights

    damaged = checkpoints[-1] / "model.safetensors"
    with open(damaged, "r+b") as handle:
        handle.truncate(damaged.stat().st_size // 2)
    capsys.readouterr()
    resumed = train.main([*flags, "--num_train_epochs", "3", "--resume_from_checkpoint", "last"])
    assert f"passing over {checkpoints[-1]}: model.safetensors is damaged" in capsys.readouterr().out
    assert resumed["training"]["trained_steps"] == {"from": steps // 2, "to": 3 * steps // 2}

    train.main([*flags, "--num_train_epochs", "1", "--overwrite_output_dir"])
    assert [path.name for path in output_dir.glob("checkpoint-*")] == [checkpoints[0].name]  # the old ones gone


@pytest.mark.slow
def test_a_failed_write_is_one_line_naming_the_output_dir(tmp_path):
    """A real failed write: a file-size limit (what a full disk does to torch.save) while saving a checkpoint."""

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))  # the weights fit, the optimizer state not

    output_dir = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "train.py", *tiny_run_flags(DATA_DIR, output_dir, "--num_train_epochs", "1")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: writing to {output_dir} failed") and "--resume_from_checkpoint last" in last


def test_every_pair_dropped_by_cleaning_is_a_clear_error_before_training(small_corpus, tmp_path):
    write_pair(small_corpus, "train", ["@@", "", "..."] * 4, ["Ein Hund.", "Leer.", "!!"] * 4)
    with pytest.raises(SystemExit, match=r"train\.en .*train\.de: all 12 pairs were dropped by cleaning"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out"))
    assert not (tmp_path / "out" / "tokenizer.json").exists()  # no 0-merge tokenizer left behind


def test_tokenizer_in_the_output_folder_must_match_vocab_size(tmp_path):
    output_dir = tmp_path / "out"
    sources = (DATA_DIR / "train.en").read_text(encoding="utf-8").splitlines()[:200]
    targets = (DATA_DIR / "train.de").read_text(encoding="utf-8").splitlines()[:200]
    prepare_tokenizer(train.TokenizerArguments(vocab_size=300), output_dir, sources + targets, 64)
    with pytest.raises(SystemExit, match=r"300-token vocabulary but --vocab_size is 400.*--vocab_size 300"):
        prepare_tokenizer(train.TokenizerArguments(vocab_size=400), output_dir, sources + targets, 64)
    reused = prepare_tokenizer(train.TokenizerArguments(vocab_size=300), output_dir, [], 64)
    assert len(reused) == 300


def test_push_without_hub_model_id_fails_before_training(small_corpus, tmp_path):
    with pytest.raises(SystemExit, match="--hub_model_id"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out", "--push_to_hub", "true"))
    assert not (tmp_path / "out").exists()


def test_push_offline_fails_before_training(small_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.time()
    with pytest.raises(SystemExit, match="offline"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out", "--push_to_hub", "true", "--hub_model_id", "a/b"))
    assert time.time() - started < 10
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ several corpora


def real_lines(lang: str, start: int, count: int) -> list[str]:
    return (DATA_DIR / f"train.{lang}").read_text(encoding="utf-8").splitlines()[start : start + count]


@pytest.fixture
def mixed_corpus(tmp_path):
    """Multi30k splits (the first 200 training pairs) and an extra "synthetic" corpus of 100 other real pairs."""
    folder = tmp_path / "multi30k"
    folder.mkdir()
    write_pair(folder, "train", real_lines("en", 0, 200), real_lines("de", 0, 200))
    for split in ("val", "test_2016_flickr"):
        for lang in ("en", "de"):
            lines = (DATA_DIR / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:8]
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    extra = tmp_path / "bt"
    extra.mkdir()
    write_pair(extra, "synthetic", real_lines("en", 1000, 100), real_lines("de", 1000, 100))
    return folder, extra / "synthetic"


def test_mix_has_the_weighted_counts(mixed_corpus):
    folder, synthetic = mixed_corpus
    data_args, *_, training_args = train.parse_arguments(
        [
            "--data_dir",
            str(folder),
            "--output_dir",
            "unused",
            "--train_weight",
            "2",
            "--extra_train",
            f"{synthetic}:0.5:tagged",
        ]
    )
    pairs = load_training_set(data_args, folder, training_args, tokenizer_train_samples=1000)
    assert len(pairs.sources) == 2 * 200 + 50
    assert pairs.tagged.count(True) == 50 and pairs.tagged.count(False) == 400
    synthetic_sources = set(real_lines("en", 1000, 100))
    assert all((source in synthetic_sources) == tag for source, tag in zip(pairs.sources, pairs.tagged, strict=True))
    assert len(set(source for source, tag in zip(pairs.sources, pairs.tagged, strict=True) if tag)) == 50
    assert [corpus.facts("<BT>")["pairs"] for corpus in pairs.corpora] == [200, 100]


def test_a_resumed_run_reads_the_mix_its_first_start_tokenized(mixed_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_MT_CACHE", str(tmp_path / "cache"))
    folder, synthetic = mixed_corpus
    flags = [
        "--data_dir",
        str(folder),
        "--output_dir",
        str(tmp_path / "out"),
        "--vocab_size",
        "400",
        "--extra_train",
        f"{synthetic}:tagged",
        "--case_augmentation",
        "0.3",
    ]
    data_args, tokenizer_args, *_, training_args = train.parse_arguments(flags)
    mix_tokenizer = training_data.mix_tokenizer_file(tokenizer_args, tmp_path / "out")

    first = load_training_set(data_args, folder, training_args, 1000, mix_tokenizer)
    tokenizer = prepare_tokenizer(tokenizer_args, tmp_path / "out", first.tokenizer_texts, 64, "<BT>")
    tokenized = training_data.tokenize_training_set(tokenizer, first, data_args, training_args)
    again = load_training_set(data_args, folder, training_args, 1000, mix_tokenizer)
    (synthetic.with_suffix(".de")).write_text("Ein Hund.\n" * 100, encoding="utf-8")  # a corpus changed
    changed = load_training_set(data_args, folder, training_args, 1000, mix_tokenizer)

    assert first.prepared is None and again.prepared is not None and again.sources == []
    assert again.prepared.to_dict() == tokenized.to_dict()
    assert again.facts("<BT>") == first.facts("<BT>") and again.has_tagged
    assert changed.prepared is None and len(changed.sources) == len(first.sources)


def test_tag_is_one_special_token_on_synthetic_sources_only(mixed_corpus, tmp_path):
    folder, synthetic = mixed_corpus
    data_args, tokenizer_args, *_, training_args = train.parse_arguments(
        [
            "--data_dir",
            str(folder),
            "--output_dir",
            "unused",
            "--vocab_size",
            "400",
            "--extra_train",
            f"{synthetic}:tagged",
        ]
    )
    pairs = load_training_set(data_args, folder, training_args, tokenizer_train_samples=1000)
    tokenizer = prepare_tokenizer(tokenizer_args, tmp_path / "out", pairs.tokenizer_texts, 64, "<BT>")
    tag_id = tokenizer.convert_tokens_to_ids("<BT>")
    assert tag_id == 400  # appended after the trained vocabulary
    dataset = tokenize_pairs(tokenizer, pairs.sources, pairs.targets, data_args, pairs.tagged)
    plain = tokenize_pairs(tokenizer, pairs.sources, pairs.targets, data_args)
    for row, untagged, tag in zip(dataset, plain, pairs.tagged, strict=True):
        if tag:
            assert row["input_ids"][0] == tag_id and row["input_ids"].count(tag_id) == 1
            assert row["input_ids"][1:] == untagged["input_ids"]  # the sentence itself is tokenized as when untagged
        else:
            assert tag_id not in row["input_ids"]
        assert row["labels"] == untagged["labels"] and tag_id not in row["labels"]
    assert tokenizer.tokenize("<BT>A dog.")[0] == "<BT>"  # never split, even as text
    assert tokenizer.decode([tag_id, *plain[0]["input_ids"]], skip_special_tokens=True) == pairs.sources[0]


def test_a_mix_is_tokenized_in_chunks_into_the_same_rows(mixed_corpus, tmp_path, monkeypatch):
    """The mix is encoded a chunk at a time (memory); the rows, their order and the tags are those of one pass."""
    folder, synthetic = mixed_corpus
    data_args, tokenizer_args, *_, training_args = train.parse_arguments(
        [
            "--data_dir",
            str(folder),
            "--output_dir",
            "unused",
            "--vocab_size",
            "400",
            "--extra_train",
            f"{synthetic}:tagged",
            "--case_augmentation",
            "0.5",
        ]
    )
    pairs = load_training_set(data_args, folder, training_args, tokenizer_train_samples=1000)
    tokenizer = prepare_tokenizer(tokenizer_args, tmp_path / "out", pairs.tokenizer_texts, 64, "<BT>")
    one_pass = training_data.encode_pairs(tokenizer, pairs.sources, pairs.targets, data_args, pairs.tagged)
    monkeypatch.setattr(training_data, "TOKENIZE_CHUNK", 7)
    assert len(pairs.sources) > 3 * 7 and len(pairs.sources) % 7  # several chunks, the last one short
    chunked = tokenize_pairs(tokenizer, pairs.sources, pairs.targets, data_args, pairs.tagged)
    assert chunked.to_dict() == one_pass and any(pairs.tagged)


def test_tag_keeps_the_shipped_tokenizer_ids(tmp_path):
    from tokenizer import load_tokenizer

    shipped = ROOT / "models" / "transformer-en-de"
    text = "A man in an orange hat starring at something."
    before = load_tokenizer(shipped)
    tag = "<FT>"  # a tag the shipped tokenizer does not have yet
    assert tag not in before.all_special_tokens
    tokenizer = prepare_tokenizer(train.TokenizerArguments(tokenizer_name=str(shipped)), tmp_path / "out", [], 256, tag)
    assert tokenizer(text)["input_ids"] == before(text)["input_ids"]
    assert tokenizer.convert_tokens_to_ids(tag) == len(before)
    assert load_tokenizer(tmp_path / "out").convert_tokens_to_ids(tag) == len(before)  # saved and loads back


def test_case_augmentation_adds_recased_sources_with_their_targets(mixed_corpus):
    folder, _ = mixed_corpus
    data_args, *_, training_args = train.parse_arguments(
        ["--data_dir", str(folder), "--output_dir", "unused", "--case_augmentation", "0.1"]
    )
    pairs = load_training_set(data_args, folder, training_args, tokenizer_train_samples=1000)
    assert len(pairs.sources) == 200 + 20
    assert pairs.sources[:200] == real_lines("en", 0, 200)  # the cased originals are all kept
    added = list(zip(pairs.sources[200:], pairs.targets[200:], strict=True))
    upper = [pair for pair in added if pair[0].isupper()]
    lower = [pair for pair in added if pair[0] == pair[0].lower()]
    assert upper and lower and len(upper) + len(lower) == 20
    originals = dict(zip(real_lines("en", 0, 200), real_lines("de", 0, 200), strict=True))
    for source, target in added:
        original = next(s for s in originals if s.lower() == source.lower())
        assert target == originals[original]  # the German target as it is written


@pytest.mark.slow
def test_mixed_tagged_run_records_its_corpora(mixed_corpus, tmp_path):
    folder, synthetic = mixed_corpus
    output_dir = tmp_path / "out"
    results = train.main(
        tiny_run_flags(
            folder,
            output_dir,
            "--num_train_epochs",
            "1",
            "--extra_train",
            f"{synthetic}:0.5:tagged",
            "--case_augmentation",
            "0.1",
        )
    )
    corpora = results["training"]["corpora"]
    assert [(c["pairs"], c["weight"], c["tag"]) for c in corpora] == [(96, 1.0, None), (96, 0.5, "<BT>")]
    assert results["training"]["tag_token"] == "<BT>" and results["training"]["case_augmentation"] == 0.1
    config = json.loads((output_dir / "config.json").read_text())
    assert config["vocab_size"] == 301  # the trained 300 and the tag
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "<BT>" in card and "tagged back-translation" in card and "Case augmentation" in card


@pytest.mark.slow
def test_reverse_direction_run_says_de_to_en(mixed_corpus, tmp_path):
    folder, _ = mixed_corpus
    output_dir = tmp_path / "de-en"
    shipped = ROOT / "models" / "transformer-en-de"
    results = train.main(
        tiny_run_flags(
            folder,
            output_dir,
            "--num_train_epochs",
            "1",
            "--source_lang",
            "de",
            "--target_lang",
            "en",
            "--tokenizer_name",
            str(shipped),
        )
    )
    assert results["languages"] == {"source": "de", "target": "en"}
    assert (output_dir / "translations.test_2016_flickr.en").is_file()
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.language == ["de", "en"]
    assert "German→English (de→en)" in card.text and "English→German" not in card.text
    assert card.data.to_dict()["model-index"][0]["results"][0]["task"]["name"] == "Translation German→English"
    # the same joint vocabulary
    assert json.loads((output_dir / "config.json").read_text())["vocab_size"] == len(load_tokenizer(shipped))


# ------------------------------------------------------------------------------------------ averaging at the end


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory):
    """A tiny model that learns 24 real pairs by heart (validation = training), averaging its last 5 checkpoints
    (the Trainer keeps 6 of its 60 checkpoints: --save_total_limit 2 is raised to fit)."""
    folder = tmp_path_factory.mktemp("memorise")
    sources, targets = real_lines("en", 0, 24), real_lines("de", 0, 24)
    for split in ("train", "val", "test_2016_flickr"):
        write_pair(folder, split, sources, targets)
    output_dir = folder / "out"
    flags = tiny_run_flags(
        folder,
        output_dir,
        "--num_train_epochs",
        "60",
        "--per_device_train_batch_size",
        "8",
        "--learning_rate",
        "3e-3",
        "--warmup_steps",
        "20",
        "--d_model",
        "64",
        "--d_ff",
        "128",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--average_last",
        "5",
        "--save_total_limit",
        "2",
    )
    return output_dir, train.main(flags)


@pytest.mark.slow
def test_average_last_ships_the_candidate_with_the_best_validation_score(averaged_run):
    output_dir, results = averaged_run
    training = results["training"]
    candidates = {candidate["name"]: candidate for candidate in training["average_candidates"]}
    assert {"last 1", "last 2", "last 5"} <= set(candidates)
    assert candidates["last 5"]["checkpoints"] == [f"checkpoint-{step}" for step in (168, 171, 174, 177, 180)]
    chosen = candidates[training["chosen_average"]]
    assert chosen["validation"]["bleu"] == max(c["validation"]["bleu"] for c in candidates.values())
    assert chosen["validation"] == {key: results["scores"]["val"][key] for key in ("bleu", "chrf")}
    assert results["scores"]["val"]["chrf"] > 0  # it translates: the candidates were told apart on real output
    assert training["averaged_checkpoints"] == chosen["checkpoints"]
    assert len(list(output_dir.glob("checkpoint-*"))) == 6  # enough checkpoints were kept for the average


@pytest.mark.slow
def test_average_last_ships_the_average_of_the_chosen_checkpoints(averaged_run):
    import torch
    from safetensors.torch import load_file

    output_dir, results = averaged_run
    chosen = results["training"]["averaged_checkpoints"]
    shipped = load_file(output_dir / "model.safetensors")
    states = [load_file(output_dir / name / "model.safetensors") for name in chosen]
    for name, tensor in shipped.items():
        expected = torch.stack([state[name].double() for state in states]).mean(dim=0).to(tensor.dtype)
        assert torch.allclose(tensor, expected, atol=1e-6), name
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert f"| {results['training']['chosen_average']} ✓ |" in card


# ------------------------------------------------------------------------------------------ fine-tuning


def fine_tune_flags(data_dir: Path, output_dir: Path, model: Path, *extra: str) -> list[str]:
    """A tiny run's flags without the architecture ones (the trained model brings its own)."""
    flags = tiny_run_flags(data_dir, output_dir)
    architecture = {model_field.name for model_field in dataclasses.fields(train.ModelArguments)}
    kept = []
    for index in range(0, len(flags), 2):
        name = flags[index].removeprefix("--")
        if name not in architecture and name != "vocab_size":
            kept += flags[index : index + 2]
    return [*kept, "--model_name_or_path", str(model), *extra]


def first_loss(run_dir: Path) -> float:
    checkpoint = max(run_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return next(entry["loss"] for entry in history if "loss" in entry)


@pytest.mark.slow
def test_fine_tuning_starts_from_the_trained_model_and_adds_the_tag(averaged_run, tmp_path):
    trained, _ = averaged_run
    data_dir = trained.parent  # the 24 pairs it learned by heart
    write_pair(tmp_path, "synthetic", real_lines("en", 1000, 24), real_lines("de", 1000, 24))
    output_dir = tmp_path / "fine-tuned"
    results = train.main(
        fine_tune_flags(
            data_dir,
            output_dir,
            trained,
            "--num_train_epochs",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--logging_steps",
            "1",
            "--extra_train",
            f"{tmp_path / 'synthetic'}:tagged",
            "--dropout",
            "0.1",
        )
    )
    # It starts where the trained model ended: far below the loss a fresh model starts with.
    assert first_loss(output_dir) < first_loss(trained) - 2.0, (first_loss(output_dir), first_loss(trained))
    before = json.loads((trained / "config.json").read_text())
    after = json.loads((output_dir / "config.json").read_text())
    assert after["vocab_size"] == before["vocab_size"] + 1  # one embedding for <BT>, every other id kept
    assert {key: after[key] for key in ("d_model", "encoder_layers", "d_ff")} == {
        key: before[key] for key in ("d_model", "encoder_layers", "d_ff")
    }
    assert (before["dropout"], after["dropout"]) == (0.0, 0.1)  # regularisation may change
    tokenizer = load_tokenizer(output_dir)
    assert tokenizer.convert_tokens_to_ids("<BT>") == before["vocab_size"]
    assert results["training"]["fine_tuned_from"] == str(trained)
    model = TransformerMTForConditionalGeneration.from_pretrained(output_dir)
    assert model.get_output_embeddings().weight.shape[0] == before["vocab_size"] + 1
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.slow
def test_fine_tuning_refuses_architecture_flags_and_another_tokenizer(averaged_run, tmp_path):
    trained, _ = averaged_run
    with pytest.raises(SystemExit, match="--d_model --d_ff cannot change a trained model"):
        train.parse_arguments(
            [
                "--data_dir",
                str(trained.parent),
                "--output_dir",
                "unused",
                "--model_name_or_path",
                str(trained),
                "--d_model",
                "64",
                "--d_ff",
                "128",
            ]
        )
    shipped = ROOT / "models" / "transformer-en-de"
    with pytest.raises(SystemExit, match=r"the tokenizer has 800\d tokens but the model .* has 300 embeddings"):
        train.main(fine_tune_flags(trained.parent, tmp_path / "out", trained, "--tokenizer_name", str(shipped)))


def test_fine_tuning_from_a_missing_folder_or_an_unreachable_hub_id_fails_at_once(tmp_path):
    with pytest.raises(SystemExit, match="there is no model folder at ./no-such-model"):
        train.parse_arguments(
            ["--data_dir", "unused", "--output_dir", "unused", "--model_name_or_path", "./no-such-model"]
        )
    with pytest.raises(SystemExit, match="Hub is unreachable .offline. and someone/not-cached"):
        train.parse_arguments(
            ["--data_dir", "unused", "--output_dir", "unused", "--model_name_or_path", "someone/not-cached"]
        )


# ------------------------------------------------------------------------------------------ datasets (Hub or local)


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """An empty datasets cache of the test's own. (Offline, `load_dataset("wmt14")` takes any cached dataset named
    wmt14, a local folder's included: the tests neither read nor fill the user's cache.)"""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")


def jsonl_dataset(folder: Path, counts=(96, 8, 8)) -> Path:
    """A local dataset in the Hub's WMT shape: train/validation/test.jsonl of {"translation": {"de": .., "en": ..}}."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, count, start in zip(("train", "validation", "test"), counts, (0, 2000, 3000), strict=True):
        rows = [
            {"translation": {"de": de, "en": en}}
            for en, de in zip(real_lines("en", start, count), real_lines("de", start, count), strict=True)
        ]
        (folder / f"{split}.jsonl").write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return folder


@pytest.mark.slow
def test_dataset_name_trains_on_a_local_dataset_and_names_it(tmp_path, datasets_cache):
    dataset = jsonl_dataset(tmp_path / "wmt-like")
    output_dir = tmp_path / "out"
    flags = [flag for flag in tiny_run_flags(dataset, output_dir, "--num_train_epochs", "1") if flag != str(dataset)]
    flags[flags.index("--data_dir")] = "--dataset_name"
    flags.insert(flags.index("--dataset_name") + 1, str(dataset))
    results = train.main(flags)
    assert set(results["scores"]) == {"validation", "test"}  # the dataset's own split names
    assert results["scores"]["test"]["num_sentences"] == 8
    assert results["training"]["trained_steps"] == {"from": 0, "to": 6}  # 96 pairs, 16 a step
    assert results["training"]["corpora"][0]["pairs"] == 96
    assert results["training"]["dataset"]["name"] == str(dataset)
    sources = real_lines("en", 3000, 8)
    assert (output_dir / "translations.test.de").read_text(encoding="utf-8").count("\n") == len(sources)


@pytest.mark.slow
def test_streaming_trains_max_steps_from_a_saved_dataset(tmp_path, capsys, datasets_cache):
    """A dataset written by save_to_disk, a column per language, streamed: tokenized on the fly, the BPE trained on
    the first --tokenizer_train_samples pairs of the stream."""
    from datasets import Dataset, DatasetDict

    splits = {
        name: Dataset.from_dict({"en": real_lines("en", start, count), "de": real_lines("de", start, count)})
        for name, start, count in (("train", 0, 200), ("validation", 2000, 8), ("test", 3000, 8))
    }
    DatasetDict(splits).save_to_disk(tmp_path / "saved")
    output_dir = tmp_path / "out"
    results = train.main(
        [
            "--dataset_name",
            str(tmp_path / "saved"),
            "--streaming",
            "--max_steps",
            "8",
            "--save_steps",
            "4",
            "--tokenizer_train_samples",
            "150",
            "--output_dir",
            str(output_dir),
            "--per_device_train_batch_size",
            "16",
            "--warmup_steps",
            "2",
            "--logging_steps",
            "2",
            "--disable_tqdm",
            "true",
            *TINY_MODEL_FLAGS,
        ]
    )
    printed = capsys.readouterr().out
    assert "[tokenizer] training on 150 pairs" in printed
    assert results["training"]["trained_steps"] == {"from": 0, "to": 8}
    assert [point["step"] for point in results["training"]["validation_curve"]] == [4, 8]  # every --save_steps
    assert results["training"]["corpora"][0]["streaming"] is True
    assert results["scores"]["test"]["num_sentences"] == 8


def test_streaming_without_max_steps_is_a_clear_error_before_any_work(tmp_path, datasets_cache):
    with pytest.raises(SystemExit, match="--streaming needs --max_steps"):
        train.main(
            ["--dataset_name", str(jsonl_dataset(tmp_path / "d")), "--streaming", "--output_dir", str(tmp_path / "out")]
        )
    assert not (tmp_path / "out").exists()


def test_dataset_name_with_text_file_mixing_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="--extra_train .* not supported"):
        train.main(["--dataset_name", "wmt14", "--extra_train", "bt/x", "--output_dir", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="either --data_dir .* or --dataset_name"):
        train.main(["--dataset_name", "wmt14", "--data_dir", "x", "--output_dir", str(tmp_path / "out")])


@pytest.mark.parametrize("streaming", [[], ["--streaming", "--max_steps", "10"]])
def test_hub_dataset_while_offline_fails_fast_and_clearly(tmp_path, streaming, datasets_cache):
    started = time.time()
    with pytest.raises(SystemExit, match="wmt14: the Hugging Face Hub is unreachable"):
        train.main(
            [
                "--dataset_name",
                "wmt14",
                "--dataset_config_name",
                "de-en",
                *streaming,
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )
    assert time.time() - started < 10
    assert not (tmp_path / "out" / "tokenizer.json").exists()


# ------------------------------------------------------------------------------------------ the paper's setting

# The README's WMT14 command (base model, 8 GPUs): the paper's sizes and recipe, about 25,000 source and 25,000 target
# tokens per step (8 GPUs x 64 sentences x 2 accumulated = 1,024 pairs of about 25 tokens a side).
WMT14_COMMAND = """torchrun --nproc_per_node 8 train.py --dataset_name wmt14 --dataset_config_name de-en
  --output_dir runs/wmt14-base --d_model 512 --encoder_layers 6 --decoder_layers 6 --num_attention_heads 8
  --d_ff 2048 --dropout 0.1 --vocab_size 37000 --tokenizer_train_samples 1000000
  --per_device_train_batch_size 64 --gradient_accumulation_steps 2 --max_steps 100000 --warmup_steps 4000
  --eval_strategy steps --eval_steps 2000 --save_strategy steps --save_steps 2000 --average_last 5 --bf16 true"""


def hub_shaped_dataset(folder: Path, counts=(96, 8, 8)) -> Path:
    """A local copy shaped like wmt14 on the Hub: a `de-en` configuration with train/validation/test splits."""
    jsonl_dataset(folder / "de-en", counts)
    files = "".join(f"  - split: {split}\n    path: de-en/{split}.jsonl\n" for split in ("train", "validation", "test"))
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: de-en\n  data_files:\n{files}---\n")
    return folder


def test_wmt14_command_parses_to_the_papers_base_model():
    argv = WMT14_COMMAND.split()[4:]  # after "torchrun --nproc_per_node 8 train.py"
    data_args, tokenizer_args, model_args, _, _, selection_args, training_args = train.parse_arguments(argv)
    assert (
        model_args.d_model,
        model_args.encoder_layers,
        model_args.decoder_layers,
        model_args.num_attention_heads,
        model_args.d_ff,
        model_args.dropout,
        model_args.label_smoothing,
    ) == (512, 6, 6, 8, 2048, 0.1, 0.1)
    assert tokenizer_args.vocab_size == 37000 and training_args.warmup_steps == 4000
    assert (training_args.adam_beta1, training_args.adam_beta2, training_args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert training_args.learning_rate == pytest.approx(512**-0.5 * 4000**-0.5)  # the paper's peak rate
    gpus = int(WMT14_COMMAND.split()[2])
    pairs = gpus * training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
    assert pairs == 1024  # x about 25 tokens a side: about 25,000 source and 25,000 target tokens a step
    assert selection_args.average_last == 5 and training_args.save_total_limit >= 6
    assert training_args.bf16 and not training_args.ddp_find_unused_parameters
    assert data_args.validation_split == "validation" and data_args.test_split == "test"


@pytest.mark.slow
def test_wmt14_command_runs_on_a_tiny_copy(tmp_path, datasets_cache):
    """Every flag of the README's WMT14 command on a tiny local dataset shaped like wmt14 (one process)."""
    dataset = hub_shaped_dataset(tmp_path / "wmt14")
    tiny = {
        "--dataset_name": str(dataset),
        "--output_dir": str(tmp_path / "out"),
        "--d_model": "32",
        "--encoder_layers": "1",
        "--decoder_layers": "1",
        "--num_attention_heads": "4",
        "--d_ff": "64",
        "--vocab_size": "300",
        "--tokenizer_train_samples": "50",
        "--per_device_train_batch_size": "8",
        "--max_steps": "12",
        "--warmup_steps": "4",
        "--eval_steps": "2",
        "--save_steps": "2",
    }
    argv = WMT14_COMMAND.split()[4:]
    for index, arg in enumerate(argv):
        if arg in tiny:
            argv[index + 1] = tiny[arg]
    argv += [
        "--max_position_embeddings",
        "64",
        "--max_source_length",
        "64",
        "--max_target_length",
        "64",
        "--disable_tqdm",
        "true",
    ]
    results = train.main(argv)
    training = results["training"]
    assert training["trained_steps"] == {"from": 0, "to": 12}  # 12 steps of 8 x 2 accumulated pairs
    assert training["dataset"] == {
        "name": str(dataset),
        "config": "de-en",
        "validation_split": "validation",
        "test_split": "test",
    }
    assert training["chosen_average"] in {candidate["name"] for candidate in training["average_candidates"]}
    assert {"last 1", "last 2", "last 5"} <= {candidate["name"] for candidate in training["average_candidates"]}
    assert set(results["scores"]) == {"validation", "test"}
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "(configuration `de-en`)" in card


# ------------------------------------------------------------------------------------------ precision


def test_native_bf16_is_read_from_the_cpu_flags():
    assert precision.cpu_has_native_bf16({"avx2", "fma", "avx512f", "avx512_bf16"})
    assert precision.cpu_has_native_bf16({"avx2", "amx_tile", "amx_bf16"})
    assert precision.cpu_has_native_bf16({"fp", "asimd", "bf16"})  # Arm with the BF16 extension
    assert not precision.cpu_has_native_bf16({"avx2", "fma", "avx512f", "avx512bw"})  # AVX-512 without BF16
    assert not precision.cpu_has_native_bf16({"avx2", "fma"})


def test_default_precision_follows_the_machine_and_a_given_flag_wins(tmp_path):
    argv = ["--data_dir", str(DATA_DIR), "--output_dir", str(tmp_path / "out")]
    native = precision.native_bf16(use_cpu=True)  # no GPU here: the Trainer runs on the CPU
    assert precision.cpu_has_native_bf16() == native
    assert train.parse_arguments(argv)[-1].bf16 is native
    assert train.parse_arguments(argv + ["--bf16", "true"])[-1].bf16 is True
    assert train.parse_arguments(argv + ["--bf16", "false"])[-1].bf16 is False
    described = precision.describe(use_cpu=True)
    assert torch.backends.cpu.get_cpu_capability() in described
    assert ("bf16 autocast" if native else "float32") in described
