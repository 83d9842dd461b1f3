"""The app's HTTP front, a Starlette (ASGI) middleware: what a raw client sends is bounded and checked before Gradio
sees it, and no client's calls can crowd out another visitor's. Each defence names the attack of
`benchmarks/hostile_clients.py` (or `page_clients.py`, `arena_attacks.py`) it answers.

- Bad calls, heavy (a 5 MB reference), server files, slow bodies: bodies over `max_body_bytes` are refused before
  they are read, and a body must be all in within `request_seconds` (uploads have their quota, `uploads.py`). JSON
  nested too deep, a call to an event the page does not have (API name, fn_index), the wrong number of values, a file
  value that is no upload, an example index out of range: one line each (404/422), never a traceback.
- Session churn, join flood, churn then learners, session eviction: Gradio keeps the state of its 10,000 latest
  sessions, and every call without a known session makes one (a
  raw call without a session is one named after its event id); new sessions are admitted per address
  (`new_sessions_per_address_per_second`, `new_sessions_per_address_burst` at once: a backstop against one machine,
  never a pool one client drains for everyone), so a visitor's session is never pushed out while its request runs.
  Pages (their heartbeat open) draw on a bucket of their own: a script churning sessions it never uses spends its
  bucket, never the pages of a class behind its address. A session has at most `calls_per_session` calls queued or
  running. An event the page paces (`Gate.pace`: the leaderboard) has a bucket per address too, and a call beyond it
  is refused at once, before Gradio's queue and event streams spend anything on it (arena_attacks: readers).
- Queue flood, starvation stream: raw calls (`POST /gradio_api/call/<api>`): an address has at most `UNREAD_CALLS`
  posted within `stream_wait_seconds` whose results it has not begun to read (`GET /gradio_api/call/<api>/<id>`); the
  scheduler drops each unread after that long, so a client that posts in a loop and never reads holds a few of the
  callbacks, never the queue the others wait in. Calls without a session draw on their own bucket of new sessions: a
  script's flood of them refuses its own calls, never a page opened from its address.
- The address is the connection's, or the visitor's where uvicorn was told to trust the proxy in front of the app
  (`server.py`: `forwarded_allow_ips`): this module never reads a forwarded header itself.
- Deep links are refused: the app offers none, and a deep link would save what a visitor typed.
- Held heartbeats: an address has at most `streams_per_address` responses open that stay open.
- Slow links, unread views: `Gate.readers` counts the event streams being read and the pages open (their heartbeats), by
  session: the scheduler drops or stops work nobody reads, and a page on a slow link, whose stream opens late, is
  served. `Gate.stalls` watches each send to an event stream: an address that leaves `stalled_streams_per_address`
  unread gets no more side work until it reads them (`streams.py`).
"""

import asyncio
import functools
import json
import re
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager

from .http_answers import RecordedAnswer, answer, asked_of, body_within, contained, drain, refuse, replay
from .limits import Limits
from .streams import Open, Stalls
from .uploads import file_values_problem

_CALL_STREAM = re.compile(r"/gradio_api/call/(?P<v2>v2/)?(?P<api>[^/]+)/(?P<event>[^/]+)/?")
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<v2>v2/)?(?P<api>[^/]+)/?")
_HEARTBEAT = re.compile(r"/gradio_api/heartbeat/(?P<session>[^/]+)/?")
_JOIN = "/gradio_api/queue/join"
_UPLOAD = "/gradio_api/upload"
_DEEP_LINK = "/gradio_api/deep_link"
# Responses that stay open as long as their client likes: event streams, heartbeats, file downloads, MCP streams.
_STREAM = re.compile(r"/gradio_api/(?:queue/data|heartbeat/[^/]+|call/(?:v2/)?[^/]+/[^/]+|file[=/].*|mcp/.*)/?")
INLINE_FILE = "An MCP call here takes no file inline (a data: URL); upload it through /gradio_api/upload."
MAX_DEPTH = 32  # JSON nesting: a call's values are at most a few levels deep
# Raw calls an address may have posted and not begun to read: a few of the callbacks (`concurrent_jobs`), each waiting
# for its reader, and the others' calls have the rest.
UNREAD_CALLS = 8
# Sessions, raw calls and buckets the front remembers (the least recent forgotten first): Gradio keeps 10,000 sessions.
REMEMBERED = 10_000
# How long a new session's first call, refused, waits for its page's heartbeat (sent alongside it) before the refusal.
PAGE_OPENS_SECONDS = 1.0


