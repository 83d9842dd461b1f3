"""The app's HTTP server: the page mounted in a FastAPI app of our own (`gr.mount_gradio_app`), behind the HTTP front
(`guard.RequestGuard`), served by uvicorn with bounds on connections.

Every open connection holds a file descriptor. A client that opens thousands and never finishes its request's headers
would exhaust the process's descriptors: every visitor then times out, and each failed accept is logged. So a
connection must finish its request's headers within `header_seconds` (the first request, and each next one on a
kept-alive connection), idle kept-alive connections close after `keep_alive_seconds`, and connections beyond
`max_connections` (below the descriptor limit, with room for the process's own files) make room by closing the oldest
connection with no request in progress; the closures are logged once a minute with their count, not once each.
"""

import asyncio
import os
import resource
import threading
import time

import gradio as gr
import uvicorn
from fastapi import FastAPI

from .internals import H11Protocol, current_request, keep_sessions, request_in_progress

# Connections accepted in one go before any is closed (asyncio accepts up to the listen backlog per wake-up).
BACKLOG = 64


def connection_limit(wanted: int) -> int:
    """`wanted`, or fewer where the descriptor limit (soft) leaves less room: half of what the process has not opened
    yet (it opens more as it runs: the comparison models, their workers, Gradio's files), less a backlog's worth."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    open_now = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 64
    return max(8, min(wanted, (soft - open_now) // 2 - BACKLOG))


class Closures:
    """Connections closed by the bounds, counted; one log line a minute at most."""

    def __init__(self, every: float = 60.0):
        self.counts = {"over the connection limit": 0, "headers too slow": 0}
        self.every, self._logged = every, float("-inf")
        self._lock = threading.Lock()

    def add(self, why: str) -> None:
        with self._lock:
            self.counts[why] += 1
            now = time.monotonic()
            if now - self._logged < self.every:
                return
            self._logged = now
            counts = ", ".join(f"{count:,} {reason}" for reason, count in self.counts.items() if count)
        print(f"app.py: connections closed so far: {counts}.", flush=True)


def bounded_protocol(max_connections: int, header_seconds: float, closures: Closures) -> type:
    """uvicorn's h11 protocol with a cap on open connections and a deadline on each request's headers."""

    opened: dict = {}  # the connections open, oldest first

    class BoundedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            opened[self] = None
            if len(opened) > max_connections:
                # The oldest connection with no request in progress makes room (a slow client's, most likely); a
                # request being answered is never cut. Only when every connection is busy is the newcomer closed.
                closed = next(
                    (other for other in opened if other.waiting_for_request and not other.transport.is_closing()),
                    self,
                )
                closures.add("over the connection limit")
                closed.transport.abort()  # frees the descriptor now; connection_lost forgets the connection
                if closed is self:
                    return
            self.header_deadline()

        def connection_lost(self, exc) -> None:
            opened.pop(self, None)
            super().connection_lost(exc)

        @property
        def waiting_for_request(self) -> bool:
            """No request read yet on this connection, or the last one answered: nothing in progress to cut."""
            return not request_in_progress(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.header_deadline()  # the next request on this connection has its own

        def header_deadline(self) -> None:
            cycle = current_request(self)

            def check():  # still no new request read since the deadline was set
                if current_request(self) is cycle and self.waiting_for_request and not self.transport.is_closing():
                    closures.add("headers too slow")
                    self.transport.abort()

            asyncio.get_running_loop().call_later(header_seconds, check)

    return BoundedH11Protocol


def build_server(demo: gr.Blocks, *, front, limits, css: str, host: str, port: int) -> uvicorn.Server:
    """The page mounted at the root of our FastAPI app, `front` (an ASGI middleware: a class and its keywords) first
    in line, and the server bounded."""
    app = FastAPI()
    app.add_middleware(front[0], **front[1])
    keep_sessions(demo, limits.sessions_kept)  # bounded sessions in memory, as launch() would set
    app = gr.mount_gradio_app(app, demo, path="", max_file_size=limits.max_file_bytes, css=css)
    closures = Closures()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=bounded_protocol(connection_limit(limits.max_connections), limits.header_seconds, closures),
        timeout_keep_alive=limits.keep_alive_seconds,
        backlog=BACKLOG,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=2,  # event streams stay open as long as their pages: stop without waiting for them
        # Who the client is behind a proxy is decided in one place, the HTTP front (`guard.scope_address`), by the
        # operator's setting; uvicorn would otherwise rewrite the address from X-Forwarded-For for loopback peers.
        proxy_headers=False,
    )
    return uvicorn.Server(config)


def start_in_thread(server: uvicorn.Server, timeout: float = 60.0) -> threading.Thread:
    """Run `server` in a daemon thread (tests, benchmarks); returns once it accepts connections."""
    thread = threading.Thread(target=server.run, name="app server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app server did not start")
        time.sleep(0.05)
    return thread
