"""The real app server (`python app.py`, offline, three tiny models) called through gradio_client: every named
endpoint, bad input answered in one line, the upload cap, one request per visitor, a closed client cancels."""

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
from tiny_models import build_tiny_t5

from transformer_en_de import evaluation
from transformer_en_de.app import corpus_report, translation, translators
from transformer_en_de.app.limits import Limits
from transformer_en_de.app.scheduler import FairScheduler

pytestmark = pytest.mark.slow

SENTENCES = "A dog runs in the park. The cat sleeps."
# 3,000 characters in capitals without a full stop: the text that made the model loop until its bound.
HEAVY = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]
LONG_FILE = "A man in a blue jacket is repairing a bicycle on the street.\n" * 500


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def model_dirs(app_model_dir, tmp_path_factory):
    ours = tmp_path_factory.mktemp("ours")
    shutil.copytree(app_model_dir, ours, dirs_exist_ok=True)
    evaluation.write_eval_results(
        ours,
        num_parameters=1,
        decoding={"num_beams": 4},
        command=["test"],
        scores={"test_2016_flickr": {"bleu": 12.34, "chrf": 45.6}},
    )
    return ours, build_tiny_marian(tmp_path_factory.mktemp("marian")), build_tiny_t5(tmp_path_factory.mktemp("t5"))


@pytest.fixture(scope="module")
def server(model_dirs, tmp_path_factory):
    """`python app.py` on a free loopback port; yields (url, its log file, Gradio's cache folder)."""
    ours, marian, t5 = model_dirs
    cache = tmp_path_factory.mktemp("gradio-cache")
    log = tmp_path_factory.mktemp("log") / "app.log"
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GRADIO_TEMP_DIR=str(cache))
    command = [
        sys.executable,
        str(ROOT / "app.py"),
        "--model",
        str(ours),
        "--comparison-models",
        str(marian),
        str(t5),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with open(log, "w") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"app.py exited with {process.returncode}:\n{log.read_text()}")
            if time.monotonic() - started > 240:  # a generous bound: start-up speed is measured in benchmarks/
                pytest.fail("app.py did not answer within 240 s")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        yield url, log, cache
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def client(server):
    client = Client(server[0], verbose=False)
    deadline = time.monotonic() + 300  # generous: the machine's cores are shared
    while client.predict(api_name="/status").count("ready") < 2:
        assert time.monotonic() < deadline, "the comparison models did not finish loading"
        time.sleep(0.5)
    return client


@pytest.fixture(scope="module")
def translators_here(model_dirs):
    """The same models loaded in this process, to check what the server answers."""
    ours, marian, t5 = model_dirs
    return (
        translators.load_our_translator(str(ours)),
        translators.load_translator(str(marian), marian.name),
        translators.load_translator(str(t5), t5.name),
    )


def test_every_named_endpoint_is_listed(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]

    assert {"/translate", "/translate_file", "/comparison", "/status"} <= set(endpoints)
    assert [parameter["parameter_name"] for parameter in endpoints["/translate"]["parameters"]] == [
        "text",
        "decoding",
        "num_beams",
        "max_new_tokens",
        "reference",
    ]


def test_translate_endpoint_answers_every_model(client, translators_here, model_dirs):
    ours, marian, t5 = translators_here
    reference = "Ein Hund rennt im Park. Die Katze schläft."

    answer = client.predict(SENTENCES, "beam search", 2, 10, reference, api_name="/translate")

    expected = translation.translate_text(
        SENTENCES, "beam search", 2, 10, reference, ours=ours, comparisons=[marian, t5], scheduler=FairScheduler()
    )
    assert len(answer) == 2 * 3 + 1 and answer[-1] == ""
    for number, output in enumerate(expected.outputs):
        assert answer[2 * number] == output.translation
        assert f"**Tokens generated** {output.new_tokens}" in answer[2 * number + 1]
        assert f"**Sentence BLEU** {output.scores['bleu']:.2f}" in answer[2 * number + 1]


def test_page_shows_no_server_path(server, model_dirs):
    with urllib.request.urlopen(server[0] + "config", timeout=10) as response:
        page = response.read().decode()

    for folder in model_dirs:
        assert folder.name in page and str(folder) not in page


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (("A dog\x1b runs.", "greedy", 1, 10, ""), "control character"),
        (("\u200b\u200b", "greedy", 1, 10, ""), "only invisible characters"),
        (("A dog runs.", "greedy", 1, 100_000, ""), "Maximum new tokens must be from 1 to 255"),
        (("A dog runs.", "beam search", -3, 10, ""), "Beams must be from 1 to 8"),
        (("A dog runs.", "sampling", 2, 10, ""), "Decoding must be one of"),
        (("   ", "greedy", 1, 10, ""), "Type an English sentence"),
    ],
)
def test_bad_input_is_one_line_not_an_error_or_a_traceback(client, server, arguments, expected):
    before = server[1].read_text()

    answer = client.predict(*arguments, api_name="/translate")

    assert expected in answer[-1] and answer[0] == ""
    assert "Traceback" not in server[1].read_text()[len(before) :]


