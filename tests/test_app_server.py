"""The real app server (`python app.py`, offline, three tiny models) called through gradio_client: every named
endpoint, bad input answered in one line, the upload cap, one request per visitor, a closed client cancels."""

import asyncio
import contextlib
import csv
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import ROOT
from gradio_client import Client, handle_file
from tiny_marian import build_tiny_marian
from tiny_models import build_tiny_t5

from benchmarks.load import Held
from transformer_en_de import evaluation
from transformer_en_de.app import corpus_report, translation, translators
from transformer_en_de.app.serving.limits import Budget, Limits

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
    folder = tmp_path_factory.mktemp("server")
    # PyTorch: requests are cut at a decoder step (CTranslate2 only between batches)
    with app_process(ours, folder, comparisons=(marian, t5)) as (port, log):
        yield f"http://127.0.0.1:{port}/", log, folder / "cache"


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


def test_the_log_names_the_pages_url_once_the_server_is_ready(server):
    url, log, _ = server
    assert f"Uvicorn running on {url.rstrip('/')}" in log.read_text()


def test_the_api_is_served_as_mcp_tools_and_translate_answers_through_an_mcp_client(client, server):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    url = server[0]
    with urllib.request.urlopen(f"{url}gradio_api/mcp/schema", timeout=60) as response:
        tools = {tool["name"]: tool for tool in json.load(response)}
    assert "translate" in tools

    async def translate_through_mcp():
        async with streamablehttp_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {tool.name for tool in (await session.list_tools()).tools}
                arguments = dict(text="A dog runs.", decoding="greedy", num_beams=1, max_new_tokens=20, reference="")
                return listed, await session.call_tool("translate", arguments)

    listed, result = asyncio.run(translate_through_mcp())
    texts = [part.text for part in result.content if part.type == "text"]
    assert "translate" in listed and not result.isError, texts
    assert texts and texts[0].strip(), texts  # our model's translation, first of the outputs
    # A file inline (a data: URL) would be written to disk by Gradio's MCP server before any admission: refused.
    call = {"name": "translate_file", "arguments": {"source_file": "data:text/plain;base64,QSBkb2cgcnVucy4="}}
    inline = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    request = urllib.request.Request(f"{url}gradio_api/mcp/", json.dumps(inline).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 422 and "takes no file inline" in refused.value.read().decode()


def test_translate_endpoint_answers_every_model(client, translators_here, model_dirs):
    ours, marian, t5 = translators_here
    reference = "Ein Hund rennt im Park. Die Katze schläft."

    answer = client.predict(SENTENCES, "beam search", 2, 10, reference, api_name="/translate")

    context = translation.RequestContext(ours, [marian, t5])
    expected = translation.translate_text(SENTENCES, "beam search", 2, 10, reference, context=context)
    assert len(answer) == 2 * 3 + 1 and answer[-1] == ""
    for number, output in enumerate(expected.outputs):
        assert answer[2 * number] == output.translation
        assert f"**Tokens generated** {output.run.new_tokens}" in answer[2 * number + 1]
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


def start_long_file(server, client, tmp_path, running: int = 1) -> Client:
    """A visitor whose file request is running (the status says `running` are) when this returns."""
    source = tmp_path / "long.txt"
    source.write_text(LONG_FILE, encoding="utf-8")
    visitor = Client(server[0], verbose=False)
    visitor.submit(handle_file(source), None, "beam search", 8, 255, api_name="/translate_file")
    deadline = time.monotonic() + 30
    while f"{running} request{'s' if running > 1 else ''} in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the long request never started"
        time.sleep(0.1)
    return visitor


def test_one_request_per_visitor(server, client, tmp_path):
    visitor = start_long_file(server, client, tmp_path)

    # Refused at the front, before Gradio's queue, at once (429 and one line, which gradio_client does not show).
    with pytest.raises(Exception, match="429 Too Many Requests"):
        visitor.predict("A dog runs.", "greedy", 1, 10, "", api_name="/translate")
    visitor.close()  # cancels the file request
    deadline = time.monotonic() + 30
    while "0 requests in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the closed client's request kept running"
        time.sleep(0.2)


def test_closed_client_cancels_its_request(server, client, tmp_path):
    visitor = start_long_file(server, client, tmp_path)

    visitor.close()  # ends its heartbeat (the front cancels the page's request) and its event stream

    deadline = time.monotonic() + 30
    while "0 requests in progress" not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, "the closed client's request kept running"
        time.sleep(0.2)
    log = server[1].read_text()
    assert "a visitor left; their request was cancelled" in log or "nobody reads a request's results any more" in log


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
    assert rows[0][5] == "Transformer (ours) confidence"
    for column in (2, 3, 4):
        scores = evaluation.corpus_scores([row[column] for row in rows[1:]], [row[6] for row in rows[1:]])
        assert f"{scores['bleu']:.2f} | {scores['chrf']:.2f}" in summary
    assert "of 3 sentences flagged as out of its depth" in summary
    assert list((server[2] / "translations").rglob("source.de.tsv"))  # written into Gradio's cache, which it cleans
    # The first lines beside their translations and our model's confidence, for the page.
    table = first_lines.splitlines()
    assert table[0] == "| Line | English | " + " | ".join(rows[0][2:6]) + " |" and len(table) == 2 + 3
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
    # the record's row, under the decoding the record names (no length penalty recorded: the beams alone)
    assert lines[2].startswith(r"| Transformer \(ours\) | test 2016 flickr | beam 4 | its record")
    assert r"|  | 12\.34 | 45\.60 |" in lines[2]
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
    try:
        with urllib.request.urlopen(
            f"{url}gradio_api/call/{api}/{json.loads(answer)['event_id']}", timeout=120
        ) as stream:
            return 200, stream.read().decode()
    except urllib.error.HTTPError as error:  # the call was taken; its stream was refused
        return error.code, error.read().decode()


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
    assert status == 200 and f"The {field} must be a string of text, not {kind}" in answer[-1]
    assert answer[-1].count("\n") == 0 and no_traceback_since(server[1], before)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "1e400", "NaN"])
