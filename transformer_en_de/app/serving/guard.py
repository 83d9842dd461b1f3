"""The HTTP front, an ASGI middleware: what a raw client sends is bounded and checked before Gradio sees it, and no
client's calls crowd out another visitor's (attacks of benchmarks/hostile_clients.py unless named).

- Bad calls, heavy, server files, slow bodies: a body too large or too slow, JSON too deep, an event the page lacks,
  values that do not fit it, a file value that is no upload: one line each where Gradio would fail (a 500 or a
  traceback); a body that is no call at all Gradio refuses itself (422).
- Session churn, churn then learners: new sessions per address in three buckets (pages with their heartbeat open,
  other sessions, calls without one); a session has one call at once, as a page; a paced event (arena_attacks:
  readers) has a bucket per address.
- Queue flood: an address has at most `UNREAD_CALLS` raw calls posted and not yet read.
- Held heartbeats: at most `STREAMS_PER_ADDRESS` open responses; a heartbeat's end cancels its session's requests.
- Slow links, unread views: `readers` counts the streams read and pages open, so that the scheduler drops work nobody
  reads; an address whose sends to its streams stall gets no side work.
- Deep links are refused: the app offers none, and one would save what a visitor typed.
"""

import asyncio
import functools
import json
import math
import re
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from urllib.parse import unquote, urlsplit

from starlette.datastructures import QueryParams

from .limits import Limits, RateLimit, keep_latest
from .uploads import OpenResponses, RecordedAnswer, answer, body_within, contained, refuse, replay, stored_upload

# Gradio's client routes (its guide "Querying Gradio Apps with Curl"): no public table of them exists (`__init__.py`).
_CALL_STREAM = re.compile(r"/gradio_api/call/(?:v2/)?[^/]+/(?P<event>[^/]+)/?")
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<v2>v2/)?(?P<api>[^/]+)/?")
_HEARTBEAT = re.compile(r"/gradio_api/heartbeat/(?P<session>[^/]+)/?")
_JOIN, _UPLOAD, _DEEP_LINK = "/gradio_api/queue/join", "/gradio_api/upload", "/gradio_api/deep_link"
# Responses that stay open as long as their client likes: event streams, heartbeats, file downloads, MCP streams.
_STREAM = re.compile(r"/gradio_api/(?:queue/data|heartbeat/[^/]+|call/(?:v2/)?[^/]+/[^/]+|file[=/].*|mcp/.*)/?")
MAX_DEPTH = 32  # JSON nesting: a call's values are a few levels deep
UNREAD_CALLS = 8  # raw calls an address may have posted and not begun to read: a few of the callbacks
REMEMBERED = 10_000  # sessions and raw calls remembered (the least recent forgotten first), as many as Gradio keeps
PAGE_OPENS_SECONDS = 1.0  # how long a new session's refused first call waits for its page's heartbeat
STREAMS_PER_ADDRESS = 256  # responses an address holds open (streams, downloads): a class of 30 holds ~60
NOT_STARTED = "this call was not started. Try again soon."


class Refused(Exception):
    """(status, one line): a request the front answers itself."""