def test_lone_surrogate_sent_as_json_is_a_message(server):
    """gradio_client cannot send one (httpx encodes UTF-8), a browser or curl can: JSON's "\\ud800" escape."""
    body = json.dumps({"data": ["A dog \ud800 runs.", "greedy", 1, 10, ""]}).encode()  # ensure_ascii: "\\ud800"
    call = urllib.request.Request(
        server[0] + "gradio_api/call/translate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(call, timeout=30) as response:
        event_id = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{server[0]}gradio_api/call/translate/{event_id}", timeout=60) as response:
        stream = response.read().decode()

    assert "event: complete" in stream and "lone surrogate" in stream


def test_heavy_request_is_translated_in_parts_in_sentence_case_and_says_so(client):
    answer = client.predict(HEAVY, "beam search", 8, 255, "", api_name="/translate")

    assert "translated in parts of at most 30 words" in answer[-1]
    for number in range(3):  # every model reads the capitals in sentence case and translates every part
        assert answer[2 * number] != ""
        assert "sentences were typed in capitals and read in sentence case" in answer[2 * number + 1]


def start_long_file(server, client, tmp_path) -> Client:
    """A visitor whose file request is running (the status says so) when this returns."""
    source = tmp_path / "long.txt"
    source.write_text(LONG_FILE, encoding="utf-8")
    visitor = Client(server[0], verbose=False)
    visitor.submit(handle_file(source), None, "beam search", 8, 255, api_name="/translate_file")
    deadline = time.monotonic() + 30
    while "1 request in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the long request never started"
        time.sleep(0.1)
    return visitor


def test_one_request_per_visitor(server, client, tmp_path):
    visitor = start_long_file(server, client, tmp_path)

    second = visitor.predict("A dog runs.", "greedy", 1, 10, "", api_name="/translate")

    assert "still running" in second[-1] and second[0] == ""
    visitor.close()  # cancels the file request
    deadline = time.monotonic() + 30
    while "0 requests in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the closed client's request kept running"
        time.sleep(0.2)


def test_closed_client_cancels_its_request(server, client, tmp_path):
    visitor = start_long_file(server, client, tmp_path)

    visitor.close()  # ends its heartbeat: Gradio runs the page's unload event

    deadline = time.monotonic() + 30
    while "0 requests in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the closed client's request kept running"
        time.sleep(0.2)
    assert "a visitor left; their request was cancelled" in server[1].read_text()


def test_translate_file_endpoint(client, server, tmp_path):
    source = tmp_path / "source.en"
    source.write_text("A dog runs.\nThe cat sleeps.\nTwo men work.\n", encoding="utf-8")
    reference = tmp_path / "reference.de"
    reference.write_text("Ein Hund rennt.\nDie Katze schläft.\nZwei Männer arbeiten.\n", encoding="utf-8")

    path, summary, first_lines = client.predict(
        handle_file(source), handle_file(reference), "greedy", 1, 8, api_name="/translate_file"
    )

    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert len(rows) == 4 and rows[0][0:2] == ["line", "source"] and rows[0][-1] == "reference"
    for column in (2, 3, 4):
        scores = evaluation.corpus_scores([row[column] for row in rows[1:]], [row[5] for row in rows[1:]])
        assert f"{scores['bleu']:.2f} | {scores['chrf']:.2f}" in summary
    assert list((server[2] / "translations").rglob("source.de.tsv"))  # written into Gradio's cache, which it cleans
    # The first lines beside their translations, for the page.
    table = first_lines.splitlines()
    assert table[0] == "| Line | English | " + " | ".join(rows[0][2:5]) + " |" and len(table) == 2 + 3
    assert table[2].startswith(r"| 1 | A dog runs\. | ")


def test_translate_file_endpoint_refuses_a_binary_file(client, tmp_path):
    upload = tmp_path / "image.txt"
    upload.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

    path, summary, _ = client.predict(handle_file(upload), None, "greedy", 1, 8, api_name="/translate_file")

    assert path is None and "looks like a binary file" in summary


def test_upload_over_the_cap_is_refused_before_it_is_stored(client, server, tmp_path):
    upload = tmp_path / "big.txt"
    upload.write_bytes(b"A dog runs.\n" * (Limits().max_file_bytes // 12 + 10))

    with pytest.raises(Exception, match="(?i)size"):
        client.predict(handle_file(upload), None, "greedy", 1, 8, api_name="/translate_file")
    assert not [path for path in server[2].rglob("big.txt")]


def test_comparison_endpoint(client):
    summary, table = client.predict(api_name="/comparison")

    lines = table.splitlines()
    assert lines[0] == "| " + " | ".join(corpus_report.HEADERS) + " |"
    assert lines[2].startswith(r"| Transformer \(ours\) | test 2016 flickr |  | 12\.34 | 45\.60 |")
    assert "BLEU counts the word sequences" in summary


# ------------------------------------------------------------------------------------------------ hostile API clients


def raw_call(url: str, api: str, body: bytes | dict, *, read: bool = True) -> tuple[int, str]:
    """POST /gradio_api/call/<api> as a raw HTTP client (no session unless the body has one); (status, answer): the
    event stream when accepted and `read`, else the response body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    call = urllib.request.Request(
        f"{url}gradio_api/call/{api}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(call, timeout=30) as response:
            answer = response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    if not read:
        return 200, answer
    with urllib.request.urlopen(f"{url}gradio_api/call/{api}/{json.loads(answer)['event_id']}", timeout=120) as stream:
        return 200, stream.read().decode()


def completed(stream: str) -> list:
    """The values of the stream's `complete` event (the test fails on an `error` event, message or not)."""
    assert "event: complete" in stream, stream[-500:]
    return json.loads(stream.split("event: complete\ndata: ", 1)[1].split("\n", 1)[0])


def no_traceback_since(log, before: str) -> bool:
    return "Traceback" not in log.read_text()[len(before) :]


@pytest.mark.parametrize(
    "value, kind", [(7, "a number"), (["A dog."], "a list"), ({"a": 1}, "an object"), (True, "true")]
)
@pytest.mark.parametrize("field", ["text", "reference"])
def test_text_or_reference_of_the_wrong_type_is_a_message(server, field, value, kind):
    before = server[1].read_text()
    data = ["A dog runs.", "greedy", 1, 10, ""]
    data[0 if field == "text" else 4] = value

    status, stream = raw_call(server[0], "translate", {"data": data})

    answer = completed(stream)
    assert status == 200 and f"The {field} must be a string of text, not {kind}" in answer[-2]
    assert answer[-2].count("\n") == 0 and no_traceback_since(server[1], before)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "1e400", "NaN"])
@pytest.mark.parametrize("slider", [2, 3])
def test_infinite_slider_values_are_a_message(server, slider, literal):
    before = server[1].read_text()
    values = ['"A dog runs."', '"beam search"', "2", "10", '""']
    values[slider] = literal

    status, stream = raw_call(server[0], "translate", ('{"data": [' + ", ".join(values) + "]}").encode())

    answer = completed(stream)
    name = "Beams" if slider == 2 else "Maximum new tokens"
    assert status == 200 and f"{name} must be a whole number" in answer[-2] and answer[0] == ""
    assert no_traceback_since(server[1], before)


@pytest.mark.parametrize(
    "api, data, expected",
    [
        ("translate", ["A dog runs.", "greedy"], "/translate takes 5 values"),
        ("translate", [], "/translate takes 5 values"),
        ("translate_file", [None], "/translate_file takes 5 values"),
    ],
)
def test_missing_arguments_are_a_message(server, api, data, expected):
    before = server[1].read_text()

    status, answer = raw_call(server[0], api, {"data": data})

    assert status == 422 and expected in json.loads(answer)["error"]
    assert no_traceback_since(server[1], before)


@pytest.mark.parametrize("body", [b"not json", b'{"data": "A dog runs."}', b"[1, 2]"])
def test_a_body_that_is_no_call_is_a_message(server, body):
    status, answer = raw_call(server[0], "translate", body)

    assert status == 422 and json.loads(answer)["error"]


def test_no_route_runs_a_translation_outside_the_queue(server):
    body = json.dumps({"data": ["A dog runs.", "greedy", 1, 10, ""]}).encode()
    for route in ("run", "api"):
        call = urllib.request.Request(
            f"{server[0]}gradio_api/{route}/translate", data=body, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(call, timeout=30)
        assert refusal.value.code == 404 and "join the queue" in refusal.value.read().decode()


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    body = json.dumps({"data": ["A dog runs. " * 100_000, "greedy", 1, 10, ""]}).encode()  # 1.2 MB

    status, answer = raw_call(server[0], "translate", body)

    assert status == 413 and f"the limit here is {Limits().max_body_bytes:,}" in json.loads(answer)["error"]


@pytest.mark.parametrize(
    "where, expected",
    [
        ("a-folder", "is no longer on the server"),
        ("missing.txt", "is no longer on the server"),
    ],
)
def test_a_file_payload_that_is_no_upload_is_a_message(server, where, expected):
    (server[2] / "a-folder").mkdir(exist_ok=True)
    before = server[1].read_text()
    payload = {"path": str(server[2] / where), "meta": {"_type": "gradio.FileData"}}

    status, stream = raw_call(server[0], "translate_file", {"data": [payload, None, "greedy", 1, 8]})

    assert expected in completed(stream)[1] and no_traceback_since(server[1], before)


@pytest.mark.parametrize(
    "payload, expected",
    [
        (42, "must be null or the object /gradio_api/upload describes"),
        ("long.txt", "must be null or the object /gradio_api/upload describes"),
        ({"name": "x"}, "must be null or the object /gradio_api/upload describes"),
        ({"path": "/etc/hostname"}, "The English file must be a file uploaded to this server"),
        ({"path": "../../etc/hostname"}, "The English file must be a file uploaded to this server"),
    ],
)
def test_a_file_payload_of_the_wrong_shape_or_place_is_a_message(server, payload, expected):
    before = server[1].read_text()

    status, answer = raw_call(server[0], "translate_file", {"data": [payload, None, "greedy", 1, 8]})

    assert status == 422 and expected in json.loads(answer)["error"]
    assert no_traceback_since(server[1], before)


def test_injected_markdown_comes_back_as_text(server, client, tmp_path):
    link = "[click here](http://evil.example/x) ![x](http://evil.example/i.png) <img src=x onerror=alert(1)>"
    status, stream = raw_call(server[0], "translate", {"data": ["A dog runs.", link, 2, 10, ""]})
    notice = completed(stream)[-2]
    assert "Decoding must be one of" in notice and "evil.example" not in notice

    upload = tmp_path / "[click here](http:evil.example).txt"
    upload.write_bytes(b"\x00binary")
    _, summary = client.predict(handle_file(upload), None, "greedy", 1, 8, api_name="/translate_file")[:2]
    assert r"\[click here\]\(httpevil\.example\)\.txt" in summary and "[click here](" not in summary  # Gradio drops ":"


def test_a_session_keeps_no_visitor_text_for_deep_links(server, client):
    secret = "A dog runs past [a link](http://evil.example/x)."
    body = {"data": [secret, "greedy", 1, 10, secret], "session_hash": "deeplinkprobe"}

    status, stream = raw_call(server[0], "translate", body)
    completed(stream)
    with urllib.request.urlopen(f"{server[0]}gradio_api/deep_link?session_hash=deeplinkprobe", timeout=10) as response:
        link = json.loads(response.read())

    saved = (server[2] / "deep_links" / link / "state.json").read_text()
    assert "evil.example" not in saved


def test_a_long_reference_is_not_scored_and_says_so(server):
    reference = "Ein Hund rennt. " * 1_000  # 16,000 characters

    status, stream = raw_call(server[0], "translate", {"data": ["A dog runs.", "greedy", 1, 10, reference]})

    answer = completed(stream)
    assert "references of up to 10,000 characters and 200 lines are scored here" in answer[-2]
    assert answer[0] != "" and "Sentence BLEU" not in answer[1]


def test_heavy_requests_beyond_the_bound_are_refused_at_once_and_unread_work_stops(server, client, tmp_path):
    source = tmp_path / "long.txt"
    source.write_text(LONG_FILE * 4, encoding="utf-8")  # 2,000 lines, put where uploads go
    before = server[1].read_text()
    file_payload = {"path": str(server[2] / "long.txt"), "meta": {"_type": "gradio.FileData"}}
    shutil.copy(source, server[2] / "long.txt")
    for _ in range(2):  # two file jobs posted and never read
        status, _ = raw_call(
            server[0], "translate_file", {"data": [file_payload, None, "beam search", 8, 255]}, read=False
        )
        assert status == 200
    deadline = time.monotonic() + 30
    while "(2 long)" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the two file jobs never started"
        time.sleep(0.1)

    asked = time.monotonic()
    answer = client.predict(HEAVY, "beam search", 8, 255, "", api_name="/translate")
    refused_in = time.monotonic() - asked
    ordinary = client.predict("A dog runs.", "beam search", 4, 128, "", api_name="/translate")

    assert "as many long requests as it can" in answer[-1] and refused_in < 5
    assert ordinary[0] != "" and ordinary[-1] == ""
    deadline = time.monotonic() + 30  # nobody reads them: both stop within the grace (5 s) and a decoder step
    while "0 requests in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the unread file jobs kept running"
        time.sleep(0.2)
    assert "nobody reads a request's results any more" in server[1].read_text()[len(before) :]
