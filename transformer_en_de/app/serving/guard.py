"""The HTTP front, an ASGI middleware: what a raw client sends is bounded and checked before Gradio sees it, and no
client's calls crowd out another visitor's. Each defence after its attack (benchmarks/hostile_clients.py unless named):
- bad calls, heavy, server files, slow bodies: a body too large or too slow, JSON too deep, an event the page lacks,
  values that do not fit it, a file value that is no upload: one line each where Gradio would fail;
- session churn, churn then learners: new sessions per address in three buckets (pages with their heartbeat open,
  other sessions, calls without one); a session has one call at once; a paced event (arena_attacks: readers) has a
  bucket per address;
- queue flood: an address has at most `UNREAD_CALLS` raw calls posted and not yet read;
- held heartbeats: at most `STREAMS_PER_ADDRESS` open responses; a heartbeat's end cancels its session's requests;
- slow links, unread views: streams read and pages open are counted (the scheduler drops work nobody reads), and so
  are stalled sends (their address gets no side work);
- deep links are refused: the app offers none, and one would save what a visitor typed.
"""

import asyncio
import functools
import json
import re
import time
from urllib.parse import unquote, urlsplit

from starlette.datastructures import QueryParams

from .http_answers import body_within, contained, refuse
from .uploads import uploaded_path

# Gradio's client routes (its guide "Querying Gradio Apps with Curl"): no public table of them exists (`__init__.py`).
_CALL = re.compile(r"/gradio_api/(?:call|run|api)/(?P<v2>v2/)?(?P<api>[^/]+)/?")
# Responses that stay open as long as their client likes: event streams, heartbeats, file downloads, MCP streams.
_STREAM = re.compile(
    r"/gradio_api/(?:(?P<queue>queue/data)|heartbeat/(?P<page>[^/]+)|call/(?:v2/)?[^/]+/(?P<event>[^/]+)"
    r"|file[=/].*|mcp/.*)/?"
)
_JOIN, _UPLOAD, _DEEP_LINK = "/gradio_api/queue/join", "/gradio_api/upload", "/gradio_api/deep_link"
MAX_DEPTH = 32  # JSON nesting: a call's values are a few levels deep
UNREAD_CALLS = 8  # raw calls an address may have posted and not begun to read: a few of the callbacks
REMEMBERED = 10_000  # sessions and raw calls remembered (the least recent forgotten first), as many as Gradio keeps
PAGE_OPENS_SECONDS = 1.0  # how long a new session's refused first call waits for its page's heartbeat
STREAMS_PER_ADDRESS = 256  # responses an address holds open (streams, downloads): a class of 30 holds ~60
NOT_STARTED = "this call was not started. Try again soon."


class Refused(Exception):
    """(status, one line): a request the front answers itself."""


class RequestGuard:
    """ASGI middleware, first in line."""

    def __init__(self, app, *, demo, serving):
        self.app, self.serving = app, serving
        config = demo.config  # as the page's /config serves it
        self.events = {event["id"]: event for event in config["dependencies"]}  # by fn_index
        self.components = {component["id"]: component for component in config["components"]}
        self.endpoints = demo.get_api_info()["named_endpoints"]  # as /gradio_api/info documents them, by name

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method, serving = scope["path"], scope["method"], self.serving
        address = (scope.get("client") or ("unknown",))[0]  # as uvicorn's proxy rule rewrote it (server.py)
        if path.rstrip("/") == _DEEP_LINK:
            return await refuse(send, 404, "This app offers no deep links.")
        if method == "GET" and (stream := _STREAM.fullmatch(path)):
            with serving.streams.open(address, STREAMS_PER_ADDRESS) as admitted:
                if admitted:
                    return await self.read(scope, receive, send, stream, address)
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
        slot = noted = None
        try:
            payload, event = self.check_call(path, body)
            raw = path.startswith("/gradio_api/call/")
            if event is not None and (raw or path.rstrip("/") == _JOIN):  # a call that enters Gradio's queue
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
                noted = functools.partial(self.noted, slot, session, counted)
        except Refused as refusal:
            serving.posted(slot, None, None)
            return await refuse(send, *refusal.args)
        await contained(self.app, scope, receive, send, body, noted=noted)

    def noted(self, slot, session: str | None, counted: bool, status: int, answer) -> None:
        """Gradio's answer to a call noted before its client has it (a raw call's stream counts from its first byte)."""
        queued = answer.get("event_id") if status == 200 and isinstance(answer, dict) else None
        if slot is not None:  # a raw call: Gradio names the session of a call without one after its event id
            self.serving.posted(slot, queued, session or queued)
        if queued is None and counted:
            self.serving.served(session)  # refused by Gradio (its queue full): it never runs

    async def page_opens(self, session: str) -> bool:
        """Whether the heartbeat of `session` opens within `PAGE_OPENS_SECONDS` (beside its first call, as a page's)."""
        deadline = time.monotonic() + PAGE_OPENS_SECONDS
        while not self.serving.readers.is_read(session) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.serving.readers.is_read(session)

    async def read(self, scope, receive, send, stream: re.Match, address: str):
        """A GET that stays open: a page is open while its heartbeat is (however late its event stream opens on a slow
        link); an event stream (a page's by session, a raw call's by event id) counts as read."""
        serving, page, event = self.serving, stream["page"], stream["event"]
        if b"," in dict(scope["headers"]).get(b"range", b""):
            # Several ranges at once: served whole (a server may ignore Range), not a failure in the file route.
            scope = dict(scope, headers=[(key, value) for key, value in scope["headers"] if key != b"range"])
        if not (page or event or stream["queue"]):  # a download or an MCP stream
            return await contained(self.app, scope, receive, send)
        key = ("call", event) if event else QueryParams(scope["query_string"]).get("session_hash", "")
        if (session := page or serving.session_of(key)) is None:
            return await refuse(send, 404, f"No call of {(event or key)[:40]!r} came here lately: nothing to stream.")

        async def watched_send(message):
            with serving.sends.open(address):
                await send(message)

        with serving.readers.open(session):
            await contained(self.app, scope, receive, send if page else watched_send)
        if page and serving.session_of(page):  # an admitted page closed: its requests stop
            serving.page_closed(page)

    def check_call(self, path: str, body: bytes) -> tuple[dict, dict | None]:
        """(payload, the event Gradio will run: None if it runs none), or Refused: every value within `MAX_DEPTH` and
        no file value but an upload's, then the values checked against the event (on /call/ the path's, elsewhere the
        body's fn_index, else the path's)."""
        call, joins = _CALL.fullmatch(path), path.rstrip("/") == _JOIN
        too_deep = Refused(422, f"The request body is JSON nested too deeply (more than {MAX_DEPTH} levels).")
        try:
            payload = json.loads(body) if body else None
        except RecursionError:  # deeper than the parser goes
            raise too_deep from None
        except ValueError:
            return {}, None  # Gradio answers 422
        mcp = path.startswith("/gradio_api/mcp")
        for value, at in nested(payload):
            if at > MAX_DEPTH and isinstance(value, list | dict):
                raise too_deep
            check_file_value(value, self.serving.limits.max_file_bytes, mcp)
        v2 = call is not None and call["v2"]
        fn_index = payload.get("fn_index") if isinstance(payload, dict) else None
        if not (call or joins) or not isinstance(payload, dict) or (joins and fn_index is None):
            return {}, None  # no call; or Gradio answers it itself (422, or 400 naming what is missing)
        if not isinstance(payload.get("session_hash"), str | None) or not (v2 or isinstance(payload.get("data"), list)):
            return {}, None
        events = self.events
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
            check_named_values(self.endpoints.get(f"/{call['api']}", {}).get("parameters", []), call["api"], payload)
        else:
            check_values(event, self.components, payload["data"])
        return payload, event


