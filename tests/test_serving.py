"""The serving front's face (`Serving`, transformer_en_de/app/serving/server.py) and the bounds its server keeps, each
on its own: a page of one button served as the app serves its page. The whole app behind them: test_app_server.py."""

import argparse
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
from conftest import start_in_thread
from test_app_server import free_port

from benchmarks.load import Page, in_parallel
from transformer_en_de.app.serving import Budget, Limits, Serving
from transformer_en_de.app.serving.guard import Refused
from transformer_en_de.app.serving.limits import RateLimit

REQUEST_SECONDS = 0.5


def visitor(session: str = "visitor") -> SimpleNamespace:
    """What a callback reads of its `gr.Request` here."""
    return SimpleNamespace(session_hash=session)


def refusal(check, *args, **options) -> str:
    """The line a check of the front refuses a call with ("" if it admits the call)."""
    try:
        check(*args, **options)
    except Refused as refused:
        return refused.args[1]
    return ""


def test_each_limit_is_a_flag_whose_default_the_environment_sets(monkeypatch, capsys):
    monkeypatch.setenv("LIMIT_HEAVY_JOBS", "3")
    parser = argparse.ArgumentParser()
    Limits.add_flags(parser)
    assert Limits.from_args(parser.parse_args([])) == Limits(heavy_jobs=3)
    chosen = Limits.from_args(parser.parse_args(["--text_seconds", "40", "--max_beams", "4"]))
    assert chosen == Limits(heavy_jobs=3, max_beams=4, text=Budget(cpu_seconds=8.0, seconds=40.0))
    monkeypatch.setenv("LIMIT_MAX_BEAMS", "eight")
    parser = argparse.ArgumentParser()
    Limits.add_flags(parser)
    with pytest.raises(SystemExit):  # a usage error naming the flag, not a traceback
        parser.parse_args([])
    assert "argument --max_beams: invalid int value: 'eight'" in capsys.readouterr().err
    monkeypatch.delenv("LIMIT_MAX_BEAMS")
    monkeypatch.setenv("LIMIT_QUEUE_SIZE", "64")  # no longer a limit one may set
    Limits.add_flags(argparse.ArgumentParser())
    assert "LIMIT_QUEUE_SIZE names no limit of this server" in capsys.readouterr().err


def test_a_rate_limit_refusal_takes_nothing_a_drained_key_refills_within_its_interval_and_keys_are_bounded():
    now = [0.0]
    rate = RateLimit(interval=0.5, burst=3, max_keys=2, clock=lambda: now[0])
    assert [rate.take("script") for _ in range(3)] == [0.0] * 3
    assert rate.take("script") == rate.take("script") == 0.5  # the second refusal waits no longer
    now[0] += 0.5
    assert rate.take("script") == 0.0 and rate.take("script") == 0.5
    assert rate.take("visitor") == rate.take("another") == 0.0 and len(rate) == 2  # the least recent forgotten
    assert rate.take("script") == 0.0  # forgotten: a full bucket again


def test_an_admitted_callback_frees_its_sessions_call_when_it_ends():
    serving = Serving()
    assert refusal(serving.admit_session, "visitor", "192.0.2.1") == ""
    # One call per session at a time.
    assert "still running" in refusal(serving.admit_session, "visitor", "192.0.2.1")

    with serving.admitted(visitor()) as arrived:
        assert arrived is not None and serving.arrival(visitor()) == arrived  # the time limit counts from the queue

    assert refusal(serving.admit_session, "visitor", "192.0.2.1") == ""


def test_side_work_nobody_reads_is_dropped_before_it_runs_and_read_side_work_runs():
    serving, ran = Serving(Limits(stream_wait_seconds=0.1)), []
    work = lambda: ran.append("work") or ("done",)  # noqa: E731

    assert serving.run_side_work(visitor(), work, ("dropped",)) == ("dropped",) and ran == []
    with serving.readers.open("visitor"):  # the page's stream is open
        assert serving.run_side_work(visitor(), work, ("dropped",)) == ("done",) and ran == ["work"]


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


