"""translate_corpus.py: aligned output through the engine, resume after a real kill, refusals, reproducible sampling."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import PAIRS, ROOT

import translate_corpus
from transformer_en_de.decoding import backends
from transformer_en_de.decoding.engine import DecodingSettings, translate
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.decoding.loading import load_model

SOURCES = [source for source, _ in PAIRS]


def write_input(path, count: int) -> list[str]:
    """`count` English lines: the test sentences with a number, so that lengths and texts vary."""
    lines = [f"{SOURCES[index % len(SOURCES)][:-1]} number {index}." for index in range(count)]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines


def run(model_dir, input_path, output, *extra) -> int:
    arguments = [
        "--model",
        str(model_dir),
        "--input",
        str(input_path),
        "--output",
        str(output),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--batch_size",
        "4",
        "--chunk_size",
        "5",
        *extra,
    ]
    return translate_corpus.main([str(argument) for argument in arguments])


def outputs(output) -> tuple[bytes, bytes]:
    return output.with_name(output.name + ".en").read_bytes(), output.with_name(output.name + ".de").read_bytes()


def progress(output) -> dict:
    return json.loads(output.with_name(output.name + ".progress.json").read_text(encoding="utf-8"))


def test_pairs_are_aligned_cleaned_and_translated_by_the_engine(tiny_model_dir, tmp_path, capsys):
    messy = ["A dog  runs\tin the park.", "", "Tom &amp; Jerry\u00a0play.", "   ", "@@ --", "Two men are working."]
    input_path = tmp_path / "input.en"
    input_path.write_text("\n".join(messy) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "synthetic"

    assert run(tiny_model_dir, input_path, output, "--num_beams", "2") == 0

    english, german = (data.decode("utf-8").split("\n")[:-1] for data in outputs(output))
    kept = ["A dog runs in the park.", "Tom & Jerry play.", "Two men are working."]
    assert english == kept  # cleaned like the training data; empty and letterless lines skipped in both files
    model, tokenizer = load_model(str(tiny_model_dir))
    expected = translate(model, tokenizer, kept, DecodingSettings(num_beams=2, batch_size=4)).texts
    assert german == [" ".join(text.split()) for text in expected]
    state = progress(output)
    assert (state["lines_read"], state["lines_written"], state["lines_skipped"]) == (6, 3, 3)
    assert state["decoding"]["num_beams"] == 2
    err = capsys.readouterr().err
    assert "6/6 lines (100.0%)" in err and "sentences/s" in err and "ETA" in err
    assert "3 empty lines skipped" in err


def test_stopping_and_resuming_gives_the_uninterrupted_output(tiny_model_dir, tmp_path, capsys):
    input_path = tmp_path / "input.en"
    write_input(input_path, 23)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run(tiny_model_dir, input_path, whole) == 0

    assert run(tiny_model_dir, input_path, parts, "--stop_after_chunks", "2") == 0
    assert progress(parts)["lines_read"] == 10
    assert "stopped after 2 chunk(s)" in capsys.readouterr().err
    # A run killed while appending its third chunk: bytes past what the progress file records.
    for path in (parts.with_name("parts.en"), parts.with_name("parts.de")):
        with open(path, "ab") as handle:
            handle.write("Ein halber Satz über die Straße, ohne Zeilenende".encode())
    assert run(tiny_model_dir, input_path, parts) == 0

    assert "resuming at input line 11 of 23" in capsys.readouterr().err
    assert outputs(parts) == outputs(whole)
    assert len(outputs(parts)[0].splitlines()) == 23
    # Done is done: the same command again changes nothing.
    assert run(tiny_model_dir, input_path, parts) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert outputs(parts) == outputs(whole)


@pytest.mark.parametrize("decoding", [("--num_beams", "1"), ("--sample", "--seed", "3")], ids=["greedy", "sampling"])
def test_limit_can_grow_between_runs(tiny_model_dir, tmp_path, decoding):
    input_path = tmp_path / "input.en"
    write_input(input_path, 12)
    whole, grown = tmp_path / "whole", tmp_path / "grown"
    assert run(tiny_model_dir, input_path, whole, *decoding) == 0
    assert run(tiny_model_dir, input_path, grown, *decoding, "--limit", "7") == 0  # chunks 0-4 and 5-6 of 5-9
    assert len(outputs(grown)[0].splitlines()) == 7

    assert run(tiny_model_dir, input_path, grown, *decoding) == 0  # 5-9 again, whole, then 10-11
    assert outputs(grown) == outputs(whole)
    assert (
        progress(grown)["lines_written"] == 12
        and progress(grown)["hit_length_bound"] == progress(whole)["hit_length_bound"]
    )


def test_other_settings_against_existing_output_are_refused(
    tiny_model_dir, tiny_model, tiny_tokenizer, tmp_path, capsys
):
    input_path = tmp_path / "input.en"
    write_input(input_path, 12)
    output = tmp_path / "out"
    assert run(tiny_model_dir, input_path, output, "--num_beams", "1", "--stop_after_chunks", "1") == 0
    before = outputs(output)
    capsys.readouterr()

    assert run(tiny_model_dir, input_path, output, "--num_beams", "2") == 1
    message = capsys.readouterr().err
    assert "num_beams" in message and "other settings" in message and "another --output" in message

    assert run(tiny_model_dir, input_path, output, "--num_beams", "1", "--sample", "--seed", "1") == 1
    assert "do_sample" in capsys.readouterr().err

    other_model = tmp_path / "other-model"  # the same architecture, other weights
    torch.manual_seed(123)
    changed = type(tiny_model)(tiny_model.config)
    changed.save_pretrained(other_model)
    tiny_tokenizer.save_pretrained(other_model)
    assert run(other_model, input_path, output, "--num_beams", "1") == 1
    assert "model_sha256" in capsys.readouterr().err

    with open(input_path, "a", encoding="utf-8") as handle:
        handle.write("One more line.\n")
    assert run(tiny_model_dir, input_path, output, "--num_beams", "1") == 1
    assert "input_sha256" in capsys.readouterr().err
    assert outputs(output) == before  # nothing was touched


def test_int8_translates_with_int8_weights_and_resumes_only_with_them(tiny_model_dir, tmp_path, capsys):
    input_path = tmp_path / "input.en"
    lines = write_input(input_path, 12)
    output = tmp_path / "out"
    assert run(tiny_model_dir, input_path, output, "--num_beams", "2", "--int8", "--stop_after_chunks", "1") == 0
    assert progress(output)["decoding"]["weights"] == "int8 dynamic"
    capsys.readouterr()

    assert run(tiny_model_dir, input_path, output, "--num_beams", "2") == 1  # not without them
    assert "int8 dynamic" in capsys.readouterr().err
    assert run(tiny_model_dir, input_path, output, "--num_beams", "2", "--int8") == 0

    german = outputs(output)[1].decode("utf-8").split("\n")[:-1]
    model, tokenizer = load_model(str(tiny_model_dir))
    # chunk by chunk (--chunk_size 5), as the command translates them
    chunks = [lines[start : start + 5] for start in range(0, len(lines), 5)]
    settings = DecodingSettings(num_beams=2, batch_size=4)
    expected = [text for chunk in chunks for text in translate(int8_dynamic(model), tokenizer, chunk, settings).texts]
    assert german == [" ".join(text.split()) for text in expected]
    assert run(tiny_model_dir, input_path, tmp_path / "gpu", "--int8", "--device", "cuda") == 1
    assert "--device cpu" in capsys.readouterr().err


def test_ctranslate2_backend_gives_the_engines_translations_and_resumes_only_with_it(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv(backends.CACHE_VARIABLE, str(tmp_path / "cache"))
    input_path = tmp_path / "input.en"
    lines = write_input(input_path, 12)
    output = tmp_path / "out"
    ctranslate2 = ("--num_beams", "1", "--backend", "ctranslate2")
    assert run(tiny_model_dir, input_path, output, *ctranslate2, "--stop_after_chunks", "1") == 0
    record = progress(output)
    assert (record["decoding"]["backend"], record["decoding"]["weights"]) == ("ctranslate2", "float32")
    capsys.readouterr()

    assert run(tiny_model_dir, input_path, output, "--num_beams", "1") == 1  # not with the other backend
    assert "backend" in capsys.readouterr().err
    assert run(tiny_model_dir, input_path, output, *ctranslate2) == 0
    german = outputs(output)[1].decode("utf-8").split("\n")[:-1]
    model, tokenizer = load_model(str(tiny_model_dir))
    chunks = [lines[start : start + 5] for start in range(0, len(lines), 5)]
    settings = DecodingSettings(num_beams=1, batch_size=4)
    expected = [text for chunk in chunks for text in translate(model, tokenizer, chunk, settings).texts]
    assert german == [" ".join(text.split()) for text in expected]  # greedy: the ids of the torch backend
    assert progress(output)["cpu_seconds"] > 0  # the worker's CPU time counted


def test_output_files_without_a_progress_file_are_refused(tiny_model_dir, tmp_path, capsys):
    input_path = tmp_path / "input.en"
    write_input(input_path, 3)
    (tmp_path / "out.de").write_text("someone else's file\n", encoding="utf-8")

    assert run(tiny_model_dir, input_path, tmp_path / "out") == 1
    assert "not written by this command" in capsys.readouterr().err
    assert (tmp_path / "out.de").read_text(encoding="utf-8") == "someone else's file\n"


def test_an_output_that_cannot_be_written_is_one_line_before_any_work(tmp_path, capsys):
    """Refused before the input is read or the model loaded (neither exists here): a path under a regular file fails
    for every user, root included."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n", encoding="utf-8")
    for output in (blocker / "out", blocker / "deeper" / "out"):
        assert run(tmp_path / "no-model", tmp_path / "missing.en", output) == 1
        error = capsys.readouterr().err
        assert error.startswith(f"error: --output {output} cannot be written (") and error.count("\n") == 1, error
        assert "Traceback" not in error and "choose another --output" in error
    assert blocker.read_text(encoding="utf-8") == "not a folder\n"


