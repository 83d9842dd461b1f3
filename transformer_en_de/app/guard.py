"""The app's HTTP front against hostile API clients: bodies bounded, calls checked, gone clients' work stopped.

- `RequestGuard` (ASGI middleware, first in line): a request body over `max_body_bytes` (uploads excepted: Gradio caps
  those with `max_file_size`) is refused with 413 before it is read into memory; a call to a named endpoint with the
  wrong number of values is refused with 422 and a one-line message (Gradio would log a traceback and answer
  `{"error": null}`); the event streams in progress are counted, so that work nobody reads can be stopped.
- `stop_unread_work` (a daemon thread): a running event whose results no one is reading (a raw `/call` never followed
  by its GET, a client that went away, a page whose stream closed) for `grace` seconds is cancelled in the scheduler,
  at its next decoder step.
- `client_address`: the address a per-visitor limit may rest on, only where the operator says to trust it.
- `forget_inputs`: Gradio keeps every input a session sent (for deep links); the app needs none of it afterwards.
"""

import json
import re
import threading
import time
from collections import Counter
from contextlib import contextmanager

from gradio.utils import get_upload_folder, is_in_or_equal

_CALL_STREAM = re.compile(r"/gradio_api/call/(?:v2/)?[^/]+/(?P<event>[0-9a-f]+)/?$")
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<api>[^/]+)/?$")
_JOIN = "/gradio_api/queue/join"
_UPLOAD = "/gradio_api/upload"
# A refused body is read and dropped up to this size, so that the client gets the message; past it, the connection
# closes. Nothing of it is kept.
DRAIN_BYTES = 64_000_000


class RequestGuard:
    """ASGI middleware: bounded bodies, checked calls, and a count of the event streams being read."""

    def __init__(self, app, *, max_body_bytes: int, demo, readers: "Readers"):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.demo = demo
        self.readers = readers

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if method == "GET":
            stream = self.readers.key(path, scope.get("query_string", b""))
            if stream is None:
                return await self.app(scope, receive, send)
            with self.readers.reading(stream):
                return await self.app(scope, receive, send)
        if method in ("HEAD", "OPTIONS") or path.startswith(_UPLOAD):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            size = f"{int(length):,}" if length.isdigit() else "an unreadable number of"
            return await refuse(send, 413, self._too_large(size), await drain(receive))
        body, more = b"", True
        while more:  # read here (bounded) so that the call can be checked, then replayed to Gradio
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body_bytes:
                drained = not more or await drain(receive)
                return await refuse(send, 413, self._too_large(f"more than {self.max_body_bytes:,}"), drained)
        problem = self.check_call(path, body)
        if problem:
            return await refuse(send, 422, problem)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()  # the client's disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    def _too_large(self, size: str) -> str:
        return (
            f"The request body has {size} bytes; the limit here is {self.max_body_bytes:,} (texts are translated up to "
            "3,000 characters; send files through the upload)."
        )

    def check_call(self, path: str, body: bytes) -> str:
        """A one-line message if a call to one of the app's events sends the wrong number of values; "" if fine (or
        not an event call: Gradio answers the rest)."""
        call = _CALL.fullmatch(path)
        if call is None and path != _JOIN:
            return ""
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return 'The request body is not JSON: send {"data": [...]} with one value per parameter.'
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            return 'The request body must be a JSON object with a "data" list, one value per parameter.'
        function = event_function(self.demo, call["api"] if call else None, payload.get("fn_index"))
        if function is None:
            return ""
        inputs = list(function.inputs)
        shown = [block for block in inputs if not getattr(block, "skip_api", False)]
        if len(payload["data"]) in (len(inputs), len(shown)):
            blocks = inputs if len(payload["data"]) == len(inputs) else shown
            return check_files(blocks, payload["data"])
        names = ", ".join(getattr(block, "label", None) or type(block).__name__ for block in shown)
        return (
            f"/{function.api_name} takes {len(shown)} value{'s' if len(shown) != 1 else ''} ({names}); this call "
            f"sent {len(payload['data'])}."
        )


def event_function(demo, api_name: str | None, fn_index: int | None = None):
    """The page's event called by its API name, or without one by its index; None if it has no such event."""
    for number, function in demo.fns.items():
        if (api_name is not None and function.api_name == api_name) or (api_name is None and number == fn_index):
            return function
    return None