def test_an_event_of_work_takes_its_inputs_as_sent_runs_in_its_group_and_is_counted(serve):
    # The work group runs `concurrent_jobs` callbacks at once (here 2 of 4 pages' calls); a value out of a control's
    # range reaches the callback as sent (the page answers it in one line); the front counts the event's calls.
    serving, lock, running = Serving(Limits(concurrent_jobs=2)), threading.Lock(), Counter()

    def hold(number, request: gr.Request) -> str:
        with serving.admitted(request), lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        time.sleep(0.5)
        with lock:
            running["now"] -= 1
        return f"got {number}"

    with gr.Blocks() as demo:
        number, text, button = gr.Number(minimum=0, maximum=10), gr.Textbox(), gr.Button()
        work = serving.work(button.click, hold, [number], [text], api_name="hold")
        other = button.click(lambda value: value, [text], [text], api_name="other")
    url = f"http://127.0.0.1:{serve(serving, demo)}/"

    def page_holds() -> str:
        page = Page(url)
        try:
            return json.dumps(page.ask(work["id"], [99]).get("output", {}).get("data"))
        finally:
            page.close()

    assert in_parallel(4, page_holds) == Counter({'["got 99"]': 4}) and running["most"] == 2
    assert serving.counted == {work["id"]} and other["id"] not in serving.counted


def test_side_work_fills_its_own_slots_and_every_translations_call_is_in_its_callback_at_once(serve):
    # A mounted page's queue runs 40 calls at once (serving/__init__.py). Side work (looks inside, battles) has its
    # own group: with all its slots held, the work group's calls must all be in their callbacks together too, none
    # held in Gradio's first-come queue behind a class's views, where the scheduler cannot put a visitor's first.
    limits = Limits()
    calls = limits.concurrent_jobs + limits.side_jobs
    serving, together = Serving(limits), threading.Barrier(calls)

    def meet(request: gr.Request) -> str:
        with serving.admitted(request):
            together.wait(timeout=30)  # broken (an error) unless every call is in a callback within 30 s
            return "met"

    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        work = serving.work(button.click, meet, None, [text], api_name="meet")
        side = serving.work(button.click, meet, None, [text], api_name="meet_aside", side=True)
    url = f"http://127.0.0.1:{serve(serving, demo)}/"
    events = iter([side["id"]] * limits.side_jobs + [work["id"]] * limits.concurrent_jobs)
    lock = threading.Lock()

    def page_meets() -> str:
        with lock:
            event = next(events)
        page = Page(url)
        try:
            return json.dumps(page.ask(event, []).get("output", {}).get("data"))
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
    waited_for(lambda: serving.stalled("127.0.0.1"), 20)
    assert serving.stalled("127.0.0.1") == 1

    work = lambda: ran.append("work") or ("done",)  # noqa: E731
    for other, address in (("same address", "127.0.0.1"), ("elsewhere", "192.0.2.1")):
        assert refusal(serving.admit_session, other, address, counted=False) == ""
    with serving.readers.open("same address"), serving.readers.open("elsewhere"):
        assert serving.run_side_work(visitor("same address"), work, ("dropped",)) == ("dropped",) and ran == []
        assert serving.run_side_work(visitor("elsewhere"), work, ("dropped",)) == ("done",)
        stream.close()  # the stream goes: nothing of the address is stalled any more
        waited_for(lambda: not serving.stalled("127.0.0.1"), 10)
        assert serving.run_side_work(visitor("same address"), work, ("dropped",)) == ("done",)


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


def test_a_body_not_all_in_within_its_deadline_is_answered_in_one_line_and_its_connection_closed(serve):
    # hostile_clients: slow bodies. The headers come at once, the body never ends: 408 once `request_seconds` pass,
    # and the connection closes (its descriptor freed); a visitor's call meanwhile is answered.
    serving = Serving(Limits(request_seconds=REQUEST_SECONDS))
    with gr.Blocks() as demo:
        text, button = gr.Textbox(), gr.Button()
        serving.work(button.click, lambda value: value, [text], [text], api_name="echo")
    port = serve(serving, demo)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"POST /gradio_api/queue/join HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        received = b""
        while chunk := connection.recv(4096):  # until the server closes the connection
            received += chunk
    assert received.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in received
    assert REQUEST_SECONDS <= time.monotonic() - started < REQUEST_SECONDS + 4
    with httpx.Client() as client:
        assert client.get(f"http://127.0.0.1:{port}/config").status_code == 200
