"""The app's HTTP front: what a raw client sends is bounded and checked before Gradio sees it, and no client's calls
can crowd out another visitor's.

- Bodies over `max_body_bytes` are refused before they are read (uploads have their quota, `uploads.py`). JSON nested
  too deep, a call to an event the page does not have (API name, fn_index), the wrong number of values, a file value
  that is no upload, an example index out of range: one line each (404/422), never a traceback or `{"error": null}`.
- Raw calls (`POST /gradio_api/call/<api>`) are held, not queued: the POST answers an id at once, and the call enters
  Gradio's queue only when its results are read (`GET /gradio_api/call/<api>/<id>`). A client that posts and never
  reads fills a bounded store of its own (`held_calls`, `held_bytes`: the oldest dropped), never the queue the others
  wait in.
- Sessions: Gradio keeps the messages of its 2,000 latest sessions, and every call without a known session makes one;
  new sessions are admitted per address (`new_sessions_per_address_per_second`, `new_sessions_per_address_burst` at
  once: a backstop against one machine, never a pool one client drains for everyone), so a visitor's session is never
  pushed out while its request runs. A session has at most `calls_per_session` calls queued or running.
- The address is the connection's, or the visitor's where uvicorn was told to trust the proxy in front of the app
  (`server.py`: `forwarded_allow_ips`): this module never reads a forwarded header itself.
- Deep links are refused: the app offers none, and a deep link would save what a visitor typed.
- `Readers` counts the event streams being read: the scheduler drops or stops work nobody reads.
"""

import functools
import json
import re
import threading
import time
import uuid
from collections import Counter, OrderedDict, deque
from contextlib import contextmanager

import gradio as gr

from .http_answers import TooLarge, answer, call_inner, contained, drain, read_body, refuse, replay
from .internals import example_count, page_events, takes_api_value
from .limits import Limits
from .uploads import file_values_problem

_CALL_STREAM = re.compile(r"/gradio_api/call/(?P<v2>v2/)?(?P<api>[^/]+)/(?P<event>[^/]+)/?")
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<v2>v2/)?(?P<api>[^/]+)/?")
_JOIN = "/gradio_api/queue/join"
_UPLOAD = "/gradio_api/upload"
_DEEP_LINK = "/gradio_api/deep_link"
# Responses that stay open as long as their client likes: event streams, heartbeats, file downloads.
_STREAM = re.compile(r"/gradio_api/(?:queue/data|heartbeat/[^/]+|call/(?:v2/)?[^/]+/[^/]+|file[=/].*)/?")
COUNTED_GROUP = "work"  # the concurrency group of the app's events that spend CPU (app.py)
MAX_DEPTH = 32  # JSON nesting: a call's values are at most a few levels deep


