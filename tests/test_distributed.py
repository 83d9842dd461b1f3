"""train.py in two real processes on CPU (gloo), started by torchrun and by accelerate launch: it finishes, one process
writes the tokenizer, the folder, the card and eval_results.json, and the scores are those a single process gives the
saved model and each checkpoint (every validation sentence once, however the processes split the batches)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA_DIR, ROOT
from test_train import TINY_MODEL_FLAGS, real_lines, write_pair

from transformer_en_de.evaluation import read_eval_results, score_model
from transformer_en_de.training.checkpoints import complete_checkpoints

BIN = Path(sys.executable).parent
PAIRS = 24  # an odd number of batches per process: the last evaluation batch of the Trainer would be padded


def memorise_flags(data_dir: Path, output_dir: Path, *extra: str) -> list[str]:
    """A tiny model that learns 24 real pairs by heart (validation = test = training), so that scores are not 0."""
    return [
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(output_dir),
        *TINY_MODEL_FLAGS,
        "--d_model",
        "64",
        "--d_ff",
        "128",
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "5",
        "--learning_rate",
        "5e-3",
        "--warmup_steps",
        "20",
        "--logging_steps",
        "10",
        "--disable_tqdm",
        "true",
        "--num_train_epochs",
        "60",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "60",
        "--save_strategy",
        "steps",
        "--save_steps",
        "60",
        "--save_total_limit",
        "10",
        *extra,
    ]


def launch(launcher: list[str], flags: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # Both processes on the cores this test may use, one thread each (gloo on CPU).
    env = dict(
        os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false"
    )
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [*launcher, str(ROOT / "train.py"), *flags], cwd=cwd, env=env, capture_output=True, text=True, timeout=420
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    assert DATA_DIR.is_dir(), f"Multi30k is missing at {DATA_DIR}"
    folder = tmp_path_factory.mktemp("memorise")
    for split in ("train", "val", "test_2016_flickr"):
        write_pair(folder, split, real_lines("en", 0, PAIRS), real_lines("de", 0, PAIRS))
    return folder


@pytest.fixture(scope="module")
def torchrun_run(corpus):
    output_dir = corpus / "torchrun"
    done = launch([str(BIN / "torchrun"), "--nproc_per_node", "2"], memorise_flags(corpus, output_dir), ROOT)
    return output_dir, done


@pytest.mark.slow
def test_two_processes_finish(torchrun_run):
    output_dir, done = torchrun_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert "find_unused_parameters=True" not in log  # no search for unused parameters at every step
    results = read_eval_results(output_dir)
    # 24 pairs, 4 per process and step, 2 processes: 3 steps an epoch (one process would take 6).
    assert results["training"]["trained_steps"] == {"from": 0, "to": 180}


@pytest.mark.slow
def test_one_process_writes_the_tokenizer_the_folder_and_the_card(torchrun_run):
    output_dir, done = torchrun_run
    log = done.stdout + done.stderr
    assert log.count("[tokenizer] trained a") == 1  # the other process loaded the saved one
    assert log.count("[save] Hub-ready folder") == 1
    assert log.count("[score] val:") == 1
    assert sorted(path.name for path in output_dir.glob("*.json")) == [
        "config.json",
        "eval_results.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert (output_dir / "README.md").is_file()


@pytest.mark.slow
def test_scores_are_a_single_process_scoring_of_the_saved_model(torchrun_run, corpus):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    output_dir, _ = torchrun_run
    results = read_eval_results(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    sources, references = real_lines("en", 0, PAIRS), real_lines("de", 0, PAIRS)
    _, expected = score_model(model, tokenizer, sources, references)
    assert results["scores"]["val"] == expected and results["scores"]["test_2016_flickr"] == expected
    assert expected["num_sentences"] == PAIRS and expected["chrf"] > 0  # it learned: the comparison means something


@pytest.mark.slow
def test_validation_during_training_is_a_single_process_scoring_of_each_checkpoint(torchrun_run):
    """The Trainer's distributed evaluation would repeat sentences to fill the last batch; ours scores each once."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    output_dir, _ = torchrun_run
    curve = {point["step"]: point for point in read_eval_results(output_dir)["training"]["validation_curve"]}
    assert sorted(curve) == [60, 120, 180]
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    sources, references = real_lines("en", 0, PAIRS), real_lines("de", 0, PAIRS)
    checkpoints = complete_checkpoints(output_dir)
    assert [int(path.name.split("-")[1]) for path in checkpoints] == [60, 120, 180]
    for checkpoint in checkpoints:
        model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
        _, scores = score_model(model, tokenizer, sources, references)
        point = curve[int(checkpoint.name.split("-")[1])]
        # Equal up to float noise: BLAS results may differ in the last bits between processes (memory alignment), and
        # a model this small is full of near-ties ("EinEinEineeee" one "e" longer). Repeated sentences would show in
        # the count below.
        assert point["bleu"] == pytest.approx(scores["bleu"], abs=0.5), checkpoint.name
        assert point["chrf"] == pytest.approx(scores["chrf"], abs=0.5), checkpoint.name
        history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
        assert [entry["eval_num_sentences"] for entry in history if "eval_bleu" in entry][-1] == PAIRS


