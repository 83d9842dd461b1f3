"""The HTTP front, a Starlette (ASGI) middleware: what a raw client sends is bounded and checked before Gradio sees it,
and no client's calls crowd out another visitor's (attacks of benchmarks/hostile_clients.py unless named).

- Bad calls, heavy, server files, slow bodies: a body over `max_body_bytes` or not in within `request_seconds` is
  refused; JSON too deep, an event the page lacks, the wrong values, a file value that is no upload: one line each.
- Session churn, churn then learners: new sessions per address in three buckets (pages with their heartbeat open,
  other sessions, calls without one), so that a script churning sessions spends its own, never a class's pages; a
  session has `calls_per_session` calls queued or running; a paced event (arena_attacks: readers) has a bucket too.
- Queue flood: an address has at most `UNREAD_CALLS` raw calls posted and not yet read.
- Held heartbeats: at most `streams_per_address` responses that stay open; a heartbeat's end (a page closed) cancels
  its session's requests here, cheaply, for each of the hundreds a script can close at once.
- Slow links, unread views: `readers` counts the streams read and pages open, by session, so that the scheduler drops
  work nobody reads; `stalled_sends` watches each send, and an address that leaves streams unread gets no side work.
- Deep links are refused: the app offers none, and one would save what a visitor typed.
"""

import asyncio
import functools
import json
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import contextmanager

from starlette.datastructures import QueryParams

from .http_answers import OpenResponses, RecordedAnswer, answer, body_within, contained, drain, refuse, replay
from .limits import Limits, RateLimit
from .uploads import file_values_problem, nested

# Gradio's client routes (its guide "Querying Gradio Apps with Curl"): no public table of them exists (`__init__.py`).
_CALL_STREAM = re.compile(r"/gradio_api/call/(?P<v2>v2/)?(?P<api>[^/]+)/(?P<event>[^/]+)/?")
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<v2>v2/)?(?P<api>[^/]+)/?")
_HEARTBEAT = re.compile(r"/gradio_api/heartbeat/(?P<session>[^/]+)/?")
_JOIN, _UPLOAD, _DEEP_LINK = "/gradio_api/queue/join", "/gradio_api/upload", "/gradio_api/deep_link"
# Responses that stay open as long as their client likes: event streams, heartbeats, file downloads, MCP streams.
_STREAM = re.compile(r"/gradio_api/(?:queue/data|heartbeat/[^/]+|call/(?:v2/)?[^/]+/[^/]+|file[=/].*|mcp/.*)/?")
INLINE_FILE = "An MCP call here takes no file inline (a data: URL); upload it through /gradio_api/upload."
MAX_DEPTH = 32  # JSON nesting: a call's values are a few levels deep
UNREAD_CALLS = 8  # raw calls an address may have posted and not begun to read: a few of the callbacks
REMEMBERED = 10_000  # sessions and raw calls remembered (the least recent forgotten first), as many as Gradio keeps
PAGE_OPENS_SECONDS = 1.0  # how long a new session's refused first call waits for its page's heartbeat


class StalledSends:
    """The sends to event streams in progress, by address. uvicorn's `send` waits for the client to take the bytes, so
    an unread stream is known only there; an unread view holds its ~200 kB in memory."""

    def __init__(self, stalled_seconds: float):
        self.stalled_seconds = stalled_seconds
        self._pending: dict[object, tuple[str, float]] = {}  # a send in progress → (its address, since when)
        self._lock = threading.Lock()

    def watched(self, address: str, send):
        async def watched_send(message):
            token = object()
            with self._lock:
                self._pending[token] = (address, time.monotonic())
            try:
                await send(message)
            finally:
                with self._lock:
                    del self._pending[token]

        return watched_send

    def stalled(self, address: str) -> int:
        """How many sends to `address` have waited `stalled_seconds` or more."""
        since = time.monotonic() - self.stalled_seconds
        with self._lock:
            return sum(owner == address and started <= since for owner, started in self._pending.values())