class Gate:
    """What the HTTP front shares with the callbacks: the streams being read, sessions admitted, calls per session,
    raw calls held until read."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.readers = Readers()
        self._lock = threading.Lock()
        self._known: OrderedDict[str, None] = OrderedDict()  # sessions seen lately (the newest last)
        self._new_sessions: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address → (tokens, as of when)
        self._calls: dict[str, deque] = {}  # session → start times of its calls queued or running
        self.held: OrderedDict[str, tuple[str, bytes, float]] = OrderedDict()  # id → (path, body, time)
        self._held_bytes = 0
        self._streams = Counter()  # address → responses open that stay open (`_STREAM`)

    @contextmanager
    def stream(self, address: str):
        """Yields False, without counting, if `address` already has `streams_per_address` open; else counts one while
        the block runs and yields True."""
        with self._lock:
            admitted = self._streams[address] < self.limits.streams_per_address
            if admitted:
                self._streams[address] += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._streams[address] -= 1
                    if not self._streams[address]:
                        del self._streams[address]

    def admit_session(self, session: str | None, address: str, counted: bool = True) -> str:
        """Empty if a call of `session` from `address` may enter Gradio's queue, else the one-line reason; a `counted`
        call counts against the session until its callback ends (`serving`)."""
        limits, now = self.limits, time.monotonic()
        with self._lock:
            if session is None or session not in self._known:
                if not self._new_session_from(address, now):
                    return (
                        "Too many new sessions from this address at once; this call was not started. Try again in a "
                        "few seconds."
                    )
            if session is None:
                return ""
            self._known[session] = None
            self._known.move_to_end(session)
            while len(self._known) > 4 * limits.sessions_kept:
                self._known.popitem(last=False)
            if not counted:
                return ""
            calls = self._calls.setdefault(session, deque())
            while calls and now - calls[0] > limits.file.seconds * 2:  # a call Gradio dropped unstarted
                calls.popleft()
            if len(calls) >= limits.calls_per_session:
                return (
                    "This session's previous request is still running; this one was not started. Wait for it to finish "
                    "(or reload the page to cancel it)."
                )
            calls.append(now)
        return ""

    def _new_session_from(self, address: str, now: float) -> bool:
        """Take one of the address's new sessions: a bucket of `new_sessions_per_address_burst`, refilled at the
        per-address rate; False if it is empty (lock held). The least recent addresses are forgotten first."""
        limits = self.limits
        rate, burst = limits.new_sessions_per_address_per_second, limits.new_sessions_per_address_burst
        tokens, when = self._new_sessions.pop(address, (float(burst), now))
        tokens = min(burst, tokens + (now - when) * rate)
        admitted = tokens >= 1
        self._new_sessions[address] = (tokens - admitted, now)
        while len(self._new_sessions) > 4 * limits.sessions_kept:
            self._new_sessions.popitem(last=False)
        return admitted

    def knows(self, session: str) -> bool:
        """Whether a call of `session` came through here lately (only such a session has an event stream to read)."""
        with self._lock:
            return session in self._known

    @contextmanager
    def serving(self, session: str | None):
        """A callback of `session` runs inside this block: its call stops counting against the session at the end.
        Yields when the call entered Gradio's queue (time.monotonic(); None for a call not counted here), so that its
        time limit counts the wait for a free callback too."""
        with self._lock:
            calls = self._calls.get(session)
            arrived = calls[0] if calls else None  # Gradio starts a session's calls in the order they came
        try:
            yield arrived
        finally:
            self.served(session)

    def served(self, session: str | None) -> None:
        with self._lock:
            calls = self._calls.get(session)
            if calls:
                calls.popleft()
            if not calls:
                self._calls.pop(session, None)

    def hold(self, path: str, body: bytes) -> str:
        """Keep a raw call until it is read; the oldest held calls go when there are too many or they are too old."""
        call_id, now = uuid.uuid4().hex, time.monotonic()
        with self._lock:
            self._expire_held(now)
            self.held[call_id] = (path, body, now)
            self._held_bytes += len(body)
            while len(self.held) > self.limits.held_calls or self._held_bytes > self.limits.held_bytes:
                self._drop_oldest()
        return call_id

    def take(self, call_id: str) -> tuple[str, bytes] | None:
        with self._lock:
            self._expire_held(time.monotonic())
            held = self.held.pop(call_id, None)
            self._held_bytes -= len(held[1]) if held else 0
        return None if held is None else held[:2]

    def _expire_held(self, now: float) -> None:
        while self.held and now - next(iter(self.held.values()))[2] > self.limits.held_seconds:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, body, _) = self.held.popitem(last=False)
        self._held_bytes -= len(body)


class RequestGuard:
    """ASGI middleware, first in line: bounded bodies, checked calls, held raw calls, admitted sessions, uploads
    within their quota, and a count of the event streams being read."""

    def __init__(self, app, *, max_body_bytes: int, demo, gate: Gate, uploads=None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.demo = demo
        self.gate = gate
        self.uploads = uploads  # uploads.UploadQuota, or None for Gradio's own cap only

    @staticmethod
    def address(scope) -> str:
        """The client's address: the connection's, or the visitor's as uvicorn's proxy rule rewrote it (server.py)."""
        return (scope.get("client") or ("unknown",))[0]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if path.rstrip("/") == _DEEP_LINK:
            return await refuse(send, 404, "This app offers no deep links.")
        if method == "GET" and _STREAM.fullmatch(path):
            with self.gate.stream(self.address(scope)) as admitted:
                if not admitted:
                    return await refuse(
                        send, 429, f"This address has {self.gate.limits.streams_per_address} responses open (event "
                        "streams, downloads), the most it may have at once; close one first.",
                    )  # fmt: skip
                return await self.read(scope, receive, send)
        if method == "GET":
            return await self.read(scope, receive, send)
        if method in ("HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        if path.startswith(_UPLOAD) and self.uploads is not None:
            return await self.uploads(self.app, scope, receive, send, self.address(scope))
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            size = f"{int(length):,}" if length.isdigit() else "an unreadable number of"
            return await refuse(send, 413, self._too_large(size), await drain(receive))
        # Read here (bounded) so that the call can be checked, then replayed to Gradio.
        try:
            body = await read_body(receive, self.max_body_bytes)
        except TooLarge as error:
            return await refuse(send, 413, self._too_large(f"more than {self.max_body_bytes:,}"), error.drained)
        if body is None:
            return
        status, problem, payload = self.check_call(path, body)
        if problem:
            return await refuse(send, status, problem)
        if _CALL.fullmatch(path) and path.startswith("/gradio_api/call/"):
            call_id = self.gate.hold(path, body)
            return await answer(send, 200, {"event_id": call_id})
        if path.rstrip("/") == _JOIN:
            function = event_function(self.demo, None, payload.get("fn_index"))
            refused = self.gate.admit_session(payload.get("session_hash"), self.address(scope), counts(function))
            if refused:
                return await refuse(send, 429, refused)
        return await contained(self.app, scope, replay(body, receive), send)

    async def read(self, scope, receive, send):
        """A GET: a held raw call's results, an event stream (counted as read while open), or anything else."""
        path = scope["path"]
        stream = _CALL_STREAM.fullmatch(path)
        if stream:
            return await self.read_held_call(scope, receive, send, stream)
        ranges = dict(scope["headers"]).get(b"range", b"")
        if path.startswith(("/gradio_api/file=", "/gradio_api/file/")) and b"," in ranges:
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        key = self.gate.readers.key(path, scope.get("query_string", b""))
        if key is None:
            return await contained(self.app, scope, receive, send)
        if not self.gate.knows(key):
            return await refuse(send, 404, f"No call of session {key[:40]!r} came here lately: nothing to stream.")
        with self.gate.readers.reading(key):
            return await contained(self.app, scope, receive, send)

    async def read_held_call(self, scope, receive, send, stream):
        """Put a held raw call into Gradio's queue now that its results are read, and stream them."""
        held = self.gate.take(stream["event"])
        if held is None:
            return await refuse(
                send,
                404,
                f"No call {stream['event'][:40]} is waiting here: it was read already, or it waited unread for more "
                f"than {self.gate.limits.held_seconds:g} s (calls run when their results are read).",
            )
        path, body = held
        payload = json.loads(body)
        session, function = payload.get("session_hash"), event_function(self.demo, stream["api"])
        refused = self.gate.admit_session(session, self.address(scope), counts(function))
        if refused:
            return await refuse(send, 429, refused)
        post = dict(scope, method="POST", path=path, raw_path=path.encode(), query_string=b"")
        post["headers"] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        status, reply = await call_inner(self.app, post, body)
        event = reply.get("event_id") if isinstance(reply, dict) else None
        if status != 200 or not isinstance(event, str):
            if counts(function):
                self.gate.served(session)  # it never runs: it does not count against the session
            detail = reply.get("detail") or reply.get("error") if isinstance(reply, dict) else None
            return await refuse(send, status if status != 200 else 500, str(detail or "The call was not started."))
        route = f"/gradio_api/call/{stream['v2'] or ''}{stream['api']}/{event}"
        get = dict(scope, path=route, raw_path=route.encode())
        # Without a session of its own, the call's session is its event id.
        with self.gate.readers.reading(session or event):
            return await contained(self.app, get, receive, send)

    @functools.cached_property
    def endpoints(self) -> dict:
        """The page's public API endpoints as `/gradio_api/info` documents them ("/translate" → its parameters, ...):
        built once, at the first call that needs them (the page's events do not change while it is served)."""
        return self.demo.get_api_info()["named_endpoints"]

    def _too_large(self, size: str) -> str:
        return (
            f"The request body has {size} bytes; the limit here is {self.max_body_bytes:,} (texts are translated up to "
            "3,000 characters; send files through the upload)."
        )

    def check_call(self, path: str, body: bytes) -> tuple[int, str, dict]:
        """(status, one-line message, payload): the message is "" if the body may go on to Gradio.

        The values are checked against the event Gradio will run: on `/call/` (and v2) the one its path names (a body
        whose fn_index names another is refused); on `/run/`, `/api/` and `/queue/join` the body's fn_index, or
        without one the path's name (the page itself sends `/run/predict` with an fn_index). File values are checked
        wherever they are in the body (`uploads.file_values_problem`)."""
        call = _CALL.fullmatch(path)
        try:
            payload = json.loads(body) if body else None
        except RecursionError:
            return 422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).", {}
        except (ValueError, UnicodeDecodeError):
            if call is None and path.rstrip("/") != _JOIN:
                return 0, "", {}
            return 422, 'The request body is not JSON: send {"data": [...]} with one value per parameter.', {}
        if depth(payload) > MAX_DEPTH:
            return 422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).", {}
        problem = file_values_problem(payload, self.gate.limits.max_file_bytes)
        if problem:
            return 422, problem, {}
        if call is None and path.rstrip("/") != _JOIN:
            return 0, "", {}
        if not isinstance(payload, dict):
            return 422, 'The request body must be a JSON object with a "data" list, one value per parameter.', {}
        fn_index = payload.get("fn_index")
        by_path = call is not None and (path.startswith("/gradio_api/call/") or fn_index is None)
        function = event_function(self.demo, call["api"]) if by_path else event_function(self.demo, None, fn_index)
        if function is None:
            asked = f"/{call['api']}" if by_path else f"fn_index {str(fn_index)[:20]}"
            names = ", ".join(sorted(self.endpoints))
            return 404, f"This app has no event {asked[:60]}; its API endpoints are {names}.", {}
        if by_path and fn_index is not None and event_function(self.demo, None, fn_index) is not function:
            other = f"fn_index {fn_index!s:.20}"
            return 422, f"This call names /{call['api']} in its path and another event ({other}): omit fn_index.", {}
        if call and call["v2"]:  # v2: the endpoint's parameters by name, at the top level of the body
            problem = check_named_values(self.endpoints.get(f"/{call['api']}", {}), call["api"], payload)
            return 422 if problem else 0, problem, payload
        if not isinstance(payload.get("data"), list):
            return 422, 'The request body must be a JSON object with a "data" list, one value per parameter.', {}
        return 422 if (problem := check_values(function, payload["data"])) else 0, problem, payload