def test_a_read_only_output_folder_is_one_line_before_any_work(tmp_path, capsys):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("this user (root) can write into a read-only folder")
        assert run(tmp_path / "no-model", tmp_path / "missing.en", folder / "out") == 1
        error = capsys.readouterr().err
        assert error.startswith(f"error: --output {folder / 'out'} cannot be written (Permission denied)")
        assert error.count("\n") == 1
        assert not list(folder.iterdir())
    finally:
        folder.chmod(0o755)


def test_sampling_is_reproducible_with_a_seed(tiny_model_dir, tmp_path):
    input_path = tmp_path / "input.en"
    write_input(input_path, 12)
    sample = ("--sample", "--top_k", "50")
    first, again, resumed, other = (tmp_path / name for name in ("first", "again", "resumed", "other"))
    assert run(tiny_model_dir, input_path, first, *sample, "--seed", "7") == 0
    assert run(tiny_model_dir, input_path, again, *sample, "--seed", "7") == 0
    assert run(tiny_model_dir, input_path, resumed, *sample, "--seed", "7", "--stop_after_chunks", "1") == 0
    assert run(tiny_model_dir, input_path, resumed, *sample, "--seed", "7") == 0
    assert run(tiny_model_dir, input_path, other, *sample, "--seed", "8") == 0

    assert outputs(first) == outputs(again) == outputs(resumed)
    assert outputs(first)[0] == outputs(other)[0] and outputs(first)[1] != outputs(other)[1]
    assert progress(first)["decoding"]["seed"] == 7
    assert progress(first)["decoding"]["do_sample"] and progress(first)["decoding"]["num_beams"] == 1