class Gate:
    """What the HTTP front shares with the callbacks and the page: the streams open and being read, sessions admitted,
    calls per session, raw calls not read yet, the events whose calls count (`count`)."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.readers = Open()  # the event streams being read, by session
        self.streams = Open()  # the responses open that stay open (`_STREAM`), by address
        self.stalls = Stalls(limits.stalled_send_seconds, limits.stalled_streams_per_address)  # unread, by address
        self._addresses: OrderedDict[str, str] = OrderedDict()  # session → the address its calls came from lately
        self._lock = threading.Lock()
        # The sessions seen lately, each its own key, and the raw calls, ("call", event id) → their session: a stream
        # read by either counts as read by the session (the newest last).
        self._known: OrderedDict[str | tuple, str] = OrderedDict()
        self._new_sessions: OrderedDict[tuple, tuple[float, float]] = OrderedDict()  # bucket → (tokens, as of when)
        self._calls: dict[str, deque] = {}  # session → start times of its calls queued or running
        self._unread: OrderedDict[object, tuple[str, float]] = OrderedDict()  # raw call → (address, when), unread
        self.counted: set[int] = set()  # the fn_index of each event whose calls count (`count`)
        self.paces: dict[int, tuple[int, float]] = {}  # fn_index → (burst, per second) of each paced event (`pace`)

    def admit_session(self, session: str | None, address: str, counted: bool = True) -> str:
        """Empty if a call of `session` from `address` may enter Gradio's queue, else the one-line reason; a `counted`
        call counts against the session until its callback ends (`serving`)."""
        limits, now = self.limits, time.monotonic()
        with self._lock:
            if session is None or session not in self._known:
                # Three buckets per address: calls without a session, pages (their heartbeat open) and other new
                # sessions, so that a script churning sessions it never uses spends its own, never a class's pages.
                kind = "no session" if session is None else "page" if self.readers.is_read(session) else "other"
                if not self._new_session_from((address, kind), now):
                    return (
                        "Too many new sessions from this address at once; this call was not started. Try again in a "
                        "few seconds."
                    )
            if session is None:
                return ""
            self._remember(session, session)
            self._keep_latest(self._addresses, session, address)
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

    def _new_session_from(self, bucket: tuple[str, str], now: float) -> bool:
        """Take one of the address's new sessions (`bucket`: the address, and the kind of session): a bucket of
        `new_sessions_per_address_burst`, refilled at the per-address rate; False if it is empty (lock held)."""
        burst, rate = self.limits.new_sessions_per_address_burst, self.limits.new_sessions_per_address_per_second
        return self._take(bucket, burst, rate, now)

    def _take(self, bucket: tuple, burst: int, rate: float, now: float) -> bool:
        """Take one token of `bucket` (`burst` at most, refilled at `rate` a second); False if it is empty (lock held).
        The least recent buckets are forgotten first."""
        tokens, when = self._new_sessions.get(bucket, (float(burst), now))
        tokens = min(burst, tokens + (now - when) * rate)
        admitted = tokens >= 1
        self._keep_latest(self._new_sessions, bucket, (tokens - admitted, now))
        return admitted

    def pace(self, dependency, burst: int, per_second: float):
        """Pace the calls of this event (an event listener's result) per address: `burst` at once, then `per_second`;
        a call beyond is refused at the front (`paced`). Returns it, to chain on."""
        self.paces[dependency["id"]] = (burst, per_second)
        return dependency

    def paced(self, event: dict, address: str) -> str:
        """Empty if a call of `event` (its config) from `address` is within its pace, else the one-line reason."""
        if event["id"] not in self.paces:
            return ""
        burst, per_second = self.paces[event["id"]]
        with self._lock:
            if self._take(("pace", address, event["id"]), burst, per_second, time.monotonic()):
                return ""
        return (
            f"/{event.get('api_name') or 'this event'} was called from this address more often than {per_second:g} a "
            "second lately; this call was not started. Try again in a few seconds."
        )

    def _remember(self, key: str | tuple, session: str) -> None:
        """Note that a stream read by `key` is read by `session` (lock held); the least recent are forgotten first."""
        self._keep_latest(self._known, key, session)

    def _keep_latest(self, table: OrderedDict, key, value) -> None:
        """`table[key] = value` as its newest entry, the least recent forgotten past `REMEMBERED` (lock held)."""
        table[key] = value
        table.move_to_end(key)
        while len(table) > REMEMBERED:
            table.popitem(last=False)

    def unread_slot(self, address: str) -> object | None:
        """A place among the raw calls `address` posted within `stream_wait_seconds` and has not begun to read, taken
        at once so that calls posted side by side cannot all pass; None if it has `UNREAD_CALLS`."""
        now = time.monotonic()
        with self._lock:
            while self._unread and now - next(iter(self._unread.values()))[1] > self.limits.stream_wait_seconds:
                self._unread.popitem(last=False)
            if sum(poster == address for poster, _ in self._unread.values()) >= UNREAD_CALLS:
                return None
            slot = object()
            self._unread[slot] = (address, now)
            return slot

    def posted(self, slot: object, event: str | None, session: str | None) -> None:
        """A raw call Gradio queued: reading its results (by `event`) counts as reading `session`; or, without an
        `event`, one that was not queued: its place is free again."""
        with self._lock:
            place = self._unread.pop(slot, None)
            if event is not None:
                self._remember(("call", event), session)
                if place:
                    self._unread[event] = place

    def side_welcome(self, session: str | None) -> bool:
        """Whether side work of `session` may run: its address reads its event streams (`streams.py`)."""
        with self._lock:
            address = self._addresses.get(session)
        return self.stalls.welcome(address)

    def is_known(self, session: str) -> bool:
        """Whether a call of `session` came through here lately (a new session's first call is not known yet)."""
        with self._lock:
            return session in self._known

    def session_of(self, key: str | tuple) -> str | None:
        """The session a stream reads, by its session or ("call", a raw call's event id, which is read from now on),
        if a call of it came through here lately (only such a session has an event stream to read)."""
        with self._lock:
            self._unread.pop(key[1] if isinstance(key, tuple) else None, None)
            return self._known.get(key)

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

    def arrival(self, session: str | None) -> float | None:
        """When the session's call now running entered Gradio's queue (time.monotonic()), as `serving` yields it."""
        with self._lock:
            calls = self._calls.get(session)
            return calls[0] if calls else None

    def served(self, session: str | None) -> None:
        with self._lock:
            calls = self._calls.get(session)
            if calls:
                calls.popleft()
            if not calls:
                self._calls.pop(session, None)

    def count(self, dependency):
        """Count the calls of this event (an event listener's result: its `id` is the fn_index) against their session:
        an event of the app's work group, whose callback says when it ends (`serving`). Returns it, to chain on."""
        self.counted.add(dependency["id"])
        return dependency


class RequestGuard:
    """ASGI middleware, first in line: bounded bodies, checked calls, admitted sessions, uploads within their quota,
    and a count of the event streams being read."""

    def __init__(self, app, *, max_body_bytes: int, demo, gate: Gate, uploads=None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.demo = demo
        self.gate = gate
        self.uploads = uploads  # uploads.UploadQuota, or None for Gradio's own cap only
        self.page: tuple[dict, dict] | None = None  # the page's events and components (`read_page`)
        self._page_read = asyncio.Lock()

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
            with self.gate.streams.open(self.address(scope), self.gate.limits.streams_per_address) as admitted:
                if not admitted:
                    return await refuse(
                        send,
                        429,
                        f"This address has {self.gate.limits.streams_per_address} responses open (event "
                        "streams, downloads), the most it may have at once; close one first.",
                    )
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
        too_large = self._too_large(f"more than {self.max_body_bytes:,}")
        body = await body_within(receive, send, self.max_body_bytes, self.gate.limits.request_seconds, too_large)
        if body is None:
            return
        if self.page is None:
            await self.read_page(scope)
        status, problem, payload, event = self.check_call(path, body)
        if problem:
            return await refuse(send, status, problem)
        raw = path.startswith("/gradio_api/call/")
        if event is None or not (raw or path.rstrip("/") == _JOIN):  # not a call that enters Gradio's queue
            return await contained(self.app, scope, replay(body, receive), send)
        address, session, counted = self.address(scope), payload.get("session_hash"), event["id"] in self.gate.counted
        slot = self.gate.unread_slot(address) if raw else None
        if raw and slot is None:
            return await refuse(
                send,
                429,
                f"This address has posted {UNREAD_CALLS} calls whose results it has not read yet; read them "
                "(GET /gradio_api/call/<api>/<event_id>) before posting more.",
            )
        if refused := self.gate.paced(event, address):
            self.gate.posted(slot, None, None)
            return await refuse(send, 429, refused)
        refused = self.gate.admit_session(session, address, counted)
        if refused and session is not None and not self.gate.is_known(session) and await self.page_opens(session):
            refused = self.gate.admit_session(session, address, counted)  # a page's: from the pages' bucket
        if refused:
            self.gate.posted(slot, None, None)
            return await refuse(send, 429, refused)
        # Gradio's answer is kept until what it says is noted here: the client reads a raw call's results by the event
        # id it answers, and that stream must count as read from its first byte.
        answered = RecordedAnswer()
        await contained(self.app, scope, replay(body, receive), answered)
        value = answered.value()
        queued = value.get("event_id") if answered.status == 200 and isinstance(value, dict) else None
        if raw:  # Gradio names the session of a call without one after its event id
            self.gate.posted(slot, queued, session or queued)
        if queued is None and counted:
            self.gate.served(session)  # refused by Gradio (its queue full): it never runs
        return await answer(send, answered.status, value)

    async def page_opens(self, session: str) -> bool:
        """Whether the heartbeat of `session` opens within `PAGE_OPENS_SECONDS`: a page opens it as it posts its first
        call, on another connection, and the two may cross."""
        for _ in range(int(PAGE_OPENS_SECONDS / 0.05)):
            if self.gate.readers.is_read(session):
                return True
            await asyncio.sleep(0.05)
        return self.gate.readers.is_read(session)

    async def read(self, scope, receive, send):
        """A GET: an event stream (a page's, by its session; a raw call's, by its event id), counted as read while it
        is open, or anything else."""
        path, query = scope["path"], scope.get("query_string", b"")
        ranges = dict(scope["headers"]).get(b"range", b"")
        if path.startswith(("/gradio_api/file=", "/gradio_api/file/")) and b"," in ranges:
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        if heartbeat := _HEARTBEAT.fullmatch(path):
            # A page is open while its heartbeat is, whenever its event stream opens (late on a slow link): its calls
            # are read (Gradio keeps their messages for the stream), and they stop when it closes (the unload).
            with self.gate.readers.open(heartbeat["session"]):
                return await contained(self.app, scope, receive, send)
        call = _CALL_STREAM.fullmatch(path)
        key = ("call", call["event"]) if call else page_stream(path, query)
        if key is None:  # not an event stream
            return await contained(self.app, scope, receive, send)
        if (session := self.gate.session_of(key)) is None:
            asked = call["event"] if call else key
            return await refuse(send, 404, f"No call of {asked[:40]!r} came here lately: nothing to stream.")
        with self.gate.readers.open(session):
            return await contained(self.app, scope, receive, self.gate.stalls.watched(self.address(scope), send))

    @functools.cached_property
    def endpoints(self) -> dict:
        """The page's public API endpoints as `/gradio_api/info` documents them ("/translate" → its parameters, ...):
        built once, at the first call that needs them (the page's events do not change while it is served)."""
        return self.demo.get_api_info()["named_endpoints"]

    async def read_page(self, scope) -> None:
        """The page's events by fn_index and its components by id (`page`), as its `/config` serves them to every page
        and client (gradio_client reads the same): asked of the page once, at the first call (`scope`'s connection)."""
        async with self._page_read:
            if self.page is None:
                config = await asked_of(self.app, scope, "/config")
                if config is None:
                    raise RuntimeError("the page did not answer /config: the front cannot check calls")
                self.page = (
                    {event["id"]: event for event in config["dependencies"]},
                    {component["id"]: component for component in config["components"]},
                )

    def event(self, api_name: str | None, fn_index=None) -> dict | None:
        """The page's event called by its API name, or without one by its index; None if it has no such event."""
        events = self.page[0]
        if api_name is None:
            return events.get(fn_index) if isinstance(fn_index, int) else None
        return next((event for event in events.values() if event["api_name"] == api_name), None)

    def _too_large(self, size: str) -> str:
        return (
            f"The request body has {size} bytes; the limit here is {self.max_body_bytes:,} (texts are translated up to "
            "3,000 characters; send files through the upload)."
        )

    def check_call(self, path: str, body: bytes) -> tuple[int, str, dict, dict | None]:
        """(status, one-line message, payload, the event called): the message is "" if the body may go on to Gradio.

        The values are checked against the event Gradio will run: on `/call/` (and v2) the one its path names (a body
        whose fn_index names another is refused); on `/run/`, `/api/` and `/queue/join` the body's fn_index, or
        without one the path's name (the page itself sends `/run/predict` with an fn_index). File values are checked
        wherever they are in the body (`uploads.file_values_problem`)."""
        call = _CALL.fullmatch(path)
        try:
            payload = json.loads(body) if body else None
            too_deep = depth(payload) > MAX_DEPTH
        except RecursionError:  # deeper than the parser goes
            payload, too_deep = None, True
        except (ValueError, UnicodeDecodeError):
            if call is None and path.rstrip("/") != _JOIN:
                return 0, "", {}, None
            return 422, 'The request body is not JSON: send {"data": [...]} with one value per parameter.', {}, None
        if too_deep:
            return 422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).", {}, None
        problem = file_values_problem(payload, self.gate.limits.max_file_bytes)
        if problem:
            return 422, problem, {}, None
        if path.startswith("/gradio_api/mcp") and inline_file(payload):
            return 422, INLINE_FILE, {}, None
        if call is None and path.rstrip("/") != _JOIN:
            return 0, "", {}, None
        if not isinstance(payload, dict):
            return 422, 'The request body must be a JSON object with a "data" list, one value per parameter.', {}, None
        fn_index = payload.get("fn_index")
        by_path = call is not None and (path.startswith("/gradio_api/call/") or fn_index is None)
        event = self.event(call["api"]) if by_path else self.event(None, fn_index)
        if event is None:
            asked = f"/{call['api']}" if by_path else f"fn_index {str(fn_index)[:20]}"
            names = ", ".join(sorted(self.endpoints))
            return 404, f"This app has no event {asked[:60]}; its API endpoints are {names}.", {}, None
        if by_path and fn_index is not None and self.event(None, fn_index) is not event:
            other = f"fn_index {fn_index!s:.20}"
            problem = f"This call names /{call['api']} in its path and another event ({other}): omit fn_index."
            return 422, problem, {}, None
        if not isinstance(payload.get("session_hash"), str | None):
            return 422, "A session_hash must be a string.", {}, None
        if call and call["v2"]:  # v2: the endpoint's parameters by name, at the top level of the body
            problem = check_named_values(self.endpoints.get(f"/{call['api']}", {}), call["api"], payload)
        elif not isinstance(payload.get("data"), list):
            problem = 'The request body must be a JSON object with a "data" list, one value per parameter.'
        else:
            problem = check_values(event, self.page[1], payload["data"])
        return 422 if problem else 0, problem, payload, event


def inline_file(value) -> bool:
    """Whether an MCP call carries a file inline (a base64 data: URL): Gradio's MCP server writes it to disk before the
    call is admitted anywhere, outside the upload quota."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and item.startswith("data:") and ";base64," in item[:200]:
            return True
        if isinstance(item, (list, dict)):
            pending += item.values() if isinstance(item, dict) else item
    return False


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


def check_values(event: dict, components: dict, values: list) -> str:
    """A one-line message if `values` do not fit the event's inputs (their number, a file value, an example index);
    `components`: the page's, by id."""
    inputs = [components[number] for number in event["inputs"]]
    shown = [component for component in inputs if not component.get("skip_api")]  # a gr.State takes no value
    if len(values) not in (len(inputs), len(shown)):
        names = ", ".join(component["props"].get("label") or component["type"] for component in shown)
        return (
            f"/{event['api_name']} takes {len(shown)} value{'s' if len(shown) != 1 else ''} ({names}); this call "
            f"sent {len(values)}."
        )
    for component, value in zip(inputs if len(values) == len(inputs) else shown, values, strict=True):
        if component["type"] == "dataset" and value is not None:
            count = len(component["props"]["samples"])
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
                return (
                    f"/{event['api_name']} takes an example number from 0 to {count - 1}; this call sent {value!r:.40}."
                )
        elif component["type"] in ("file", "uploadbutton") and value is not None:
            # Shaped as an upload's (the object /gradio_api/upload describes): Gradio would fail on any other with a
            # traceback. Where its path points is checked for every value of every call (`file_values_problem`).
            if not (isinstance(value, dict) and isinstance(value.get("path"), str)):
                label = component["props"].get("label") or "file"
                return (
                    f"The value for {label} must be null or the object /gradio_api/upload describes a file with "
                    '({"path": ..., "meta": {"_type": "gradio.FileData"}}).'
                )
    return ""


def page_stream(path: str, query: bytes) -> str | None:
    """The session whose messages a page's event stream (`/queue/data?session_hash=...`) reads; else None."""
    found = re.search(rb"(?:^|&)session_hash=([^&]+)", query) if path.rstrip("/") == "/gradio_api/queue/data" else None
    return found[1].decode("latin-1") if found else None