@pytest.mark.parametrize("slider", [2, 3])
def test_infinite_slider_values_are_a_message(server, slider, literal):
    before = server[1].read_text()
    values = ['"A dog runs."', '"beam search"', "2", "10", '""']
    values[slider] = literal

    status, stream = raw_call(server[0], "translate", ('{"data": [' + ", ".join(values) + "]}").encode())

    answer = completed(stream)
    name = "Beams" if slider == 2 else "Maximum new tokens"
    assert status == 200 and f"{name} must be a whole number" in answer[-1] and answer[0] == ""
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


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"not json", "JSON decode error"),
        (b'{"data": "A dog runs."}', "Input should be a valid list"),
        (b"[1, 2]", "Input should be a valid dictionary"),
    ],
)
def test_a_body_that_is_no_call_is_refused_by_gradio(server, client, body, expected):
    before = server[1].read_text()

    status, answer = raw_call(server[0], "translate", body)

    assert status == 422 and expected in json.dumps(json.loads(answer)["detail"])  # FastAPI's shape: no call started
    assert no_traceback_since(server[1], before) and "0 requests in progress" in client.predict(api_name="/status")


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


@pytest.mark.parametrize("where", ["a-folder", "missing.txt"])
def test_a_file_payload_that_is_no_upload_is_a_message(server, where):
    (server[2] / "a-folder").mkdir(exist_ok=True)
    before = server[1].read_text()
    payload = {"path": str(server[2] / where), "meta": {"_type": "gradio.FileData"}}

    status, answer = raw_call(server[0], "translate_file", {"data": [payload, None, "greedy", 1, 8]})

    assert status == 422 and "must be a file uploaded to this server" in json.loads(answer)["error"]
    assert no_traceback_since(server[1], before)