def test_bad_input_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    assert run(tiny_model_dir, tmp_path / "missing.en", tmp_path / "out") == 1
    assert "Missing data file" in capsys.readouterr().err

    latin1 = tmp_path / "latin1.en"
    latin1.write_bytes("Ein Mädchen läuft.\n".encode("latin-1"))
    assert run(tiny_model_dir, latin1, tmp_path / "out") == 1
    assert "not UTF-8" in capsys.readouterr().err

    good = tmp_path / "good.en"
    write_input(good, 2)
    assert run(tmp_path / "no-model", good, tmp_path / "out") == 1
    assert "no model folder" in capsys.readouterr().err
    assert not any(path.name.startswith("out") for path in tmp_path.iterdir())


@pytest.mark.slow
def test_a_killed_process_resumes_to_the_uninterrupted_output(tiny_model_dir, tmp_path):
    input_path = tmp_path / "input.en"
    lines = write_input(input_path, 240)
    command = [
        sys.executable,
        "translate_corpus.py",
        "--model",
        str(tiny_model_dir),
        "--input",
        str(input_path),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--batch_size",
        "8",
        "--chunk_size",
        "10",
        "--threads",
        "1",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    killed, whole = tmp_path / "killed", tmp_path / "whole"

    process = subprocess.Popen([*command, "--output", str(killed)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
    progress_file = killed.with_name("killed.progress.json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if progress_file.is_file() and progress(killed)["lines_read"] >= 30:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    at_kill = progress(killed)["lines_read"]
    assert process.returncode == -signal.SIGKILL and 30 <= at_kill < len(lines), "the kill came too late to test"

    resumed = subprocess.run(
        [*command, "--output", str(killed)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at input line {at_kill + 1:,}" in resumed.stderr
    complete = subprocess.run(
        [*command, "--output", str(whole)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert complete.returncode == 0, complete.stderr

    assert outputs(killed) == outputs(whole)
    assert outputs(killed)[0].decode("utf-8").splitlines() == lines
    assert len(outputs(killed)[1].decode("utf-8").split("\n")) == len(lines) + 1
