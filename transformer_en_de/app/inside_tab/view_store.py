"""The views the Inside tab's page redraws from, kept on the server: another kind, layer or head needs no model run,
and a session keeps only its view's id. Bounded (views and bytes), expiring, one view per session."""

import json
import secrets
import threading
import time
import zlib
from collections import OrderedDict

# The views the page redraws from (`ViewStore`): the latest 64, 32 MB of compressed JSON in all (JSON of weights
# compresses about 5x: our model's 1.3 MB view to 0.24 MB), each kept 15 minutes after its last use; one a session (its
# page redraws only its latest), so that a session asking for view after view never pushes out another's.
VIEWS_KEPT = 64
VIEW_STORE_BYTES = 32_000_000
VIEW_SECONDS = 900.0

EXPIRED = {
    "message": f"This view is no longer kept (the server keeps the latest {VIEWS_KEPT}, each {VIEW_SECONDS / 60:g} "
    "minutes after its last use): press Look inside again.",
    "notices": [],
}


class ViewStore:
    """The views the page redraws from (another kind, layer or head needs no model run), on the server under random
    ids: a session keeps only its id. One view per session (its latest), at most `max_views` views and `max_bytes` of
    compressed JSON in all, the least recently used dropped first, each dropped `seconds` after its last use; `get` of
    a dropped one is `EXPIRED`."""

    def __init__(
        self,
        max_views: int = VIEWS_KEPT,
        max_bytes: int = VIEW_STORE_BYTES,
        seconds: float = VIEW_SECONDS,
        clock=time.monotonic,
    ):
        self.max_views, self.max_bytes, self.seconds, self.clock = max_views, max_bytes, seconds, clock
        self.views: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # id -> (compressed JSON, last use)
        self.latest: dict[str, str] = {}  # session -> the id of its view
        self.bytes = 0
        self.lock = threading.Lock()

    def put(self, view: dict, session: str | None = None) -> str:
        """Keep `view` (at most `view_request.MAX_VIEW_BYTES` of JSON: `inside_request`'s answer) in place of the
        session's earlier one; returns its id."""
        data = zlib.compress(json.dumps(view).encode(), 1)
        view_id = secrets.token_urlsafe(16)
        with self.lock:
            earlier = self.latest.pop(session, None) if session is not None else None
            if earlier in self.views:
                self.bytes -= len(self.views.pop(earlier)[0])
            if session is not None:
                self.latest[session] = view_id
            self.views[view_id] = (data, self.clock())
            self.bytes += len(data)
            self.drop_old()
        return view_id

    def get(self, view_id: str | None) -> dict | None:
        """The view kept under `view_id` (its time starts again); None for none (nothing looked at yet), `EXPIRED`
        for one no longer kept."""
        if not view_id:
            return None
        with self.lock:
            self.drop_old()
            if view_id not in self.views:
                return EXPIRED
            data, _ = self.views.pop(view_id)
            self.views[view_id] = (data, self.clock())  # the most recently used: last
        return json.loads(zlib.decompress(data))

    def drop_old(self) -> None:
        """Drop the least recently used views while over a bound, then those unused for `seconds` (the lock held)."""
        now = self.clock()
        while self.views:
            _, (data, used) = next(iter(self.views.items()))
            if len(self.views) <= self.max_views and self.bytes <= self.max_bytes and now - used <= self.seconds:
                return
            self.views.popitem(last=False)
            self.bytes -= len(data)
            if len(self.latest) > self.max_views:  # sessions whose views are gone, forgotten
                self.latest = {session: kept for session, kept in self.latest.items() if kept in self.views}


__all__ = ["EXPIRED", "VIEW_SECONDS", "VIEW_STORE_BYTES", "VIEWS_KEPT", "ViewStore"]
