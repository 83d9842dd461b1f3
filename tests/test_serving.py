"""The serving room's face (`transformer_en_de/app/serving/serving.py`) and the bounds on connections its server keeps
(`server.py`'s h11 protocol), each on its own: a page of one button, a loopback uvicorn serving a two-route ASGI app.
The whole app behind them: tests/test_app_server.py."""

import json
import os
import socket
import threading
import time
from collections import Counter
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest
import uvicorn
from test_app_server import free_port

from benchmarks.load import Page, in_parallel
from transformer_en_de.app.serving import Limits, Serving, start_in_thread
from transformer_en_de.app.serving.server import bounded_protocol
from transformer_en_de.app.serving.serving import WORK

REQUEST_SECONDS = 0.5


def visitor(session: str = "visitor") -> SimpleNamespace:
    """What a callback reads of its `gr.Request` here."""
    return SimpleNamespace(session_hash=session)


def test_an_event_of_work_is_in_the_work_group_takes_its_inputs_as_sent_and_is_counted():
    serving = Serving(Limits(concurrent_jobs=7))
    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        work = serving.work(button.click, lambda value: value, [text], [text], api_name="go")
        other = button.click(lambda value: value, [text], [text], api_name="other")
    registered = demo.fns[work["id"]]  # what Gradio's queue runs the event with

    assert (registered.concurrency_id, registered.concurrency_limit) == (WORK, 7)
    assert registered.preprocess is False  # a value out of a control's range reaches the callback as sent
    assert serving.gate.counted == {work["id"]} and other["id"] not in serving.gate.counted


def test_an_admitted_callback_frees_its_sessions_call_when_it_ends():
    serving = Serving(Limits(calls_per_session=1))
    assert serving.gate.admit_session("visitor", "192.0.2.1") == ""
    assert "still running" in serving.gate.admit_session("visitor", "192.0.2.1")  # one call per session at a time

    with serving.admitted(visitor()) as arrived:
        assert arrived is not None and serving.arrival(visitor()) == arrived  # the time limit counts from the queue

    assert serving.gate.admit_session("visitor", "192.0.2.1") == ""


def test_side_work_nobody_reads_is_dropped_before_it_runs_and_read_side_work_runs():
    serving, ran = Serving(Limits(stream_wait_seconds=0.1)), []
    work = lambda: ran.append("work") or ("done",)  # noqa: E731

    assert serving.side_work(visitor(), work, ("dropped",)) == ("dropped",) and ran == []
    with serving.gate.readers.open("visitor"):  # the page's stream is open
        assert serving.side_work(visitor(), work, ("dropped",)) == ("done",) and ran == ["work"]


@pytest.fixture
def serve():
    """Serves a page with its `Serving` (queue and server as the app has them) on a loopback port; yields a function of
    (serving, demo, server options) that starts it and returns its port. The servers stop after the test."""
    servers = []

    def start(serving: Serving, demo, **options) -> int:
        serving.queue(demo)
        servers.append(serving.server(demo, css="", port=free_port(), **options))
        start_in_thread(servers[-1])
        return servers[-1].config.port

    yield start
    for server in servers:
        server.should_exit = True