class Visitors:
    """What the front knows of its visitors and shares with the callbacks."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.readers = OpenResponses()  # the event streams being read and pages open, by session
        self.streams = OpenResponses()  # the responses open that stay open, by address
        # Sends to event streams in progress, by address: uvicorn's `send` waits for the client to take the bytes, so
        # an unread stream (~200 kB of a view held in memory) is known only there.
        self.sends = OpenResponses()
        burst, per_second = limits.new_sessions_per_address_burst, limits.new_sessions_per_address_per_second
        self.new_sessions = RateLimit(1 / per_second, burst, REMEMBERED)  # by (address, kind of session)
        # Sessions admitted lately → the address of their latest call; raw calls, ("call", event id) → their session.
        self._known: OrderedDict[str | tuple, str] = OrderedDict()
        self._calls: OrderedDict[str, float] = OrderedDict()  # session → when its call queued or running came
        self._unread: OrderedDict[object, tuple[str, float]] = OrderedDict()  # raw call → (address, when), unread
        self._lock = threading.Lock()
        self.counted: set[int] = set()  # the fn_index of each event whose calls count
        self.paces: dict[int, RateLimit] = {}  # fn_index → its calls' pace, by address

    def admit_session(self, session: str | None, address: str, counted: bool = True) -> None:
        """Refused if a call of `session` from `address` may not enter Gradio's queue; a `counted` call holds its
        session's one place until its callback ends (`serving`)."""
        now = time.monotonic()
        with self._lock:
            if session is None or session not in self._known:
                kind = "no session" if session is None else "page" if self.readers.is_read(session) else "other"
                if self.new_sessions.take((address, kind)):
                    raise Refused(429, f"Too many new sessions from this address at once; {NOT_STARTED}")
            if session is None:
                return
            keep_latest(self._known, session, address, REMEMBERED)
            # A call older than any time limit was dropped unstarted by Gradio.
            if counted and now - self._calls.get(session, -math.inf) < self.limits.file.seconds * 2:
                running = "This session's previous request is still running; this one was not started"
                raise Refused(429, f"{running} (or reload the page).")
            if counted:
                keep_latest(self._calls, session, now, REMEMBERED)

    def paced(self, event: dict, address: str) -> None:
        """Refused if a call of `event` (its config) from `address` is past its pace."""
        pace = self.paces.get(event["id"])
        if pace is not None and pace.take(address):
            rate = f"more often than {1 / pace.interval:g} a second lately"
            raise Refused(429, f"/{event.get('api_name')} was called from this address {rate}; {NOT_STARTED}")

    def unread_slot(self, address: str) -> object | None:
        """A place among the raw calls `address` posted within `stream_wait_seconds` and has not read (taken at once:
        calls posted side by side cannot all pass); None if it has `UNREAD_CALLS`."""
        now = time.monotonic()
        with self._lock:
            while self._unread and now - next(iter(self._unread.values()))[1] > self.limits.stream_wait_seconds:
                self._unread.popitem(last=False)
            if sum(poster == address for poster, _ in self._unread.values()) >= UNREAD_CALLS:
                return None
            self._unread[slot := object()] = (address, now)
            return slot

    def posted(self, slot: object, event: str | None, session: str | None) -> None:
        """A raw call Gradio queued as `event`, whose stream reads `session`; or (no `event`) not queued: slot freed."""
        with self._lock:
            place = self._unread.pop(slot, None)
            if event is not None:
                keep_latest(self._known, ("call", event), session, REMEMBERED)
                if place:
                    self._unread[event] = place

    def stalled(self, address: str) -> int:
        """How many sends to the streams of `address` have waited `stalled_send_seconds` or more."""
        return self.sends.count(address, self.limits.stalled_send_seconds)

    def side_welcome(self, session: str | None) -> bool:
        """Whether side work of `session` may run: its address has under `stalled_streams_per_address` stalled sends."""
        with self._lock:
            address = self._known.get(session)
        return address is None or self.stalled(address) < self.limits.stalled_streams_per_address

    def session_of(self, key: str | tuple) -> str | None:
        """The session a stream reads (by its session, or ("call", event id): read from now on), if it was admitted."""
        with self._lock:
            if isinstance(key, str):
                return key if key in self._known else None
            self._unread.pop(key[1], None)
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
            return self._calls.get(session)

    def served(self, session: str | None) -> None:
        with self._lock:
            self._calls.pop(session, None)


