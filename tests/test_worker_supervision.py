"""The CTranslate2 worker process under supervision (`backends.CTranslate2Backend`), with a real worker killed by
SIGKILL: it is started again and the request it was running is sent again (nothing lost, one line in the log); a
worker that keeps dying, or cannot be started again, is given up for good in one line, and the app's translator then
decodes with PyTorch. Skipped where the optional `ctranslate2` package is not installed."""

import os
import shutil
import signal
import threading
import time

import pytest
import torch
from conftest import tiny_config

from modeling import TransformerMTForConditionalGeneration
from transformer_en_de.app import translators
from transformer_en_de.app.serving.scheduler import FairScheduler
from transformer_en_de.app.translation import run_system
from transformer_en_de.decoding import backends
from transformer_en_de.decoding.engine import DecodingSettings, confidences, plan_decoding, translate
from transformer_en_de.decoding.loading import load_model

pytest.importorskip("ctranslate2")

SOURCES = ["A dog runs in the park.", "Two men are working.", "The cat sleeps on the sofa.", "Three people ride."]
GREEDY = DecodingSettings(num_beams=1, max_new_tokens=12)


@pytest.fixture(scope="module")
def model_dir(tiny_tokenizer, tmp_path_factory):
    """A saved tiny model of ours with wide random weights (its output depends on its input)."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    folder = tmp_path_factory.mktemp("wide")
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def start(model_dir, tmp_path):
    """start(**options) -> (model, tokenizer, a CTranslate2Backend in a worker process on a copy of the conversion),
    closed after the test."""
    model, tokenizer = load_model(str(model_dir))
    started = []

    def start(**options):
        folder = shutil.copytree(backends.convert_cached(str(model_dir), model, tokenizer), tmp_path / "ct2")
        started.append(backends.CTranslate2Backend(folder, tokenizer, **options))
        return model, tokenizer, started[-1]

    yield start
    for decoder in started:
        decoder.close()


def logged(capfd) -> list[str]:
    """The lines written to stdout and stderr (this process's and the worker's) since the last call."""
    out, err = capfd.readouterr()
    return [line for line in (out + err).splitlines() if line.strip()]


def kill_and_wait(pid: int) -> None:
    """SIGKILL, then wait until the process has ended (a zombie that its parent has not reaped yet)."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:  # reaped already, or not Linux
            return
        if state == "Z":
            return
        time.sleep(0.01)


def ids(run) -> list[list[int]]:
    return [translation.generated_ids for translation in run.translations]


def test_a_worker_killed_between_requests_is_started_again_for_the_next_one(start, capfd):
    model, tokenizer, decoder = start()
    expected = translate(model, tokenizer, SOURCES, GREEDY, backend=decoder)
    first = decoder.pid
    logged(capfd)

    kill_and_wait(first)  # found dead when the next request comes
    run = translate(model, tokenizer, SOURCES, GREEDY, backend=decoder)

    assert ids(run) == ids(expected) and len({tuple(row) for row in ids(run)}) > 1
    assert decoder.pid != first and not decoder.gave_up
    lines = logged(capfd)
    assert len(lines) == 1, lines
    assert "worker process died (killed by SIGKILL); a new one was started (restart 1 of at most 3" in lines[0]


def test_the_request_running_when_the_worker_is_killed_is_answered_by_the_next_worker(start, capfd):
    model, tokenizer, decoder = start()
    expected = translate(model, tokenizer, SOURCES, GREEDY, backend=decoder)
    expected_scores = confidences(model, expected.translations, backend=decoder)
    first = decoder.pid
    logged(capfd)

    os.kill(first, signal.SIGSTOP)  # the worker holds the request unanswered until it is killed
    answers = {}
    running = threading.Thread(
        target=lambda: answers.update(run=translate(model, tokenizer, SOURCES, GREEDY, backend=decoder))
    )
    running.start()
    time.sleep(0.5)
    assert running.is_alive()  # waiting for the stopped worker's answer
    os.kill(first, signal.SIGKILL)
    running.join(timeout=60)

    assert ids(answers["run"]) == ids(expected)  # sent again to a new worker: the caller lost nothing
    assert confidences(model, answers["run"].translations, backend=decoder) == pytest.approx(expected_scores)
    assert decoder.pid != first
    lines = logged(capfd)
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0], lines


def test_a_worker_that_keeps_dying_is_given_up_and_the_app_decodes_with_pytorch(start, model_dir, capfd):
    model, tokenizer, decoder = start(restarts=1, fallback="PyTorch")
    translator = translators.Translator("ours", str(model_dir), model, tokenizer, decoder, decoder.name)
    with_pytorch = translate(model, tokenizer, SOURCES, GREEDY)
    assert translator.backend is decoder and translator.backend_name == "CTranslate2 float32"
    logged(capfd)

    os.kill(decoder.pid, signal.SIGKILL)
    assert ids(translate(model, tokenizer, SOURCES, GREEDY, backend=translator.backend)) == ids(with_pytorch)
    os.kill(decoder.pid, signal.SIGKILL)  # a second death in 10 minutes, with one restart allowed
    with pytest.raises(backends.BackendError) as error:
        translate(model, tokenizer, SOURCES, GREEDY, backend=translator.backend)

    assert str(error.value) == (
        "the CTranslate2 float32 worker process died 2 times in 10 minutes (last: killed by SIGKILL); it is not "
        "started again; PyTorch decodes from now on."
    )
    assert decoder.gave_up and translator.backend is None
    assert translator.backend_name == "PyTorch (CTranslate2 stopped)"
    plan = plan_decoding(model, tokenizer, SOURCES, GREEDY)
    output = run_system(translator, plan, FairScheduler())  # the app's panel: PyTorch decodes
    assert ids(output.run) == ids(with_pytorch) and output.run.plan.backend == "PyTorch"
    with pytest.raises(backends.BackendError, match="died 2 times"):  # no worker is started again, nothing more said
        decoder.translate_batch([["▁A"]], {})
    lines = logged(capfd)
    assert len(lines) == 2 and "restart 1 of at most 1" in lines[0] and lines[1] == str(error.value), lines


def test_a_worker_that_cannot_be_started_again_is_given_up_in_one_line(start, capfd, tmp_path):
    model, tokenizer, decoder = start(fallback="PyTorch")
    shutil.rmtree(tmp_path / "ct2")  # the conversion is gone: a new worker cannot load it
    logged(capfd)

    os.kill(decoder.pid, signal.SIGKILL)
    with pytest.raises(backends.BackendError) as error:
        translate(model, tokenizer, SOURCES, GREEDY, backend=decoder)

    # The message may reach a visitor: no path. The log line gives the operator the worker's own words.
    assert str(error.value) == (
        "the CTranslate2 float32 worker process died (killed by SIGKILL) and could not be started again; PyTorch "
        "decodes from now on."
    )
    assert decoder.gave_up
    lines = logged(capfd)
    assert len(lines) == 1 and lines[0].startswith(str(error.value)) and "cannot load" in lines[0], lines
