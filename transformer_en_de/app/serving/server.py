"""`Serving`, the one object a page goes through, and its uvicorn server: the page (its API also as MCP tools) behind
the HTTP front (`guard.py`). A client is the connection's address, or the one a trusted proxy appended to
X-Forwarded-For (on a Space, one of `SPACE_PROXY_NETWORKS`)."""

import asyncio
import contextlib
import os
import resource
import threading
import time
from collections.abc import Callable

import gradio as gr
import uvicorn
from fastapi import FastAPI

from transformer_en_de import heap

from .guard import REMEMBERED, RequestGuard, Visitors
from .limits import Limits, RateLimit
from .scheduler import Cancelled, FairScheduler
from .uploads import UploadQuota

SPACE_PROXY_NETWORKS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
WORK, SIDE = "work", "side work"  # the concurrency groups of Gradio's queue for the events that spend CPU


class Serving:
    """The defences of one page: the front's `visitors`, the `uploads` quota and the `scheduler`, within `limits`."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.visitors, self.uploads = Visitors(limits), UploadQuota(limits)
        self.scheduler = FairScheduler(
            heavy_jobs=limits.heavy_jobs,
            is_read=self.visitors.readers.is_read,
            side_welcome=self.visitors.side_welcome,
            stream_wait_seconds=limits.stream_wait_seconds,
        )

    def work(self, listener: Callable, fn: Callable, inputs, outputs, *, side: bool = False, **options):
        """`listener(fn, inputs, outputs, **options)`, its calls counted by the front, in the WORK group or in SIDE's
        own slots (a class's looks inside never hold a translation's: hostile_clients, views at once); inputs as sent
        (the page answers a bad one in one line, where Gradio would log a traceback)."""
        group, limit = (SIDE, self.limits.side_jobs) if side else (WORK, self.limits.concurrent_jobs)
        event = listener(
            fn, inputs, outputs, concurrency_id=group, concurrency_limit=limit, preprocess=False, **options
        )
        self.visitors.counted.add(event["id"])
        return event

    def paced(self, event, burst: int, per_second: float):
        """`event` paced per address at the front: `burst` calls, then `per_second`."""
        self.visitors.paces[event["id"]] = RateLimit(1 / per_second, burst, REMEMBERED)
        return event

    def admitted(self, request):
        """A work callback runs inside; yields when its call entered Gradio's queue (None if unknown)."""
        return self.visitors.serving(request.session_hash)

    def arrival(self, request) -> float | None:
        return self.visitors.arrival(request.session_hash)

    def run_side_work(self, request, work: Callable[[], tuple], dropped: tuple) -> tuple:
        """`work()` admitted in the scheduler's side lane; a call nobody reads answers `dropped`."""
        with self.admitted(request) as arrived:
            try:
                with self.scheduler.job(request.session_hash, self.limits.text.seconds, side=True, since=arrived):
                    return work()
            except Cancelled:
                return dropped

    def page_closed(self, session: str) -> None:
        """A page's heartbeat ended: its requests stop. (Gradio's `unload` runs a callback per page: 256 pages closed
        at once held the server 11 s; hostile_clients: held heartbeats.)"""
        if self.scheduler.cancel(session):
            print("app.py: a visitor left; their request was cancelled.", flush=True)

    def queue(self, demo) -> None:
        """Gradio's queue: 128 calls waiting at most; no route runs a queued event outside it (/run, /api)."""
        demo.queue(max_size=128, api_open=False)

    def server(
        self, demo, *, css: str, host: str | None = None, port: int | None = None, forwarded_allow_ips: str = ""
    ) -> uvicorn.Server:
        """The server for `demo`; host and port default to GRADIO_SERVER_NAME / _PORT (as a Space sets)."""
        limits, descriptors = self.limits, raise_descriptor_limit()
        app = FastAPI(lifespan=self.giving_back_memory)
        app.add_middleware(
            RequestGuard, demo=demo, visitors=self.visitors, uploads=self.uploads, page_closed=self.page_closed
        )
        app = gr.mount_gradio_app(app, demo, path="", max_file_size=limits.max_file_bytes, css=css, mcp_server=True)
        config = uvicorn.Config(
            app,
            host=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
            log_level="info",  # says where the page is ("Uvicorn running on ...")
            access_log=False,  # a flood of requests would flood the log
            http="h11",  # bounds a request's headers (16 kB by default); idle connections close after 5 s
            # Counts every connection, even one still sending headers: kept below the descriptors, with room for the
            # process's own files, so that past it a request is told 503 (hostile_clients: slow connections).
            limit_concurrency=min(10_000, descriptors - 256),
            timeout_graceful_shutdown=2,  # event streams stay open as long as their pages
            proxy_headers=bool(forwarded_allow_ips),  # uvicorn alone would trust loopback peers
            forwarded_allow_ips=forwarded_allow_ips or "",
        )
        return uvicorn.Server(config)

    @contextlib.asynccontextmanager
    async def giving_back_memory(self, _app):
        """glibc's free pages given back every minute (by an hour's end 417 of 664 MiB were free yet resident:
        mixed_use.py); blocks of 256 kB or more get pages of their own, returned when freed."""

        async def give_back() -> None:
            while True:
                await asyncio.sleep(60)
                await asyncio.to_thread(heap.give_back)

        heap.large_blocks_apart(262_144)
        task = asyncio.create_task(give_back())
        yield
        task.cancel()


def raise_descriptor_limit() -> int:
    """The soft descriptor limit raised to the hard one (a connection that never ends its headers holds one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def forwarded_allow_ips_by_default(environ) -> str:
    """FORWARDED_ALLOW_IPS; else on a Space (SPACE_ID set) its proxy's networks; else nothing trusted."""
    if "FORWARDED_ALLOW_IPS" in environ:
        return environ["FORWARDED_ALLOW_IPS"]
    return SPACE_PROXY_NETWORKS if environ.get("SPACE_ID") else ""


def start_in_thread(server: uvicorn.Server, timeout: float = 60.0) -> threading.Thread:
    """Run `server` in a daemon thread; returns once it accepts connections."""
    thread = threading.Thread(target=server.run, name="app server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app server did not start")
        time.sleep(0.05)
    return thread
