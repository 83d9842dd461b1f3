"""The recipes, run for real on the CPU with a tiny model. recipes/distill_gpu.sh: teachers side by side, each averaged
and translating the training sources and its share of monolingual English; a student on all of it, stopped by the
clock and averaged from what it saved. The CPU recipes: a second round, a cool-down, a deep-encoder run and its fork."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, ROOT

from transformer_en_de.data import is_loop
from transformer_en_de.evaluation import read_eval_results

TINY = (
    "--d_model 32 --d_ff 64 --num_attention_heads 2 --encoder_layers 1 --decoder_layers 1 --warmup_steps 10 "
    "--max_source_length 48 --max_target_length 48"
)


def run_recipe(*args, **env):
    environment = dict(os.environ, PYTHON=sys.executable, THREADS="1", HF_HUB_OFFLINE="1", **env)
    return subprocess.run(
        ["bash", str(ROOT / "recipes" / "distill_gpu.sh"), *map(str, args)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_in_background(recipe: str, model, name: str, environment: dict) -> str:
    """Start `recipes/<recipe>` (it trains in the background, pinned to one core of this process's), wait until the
    training it started ends, and return its log."""
    runs, core = Path(environment["RUNS"]), str(min(os.sched_getaffinity(0)))
    started = subprocess.run(
        ["bash", str(ROOT / "recipes" / recipe), str(model), name, core],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert started.returncode == 0, started.stderr
    pid = int((runs / f"{name}.pid").read_text())
    deadline = time.monotonic() + 600
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(1)
    return (runs / f"{name}.log").read_text()


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for split, count in (("train", 120), ("val", 12)):
        for language in ("en", "de"):
            lines = (DATA_DIR / f"{split}.{language}").read_text(encoding="utf-8").splitlines()[:count]
            (folder / f"{split}.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    mono = folder / "mono.en"
    mono.write_text("\n".join((DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[100:115]) + "\n")
    return folder, mono


@pytest.mark.slow
def test_teachers_then_student(small_data, tiny_model_dir, tmp_path):
    data, mono = small_data
    work = tmp_path / "work"
    teachers = run_recipe(
        "teachers",
        data,
        tiny_model_dir,
        work,
        mono,
        TEACHERS="2",
        TRAIN_SECONDS="300",
        TRANSLATE_SECONDS="120",
        EXTRA_FLAGS=f"{TINY} --num_train_epochs 2",
    )
    assert teachers.returncode == 0, teachers.stderr
    shares = []
    for k in (1, 2):
        averaged = read_eval_results(work / f"teacher-{k}-avg")  # best of its last checkpoints, scored on val
        assert averaged["scores"]["val"]["num_sentences"] == 12 and averaged["training"]["average_candidates"]
        for language in ("en", "de"):  # every training source translated, line-aligned
            assert len((work / "kd" / f"train.t{k}.{language}").read_text().splitlines()) == 120
        shares.append((work / "kd" / f"mono.t{k}.en").read_text().splitlines())
        assert len((work / "kd" / f"mono.t{k}.de").read_text().splitlines()) == len(shares[-1])
    # seeds 1 and 2: two different teachers
    weights = [(work / f"teacher-{k}-avg" / "model.safetensors").read_bytes() for k in (1, 2)]
    assert weights[0] != weights[1]
    # the monolingual file is split between the teachers: every line once
    assert sorted(shares[0] + shares[1]) == sorted(mono.read_text().splitlines())


@pytest.mark.slow
def test_student_stops_on_the_clock_and_averages_what_it_saved(small_data, tiny_model_dir, tmp_path):
    data, _ = small_data
    work = tmp_path / "work"
    # An extra corpus as a teacher's translations would be (tiny teachers write nothing a student could learn from)
    for language in ("en", "de"):
        (tmp_path / f"synthetic.{language}").write_text((data / f"train.{language}").read_text()[::-1])
    student = run_recipe(
        "student",
        data,
        tiny_model_dir,
        work,
        "student",
        tmp_path / "synthetic",
        TRAIN_SECONDS="40",
        SAVE_STEPS="3",
        EXTRA_FLAGS=f"{TINY} --eval_strategy no --load_best_model_at_end false",
    )
    assert student.returncode == 0, student.stderr
    log = (work / "student.log").read_text()
    assert "synthetic: kept" in log and "train x1.0, " in log
    assert "[train] done" not in log  # stopped by TRAIN_SECONDS, not by its end
    averaged = json.loads((work / "student-avg" / "eval_results.json").read_text())
    assert averaged["training"]["averaged_checkpoints"] and averaged["scores"]["val"]["num_sentences"] == 12
    assert (work / "student-avg" / "model.safetensors").is_file()


def test_a_failed_stage_says_where_to_look(small_data, tiny_model_dir, tmp_path):
    data, _ = small_data
    result = run_recipe(
        "student", data, tiny_model_dir, tmp_path / "work", "student", tmp_path / "missing", TRAIN_SECONDS="60"
    )
    assert result.returncode != 0 and "student-avg.log" in result.stderr


def test_unknown_stage_is_refused():
    result = run_recipe("pupils")
    assert result.returncode == 2 and "usage:" in result.stderr


@pytest.mark.slow
def test_second_round_translates_drops_loops_and_fine_tunes_the_teacher(small_data, app_model_dir, tmp_path):
    data, mono = small_data
    distill, runs = tmp_path / "distill", tmp_path / "runs"
    distill.mkdir()
    (distill / "teacher-t11.en").write_text(mono.read_text())  # the sources every teacher translated
    environment = dict(
        os.environ,
        PYTHON=sys.executable,
        HF_HUB_OFFLINE="1",
        DATA=str(data),
        DISTILL=str(distill),
        RUNS=str(runs),
        EXTRA_FLAGS="--max_steps 2 --save_steps 2 --max_tokens 400 --max_source_length 48 --max_target_length 48",
    )
    log = run_in_background("student_round2.sh", app_model_dir, "r2", environment)

    translations = runs / "round2" / app_model_dir.name
    sources = (translations.parent / f"{translations.name}.en").read_text().splitlines()
    assert sources == mono.read_text().splitlines()  # every source translated, in order
    clean = [translations.parent / f"{translations.name}-clean.{lang}" for lang in ("en", "de")]
    kept = [path.read_text().splitlines() for path in clean]
    pairs = list(zip(sources, (translations.parent / f"{translations.name}.de").read_text().splitlines(), strict=True))
    assert list(zip(*kept, strict=True)) == [pair for pair in pairs if not is_loop(*pair)]
    assert f"--model_name_or_path {app_model_dir}" in log and "[train] " in log
    assert (runs / "r2" / "checkpoint-2" / "model.safetensors").is_file(), log[-2000:]


@pytest.mark.slow
def test_cooldown_fine_tunes_with_the_rate_falling_linearly_to_zero(small_data, app_model_dir, tmp_path):
    data, _ = small_data
    runs = tmp_path / "runs"
    environment = dict(
        os.environ,
        PYTHON=sys.executable,
        HF_HUB_OFFLINE="1",
        DATA=str(data),
        RUNS=str(runs),
        TRANSLATIONS=str(data / "val"),
        STEPS="4",
        SAVE_STEPS="2",
        LEARNING_RATE="1e-3",
        EXTRA_FLAGS="--logging_steps 1 --max_tokens 400 --max_source_length 48 --max_target_length 48",
    )

    recipe = ["bash", str(ROOT / "recipes" / "cooldown.sh"), str(app_model_dir), "cool"]

    missing = subprocess.run(
        recipe,
        cwd=ROOT,
        env=dict(environment, TRANSLATIONS=str(tmp_path / "none")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "student_round2.sh" in missing.stderr and not runs.exists()
    mix = f"{data / 'val'} {tmp_path / 'none'}:0.5:tagged"  # a first-round mix lists several corpora
    missing = subprocess.run(
        recipe, cwd=ROOT, env=dict(environment, MIX=mix), capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 1 and f"no {tmp_path / 'none'}.de" in missing.stderr and not runs.exists()
    mix = f"{data / 'val'} {data / 'val'}:0.5:tagged"
    log = run_in_background("cooldown.sh", app_model_dir, "cool", dict(environment, MIX=mix))

    assert f"--model_name_or_path {app_model_dir}" in log and "--lr_scheduler_type linear" in log
    assert f"--extra_train {mix} " in log and log.count(f"[data] {data / 'val'}: kept") == 2  # both read
    state = json.loads((runs / "cool" / "checkpoint-4" / "trainer_state.json").read_text())
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    # The rate each step trained with: LEARNING_RATE at the first (no warm-up), a quarter less at each next one.
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4]), rates


@pytest.mark.slow
def test_deep_shallow_starts_resumes_and_forks_at_the_same_step(small_data, app_model_dir, tmp_path):
    data, _ = small_data
    runs = tmp_path / "runs"
    other_mix = tmp_path / "other"  # a second mix for the fork: the first 60 pairs only
    for language in ("en", "de"):
        lines = (data / f"train.{language}").read_text(encoding="utf-8").splitlines()[:60]
        Path(f"{other_mix}.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    environment = dict(
        os.environ,
        PYTHON=sys.executable,
        HF_HUB_OFFLINE="1",
        DATA=str(data),
        RUNS=str(runs),
        MIX=str(data / "val"),
        ENCODER_LAYERS="3",
        DECODER_LAYERS="1",
        NUM_BEAMS="1",
        SAVE_STEPS="2",
        EXTRA_FLAGS="--max_steps 4 --max_tokens 400 --max_source_length 48 --max_target_length 48",
    )

    log = run_in_background("deep_shallow.sh", app_model_dir, "parent", environment)
    init = json.loads((runs / "parent-init" / "config.json").read_text())
    assert (init["encoder_layers"], init["decoder_layers"]) == (3, 1)
    assert (runs / "parent" / "checkpoint-4" / "trainer_state.json").is_file(), log[-2000:]
    # The start decodes greedily, and so do every checkpoint and the model the run ends with (the start's model had
    # more beams).
    beams = [
        json.loads((folder / "generation_config.json").read_text())["num_beams"]
        for folder in (app_model_dir, runs / "parent-init", runs / "parent" / "checkpoint-4", runs / "parent")
    ]
    assert beams[0] > 1 and beams[1:] == [1, 1, 1], beams

    bad = subprocess.run(
        ["bash", str(ROOT / "recipes" / "deep_shallow.sh"), str(app_model_dir), "stray"],
        cwd=ROOT,
        env=dict(environment, FORK=str(runs / "parent")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "not a complete checkpoint" in bad.stderr and not (runs / "stray").exists()

    fork = dict(
        environment,
        FORK=str(runs / "parent" / "checkpoint-2"),
        MIX=str(other_mix),
        EXTRA_FLAGS=environment["EXTRA_FLAGS"].replace("--max_steps 4", "--max_steps 6"),
    )
    log = run_in_background("deep_shallow.sh", app_model_dir, "fork", fork)
    assert "[train] resumed at step 2 of 6" in log and f"--extra_train {other_mix} " in log
    assert (runs / "fork-init" / "model.safetensors").read_bytes() == (
        runs / "parent-init" / "model.safetensors"
    ).read_bytes()
    weights = [runs / run / "checkpoint-4" / "model.safetensors" for run in ("parent", "fork")]
    assert weights[0].read_bytes() != weights[1].read_bytes()  # the same step, two mixes
    assert (runs / "fork" / "checkpoint-6").is_dir() and not (runs / "parent" / "checkpoint-6").exists()

    # The same command again resumes the fork from its own newest checkpoint; FORK is not read again.
    fork["EXTRA_FLAGS"] = fork["EXTRA_FLAGS"].replace("--max_steps 6", "--max_steps 8")
    log = run_in_background("deep_shallow.sh", app_model_dir, "fork", fork)
    assert log.count("[train] resumed at step") == 2 and "[train] resumed at step 6 of 8" in log
    assert (runs / "fork" / "checkpoint-8").is_dir()