def depth(value, limit: int = MAX_DEPTH + 1) -> int:
    """How deeply `value` nests lists and objects (counted up to `limit`)."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, at = level.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, at)
            if at < limit:
                level += [(child, at + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def counts(function) -> bool:
    """Whether calls of this event count against their session: the app's own queued events (its one concurrency
    group), whose callbacks say when they end (`Gate.serving`)."""
    return function is not None and function.concurrency_id == COUNTED_GROUP


def event_function(demo, api_name: str | None, fn_index=None):
    """The page's event called by its API name, or without one by its index; None if it has no such event."""
    for number, function in page_events(demo).items():
        if (api_name is not None and function.api_name == api_name) or (
            api_name is None and isinstance(fn_index, int) and number == fn_index
        ):
            return function
    return None


def check_named_values(endpoint: dict, api_name: str, payload: dict) -> str:
    """A one-line message if a v2 call's body (the endpoint's parameters by name, as `/gradio_api/info` documents them
    in `endpoint`) names a parameter the endpoint does not have or leaves out one without a default."""
    parameters = endpoint.get("parameters", [])
    names = [parameter["parameter_name"] for parameter in parameters]
    unknown = [name for name in payload if name not in names and name not in ("session_hash", "oauth_token")]
    needed = [parameter["parameter_name"] for parameter in parameters if not parameter.get("parameter_has_default")]
    missing = [name for name in needed if name not in payload]
    if unknown or missing:
        wrong = f"has no parameter {unknown[0][:40]!r}" if unknown else f"needs {missing[0]!r}"
        return f"/call/v2/{api_name} {wrong}; send its parameters by name: {', '.join(names)}."
    return ""