@pytest.mark.parametrize(
    "payload, expected",
    [
        (42, "must be null or the object /gradio_api/upload describes"),
        ("long.txt", "must be null or the object /gradio_api/upload describes"),
        ({"name": "x"}, "must be null or the object /gradio_api/upload describes"),
        ({"path": "/etc/hostname"}, "A file value must be a file uploaded to this server"),
        ({"path": "../../etc/hostname"}, "A file value must be a file uploaded to this server"),
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
    notice = completed(stream)[-1]
    assert "Decoding must be one of" in notice and "evil.example" not in notice

    upload = tmp_path / "[click here](http:evil.example).txt"
    upload.write_bytes(b"\x00binary")
    _, summary = client.predict(handle_file(upload), None, "greedy", 1, 8, api_name="/translate_file")[:2]
    assert r"\[click here\]\(httpevil\.example\)\.txt" in summary and "[click here](" not in summary  # Gradio drops ":"


def test_deep_links_are_refused_so_no_visitor_text_is_saved(server, client):
    secret = "A dog runs past [a link](http://evil.example/x)."
    body = {"data": [secret, "greedy", 1, 10, secret], "session_hash": "deeplinkprobe"}

    status, stream = raw_call(server[0], "translate", body)
    completed(stream)
    with pytest.raises(urllib.error.HTTPError) as refusal:
        urllib.request.urlopen(f"{server[0]}gradio_api/deep_link?session_hash=deeplinkprobe", timeout=10)

    assert refusal.value.code == 404 and "no deep links" in refusal.value.read().decode()
    assert not list(server[2].rglob("state.json"))


def test_a_long_reference_is_not_scored_and_says_so(server):
    reference = "Ein Hund rennt. " * 1_000  # 16,000 characters

    status, stream = raw_call(server[0], "translate", {"data": ["A dog runs.", "greedy", 1, 10, reference]})

    answer = completed(stream)
    assert "references of up to 10,000 characters and 200 lines are scored here" in answer[-1]
    assert answer[0] != "" and "Sentence BLEU" not in answer[1]


def test_heavy_requests_beyond_the_bound_are_refused_at_once(server, client, tmp_path):
    visitors = [start_long_file(server, client, tmp_path, running=n + 1) for n in range(2)]

    asked = time.monotonic()
    answer = client.predict(HEAVY, "beam search", 8, 255, "", api_name="/translate")
    refused_in = time.monotonic() - asked
    ordinary = client.predict("A dog runs.", "beam search", 4, 128, "", api_name="/translate")

    assert "as many long requests as it can" in answer[-1] and refused_in < 5
    assert ordinary[0] != "" and ordinary[-1] == ""
    for visitor in visitors:
        visitor.close()
    wait_for_status(client, "0 requests in progress", "the closed clients' requests kept running")


def test_a_raw_call_is_run_only_when_read_and_stops_when_nobody_reads_it(server, client, tmp_path):
    shutil.copy(write_long(tmp_path), server[2] / "long.txt")
    payload = {"path": str(server[2] / "long.txt"), "meta": {"_type": "gradio.FileData"}}
    before = server[1].read_text()
    body = {"data": [payload, None, "beam search", 8, 255]}

    status, event = raw_call(server[0], "translate_file", body, read=False)  # posted, never read
    time.sleep(1)
    # Taken, not run: it waits for a reader (a second here), and is dropped unstarted after two.
    assert status == 200 and "0 requests in progress" in client.predict(api_name="/status")

    status, event = raw_call(server[0], "translate_file", body, read=False)
    reader = urllib.request.urlopen(f"{server[0]}gradio_api/call/translate_file/{json.loads(event)['event_id']}")
    wait_for_status(client, "1 request in progress", "the read call never started")
    reader.close()  # the reader goes away: within the grace (5 s) and a decoder step, the work stops
    wait_for_status(client, "0 requests in progress", "the unread file job kept running")
    assert "nobody reads a request's results any more" in server[1].read_text()[len(before) :]


def write_long(folder):
    source = folder / "long.txt"
    source.write_text(LONG_FILE * 4, encoding="utf-8")  # 2,000 lines
    return source


def wait_for_status(client, words: str, failure: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while words not in client.predict(api_name="/status"):
        assert time.monotonic() < deadline, failure
        time.sleep(0.2)


@pytest.mark.parametrize(
    "route, body, expected",
    [
        ("call/load_example", {"data": [99]}, "/load_example takes an example number from 0 to 5; this call sent 99"),
        ("call/no_such_endpoint", {"data": []}, "This app has no event /no_such_endpoint; its API endpoints are"),
        ("queue/join", {"data": [], "fn_index": 999, "session_hash": "x"}, "This app has no event fn_index 999"),
        ("queue/join", {"data": [], "fn_index": -1, "session_hash": "x"}, "This app has no event fn_index -1"),
        ("call/translate", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ("queue/join", b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    ],
)
def test_a_call_the_page_has_no_event_for_is_one_line(server, route, body, expected):
    before = server[1].read_text()
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    call = urllib.request.Request(
        f"{server[0]}gradio_api/{route}", data=data, headers={"Content-Type": "application/json"}
    )

    with pytest.raises(urllib.error.HTTPError) as refusal:
        urllib.request.urlopen(call, timeout=30)

    message = json.loads(refusal.value.read())["error"]
    assert refusal.value.code in (404, 422) and expected in message and "\n" not in message
    assert no_traceback_since(server[1], before)


# ----------------------------------------------------------------------------------- server files through file values


def post(url: str, route: str, body: dict) -> tuple[int, str]:
    """POST a JSON body to /gradio_api/<route>; (status, answer)."""
    call = urllib.request.Request(
        f"{url}gradio_api/{route}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(call, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def server_files(cache) -> list[str]:
    """Paths a raw client may name to make the server read a file that is no upload: absolute and relative server
    files, devices, a link in the upload folder that points out of it, a file in the upload folder over the cap."""
    (cache / "link.txt").unlink(missing_ok=True)
    (cache / "link.txt").symlink_to("/etc/hostname")
    (cache / "huge.txt").write_text("A dog runs.\n" * (Limits().max_file_bytes // 12 + 1))
    return [
        "/etc/passwd",
        "app.py",
        ".git/config",
        "/proc/self/status",
        "/etc/hostname",
        "/dev/zero",
        "/dev/urandom",
        str(cache / "link.txt"),
        str(cache / "huge.txt"),
        f"{cache}/../../../etc/hostname",
        "http://127.0.0.1:9/x",
    ]


def test_no_call_makes_the_server_read_a_file_that_is_no_upload_whatever_route_or_fn_index(server):
    url, log, cache = server
    before = log.read_text()
    fn_indices = [None, *range(12)]
    for path in server_files(cache):
        value = {"path": path, "meta": {"_type": "gradio.FileData"}}
        bodies = [  # the file value where a file goes, where a text goes, and deep inside another value
            ("call/translate_file", {"data": [value, None, "greedy", 1, 1]}),
            ("call/translate", {"data": [value, "greedy", 1, 1, ""]}),
            ("call/translate", {"data": ["A dog.", "greedy", 1, 1, {"x": [value]}]}),
            ("call/v2/translate_file", {"source_file": value, "reference_file": None}),
            ("queue/join", {"data": [value, None, "greedy", 1, 1], "session_hash": "reader"}),
            ("run/predict", {"data": [value, None, "greedy", 1, 1], "session_hash": "reader"}),  # the page's route
        ]
        for route, body in bodies:
            for fn_index in fn_indices:
                sent = dict(body, **({} if fn_index is None else {"fn_index": fn_index}))
                status, answer = post(url, route, sent)
                message = json.loads(answer)["error"]
                assert status in (404, 422) and "\n" not in message, (path, route, fn_index, status, answer)
    assert "Traceback" not in log.read_text()[len(before) :]
    with urllib.request.urlopen(f"{url}config", timeout=30) as response:  # the server still answers
        assert response.status == 200


def test_a_call_whose_fn_index_names_another_event_than_its_path_is_refused(server, client):
    index = next(number for number, info in enumerate(client.config["dependencies"]) if info["api_name"] == "translate")

    status, answer = post(server[0], "call/translate_file", {"data": ["A dog.", "greedy", 1, 1, ""], "fn_index": index})

    assert status == 422 and "another event" in json.loads(answer)["error"]


def test_the_documented_v2_call_works_and_a_wrong_one_is_one_line(server):
    with urllib.request.urlopen(f"{server[0]}gradio_api/info", timeout=30) as response:
        snippet = json.load(response)["named_endpoints"]["/translate"]["code_snippets"]["bash"]
    documented = json.loads(snippet.split("-d '", 1)[1].split("'", 1)[0])  # the body /gradio_api/info prints

    status, answer = post(server[0], "call/v2/translate", documented)
    with urllib.request.urlopen(f"{server[0]}gradio_api/call/translate/{json.loads(answer)['event_id']}") as stream:
        translated = completed(stream.read().decode())[0]
    wrong_status, wrong = post(server[0], "call/v2/translate", {"data": documented})

    assert status == 200 and translated
    assert wrong_status == 422 and "send its parameters by name: text, decoding" in json.loads(wrong)["error"]


def test_an_unknown_sessions_stream_and_a_multi_range_download_are_one_line(server):
    url, log, cache = server
    before = log.read_text()
    for _ in range(300):
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(f"{url}gradio_api/queue/data?session_hash=nobody-{_}", timeout=30)
        assert refusal.value.code == 404 and "\n" not in json.loads(refusal.value.read())["error"]
    part = b'--B\r\nContent-Disposition: form-data; name="files"; filename="r.txt"\r\n\r\n' + b"0123456789" * 10
    upload = urllib.request.Request(
        f"{url}gradio_api/upload",
        data=part + b"\r\n--B--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=B"},
    )
    with urllib.request.urlopen(upload, timeout=30) as response:
        [stored] = json.load(response)
    ranged = urllib.request.Request(f"{url}gradio_api/file={stored}", headers={"Range": "bytes=0-0,5-9"})
    with urllib.request.urlopen(ranged, timeout=30) as response:
        assert response.status == 200 and response.read() == b"0123456789" * 10
    assert len(log.read_text()) - len(before) < 2_000 and "Traceback" not in log.read_text()[len(before) :]


@pytest.mark.parametrize(
    "part, expected",
    [
        # A text field where a file goes: Gradio's upload route fails on it; the guard answers in one line.
        (b'Content-Disposition: form-data; name="files"\r\n\r\nA dog runs.', "each with a file name"),
        # A part with no name at all: Starlette's form parser refuses it in one line of its own.
        (b"Content-Type: text/plain\r\n\r\nA dog runs.", '"name" must be provided'),
    ],
)
def test_an_upload_that_is_no_file_is_refused_in_one_line(server, part, expected):
    url, log, _ = server
    before = log.read_text()
    upload = urllib.request.Request(
        f"{url}gradio_api/upload",
        data=b"--B\r\n" + part + b"\r\n--B--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=B"},
    )
    with pytest.raises(urllib.error.HTTPError) as refusal:
        urllib.request.urlopen(upload, timeout=30)
    answer = refusal.value.read().decode()
    assert refusal.value.code == 400 and expected in answer and "\n" not in answer
    assert "Traceback" not in log.read_text()[len(before) :]


# ------------------------------------------------------------------------------------------------ attacks, small scale


@pytest.fixture(scope="module")
def small_server(model_dirs):
    """The app's server in this process (our model alone) with small limits, so that each attack shows at a small
    scale; yields (url, the app)."""
    from conftest import start_in_thread

    import app

    small = Limits(
        new_sessions_per_address_per_second=0.5,
        new_sessions_per_address_burst=12,
        uploads_per_address=3,
        upload_seconds=3.0,
    )
    translation_app = app.build_app(str(model_dirs[0]), [], limits=small, backend="torch")
    port = free_port()
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    yield f"http://127.0.0.1:{port}/", translation_app
    server.should_exit = True


def flood(target, threads: int = 4) -> tuple[threading.Event, list]:
    """`threads` threads calling `target()` until the event is set; their results in the list."""
    stop, results = threading.Event(), []

    def loop():
        while not stop.is_set():
            results.append(target())

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    return stop, results


def test_calls_posted_and_never_read_neither_fill_a_queue_nor_delay_a_visitor(small_server):
    url, _ = small_server
    visitor = Client(url, verbose=False)
    body = json.dumps({"data": ["A dog runs in the park.", "beam search", 8, 255, ""]}).encode()

    stop, posted = flood(lambda: raw_call(url, "translate", body, read=False)[0])
    answers = [visitor.predict("A dog runs.", "beam search", 4, 20, "", api_name="/translate") for _ in range(3)]
    stop.set()

    # The address's calls without a session: a few taken at once, then at its rate (each dropped unread after two
    # seconds), the rest refused at once; the visitor's page session, new during the flood, was not.
    assert len(posted) > 64 and set(posted) == {200, 429}
    assert all(answer[0] and answer[-1] == "" for answer in answers), answers
    assert "0 requests in progress" in visitor.predict(api_name="/status")


def test_uploads_beyond_the_quota_are_refused_in_one_line_and_expire(small_server):
    import httpx

    url, _ = small_server

    def upload(number: int):
        return httpx.post(f"{url}gradio_api/upload", files={"files": (f"u{number}.txt", b"A dog runs.\n")})

    kept = [upload(number) for number in range(3)]
    refused = upload(3)

    assert [response.status_code for response in kept] == [200] * 3
    assert refused.status_code == 429 and "the most it may keep" in refused.json()["error"]
    time.sleep(3.5)  # the uploads' lifetime here
    again = upload(4)
    assert again.status_code == 200
    assert not any(os.path.exists(response.json()[0]) for response in kept)  # deleted, not only forgotten


def test_a_stream_of_tiny_requests_does_not_starve_a_longer_one(small_server):
    url, _ = small_server
    visitor = Client(url, verbose=False)
    sessions = iter(f"tiny-{number}" for number in range(4))
    local = threading.local()

    def tiny():
        local.session = getattr(local, "session", None) or next(sessions)  # one session per thread
        return raw_call(url, "translate", {"data": ["A dog.", "greedy", 1, 2, ""], "session_hash": local.session})[0]

    stop, tiny_answers = flood(tiny)
    answer = visitor.predict(
        "A man in a blue jacket is repairing a bicycle on the street.", "beam search", 4, 128, "", api_name="/translate"
    )
    stop.set()

    assert len(tiny_answers) > 10 and answer[0] and "time limit" not in answer[1], (tiny_answers[:5], answer[:3])


# Last of the small server's tests: it spends the new sessions the others need.
def test_new_sessions_beyond_their_rate_are_refused_in_one_line_and_a_running_visitor_keeps_its_own(
    small_server, tmp_path
):
    url, _ = small_server
    source = tmp_path / "lines.txt"
    source.write_text("A dog runs in the park.\n" * 40, encoding="utf-8")
    visitor = Client(url, verbose=False)
    job = visitor.submit(handle_file(source), None, "greedy", 1, 20, api_name="/translate_file")
    body = json.dumps({"data": ["A dog.", "greedy", 1, 4, ""]}).encode()  # no session: a new one each

    answers = [raw_call(url, "translate", body) for _ in range(30)]

    refused = [answer for status, answer in answers if status == 429]
    assert refused
    assert all("Too many new sessions from this address" in json.loads(answer)["error"] for answer in refused)
    path, summary, _ = job.result(timeout=120)
    assert path and "⚠️ Cancelled" not in summary


def test_a_call_that_waited_for_a_free_callback_keeps_to_its_time_limit(model_dirs, tmp_path):
    # One callback at a time: a visitor's text waits in Gradio's queue while a long file job runs. Its time limit
    # (1 s here) counts from when it came, not from when its callback began: it answers at once, and says so.
    from conftest import start_in_thread

    import app

    one_at_a_time = Limits(
        concurrent_jobs=1, text=Budget(cpu_seconds=8.0, seconds=1.0), file=Budget(cpu_seconds=10_000, seconds=120)
    )
    translation_app = app.build_app(str(model_dirs[0]), [], limits=one_at_a_time, backend="torch")
    port = free_port()
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    url = f"http://127.0.0.1:{port}/"
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"A man number {n} walks with {n % 7 + 2} dogs in the park.\n" for n in range(200)))
    try:
        long_job = Client(url, verbose=False).submit(
            handle_file(source), None, "beam search", 8, 60, api_name="/translate_file"
        )
        while "1 request in progress" not in Client(url, verbose=False).predict(api_name="/status"):
            time.sleep(0.1)
        asked = time.monotonic()
        answer = Client(url, verbose=False).predict("A dog runs.", "beam search", 4, 20, "", api_name="/translate")
        waited = time.monotonic() - asked
        path, _, _ = long_job.result(timeout=300)
    finally:
        server.should_exit = True

    assert waited > 1.0 and path  # it waited for the file job's callback, which went on to the end
    assert "time limit" in answer[1], answer[1]


def test_slow_connections_leave_a_visitor_room_under_a_low_soft_descriptor_limit(model_dirs, tmp_path):
    # The server starts with a soft limit of 400 files (its hard limit 4,096): 600 connections that never finish their
    # headers would take them all, were the soft limit not raised to the hard one (`server.raise_descriptor_limit`;
    # uvicorn has no deadline on headers: serving/__init__.py).
    slow = []
    with app_process(model_dirs[0], tmp_path, backend="auto", max_files=(400, 4_096)) as (port, log):
        try:
            for _ in range(600):
                connection = socket.create_connection(("127.0.0.1", port))
                connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
                slow.append(connection)

            visitor = {"data": ["A dog runs.", "greedy", 1, 10, ""]}
            status, stream = raw_call(f"http://127.0.0.1:{port}/", "translate", visitor)

            assert status == 200 and completed(stream)[0]
        finally:
            for connection in slow:
                connection.close()
    text = log.read_text()
    assert "Too many open files" not in text and "Traceback" not in text


@contextlib.contextmanager
def app_process(model_dir, folder, *, comparisons=(), backend="torch", max_files=None, offline=True, **env):
    """`python app.py` with our model and `comparisons` (none by default) on a free loopback port, its log and Gradio's
    cache in `folder`, offline unless `offline` is False (HF_HUB_OFFLINE, as a developer runs it), `env` added to the
    environment last (and nothing of a Space's or a proxy's unless given), at most `max_files` descriptors (or a
    (soft, hard) pair); yields (port, log)."""
    port, log = free_port(), folder / "app.log"
    command = [sys.executable, str(ROOT / "app.py"), "--model", str(model_dir)]
    command += ["--comparison-models", *map(str, comparisons), "--port", str(port), "--backend", backend]
    environment = {key: value for key, value in os.environ.items() if key not in ("SPACE_ID", "FORWARDED_ALLOW_IPS")}
    environment.update(HF_HUB_OFFLINE="1" if offline else "0", OMP_NUM_THREADS="1")
    environment.update(GRADIO_TEMP_DIR=str(folder / "cache"), **env)
    limits = (max_files, max_files) if isinstance(max_files, int) else max_files  # (soft, hard)
    limit = None if limits is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits))
    with open(log, "w") as output:
        process = subprocess.Popen(
            command, env=environment, stdout=output, stderr=subprocess.STDOUT, text=True, preexec_fn=limit
        )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/", process, log)
        yield port, log
    finally:
        process.terminate()
        process.wait(timeout=20)


CAPTIONS = [
    "A dog runs in the park.",
    "Two men are playing football on the grass.",
    "A woman reads a book on a bench.",
    "A little girl eats an ice cream.",
    "People walk along a busy street.",
]


def test_a_class_behind_one_school_address_is_served(model_dirs, tmp_path):
    # 24 learners behind one address (a school's NAT), each with the page open (a gradio_client session), each
    # translating five captions at the page's defaults: every request is answered, none cancelled or refused.
    answers, failures = [], []

    def learner():
        try:
            visitor = Client(url, verbose=False)
            for caption in CAPTIONS:
                result = visitor.predict(caption, "beam search", 4, 128, "", api_name="/translate")
                (answers if result[0] and not result[-1] else failures).append(result[-1] or result[0])
        except Exception as error:  # noqa: BLE001 - a refused or cancelled call is what this test looks for
            failures.append(repr(error))

    with app_process(model_dirs[0], tmp_path, backend="auto") as (port, log):
        url = f"http://127.0.0.1:{port}/"
        learners = [threading.Thread(target=learner) for _ in range(24)]
        for thread in learners:
            thread.start()
        for thread in learners:
            thread.join(timeout=600)
    assert not failures and len(answers) == 24 * len(CAPTIONS), failures[:3]
    assert "Traceback" not in log.read_text()


def test_a_thousand_unread_heartbeats_of_one_address_do_not_lock_out_a_visitor(model_dirs, tmp_path):
    # Heartbeat responses never end: 1,000 of them held open would each be a request in progress and a connection
    # (uvicorn's `limit_concurrency` counts both). The attacker is another loopback address (127.0.0.2) than the
    # visitor; past its share of open responses it is answered at once.
    request = "GET /gradio_api/heartbeat/held-{} HTTP/1.1\r\nHost: x\r\n\r\n".format
    with app_process(model_dirs[0], tmp_path) as (port, log):
        held = Held(f"http://127.0.0.1:{port}/", 1_000, lambda number: request(number).encode(), peer="127.0.0.2")
        try:
            assert len(held.opened) == 1_000  # never read

            visitor = {"data": ["A dog runs.", "greedy", 1, 10, ""]}
            status, stream = raw_call(f"http://127.0.0.1:{port}/", "translate", visitor)

            assert status == 200 and completed(stream)[0]
            refused = 0
            for connection in held.opened[-100:]:  # those past the address's share were answered at once, in one line
                connection.settimeout(30)
                refused += connection.recv(4096).startswith(b"HTTP/1.1 429")
            assert refused == 100
        finally:
            held.states()  # closes them
    text = log.read_text()
    assert "Traceback" not in text and len(text) < 20_000


def upload_from(port: int, peer: str, forwarded_for: str | None, number: int) -> int:
    """One small upload over a connection from `peer` (a loopback address), with an X-Forwarded-For header as a proxy
    sends it; the status."""
    part = b'--B\r\nContent-Disposition: form-data; name="files"; filename="u.txt"\r\n\r\n'
    body = part + f"A dog {number}.".encode() + b"\r\n--B--\r\n"
    headers = "POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
    headers += f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    headers += f"X-Forwarded-For: {forwarded_for}\r\n" if forwarded_for else ""
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(peer, 0)) as connection:
        connection.sendall(headers.encode() + b"\r\n" + body)
        return int(connection.recv(64).split()[1])


@pytest.mark.parametrize("proxy", ["the trusted proxy", "another peer on a Space"])
def test_forwarded_for_is_trusted_only_from_the_proxys_own_address(model_dirs, tmp_path, proxy):
    # The proxy connects from one address (here 127.0.0.2, not loopback's usual 127.0.0.1) and appends each visitor's
    # address to X-Forwarded-For; what a visitor sent itself comes before it and is not taken for theirs. From any
    # other peer the header is ignored, on a Space too (SPACE_ID set): a client that sends it straight to the app is
    # its own connection's address.
    quota = Limits().uploads_per_address
    trusted = proxy == "the trusted proxy"
    env = {"FORWARDED_ALLOW_IPS": "127.0.0.2"} if trusted else {"SPACE_ID": "someone/transformer-en-de"}
    with app_process(model_dirs[0], tmp_path, **env) as (port, _):
        first = [upload_from(port, "127.0.0.2", f"198.51.100.{n}, 203.0.113.7", n) for n in range(quota + 1)]
        second = upload_from(port, "127.0.0.2", "203.0.113.8", quota + 1)
    assert first[:quota] == [200] * quota and first[quota] == 429  # forged first hops do not make new visitors
    assert second == (200 if trusted else 429)  # from another peer, one peer is one address


def wait_until_up(url: str, process, log, timeout: float = 240) -> None:
    """Until `python app.py` answers its page; fails if it exits, or after `timeout` (a generous bound: start-up speed
    is measured in benchmarks/)."""
    started = time.monotonic()
    while True:
        if process.poll() is not None:
            pytest.fail(f"app.py exited with {process.returncode}:\n{log.read_text()}")
        if time.monotonic() - started > timeout:
            pytest.fail(f"app.py did not answer within {timeout:g} s")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
