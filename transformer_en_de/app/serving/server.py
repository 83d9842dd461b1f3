"""The app's HTTP server: the page mounted in a FastAPI app of our own (`gr.mount_gradio_app`), behind the HTTP front
(`guard.RequestGuard`), served by uvicorn with its proxy rule and bounds on connections.

Who a client is: the connection's address, or behind a proxy the address that proxy appended to X-Forwarded-For,
trusted only from the proxy's own address (uvicorn's `proxy_headers` with `forwarded_allow_ips`), never from any peer.
On a Hugging Face Space that proxy connects from the Space's private networks (`SPACE_PROXY_NETWORKS`).

Every open connection holds a file descriptor. A client that opens thousands and never finishes its request (its
headers, or its body a byte at a time) would exhaust the process's descriptors. So a connection must send its whole
request within `request_seconds` (the first, and each next one on a kept-alive connection), idle kept-alive
connections close after `keep_alive_seconds`, and connections beyond `max_connections` (below the descriptor limit,
with room for the process's own files) make room by closing the oldest connection whose client is still sending or
idle; a request that is all in and being answered (a visitor's call, an event stream) is never cut. Nothing is logged
for a closed connection: a flood of them would flood the log.

uvicorn has settings for what it can bound (`timeout_keep_alive`, `h11_max_incomplete_event_size`, `backlog`,
`proxy_headers`), and they are used. It has none for the deadline on a whole request or for a cap that closes a
connection (`limit_concurrency` answers 503 and keeps every connection open), and Gradio has none either. Those two
stay in a subclass of uvicorn's h11 protocol (`bounded_protocol`), not in an ASGI middleware: uvicorn calls the ASGI
app only once a request's headers are all in, so a middleware never sees a client whose headers never end (the first
attack above), and ASGI gives it no handle to close a connection (none to close the oldest idle one, nor one whose
client is between requests).
"""

import asyncio
import os
import resource
import threading
import time

import gradio as gr
import uvicorn
from fastapi import FastAPI

from .guard import Gate, RequestGuard
from .internals import H11Protocol, keep_sessions, request_received
from .limits import Limits
from .memory import giving_back
from .uploads import UploadQuota

# On a Space every request comes through the Hub's proxy, from the Space's private network; nothing else reaches it.
SPACE_PROXY_NETWORKS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
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


def bounded_protocol(max_connections: int, request_seconds: float) -> type:
    """uvicorn's h11 protocol with a cap on open connections and a deadline on each whole request."""

    opened: dict = {}  # the connections open, oldest first

    class BoundedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            opened[self] = None
            if len(opened) > max_connections:
                # The oldest connection whose client is idle or still sending makes room (a slow client's, most
                # likely); a request being answered is never cut. Only when every one is busy is the newcomer closed.
                closed = next(
                    (other for other in opened if not request_received(other) and not other.transport.is_closing()),
                    self,
                )
                closed.transport.abort()  # frees the descriptor now; connection_lost forgets the connection
                if closed is self:
                    return
            self.request_deadline()

        def connection_lost(self, exc) -> None:
            opened.pop(self, None)
            super().connection_lost(exc)

        answered = 0  # requests answered on this connection

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.answered += 1
            self.request_deadline()  # the next request on this connection has its own

        def request_deadline(self) -> None:
            answered = self.answered

            def check():  # the next request, not answered since, is not all in yet (its headers or its body)
                if self.answered == answered and not request_received(self) and not self.transport.is_closing():
                    self.transport.abort()

            asyncio.get_running_loop().call_later(request_seconds, check)

    return BoundedH11Protocol


def build_server(
    demo: gr.Blocks,
    *,
    gate: Gate,
    uploads: UploadQuota,
    limits: Limits,
    css: str,
    host: str | None = None,
    port: int | None = None,
    forwarded_allow_ips: str = "",
) -> uvicorn.Server:
    """The page mounted at the root of our FastAPI app, the HTTP front (`RequestGuard`, with the page's `gate` and
    `uploads`) first in line, and the server bounded. The host and port default to Gradio's (GRADIO_SERVER_NAME /
    GRADIO_SERVER_PORT, as a Space sets them). `forwarded_allow_ips`: the proxies whose X-Forwarded-For is trusted
    (addresses or networks, comma-separated; "" for none)."""
    app = FastAPI(lifespan=giving_back(demo, limits, gate.readers.is_read))  # memory given back (memory.py)
    app.add_middleware(RequestGuard, max_body_bytes=limits.max_body_bytes, demo=demo, gate=gate, uploads=uploads)
    app = gr.mount_gradio_app(app, demo, path="", max_file_size=limits.max_file_bytes, css=css)
    keep_sessions(demo, limits.sessions_kept)  # bounded sessions in memory, as launch() would set, once mounted
    config = uvicorn.Config(
        app,
        host=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        log_level="warning",
        http=bounded_protocol(connection_limit(limits.max_connections), limits.request_seconds),
        timeout_keep_alive=limits.keep_alive_seconds,
        backlog=BACKLOG,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=2,  # event streams stay open as long as their pages: stop without waiting for them
        # The proxy rule: X-Forwarded-For rewrites the client's address only on connections from these addresses
        # (uvicorn's own default would trust loopback peers: here nothing unless the operator says).
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or "",
    )
    return uvicorn.Server(config)


def forwarded_allow_ips_by_default(environ) -> str:
    """The operator's FORWARDED_ALLOW_IPS; else on a Space (the runtime sets SPACE_ID) the private networks the Hub's
    proxy connects from, whose last X-Forwarded-For hop is the visitor's; elsewhere nothing is trusted."""
    if "FORWARDED_ALLOW_IPS" in environ:
        return environ["FORWARDED_ALLOW_IPS"]
    return SPACE_PROXY_NETWORKS if environ.get("SPACE_ID") else ""


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