class RequestGuard:
    """ASGI middleware, first in line: bounded bodies, checked calls, admitted sessions, uploads within their quota,
    the event streams being read counted."""

    def __init__(self, app, *, demo, visitors: Visitors, uploads, page_closed):
        self.app, self.demo, self.visitors, self.uploads, self.page_closed = app, demo, visitors, uploads, page_closed

    @staticmethod
    def address(scope) -> str:
        """The connection's address, or the visitor's as uvicorn's proxy rule rewrote it (server.py)."""
        return (scope.get("client") or ("unknown",))[0]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method, visitors, address = scope["path"], scope["method"], self.visitors, self.address(scope)
        if path.rstrip("/") == _DEEP_LINK:
            return await refuse(send, 404, "This app offers no deep links.")
        if method == "GET" and _STREAM.fullmatch(path):
            with visitors.streams.open(address, STREAMS_PER_ADDRESS) as admitted:
                if admitted:
                    return await self.read(scope, receive, send)
            open_now = f"This address has {STREAMS_PER_ADDRESS} responses open (streams, downloads)"
            return await refuse(send, 429, f"{open_now}; close one.")
        if method in ("GET", "HEAD", "OPTIONS"):
            return await contained(self.app, scope, receive, send)
        if path.startswith(_UPLOAD):
            return await self.uploads(self.app, scope, receive, send, address)
        # Read here (bounded) so that the call can be checked, then replayed to Gradio.
        most = visitors.limits.max_body_bytes
        too_large = f"The request body is too large; the limit here is {most:,} bytes (send files through the upload)."
        body = await body_within(receive, send, most, visitors.limits.request_seconds, too_large)
        if body is None:
            return
        slot = None
        try:
            payload, event = self.check_call(path, body)
            raw = path.startswith("/gradio_api/call/")
            if event is None or not (raw or path.rstrip("/") == _JOIN):  # not a call that enters Gradio's queue
                return await contained(self.app, scope, replay(body, receive), send)
            session, counted = payload.get("session_hash"), event["id"] in visitors.counted
            if raw and (slot := visitors.unread_slot(address)) is None:
                unread = f"This address has posted {UNREAD_CALLS} calls whose results it has not read yet"
                raise Refused(429, f"{unread}; read them (GET /gradio_api/call/<api>/<event_id>) first.")
            visitors.paced(event, address)
            try:
                visitors.admit_session(session, address, counted)
            except Refused:
                if not session or visitors.session_of(session) or not await self.page_opens(session):
                    raise
                visitors.admit_session(session, address, counted)  # a page's: from the pages' bucket
        except Refused as refusal:
            visitors.posted(slot, None, None)
            return await refuse(send, *refusal.args)
        # Gradio's answer is held until noted here: a raw call's stream, read by its event id, counts as read from
        # its first byte.
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
        deadline = time.monotonic() + PAGE_OPENS_SECONDS
        while not self.visitors.readers.is_read(session) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.visitors.readers.is_read(session)

    async def read(self, scope, receive, send):
        """A GET that stays open; an event stream (a page's by session, a raw call's by event id) counts as read."""
        path, visitors = scope["path"], self.visitors
        if path.startswith("/gradio_api/file") and b"," in dict(scope["headers"]).get(b"range", b""):
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        if heartbeat := _HEARTBEAT.fullmatch(path):
            # A page is open while its heartbeat is, however late its event stream opens on a slow link.
            with visitors.readers.open(heartbeat["session"]):
                await contained(self.app, scope, receive, send)
            if visitors.session_of(heartbeat["session"]):  # admitted: it may have requests to stop
                self.page_closed(heartbeat["session"])
            return
        call, key = _CALL_STREAM.fullmatch(path), None
        if call:
            key = ("call", call["event"])
        elif path.rstrip("/") == "/gradio_api/queue/data":
            key = QueryParams(scope.get("query_string", b"")).get("session_hash") or None
        if key is None:  # not an event stream
            return await contained(self.app, scope, receive, send)
        if (session := visitors.session_of(key)) is None:
            asked = key[1] if call else key
            return await refuse(send, 404, f"No call of {asked[:40]!r} came here lately: nothing to stream.")

        async def watched_send(message):
            with visitors.sends.open(self.address(scope)):
                await send(message)

        with visitors.readers.open(session):
            return await contained(self.app, scope, receive, watched_send)

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

    def check_call(self, path: str, body: bytes) -> tuple[dict, dict | None]:
        """(payload, the event Gradio will run: None if it runs none), or Refused: the values checked against the event
        (on /call/ the path's, elsewhere the body's fn_index, else the path's), file values wherever they are."""
        call, joins = _CALL.fullmatch(path), path.rstrip("/") == _JOIN
        try:
            payload = json.loads(body) if body else None
            too_deep = any(at > MAX_DEPTH and isinstance(item, list | dict) for item, at in nested(payload))
        except RecursionError:  # deeper than the parser goes
            too_deep = True
        except (ValueError, UnicodeDecodeError):
            return {}, None  # Gradio answers 422
        if too_deep:
            raise Refused(422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).")
        check_file_values(payload, self.visitors.limits.max_file_bytes)
        if path.startswith("/gradio_api/mcp") and any(
            isinstance(item, str) and item.startswith("data:") and ";base64," in item[:200]
            for item, _ in nested(payload)
        ):  # Gradio's MCP server would store an inline file outside the upload quota.
            raise Refused(422, "An MCP call here takes no file inline (a data: URL); upload it to /gradio_api/upload.")
        v2 = call is not None and call["v2"]
        fn_index = payload.get("fn_index") if isinstance(payload, dict) else None
        if not (call or joins) or not isinstance(payload, dict) or (joins and fn_index is None):
            return {}, None  # no call; or Gradio answers it itself (422, or 400 naming what is missing)
        if not isinstance(payload.get("session_hash"), str | None) or not (v2 or isinstance(payload.get("data"), list)):
            return {}, None
        events = self.page[0]
        if call is not None and (path.startswith("/gradio_api/call/") or fn_index is None):
            asked, event = f"/{call['api']}", next((e for e in events.values() if e["api_name"] == call["api"]), None)
        else:
            asked, event = f"fn_index {fn_index!s:.20}", events.get(fn_index) if isinstance(fn_index, int) else None
        if event is None:
            names = ", ".join(sorted(self.endpoints))
            raise Refused(404, f"This app has no event {asked[:60]}; its API endpoints are {names}.")
        if v2:  # the endpoint's parameters by name, at the top level of the body
            check_named_values(self.endpoints.get(f"/{call['api']}", {}), call["api"], payload)
        else:
            check_values(event, self.page[1], payload["data"])
        return payload, event


