"""The real app server (`python app.py`, offline, tiny models) called through gradio_client at every named endpoint."""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import ROOT
from gradio_client import Client, handle_file
from tiny_marian import build_tiny_marian

import app
from transformer_en_de import evaluation as metrics

pytestmark = pytest.mark.slow

SENTENCES = "A dog runs in the park. The cat sleeps."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def model_dirs(app_model_dir, tmp_path_factory):
    ours = tmp_path_factory.mktemp("ours")
    shutil.copytree(app_model_dir, ours, dirs_exist_ok=True)
    (ours / "eval_results.json").write_text(json.dumps({"test_2016_flickr": {"bleu": 12.34, "chrf": 45.6}}))
    return ours, build_tiny_marian(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def server(model_dirs):
    """`python app.py` on a free loopback port; yields (url, seconds until the page answered)."""
    ours, marian = model_dirs
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, str(ROOT / "app.py"), "--model", str(ours), "--marian-model", str(marian),
               "--host", "127.0.0.1", "--port", str(port)]
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"app.py exited with {process.returncode}:\n{process.stdout.read()}")
            if time.monotonic() - started > 180:  # a generous bound: start-up speed is measured in benchmarks/
                pytest.fail("app.py did not answer within 180 s")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        seconds = time.monotonic() - started
        print(f"\napp.py answered after {seconds:.1f} s (offline, tiny models)")
        yield url, seconds
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def client(server):
    client = Client(server[0], verbose=False)
    deadline = time.monotonic() + 60
    while "ready" not in client.predict(api_name="/marian_status"):
        assert time.monotonic() < deadline, "MarianMT did not finish loading"
        time.sleep(0.5)
    return client


@pytest.fixture(scope="module")
def translators(model_dirs):
    """The same models loaded in this process, to check what the server answers."""
    ours, marian = model_dirs
    return app.load_our_translator(str(ours)), app.load_translator(str(marian), app.MARIAN_NAME, eager_attention=True)


def test_every_named_endpoint_is_listed(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]

    assert {"/translate", "/translate_file", "/comparison", "/marian_status"} <= set(endpoints)
    assert [parameter["parameter_name"] for parameter in endpoints["/translate"]["parameters"]] == [
        "text", "decoding", "num_beams", "max_new_tokens", "reference"
    ]


def test_translate_endpoint(client, translators):
    ours, marian = translators
    reference = "Ein Hund rennt im Park. Die Katze schläft."

    answer = client.predict(SENTENCES, "beam search", 2, 10, reference, api_name="/translate")

    expected = app.translate_text(SENTENCES, "beam search", 2, 10, reference, ours=ours, marian=marian)
    our_text, our_details, marian_text, marian_details, notice = answer
    assert our_text == expected.ours.translation and marian_text == expected.marian.translation
    for details, output in ((our_details, expected.ours), (marian_details, expected.marian)):
        assert f"**Tokens generated** {output.tokens_generated}" in details
        assert f"**Sentence BLEU** {metrics.sentence_scores(output.translation, reference)['bleu']:.2f}" in details
    assert notice == ""


def test_translate_endpoint_with_only_text_uses_the_page_defaults(client, translators):
    ours, marian = translators

    answer = client.predict(text="Two dogs are playing in the snow.", api_name="/translate")

    expected = app.translate_text("Two dogs are playing in the snow.", "beam search", 4,
                                  min(128, ours.max_new_tokens), ours=ours, marian=marian)
    assert answer[0] == expected.ours.translation and answer[2] == expected.marian.translation


def test_translate_endpoint_with_empty_text_answers_a_message(client):
    answer = client.predict("   ", "greedy", 1, 10, "", api_name="/translate")

    assert answer[0] == "" and "Type an English sentence" in answer[4]


def test_translate_file_endpoint(client, tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("A dog runs.\nThe cat sleeps.\nTwo men work.\n", encoding="utf-8")
    reference = tmp_path / "reference.txt"
    reference.write_text("Ein Hund rennt.\nDie Katze schläft.\nZwei Männer arbeiten.\n", encoding="utf-8")

    path, summary = client.predict(handle_file(source), handle_file(reference), "greedy", 1, 8,
                                   api_name="/translate_file")

    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert rows[0] == ["line", "source", app.OURS_NAME, app.MARIAN_NAME, "reference"]
    assert len(rows) == 4
    for column in (2, 3):
        scores = metrics.corpus_scores([row[column] for row in rows[1:]], [row[4] for row in rows[1:]])
        assert f"{scores['bleu']:.2f} | {scores['chrf']:.2f}" in summary


def test_translate_file_endpoint_refuses_a_binary_file(client, tmp_path):
    upload = tmp_path / "image.txt"
    upload.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

    path, summary = client.predict(handle_file(upload), None, "greedy", 1, 8, api_name="/translate_file")

    assert path is None and "looks like a binary file" in summary


def test_comparison_endpoint(client):
    summary, table = client.predict(api_name="/comparison")

    assert table["headers"] == app.COMPARISON_HEADERS
    assert table["data"][0][:5] == [f"{app.OURS_NAME}, eval_results.json", "test_2016_flickr", "", "12.34", "45.60"]
    assert "sacreBLEU" in summary
