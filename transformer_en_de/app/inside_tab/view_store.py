"""The views the Inside tab redraws from (another kind, layer or head runs no model), kept on the server under random
ids that sessions hold: one a session (view after view never pushes out another's), at most `VIEWS_KEPT` and
`VIEW_STORE_BYTES` of compressed JSON (our 1.3 MB view is 0.24 MB), the least recently used dropped first, and each
dropped `VIEW_SECONDS` after its last use."""

import json
import secrets
import threading
import time
import zlib
from collections import OrderedDict

VIEWS_KEPT = 64
VIEW_STORE_BYTES = 32_000_000
VIEW_SECONDS = 900.0
EXPIRED = {
    "message": f"This view is no longer kept (the server keeps the latest {VIEWS_KEPT}, each {VIEW_SECONDS / 60:g} "
    "minutes after its last use): press Look inside again.",
}


class ViewStore:
    def __init__(self, max_views=VIEWS_KEPT, max_bytes=VIEW_STORE_BYTES, seconds=VIEW_SECONDS, clock=time.monotonic):
        self.max_views, self.max_bytes, self.seconds, self.clock = max_views, max_bytes, seconds, clock
        self.views: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # id -> (compressed JSON, last use)
        self.latest: dict[str, str] = {}  # session -> the id of its view
        self.bytes = 0
        self.lock = threading.Lock()

    def put(self, view: dict, session: str | None = None) -> str:
        """Keep `view` in place of the session's earlier one; its id."""
        data, view_id = zlib.compress(json.dumps(view).encode(), 1), secrets.token_urlsafe(16)
        with self.lock:
            self.bytes -= len(self.views.pop(self.latest.pop(session, None), (b"", 0))[0])
            if session is not None:
                self.latest[session] = view_id
            self.views[view_id] = (data, self.clock())
            self.bytes += len(data)
            self.drop_old()
        return view_id

    def get(self, view_id: str | None) -> dict | None:
        """The view, its time started again; None for no id, `EXPIRED` for one no longer kept."""
        if not view_id:
            return None
        with self.lock:
            self.drop_old()
            if view_id not in self.views:
                return EXPIRED
            data, _ = self.views.pop(view_id)
            self.views[view_id] = (data, self.clock())
        return json.loads(zlib.decompress(data))

    def drop_old(self) -> None:  # the lock held
        now = self.clock()
        while self.views and (
            len(self.views) > self.max_views
            or self.bytes > self.max_bytes
            or now - next(iter(self.views.values()))[1] > self.seconds
        ):
            self.bytes -= len(self.views.popitem(last=False)[1][0])
        if len(self.latest) > self.max_views:  # sessions whose views are gone, forgotten
            self.latest = {session: kept for session, kept in self.latest.items() if kept in self.views}