def check_named_values(endpoint: dict, api_name: str, payload: dict) -> None:
    """Refused if a v2 call's body names a parameter the endpoint lacks or leaves out one without a default."""
    parameters = endpoint.get("parameters", [])
    names = [parameter["parameter_name"] for parameter in parameters]
    unknown = [name for name in payload if name not in names and name not in ("session_hash", "oauth_token")]
    needed = [parameter["parameter_name"] for parameter in parameters if not parameter.get("parameter_has_default")]
    missing = [name for name in needed if name not in payload]
    if unknown or missing:
        wrong = f"has no parameter {unknown[0][:40]!r}" if unknown else f"needs {missing[0]!r}"
        raise Refused(422, f"/call/v2/{api_name} {wrong}; send its parameters by name: {', '.join(names)}.")


def check_values(event: dict, components: dict, values: list) -> None:
    """Refused if `values` do not fit the event's inputs (their number, a file value, an example index)."""
    inputs = [components[number] for number in event["inputs"]]
    shown = [component for component in inputs if not component.get("skip_api")]  # a gr.State takes no value
    name = f"/{event['api_name']}"
    if len(values) not in (len(inputs), len(shown)):
        labels = ", ".join(component["props"].get("label") or component["type"] for component in shown)
        plural = "s" if len(shown) != 1 else ""
        raise Refused(422, f"{name} takes {len(shown)} value{plural} ({labels}); this call sent {len(values)}.")
    for component, value in zip(inputs if len(values) == len(inputs) else shown, values, strict=True):
        if component["type"] == "dataset" and value is not None:
            last = len(component["props"]["samples"]) - 1
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= last:
                raise Refused(422, f"{name} takes an example number from 0 to {last}; this call sent {value!r:.40}.")
        elif component["type"] in ("file", "uploadbutton") and value is not None:
            if not (isinstance(value, dict) and isinstance(value.get("path"), str)):  # Gradio: a traceback
                label = component["props"].get("label") or "file"
                upload = '{"path": ..., "meta": {"_type": "gradio.FileData"}}'
                raise Refused(
                    422, f"The value for {label} must be null or the object /gradio_api/upload describes: {upload}."
                )


def check_file_values(payload, max_bytes: int) -> None:
    """Refused if a file value in a call (a FileData, or a bare {"path": ...}, anywhere) is no upload stored here:
    Gradio copies every file value into its cache before the callback runs (reading a path, fetching a URL)."""
    for value, _ in nested(payload):
        if not isinstance(value, dict):
            continue
        meta, path, url = value.get("meta"), value.get("path"), value.get("url")
        if not ("path" in value or "url" in value or isinstance(meta, dict) and meta.get("_type") == "gradio.FileData"):
            continue
        if stored_upload(path, max_bytes) is None:
            raise Refused(422, "A file value must be a file uploaded to this server (through /gradio_api/upload).")
        # The page sends the URL this server gave the upload (.../gradio_api/file=PATH); no other URL is accepted.
        if url is not None and not (isinstance(url, str) and unquote(urlsplit(url).path).endswith(f"/file={path}")):
            raise Refused(
                422,
                "A file value's url must be the one this server gave its upload (or null): no other URL is fetched.",
            )


def nested(value):
    """`value` and every value inside it, each with its depth (1 for `value`)."""
    pending = [(value, 1)]
    while pending:
        item, at = pending.pop()
        yield item, at
        if isinstance(item, (list, dict)):
            pending += [(child, at + 1) for child in (item.values() if isinstance(item, dict) else item)]