def waited_for(condition, seconds: float) -> bool:
    """Whether `condition()` holds within `seconds` (asked every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_a_closed_pages_state_is_forgotten_and_an_open_pages_kept(monkeypatch, serve):
    # A page-like client notices it was closed at its heartbeat's next beat (a browser closes at once): beat often.
    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")
    serving = Serving(Limits(closed_session_seconds=0.5, memory_sweep_seconds=0.2))

    def shout(value: str, request: gr.Request) -> str:
        with serving.admitted(request):
            return value.upper()

    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        serving.work(button.click, shout, [text], [text], api_name="go")
    url = f"http://127.0.0.1:{serve(serving, demo)}/"
    left, staying = Page(url), Page(url)
    for page in (left, staying):
        assert page.ask(0, ["a dog"])["output"]["data"] == ["A DOG"]
    sessions = demo.state_holder.session_data  # what Gradio keeps of each page in memory
    assert {left.session, staying.session} <= set(sessions)

    left.close()
    assert waited_for(lambda: left.session not in sessions, 10) and staying.session in sessions
    answer = staying.ask(0, ["a cat"])
    assert answer.get("output", {}).get("data") == ["A CAT"], answer
    staying.close()


def test_every_call_within_the_limit_is_in_its_callback_at_once_none_held_in_gradios_queue(serve):
    # Past Gradio's own 40 calls at once, a visitor's call would wait in Gradio's first-come queue behind a class's
    # (where the scheduler cannot put it first): all 50 here must be in their callbacks together.
    calls = 50
    serving, together = Serving(Limits(threads=calls + 4, concurrent_jobs=calls)), threading.Barrier(calls)

    def meet(request: gr.Request) -> str:
        with serving.admitted(request):
            together.wait(timeout=30)  # broken (an error) unless every call is in a callback within 30 s
            return "met"

    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        serving.work(button.click, meet, None, [text], api_name="meet")
    url = f"http://127.0.0.1:{serve(serving, demo)}/"

    def page_meets() -> str:
        page = Page(url)
        try:
            return json.dumps(page.ask(0, []).get("output", {}).get("data"))
        finally:
            page.close()

    assert in_parallel(calls, page_meets) == Counter({'["met"]': calls})


def test_an_address_that_leaves_its_streams_unread_gets_no_side_work_until_it_reads_and_others_do(serve):
    serving, ran = Serving(Limits(stalled_send_seconds=0.5, stalled_streams_per_address=1)), []

    def answer(request: gr.Request) -> str:
        with serving.admitted(request):
            return "x" * 8_000_000  # far more than the socket's buffers hold: the stream's send waits for its reader

    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        serving.work(button.click, answer, None, [text], api_name="big")
    port = serve(serving, demo)
    session = "never-reads"
    body = {"data": [], "fn_index": 0, "session_hash": session}
    assert httpx.post(f"http://127.0.0.1:{port}/gradio_api/queue/join", json=body).status_code == 200
    stream = socket.socket()
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4_096)  # before connecting: the window it offers
    stream.connect(("127.0.0.1", port))
    stream.sendall(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    waited_for(lambda: serving.gate.stalls.stalled("127.0.0.1"), 20)
    assert serving.gate.stalls.stalled("127.0.0.1") == 1

    work = lambda: ran.append("work") or ("done",)  # noqa: E731
    for other, address in (("same address", "127.0.0.1"), ("elsewhere", "192.0.2.1")):
        assert serving.gate.admit_session(other, address, counted=False) == ""
    with serving.gate.readers.open("same address"), serving.gate.readers.open("elsewhere"):
        assert serving.side_work(visitor("same address"), work, ("dropped",)) == ("dropped",) and ran == []
        assert serving.side_work(visitor("elsewhere"), work, ("dropped",)) == ("done",)
        stream.close()  # the stream goes: nothing of the address is stalled any more
        waited_for(lambda: not serving.gate.stalls.stalled("127.0.0.1"), 10)
        assert serving.side_work(visitor("same address"), work, ("dropped",)) == ("done",)


def test_a_paced_event_is_refused_at_the_front_past_its_addresss_bucket_and_other_addresses_and_events_go_on(serve):
    serving = Serving()

    def read(request: gr.Request) -> str:
        with serving.admitted(request):
            return "the board"

    with gr.Blocks() as demo:
        board, show, other = gr.Markdown(), gr.Button(), gr.Button()
        serving.paced(serving.work(show.click, read, None, [board], api_name="leaderboard"), 2, 0.01)
        serving.work(other.click, read, None, [board], api_name="other")
    url = f"http://127.0.0.1:{serve(serving, demo, forwarded_allow_ips='127.0.0.1')}/gradio_api/queue/join"

    def join(fn_index: int, address: str) -> httpx.Response:
        body = {"data": [], "fn_index": fn_index, "session_hash": os.urandom(8).hex()}
        return httpx.post(url, json=body, headers={"X-Forwarded-For": address})

    assert [join(0, "192.0.2.1").status_code for _ in range(2)] == [200, 200]  # the burst
    refused = join(0, "192.0.2.1")
    assert refused.status_code == 429 and "/leaderboard" in refused.text and "\n" not in refused.text.strip()
    assert join(0, "198.51.100.7").status_code == 200  # another address: its own bucket
    assert join(1, "192.0.2.1").status_code == 200  # another event of the same address: not paced


# ------------------------------------------------------------------------------------------ bounds on connections


async def held_or_answered(scope, receive, send):
    """`/held`: an answer begun and never ended (an event stream); anything else: the whole body read, then "ok"."""
    if scope["type"] != "http":
        return
    start = {"type": "http.response.start", "status": 200, "headers": []}
    if scope["path"] == "/held":
        await send(start)
        await send({"type": "http.response.body", "body": b"streaming", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        return
    message = await receive()
    while message["type"] == "http.request" and message.get("more_body"):
        message = await receive()
    if message["type"] == "http.request":
        await send(start)
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def bounded_server():
    """Serves `held_or_answered` with the app's protocol on a loopback port, at most 3 connections, each request whole
    within the seconds given; yields a function of those seconds that starts it and returns its port."""
    servers = []

    def start(request_seconds: float) -> int:
        port = free_port()
        config = uvicorn.Config(
            held_or_answered, host="127.0.0.1", port=port, log_level="warning",
            http=bounded_protocol(3, request_seconds), timeout_keep_alive=30,
        )  # fmt: skip
        servers.append(uvicorn.Server(config))
        start_in_thread(servers[-1])
        return port

    yield start
    for server in servers:
        server.should_exit = True


def connect(port: int, sent: bytes = b"") -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(sent)
    return connection


def closed(connection: socket.socket, within: float = 5.0) -> bool:
    """Whether the server closes `connection` within `within` seconds (whatever it answered first)."""
    connection.settimeout(within)
    try:
        while chunk := connection.recv(4096):
            if b"200 OK" in chunk:
                return False
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def received_until(connection: socket.socket, marker: bytes) -> bytes:
    """Everything `connection` receives until `marker` has come (or the server closes it)."""
    received = b""
    while marker not in received and (chunk := connection.recv(4096)):
        received += chunk
    return received


def answered(port: int) -> bool:
    with connect(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") as connection:
        return connection.recv(4096).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "sent",
    [b"GET / HTTP/1.1\r\nHost: x\r\n", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nA dog"],
    ids=["headers never finished", "body never finished"],
)
def test_a_request_not_all_in_within_its_deadline_is_closed(bounded_server, sent):
    port = bounded_server(REQUEST_SECONDS)
    started = time.monotonic()
    with connect(port, sent) as connection:
        assert closed(connection)
    assert REQUEST_SECONDS <= time.monotonic() - started < REQUEST_SECONDS + 4
    assert answered(port)


def test_past_the_cap_the_oldest_idle_connection_makes_room_and_an_answer_in_progress_is_never_cut(bounded_server):
    port = bounded_server(30.0)  # no deadline passes during the test: only the cap closes a connection
    held = connect(port, b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
    begun = received_until(held, b"streaming")  # the head and the first chunk may come as two reads
    assert begun.startswith(b"HTTP/1.1 200")  # being answered: the oldest, and not to be cut
    idle = [connect(port) for _ in range(2)]  # the cap (3) reached
    time.sleep(0.2)

    assert answered(port)  # a fourth connection: the oldest idle one made room
    assert closed(idle[0], within=2.0) and not closed(idle[1], within=0.3)
    held.settimeout(0.3)
    with pytest.raises(TimeoutError):  # still open, its answer going on
        held.recv(4096)
    for connection in (held, *idle):
        connection.close()