@pytest.mark.slow
def test_the_folder_loads_in_a_fresh_process(torchrun_run, tmp_path):
    output_dir, _ = torchrun_run
    script = (
        "import sys\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        "tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "batch = tokenizer([sys.argv[2]], return_tensors='pt')\n"
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)[0])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    done = subprocess.run(
        [sys.executable, "-c", script, str(output_dir), real_lines("en", 0, 1)[0]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()  # a translation, from the folder alone


@pytest.mark.slow
def test_accelerate_launch_runs_two_processes(corpus):
    """`accelerate launch --multi_gpu --num_processes 2` starts two processes, on CPU too (gloo). (`--cpu` would
    start one: accelerate runs several CPU processes only through mpirun.)"""
    output_dir = corpus / "accelerate"
    flags = memorise_flags(
        corpus,
        output_dir,
        "--num_train_epochs",
        "2",
        "--eval_strategy",
        "epoch",
        "--save_strategy",
        "epoch",
        "--test_split",
        "",
    )
    done = launch(
        [
            str(BIN / "accelerate"),
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
        ],
        flags,
        ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = read_eval_results(output_dir)
    assert results["training"]["trained_steps"] == {"from": 0, "to": 6}  # 3 steps an epoch: two processes
    assert (done.stdout + done.stderr).count("[tokenizer] trained a") == 1


@pytest.mark.slow
def test_two_processes_stream_a_dataset(tmp_path):
    """--streaming in two processes: each reads the stream and pads its own batches (the main process cannot hand out
    slices of batches padded to different lengths: accelerate's default for streams fails there)."""
    from datasets import Dataset, DatasetDict

    def split(start: int, count: int) -> Dataset:
        pairs = zip(real_lines("en", start, count), real_lines("de", start, count), strict=True)
        return Dataset.from_dict({"translation": [{"en": en, "de": de} for en, de in pairs]})

    DatasetDict({"train": split(0, 300), "validation": split(500, 11), "test": split(600, 11)}).save_to_disk(
        tmp_path / "saved"
    )
    output_dir = tmp_path / "out"
    flags = [
        "--dataset_name",
        str(tmp_path / "saved"),
        "--streaming",
        "--max_steps",
        "6",
        "--save_steps",
        "3",
        "--output_dir",
        str(output_dir),
        *TINY_MODEL_FLAGS,
        "--per_device_train_batch_size",
        "8",
        "--warmup_steps",
        "2",
        "--logging_steps",
        "2",
        "--disable_tqdm",
        "true",
        "--tokenizer_train_samples",
        "100",
    ]
    done = launch([str(BIN / "torchrun"), "--nproc_per_node", "2"], flags, ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = read_eval_results(output_dir)
    assert results["training"]["trained_steps"] == {"from": 0, "to": 6}
    assert [point["step"] for point in results["training"]["validation_curve"]] == [3, 6]
    assert results["scores"]["test"]["num_sentences"] == 11
