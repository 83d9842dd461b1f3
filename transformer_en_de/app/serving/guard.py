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
import re
import time
from urllib.parse import unquote, urlsplit

from starlette.datastructures import QueryParams

from .http_answers import RecordedAnswer, answer, body_within, contained, refuse, replay
from .uploads import stored_upload

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


class RequestGuard:
    """ASGI middleware, first in line: bounded bodies, checked calls, admitted sessions, uploads within their quota,
    the event streams being read counted."""

    def __init__(self, app, *, demo, serving):
        self.app, self.demo, self.serving = app, demo, serving

    @staticmethod
    def address(scope) -> str:
        """The connection's address, or the visitor's as uvicorn's proxy rule rewrote it (server.py)."""
        return (scope.get("client") or ("unknown",))[0]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method, serving, address = scope["path"], scope["method"], self.serving, self.address(scope)
        if path.rstrip("/") == _DEEP_LINK:
            return await refuse(send, 404, "This app offers no deep links.")
        if method == "GET" and _STREAM.fullmatch(path):
            with serving.streams.open(address, STREAMS_PER_ADDRESS) as admitted:
                if admitted:
                    return await self.read(scope, receive, send)
            open_now = f"This address has {STREAMS_PER_ADDRESS} responses open (streams, downloads)"
            return await refuse(send, 429, f"{open_now}; close one.")
        if method in ("GET", "HEAD", "OPTIONS"):
            return await contained(self.app, scope, receive, send)
        if path.startswith(_UPLOAD):
            return await serving.uploads(self.app, scope, receive, send, address)
        # Read here (bounded) so that the call can be checked, then replayed to Gradio.
        most = serving.limits.max_body_bytes
        too_large = f"The request body is too large; the limit here is {most:,} bytes (send files through the upload)."
        body = await body_within(receive, send, most, serving.limits.request_seconds, too_large)
        if body is None:
            return
        slot = None
        try:
            payload, event = self.check_call(path, body)
            raw = path.startswith("/gradio_api/call/")
            if event is None or not (raw or path.rstrip("/") == _JOIN):  # not a call that enters Gradio's queue
                return await contained(self.app, scope, replay(body, receive), send)
            session, counted = payload.get("session_hash"), event["id"] in serving.counted
            if raw and (slot := serving.unread_slot(address)) is None:
                unread = f"This address has posted {UNREAD_CALLS} calls whose results it has not read yet"
                raise Refused(429, f"{unread}; read them (GET /gradio_api/call/<api>/<event_id>) first.")
            serving.check_pace(event, address)
            try:
                serving.admit_session(session, address, counted)
            except Refused:
                if not session or serving.session_of(session) or not await self.page_opens(session):
                    raise
                serving.admit_session(session, address, counted)  # a page's: from the pages' bucket
        except Refused as refusal:
            serving.posted(slot, None, None)
            return await refuse(send, *refusal.args)
        # Gradio's answer is held until noted here: a raw call's stream, read by its event id, counts as read from
        # its first byte.
        answered = RecordedAnswer()
        await contained(self.app, scope, replay(body, receive), answered)
        value = answered.value()
        queued = value.get("event_id") if answered.status == 200 and isinstance(value, dict) else None
        if raw:  # Gradio names the session of a call without one after its event id
            serving.posted(slot, queued, session or queued)
        if queued is None and counted:
            serving.served(session)  # refused by Gradio (its queue full): it never runs
        return await answer(send, answered.status, value)

    async def page_opens(self, session: str) -> bool:
        """Whether the heartbeat of `session` opens within `PAGE_OPENS_SECONDS` (a page opens it beside its first
        call, on another connection)."""
        deadline = time.monotonic() + PAGE_OPENS_SECONDS
        while not self.serving.readers.is_read(session) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.serving.readers.is_read(session)

    async def read(self, scope, receive, send):
        """A GET that stays open; an event stream (a page's by session, a raw call's by event id) counts as read."""
        path, serving = scope["path"], self.serving
        if path.startswith("/gradio_api/file") and b"," in dict(scope["headers"]).get(b"range", b""):
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        if heartbeat := _HEARTBEAT.fullmatch(path):
            # A page is open while its heartbeat is, however late its event stream opens on a slow link.
            with serving.readers.open(heartbeat["session"]):
                await contained(self.app, scope, receive, send)
            if serving.session_of(heartbeat["session"]):  # admitted: it may have requests to stop
                serving.page_closed(heartbeat["session"])
            return
        call, key = _CALL_STREAM.fullmatch(path), None
        if call:
            key = ("call", call["event"])
        elif path.rstrip("/") == "/gradio_api/queue/data":
            key = QueryParams(scope.get("query_string", b"")).get("session_hash") or None
        if key is None:  # not an event stream
            return await contained(self.app, scope, receive, send)
        if (session := serving.session_of(key)) is None:
            asked = key[1] if call else key
            return await refuse(send, 404, f"No call of {asked[:40]!r} came here lately: nothing to stream.")

        async def watched_send(message):
            with serving.sends.open(self.address(scope)):
                await send(message)

        with serving.readers.open(session):
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
        check_file_values(payload, self.serving.limits.max_file_bytes)
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
        by_path = call is not None and (path.startswith("/gradio_api/call/") or fn_index is None)
        if by_path:
            asked, event = f"/{call['api']}", next((e for e in events.values() if e["api_name"] == call["api"]), None)
        else:
            asked, event = f"fn_index {fn_index!s:.20}", events.get(fn_index) if isinstance(fn_index, int) else None
        if event is None:
            names = ", ".join(sorted(self.endpoints))
            raise Refused(404, f"This app has no event {asked[:60]}; its API endpoints are {names}.")
        # Gradio runs the path's event and reads no fn_index there: a call naming two events is refused, not guessed.
        if by_path and fn_index is not None and events.get(fn_index) is not event:
            raise Refused(422, f"This call names /{call['api']} in its path and another event: omit fn_index.")
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