class Visitors:
    """What the front knows of its visitors and shares with the callbacks: streams open and read, sessions admitted,
    calls per session, raw calls not read yet, the events whose calls count and those paced."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.readers = OpenResponses()  # the event streams being read and pages open, by session
        self.streams = OpenResponses()  # the responses open that stay open, by address
        self.stalled_sends = StalledSends(limits.stalled_send_seconds)
        burst, per_second = limits.new_sessions_per_address_burst, limits.new_sessions_per_address_per_second
        self.new_sessions = RateLimit(1 / per_second, burst, REMEMBERED)  # by (address, kind of session)
        self._addresses: OrderedDict[str, str] = OrderedDict()  # session → the address of its latest call
        # Sessions seen lately, each its own key, and raw calls, ("call", event id) → their session.
        self._known: OrderedDict[str | tuple, str] = OrderedDict()
        self._calls: dict[str, deque] = {}  # session → start times of its calls queued or running
        self._unread: OrderedDict[object, tuple[str, float]] = OrderedDict()  # raw call → (address, when), unread
        self._lock = threading.Lock()
        self.counted: set[int] = set()  # the fn_index of each event whose calls count
        self.paces: dict[int, RateLimit] = {}  # fn_index → its calls' pace, by address

    def admit_session(self, session: str | None, address: str, counted: bool = True) -> str:
        """Why a call of `session` from `address` may not enter Gradio's queue, in one line ("" if it may); a `counted`
        call counts against its session until its callback ends (`serving`)."""
        limits, now = self.limits, time.monotonic()
        with self._lock:
            if session is None or session not in self._known:
                kind = "no session" if session is None else "page" if self.readers.is_read(session) else "other"
                if self.new_sessions.take((address, kind)):
                    return (
                        "Too many new sessions from this address at once; this call was not started. Try again in a "
                        "few seconds."
                    )
            if session is None:
                return ""
            self._keep_latest(self._known, session, session)
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

    def paced(self, event: dict, address: str) -> str:
        """ "" if a call of `event` (its config) from `address` is within its pace, else why not in one line."""
        pace = self.paces.get(event["id"])
        if pace is None or not pace.take(address):
            return ""
        return (
            f"/{event.get('api_name') or 'this event'} was called from this address more often than "
            f"{1 / pace.interval:g} a second lately; this call was not started. Try again in a few seconds."
        )

    @staticmethod
    def _keep_latest(table: OrderedDict, key, value) -> None:
        """`table[key] = value` as its newest entry, the least recent forgotten past `REMEMBERED` (lock held)."""
        table[key] = value
        table.move_to_end(key)
        while len(table) > REMEMBERED:
            table.popitem(last=False)

    def unread_slot(self, address: str) -> object | None:
        """A place among the raw calls `address` posted within `stream_wait_seconds` and has not read (taken at once,
        so that calls posted side by side cannot all pass); None if it has `UNREAD_CALLS`."""
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
        """A raw call Gradio queued as `event`, whose stream reads `session`; or (no `event`) not queued: slot freed."""
        with self._lock:
            place = self._unread.pop(slot, None)
            if event is not None:
                self._keep_latest(self._known, ("call", event), session)
                if place:
                    self._unread[event] = place

    def side_welcome(self, session: str | None) -> bool:
        """Whether side work of `session` may run: its address has fewer than `stalled_streams_per_address` stalled
        sends (it reads its event streams)."""
        with self._lock:
            address = self._addresses.get(session)
        return address is None or self.stalled_sends.stalled(address) < self.limits.stalled_streams_per_address

    def is_known(self, session: str) -> bool:
        with self._lock:
            return session in self._known

    def session_of(self, key: str | tuple) -> str | None:
        """The session a stream reads (by its session, or ("call", event id): read from now on), if it came here."""
        with self._lock:
            self._unread.pop(key[1] if isinstance(key, tuple) else None, None)
            return self._known.get(key)

    @contextmanager
    def serving(self, session: str | None):
        """A callback of `session` runs inside; yields when its call entered the queue (None if not counted)."""
        try:
            yield self.arrival(session)
        finally:
            self.served(session)

    def arrival(self, session: str | None) -> float | None:
        with self._lock:
            calls = self._calls.get(session)
            return calls[0] if calls else None  # Gradio starts a session's calls in the order they came

    def served(self, session: str | None) -> None:
        with self._lock:
            calls = self._calls.get(session)
            if calls:
                calls.popleft()
            if not calls:
                self._calls.pop(session, None)


class RequestGuard:
    """ASGI middleware, first in line: bounded bodies, checked calls, admitted sessions, uploads within their quota,
    and the event streams being read counted."""

    def __init__(self, app, *, demo, visitors: Visitors, uploads, page_closed: Callable[[str], None]):
        self.app, self.demo, self.visitors, self.uploads = app, demo, visitors, uploads
        self.page_closed = page_closed
        self.max_body_bytes = visitors.limits.max_body_bytes

    @staticmethod
    def address(scope) -> str:
        """The connection's address, or the visitor's as uvicorn's proxy rule rewrote it (server.py)."""
        return (scope.get("client") or ("unknown",))[0]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method, visitors = scope["path"], scope["method"], self.visitors
        limits = visitors.limits
        if path.rstrip("/") == _DEEP_LINK:
            return await refuse(send, 404, "This app offers no deep links.")
        if method == "GET" and _STREAM.fullmatch(path):
            with visitors.streams.open(self.address(scope), limits.streams_per_address) as admitted:
                if not admitted:
                    return await refuse(
                        send,
                        429,
                        f"This address has {limits.streams_per_address} responses open (event streams, downloads), "
                        "the most it may have at once; close one first.",
                    )
                return await self.read(scope, receive, send)
        if method == "GET":
            return await self.read(scope, receive, send)
        if method in ("HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        if path.startswith(_UPLOAD):
            return await self.uploads(self.app, scope, receive, send, self.address(scope))
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            size = f"{int(length):,}" if length.isdigit() else "an unreadable number of"
            return await refuse(send, 413, self._too_large(size), await drain(receive))
        # Read here (bounded) so that the call can be checked, then replayed to Gradio.
        too_large = self._too_large(f"more than {self.max_body_bytes:,}")
        body = await body_within(receive, send, self.max_body_bytes, limits.request_seconds, too_large)
        if body is None:
            return
        status, problem, payload, event = self.check_call(path, body)
        if problem:
            return await refuse(send, status, problem)
        raw = path.startswith("/gradio_api/call/")
        if event is None or not (raw or path.rstrip("/") == _JOIN):  # not a call that enters Gradio's queue
            return await contained(self.app, scope, replay(body, receive), send)
        address, session, counted = self.address(scope), payload.get("session_hash"), event["id"] in visitors.counted
        slot = visitors.unread_slot(address) if raw else None
        if raw and slot is None:
            return await refuse(
                send,
                429,
                f"This address has posted {UNREAD_CALLS} calls whose results it has not read yet; read them "
                "(GET /gradio_api/call/<api>/<event_id>) before posting more.",
            )
        refused = visitors.paced(event, address)
        if not refused:
            refused = visitors.admit_session(session, address, counted)
            if refused and session is not None and not visitors.is_known(session) and await self.page_opens(session):
                refused = visitors.admit_session(session, address, counted)  # a page's: from the pages' bucket
        if refused:
            visitors.posted(slot, None, None)
            return await refuse(send, 429, refused)
        # Gradio's answer is held until noted here: a raw call's stream, read by the event id it answers, must count as
        # read from its first byte.
        answered = RecordedAnswer()
        await contained(self.app, scope, replay(body, receive), answered)
        value = answered.value()
        queued = value.get("event_id") if answered.status == 200 and isinstance(value, dict) else None
        if raw:  # Gradio names the session of a call without one after its event id
            visitors.posted(slot, queued, session or queued)
        if queued is None and counted:
            visitors.served(session)  # refused by Gradio (its queue full): it never runs
        return await answer(send, answered.status, value)

    async def page_opens(self, session: str) -> bool:
        """Whether the heartbeat of `session` opens within `PAGE_OPENS_SECONDS` (a page opens it beside its first
        call, on another connection)."""
        for _ in range(int(PAGE_OPENS_SECONDS / 0.05)):
            if self.visitors.readers.is_read(session):
                return True
            await asyncio.sleep(0.05)
        return self.visitors.readers.is_read(session)

    async def read(self, scope, receive, send):
        """A GET; an event stream (a page's by session, a raw call's by event id) counts as read while open."""
        path = scope["path"]
        ranges = dict(scope["headers"]).get(b"range", b"")
        if path.startswith(("/gradio_api/file=", "/gradio_api/file/")) and b"," in ranges:
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        if heartbeat := _HEARTBEAT.fullmatch(path):
            # A page is open while its heartbeat is, however late its event stream opens on a slow link.
            try:
                with self.visitors.readers.open(heartbeat["session"]):
                    return await contained(self.app, scope, receive, send)
            finally:
                self.page_closed(heartbeat["session"])
        call = _CALL_STREAM.fullmatch(path)
        if call:
            key = ("call", call["event"])
        elif path.rstrip("/") == "/gradio_api/queue/data":
            key = QueryParams(scope.get("query_string", b"")).get("session_hash") or None
        else:
            key = None
        if key is None:  # not an event stream
            return await contained(self.app, scope, receive, send)
        if (session := self.visitors.session_of(key)) is None:
            asked = call["event"] if call else key
            return await refuse(send, 404, f"No call of {asked[:40]!r} came here lately: nothing to stream.")
        watched = self.visitors.stalled_sends.watched(self.address(scope), send)
        with self.visitors.readers.open(session):
            return await contained(self.app, scope, receive, watched)

    @functools.cached_property
    def endpoints(self) -> dict:
        """The page's API endpoints as `/gradio_api/info` documents them ("/translate" → its parameters, ...)."""
        return self.demo.get_api_info()["named_endpoints"]

    @functools.cached_property
    def page(self) -> tuple[dict, dict]:
        """The page's events by fn_index and its components by id, from the config its /config serves."""
        config = self.demo.config
        events = {event["id"]: event for event in config["dependencies"]}
        return events, {component["id"]: component for component in config["components"]}

    def event(self, api_name: str | None, fn_index=None) -> dict | None:
        """The page's event called by its API name, or without one by its index; None if it has none such."""
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
        """(status, one-line problem, payload, the event called); the problem is "" if the body may go on to Gradio.
        Values are checked against the event Gradio will run: on /call/ the one its path names, elsewhere the body's
        fn_index, else the path's name; file values wherever they are."""
        call = _CALL.fullmatch(path)
        try:
            payload = json.loads(body) if body else None
            too_deep = any(at > MAX_DEPTH and isinstance(item, list | dict) for item, at in nested(payload))
        except RecursionError:  # deeper than the parser goes
            payload, too_deep = None, True
        except (ValueError, UnicodeDecodeError):
            if call is None and path.rstrip("/") != _JOIN:
                return 0, "", {}, None
            return 422, 'The request body is not JSON: send {"data": [...]} with one value per parameter.', {}, None
        if too_deep:
            return 422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).", {}, None
        problem = file_values_problem(payload, self.visitors.limits.max_file_bytes)
        if problem:
            return 422, problem, {}, None
        if path.startswith("/gradio_api/mcp") and any(
            isinstance(item, str) and item.startswith("data:") and ";base64," in item[:200]
            for item, _ in nested(payload)
        ):
            # Gradio's MCP server would store an inline file outside the upload quota.
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


def check_named_values(endpoint: dict, api_name: str, payload: dict) -> str:
    """A one-line problem if a v2 call's body (parameters by name, `endpoint` as /gradio_api/info has it) names one the
    endpoint lacks or leaves out one without a default."""
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
    """A one-line problem if `values` do not fit the event's inputs (their number, a file value, an example index)."""
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
            # Shaped as an upload's: Gradio would fail on any other with a traceback.
            if not (isinstance(value, dict) and isinstance(value.get("path"), str)):
                label = component["props"].get("label") or "file"
                return (
                    f"The value for {label} must be null or the object /gradio_api/upload describes a file with "
                    '({"path": ..., "meta": {"_type": "gradio.FileData"}}).'
                )
    return ""
