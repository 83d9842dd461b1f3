"""The app's HTTP server: the page mounted in a FastAPI app of our own (`gr.mount_gradio_app`, its API also served as
MCP tools at /gradio_api/mcp/), behind the HTTP front (`guard.RequestGuard`), served by uvicorn with its public
settings only.

Who a client is: the connection's address, or behind a proxy the address that proxy appended to X-Forwarded-For,
trusted only from the proxy's own address (uvicorn's `proxy_headers` with `forwarded_allow_ips`), never from any peer.
On a Hugging Face Space that proxy connects from the Space's private networks (`SPACE_PROXY_NETWORKS`).

Connections (hostile_clients.py: slow connections, slow bodies, held heartbeats): headers are at most
`max_header_bytes` (`h11_max_incomplete_event_size`), an idle kept-alive connection closes after `keep_alive_seconds`
(`timeout_keep_alive`), a body must be all in within `request_seconds` (the front: `http_answers.body_within`), the
process may open as many descriptors as its hard limit allows (`raise_descriptor_limit`), and past `max_connections`
(or those descriptors, less the process's own) a new request is answered 503 at once (`limit_concurrency`). What
uvicorn cannot bound is said in `__init__.py`.
"""

import os
import resource
import threading
import time

import gradio as gr
import uvicorn
from fastapi import FastAPI

from .guard import Gate, RequestGuard
from .limits import Limits
from .memory import giving_back
from .uploads import UploadQuota

# On a Space every request comes through the Hub's proxy, from the Space's private network; nothing else reaches it.
SPACE_PROXY_NETWORKS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"


def raise_descriptor_limit() -> int:
    """Let the process open as many files as its hard limit allows (connections that never finish their headers each
    hold one); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


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
    descriptors = raise_descriptor_limit()
    app = FastAPI(lifespan=giving_back(limits))  # memory given back (memory.py)
    app.add_middleware(RequestGuard, max_body_bytes=limits.max_body_bytes, demo=demo, gate=gate, uploads=uploads)
    app = gr.mount_gradio_app(app, demo, path="", max_file_size=limits.max_file_bytes, css=css, mcp_server=True)
    config = uvicorn.Config(
        app,
        host=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        log_level="info",  # says where the page is once it listens ("Uvicorn running on ...")
        access_log=False,  # a flood of requests would flood the log
        http="h11",  # the implementation whose header size uvicorn can bound
        # Counted with every connection open, idle or still sending its headers: below the descriptors, with room for
        # the process's own files (comparison models, workers, Gradio's files), so that past it a request is told 503.
        limit_concurrency=min(limits.max_connections, descriptors - 256),
        timeout_keep_alive=limits.keep_alive_seconds,
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