def check_values(function, values: list) -> str:
    """A one-line message if `values` do not fit the event's inputs (their number, a file value, an example index)."""
    inputs = list(function.inputs)
    shown = [block for block in inputs if takes_api_value(block)]
    if len(values) not in (len(inputs), len(shown)):
        names = ", ".join(getattr(block, "label", None) or type(block).__name__ for block in shown)
        return (
            f"/{function.api_name} takes {len(shown)} value{'s' if len(shown) != 1 else ''} ({names}); this call "
            f"sent {len(values)}."
        )
    blocks = inputs if len(values) == len(inputs) else shown
    for block, value in zip(blocks, values, strict=True):
        if isinstance(block, gr.Dataset) and value is not None:
            count = example_count(block)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
                return (
                    f"/{function.api_name} takes an example number from 0 to {count - 1}; this call sent {value!r:.40}."
                )
    return check_file_shapes(blocks, values)


def check_file_shapes(blocks, values) -> str:
    """A one-line message if a file input's value is not shaped as an upload's (`null`, or an object whose "path" is a
    string); Gradio would fail on it with a traceback. Where the path points is checked for every value of every call
    (`uploads.file_values_problem`)."""
    for block, value in zip(blocks, values, strict=True):
        if value is None or type(block).__name__ not in ("File", "UploadButton"):
            continue
        if not (isinstance(value, dict) and isinstance(value.get("path"), str)):
            label = getattr(block, "label", None) or "file"
            return (
                f"The value for {label} must be null or the object /gradio_api/upload describes a file with "
                '({"path": ..., "meta": {"_type": "gradio.FileData"}}).'
            )
    return ""


class Readers:
    """The event streams open now: a page's (`/queue/data?session_hash=...`) and a raw call's (by its session)."""

    def __init__(self):
        self._open = Counter()
        self._lock = threading.Lock()

    @staticmethod
    def key(path: str, query: bytes) -> str | None:
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

    def is_read(self, key: str | None) -> bool:
        with self._lock:
            return key is not None and self._open.get(key, 0) > 0