def check_files(blocks, values) -> str:
    """A one-line message if a file input's value is not what an upload returns (`null`, or an object whose "path" is
    a string); Gradio would fail on it with a traceback."""
    for block, value in zip(blocks, values, strict=True):
        if getattr(block, "data_model", None) is None or type(block).__name__ not in ("File", "UploadButton"):
            continue
        label = getattr(block, "label", None) or "file"
        if value is None:
            continue
        path = value.get("path") if isinstance(value, dict) else None
        if not isinstance(path, str):
            return (
                f"The value for {label} must be null or the object /gradio_api/upload describes a file with "
                '({"path": ..., "meta": {"_type": "gradio.FileData"}}).'
            )
        if "\x00" in path or not is_in_or_equal(path, get_upload_folder()):
            return f"The {label} must be a file uploaded to this server (through /gradio_api/upload)."
    return ""


async def drain(receive, most: int = DRAIN_BYTES) -> bool:
    """Read and drop the rest of a refused body (so that the client, still sending, reads the answer instead of a
    broken pipe), up to `most` bytes; True if it was all read."""
    seen, more = 0, True
    while more and seen <= most:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        seen += len(message.get("body", b""))
        more = message.get("more_body", False)
    return not more


async def refuse(send, status: int, message: str, drained: bool = True) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if not drained:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Readers:
    """The event streams open now: a page's (`/queue/data?session_hash=...`, by session) and a raw call's
    (`/call/<api>/<event id>`, by event)."""

    def __init__(self):
        self._open = Counter()
        self._lock = threading.Lock()

    @staticmethod
    def key(path: str, query: bytes) -> str | None:
        stream = _CALL_STREAM.fullmatch(path)
        if stream:
            return stream["event"]
        if path.rstrip("/") == "/gradio_api/queue/data":
            found = re.search(rb"(?:^|&)session_hash=([^&]+)", query)
            return found[1].decode("latin-1") if found else None
        return None

    @contextmanager
    def reading(self, key: str):
        """Count the stream `key` as read while the block runs."""
        with self._lock:
            self._open[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._open[key] -= 1
                if self._open[key] <= 0:
                    del self._open[key]

    def is_read(self, *keys: str) -> bool:
        with self._lock:
            return any(self._open.get(key, 0) > 0 for key in keys)


def stop_unread_work(demo, scheduler, readers: Readers, *, grace: float = 5.0, every: float = 0.5) -> threading.Thread:
    """Cancel, at its next decoder step, the work of every running event nobody has read for `grace` seconds."""
    unread_since: dict[str, float] = {}

    def watch():
        while True:
            time.sleep(every)
            queue = getattr(demo, "_queue", None)
            now, running = time.monotonic(), {}
            for events in list(getattr(queue, "active_jobs", None) or []):
                for event in events or []:
                    running[event._id] = event
            for event_id in set(unread_since) - set(running):
                del unread_since[event_id]
            for event_id, event in running.items():
                if event.alive and readers.is_read(event_id, event.session_hash):
                    unread_since.pop(event_id, None)
                    continue
                first = unread_since.setdefault(event_id, now)
                if now - first >= grace and scheduler.cancel(event.session_hash):
                    print("app.py: nobody reads a request's results any more; it was cancelled.", flush=True)

    thread = threading.Thread(target=watch, name="stop unread work", daemon=True)
    thread.start()
    return thread


def client_address(request, trust_forwarded_for: bool) -> str | None:
    """The client's address for per-visitor limits: the last X-Forwarded-For hop (the one the operator's proxy
    added) when the operator trusts it; otherwise None, as every client may share one address (loopback, a proxy)."""
    if not trust_forwarded_for or request is None:
        return None
    hops = [hop.strip() for hop in (request.headers.get("x-forwarded-for") or "").split(",") if hop.strip()]
    return hops[-1] if hops else getattr(getattr(request, "client", None), "host", None)


def forget_inputs(demo, session: str | None, api_name: str) -> None:
    """Drop what Gradio keeps of the values `session` sent to the event `api_name` (it keeps them for deep links,
    which this app does not offer): a session holds no visitor's text once its request ends."""
    holder = getattr(demo, "state_holder", None)
    state = getattr(holder, "session_data", {}).get(session) if session else None
    event = event_function(demo, api_name)
    if state is None or event is None:
        return
    for component in event.inputs:
        config = state.config_values.get(component._id)
        if config and "props" in config:
            config["props"]["value"] = None
