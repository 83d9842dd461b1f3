"""The parts of gradio and uvicorn the app relies on that neither documents
(`transformer_en_de/app/serving/internals.py`), checked on the installed releases: an upgrade that changes one fails
here, by name, before a hostile client finds it.
"""

import asyncio
import datetime
import os
import subprocess
import sys

import gradio as gr
import gradio.utils
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from transformer_en_de.app.serving import internals

UPGRADE = "changed in this gradio/uvicorn release: update transformer_en_de/app/serving/internals.py"


@pytest.fixture(scope="module")
def page():
    with gr.Blocks() as demo:
        text, kept, file = gr.Textbox(label="Text"), gr.State(), gr.File(label="File")
        examples = gr.Dataset(components=[text], samples=[["A dog."], ["A cat."], ["A bird."]])
        button = gr.Button()
        go = button.click(lambda a, b, c: a, [text, kept, file], [text], api_name="go", concurrency_id="work")
        examples.click(lambda index: index, [examples], [text], api_name="example")
    return demo, go


def test_the_config_a_page_serves_has_its_events_and_components(page):
    demo, listener = page
    with TestClient(gr.mount_gradio_app(FastAPI(), demo, path="")) as client:
        config = client.get("/config").json()  # what every page and client reads, and the HTTP front asks for
    events = {event["api_name"]: event for event in config["dependencies"]}
    assert set(events) == {"go", "example"}, f"/config dependencies' api_name {UPGRADE}"
    go, example = events["go"], events["example"]
    assert go["api_visibility"] == "public", f"/config dependencies' api_visibility {UPGRADE}"
    assert listener["id"] == go["id"], f"an event listener's result (Dependency) and /config's id {UPGRADE}"
    components = {component["id"]: component for component in config["components"]}
    inputs = [components[number] for number in go["inputs"]]
    assert [component["type"] for component in inputs] == ["textbox", "state", "file"], (
        f"/config dependencies' inputs, components' type {UPGRADE}"
    )
    skip = [component.get("skip_api", False) for component in inputs]
    assert skip == [False, True, False], f"/config components' skip_api {UPGRADE}"
    dataset = components[example["inputs"][0]]
    assert dataset["type"] == "dataset" and len(dataset["props"]["samples"]) == 3, f"Dataset samples {UPGRADE}"
    # The public API description leaves the State out too: the two agree on which values a client sends.
    parameters = demo.get_api_info()["named_endpoints"]["/go"]["parameters"]
    assert len(parameters) == 2, f"get_api_info() and /config's skip_api disagree: {UPGRADE}"


def test_kept_sessions_bound_gradios_state_holder(page):
    demo, _ = page
    gr.mount_gradio_app(FastAPI(), demo, path="")
    internals.keep_sessions(demo, 3)
    holder = demo.state_holder
    for session in ("first", "second", "third", "fourth"):
        holder[session]  # a session's state, made as a call makes it
    assert list(holder.session_data) == ["second", "third", "fourth"], f"StateHolder's capacity {UPGRADE}"


def test_a_closed_session_unused_long_enough_is_forgotten_from_gradios_state_holder(page):
    demo, _ = page
    gr.mount_gradio_app(FastAPI(), demo, path="")
    holder = demo.state_holder
    for session in ("closed long ago", "closed just now", "open"):
        holder[session]  # a session's state, made as a call makes it
    holder.session_data["closed long ago"].is_closed = holder.session_data["closed just now"].is_closed = True
    holder.time_last_used["closed long ago"] -= datetime.timedelta(seconds=60)

    holder["back again"]  # closed long ago, but its page came back (its heartbeat open again)
    holder.session_data["back again"].is_closed = True
    holder.time_last_used["back again"] -= datetime.timedelta(seconds=60)

    forgotten = internals.forget_closed_sessions(demo, 30, reopened=lambda session: session == "back again")
    assert forgotten == 1, f"StateHolder's session_data, is_closed, time_last_used {UPGRADE}"
    assert "closed long ago" not in holder and {"closed just now", "open", "back again"} <= set(holder.session_data)


def test_kept_threads_reach_gradios_limiter(page):
    # The queue's calls at once, read from the same number when `queue()` makes the queue, are checked on a served page:
    # tests/test_serving.py::test_every_call_within_the_limit_is_in_its_callback_at_once_none_held_in_gradios_queue.
    demo, _ = page
    internals.keep_threads(demo, 77)
    with TestClient(gr.mount_gradio_app(FastAPI(), demo, path="")):  # the app's start-up makes the limiter
        assert demo.limiter is not None and demo.limiter.total_tokens == 77, f"Blocks.max_threads {UPGRADE}"


def test_upload_folder_is_gradios(tmp_path):
    assert internals.upload_folder() == gradio.utils.get_upload_folder(), f"the upload folder {UPGRADE}"
    # Gradio reads GRADIO_TEMP_DIR when it stores a file; so do we.
    code = "import gradio.utils, sys; from transformer_en_de.app.serving import internals; " \
        "print(internals.upload_folder() == gradio.utils.get_upload_folder() == sys.argv[1])"  # fmt: skip
    env = dict(os.environ, GRADIO_TEMP_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "True", f"GRADIO_TEMP_DIR {UPGRADE}: {done.stderr[-500:]}"


def test_h11_protocol_tells_a_request_all_in_from_one_still_being_sent():
    """A real uvicorn protocol on a fake transport: before a request and while its body is still coming the client
    has not sent it all; once it has, until it is answered, the request is in; idle again after;
    `on_response_complete` is called when an answer is sent."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    completed = []

    class Watched(internals.H11Protocol):
        def on_response_complete(self) -> None:
            super().on_response_complete()
            completed.append(internals.request_received(self))

    class Transport(asyncio.Transport):
        def __init__(self):
            super().__init__()
            self.written, self.closing = b"", False

        def get_extra_info(self, name, default=None):
            return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 80)}.get(name, default)

        def write(self, data):
            self.written += data

        def is_closing(self):
            return self.closing

        def close(self):
            self.closing = True

        def pause_reading(self):
            pass

        def resume_reading(self):
            pass

        def set_write_buffer_limits(self, high=None, low=None):
            pass

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def run():
        config = Config(app, log_level="warning")
        config.load()
        protocol = Watched(config=config, server_state=ServerState(), app_state={})
        transport = Transport()
        protocol.connection_made(transport)
        assert not internals.request_received(protocol), f"H11Protocol.conn {UPGRADE}"
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        assert not internals.request_received(protocol), f"H11Protocol.conn {UPGRADE}"
        protocol.data_received(b"cd")  # the rest of the body: the request is in
        assert internals.request_received(protocol), f"H11Protocol.conn {UPGRADE}"
        for _ in range(20):
            await asyncio.sleep(0)
        assert b"200" in transport.written.split(b"\r\n")[0]
        assert not internals.request_received(protocol), f"H11Protocol.conn {UPGRADE}"
        assert completed == [False], f"H11Protocol.on_response_complete {UPGRADE}"
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # the next request, all in at once
        assert internals.request_received(protocol), f"H11Protocol.conn {UPGRADE}"
        protocol.connection_lost(None)

    asyncio.run(run())
