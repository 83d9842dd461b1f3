"""train.py end to end on slices of the real Multi30k files: it learns, writes a Hub-ready folder with a card,
pushes it, resumes after a kill, and refuses bad data with errors that name the files."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, ROOT
from huggingface_hub import ModelCard, constants
from loopback_hub import LoopbackHub

import train

TOKEN = "hf_loopback_write_token"
TINY_MODEL_FLAGS = [
    "--vocab_size", "300",
    "--d_model", "32",
    "--encoder_layers", "1",
    "--decoder_layers", "1",
    "--num_attention_heads", "4",
    "--d_ff", "64",
    "--dropout", "0.0",
    "--max_position_embeddings", "64",
    "--max_source_length", "64",
    "--max_target_length", "64",
]


def tiny_run_flags(data_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--data_dir", str(data_dir),
        "--output_dir", str(output_dir),
        "--max_train_samples", "96",
        "--max_eval_samples", "8",
        "--max_test_samples", "8",
        "--per_device_train_batch_size", "16",
        "--per_device_eval_batch_size", "8",
        "--generation_num_beams", "2",
        "--warmup_steps", "4",
        "--learning_rate", "3e-3",
        "--logging_steps", "2",
        "--disable_tqdm", "true",
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
            DATA_DIR, output_dir, "--num_train_epochs", "6",
            "--push_to_hub", "true", "--hub_model_id", "tester/tiny-en-de", "--hub_token", TOKEN,
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
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md",
                 "eval_results.json", "modeling_transformer_mt.py", "configuration_transformer_mt.py"):
        assert (output_dir / name).is_file(), name
    config = json.loads((output_dir / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_transformer_mt.")
    saved = json.loads((output_dir / "eval_results.json").read_text())
    assert saved["test_2016_flickr"]["num_sentences"] == 8
    assert saved == json.loads(json.dumps(results))


@pytest.mark.slow
def test_model_card_carries_the_metrics(trained_run):
    output_dir, results, _ = trained_run
    card = ModelCard.load(output_dir / "README.md")
    metrics = {
        metric["type"]: metric["value"]
        for entry in card.data.to_dict()["model-index"][0]["results"]
        for metric in entry["metrics"]
    }
    assert metrics == {"bleu": results["test_2016_flickr"]["bleu"], "chrf": results["test_2016_flickr"]["chrf"]}
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
        [sys.executable, "-c", script, str(output_dir)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["class"].startswith("transformers_modules.")
    assert loaded["ids"][0][0] == 1  # decoding starts at the decoder start token


@pytest.mark.slow
def test_test_translations_are_the_saved_models_in_file_order(trained_run):
    """The scored translations come from the saved folder, line by line in the order of the test file."""
    output_dir, _, _ = trained_run
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    sources = (DATA_DIR / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:8]
    saved = (output_dir / "translations.test_2016_flickr.de").read_text(encoding="utf-8")
    expected = []
    for source in sources:  # one at a time: no padding, nothing to reorder
        ids = model.generate(**tokenizer([source], return_tensors="pt", truncation=True))  # as train.py
        expected += tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert saved == "\n".join(expected) + "\n"  # a barely trained model may emit newlines: compare the whole file


@pytest.mark.slow
def test_push_uploads_the_folder(trained_run):
    output_dir, _, uploaded = trained_run
    assert uploaded == folder_files(output_dir)


def test_push_offline_fails_clearly(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    from publish import PublishError, push_folder

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
    train.main(tiny_run_flags(small_corpus, tmp_path / "out", "--num_train_epochs", "1", "--test_split", ""))
    printed = capsys.readouterr().out
    assert "train: kept 8 pairs, dropped 8 (4 empty side, 4 placeholder" in printed


def test_resume_without_checkpoint_is_a_clear_error(small_corpus, tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint"):
        train.main(tiny_run_flags(small_corpus, tmp_path / "out", "--resume_from_checkpoint", "last"))


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(tmp_path):
    """Kill a real training process after its first checkpoint; the resumed run continues at that step."""
    output_dir = tmp_path / "out"
    flags = tiny_run_flags(
        DATA_DIR, output_dir, "--num_train_epochs", "10", "--save_strategy", "steps", "--save_steps", "6",
        "--eval_strategy", "no", "--load_best_model_at_end", "false", "--test_split", "",
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *flags], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
    # trainer_state.json is the last file a checkpoint writes: folders without it were cut off mid-save.
    for partial in [path for path in output_dir.glob("checkpoint-*") if not (path / "trainer_state.json").is_file()]:
        shutil.rmtree(partial)
    killed_at = max(int(path.name.split("-")[1]) for path in output_dir.glob("checkpoint-*"))
    assert killed_at < 60, "the run finished instead of being killed"

    results = train.main([*flags, "--resume_from_checkpoint", "last"])
    assert results["trained_steps"] == {"from": killed_at, "to": 60}  # 96 pairs / 16 per batch * 10 epochs
    final = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert final.name == "checkpoint-60"