def check_named_values(parameters: list, api_name: str, payload: dict) -> None:
    """Refused if a v2 call's body names a parameter the endpoint lacks or leaves out one without a default."""
    has_default = {parameter["parameter_name"]: parameter.get("parameter_has_default") for parameter in parameters}
    unknown = [name for name in payload if name not in has_default and name not in ("session_hash", "oauth_token")]
    missing = [name for name, default in has_default.items() if not default and name not in payload]
    if unknown or missing:
        wrong = f"has no parameter {unknown[0][:40]!r}" if unknown else f"needs {missing[0]!r}"
        raise Refused(422, f"/call/v2/{api_name} {wrong}; send its parameters by name: {', '.join(has_default)}.")


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
        is_upload = isinstance(value, dict) and isinstance(value.get("path"), str)
        if component["type"] == "dataset" and value is not None:
            last = len(component["props"]["samples"]) - 1
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= last:
                raise Refused(422, f"{name} takes an example number from 0 to {last}; this call sent {value!r:.40}.")
        elif component["type"] in ("file", "uploadbutton") and not (value is None or is_upload):  # Gradio: a traceback
            label = component["props"].get("label") or "A file"
            upload = 'the object /gradio_api/upload describes: {"path": ..., "meta": {"_type": "gradio.FileData"}}'
            raise Refused(422, f"{label} must be null or {upload}.")


def check_file_value(value, max_bytes: int, mcp: bool) -> None:
    """Refused if `value` is a file value (a FileData, or a bare {"path": ...}) that is no upload stored here: Gradio
    copies every file value into its cache before the callback runs (reading a path, fetching a URL); or on MCP a file
    inline (a data: URL), which Gradio's MCP server would store outside the upload quota."""
    if mcp and isinstance(value, str) and value.startswith("data:") and ";base64," in value[:200]:
        raise Refused(422, "An MCP call here takes no file inline (a data: URL); upload it to /gradio_api/upload.")
    if not isinstance(value, dict):
        return
    meta, url = value.get("meta"), value.get("url")
    if not ("path" in value or "url" in value or isinstance(meta, dict) and meta.get("_type") == "gradio.FileData"):
        return
    if uploaded_path(value, max_bytes) is None:
        raise Refused(422, "A file value must be a file uploaded to this server (through /gradio_api/upload).")
    # The page sends the URL this server gave the upload (.../gradio_api/file=PATH); no other URL is fetched.
    if url is not None and not unquote(urlsplit(str(url)).path).endswith(f"/file={value['path']}"):
        raise Refused(422, "A file value's url must be null or the one this server gave its upload.")


def nested(value):
    """`value` and every value inside it, each with its depth (1 for `value`)."""
    pending = [(value, 1)]
    while pending:
        item, at = pending.pop()
        yield item, at
        if isinstance(item, (list, dict)):
            pending += [(child, at + 1) for child in (item.values() if isinstance(item, dict) else item)]
