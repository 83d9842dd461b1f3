"""One-line answers and the small ASGI pieces the front (guard.py) and the upload quota (uploads.py) share."""

import asyncio
import json
import threading
import time
from contextlib import contextmanager

from starlette.responses import Response


async def contained(app, scope, receive, send, body: bytes | None = None, malformed: str = "", noted=None) -> None:
    """The wrapped app run, given `body` if it was read already; its failure is one log line and, if nothing was sent
    yet, one line to the client (400 `malformed` if given and not an OSError, else 500). A 5xx answer is held until the
    app returns, so that Starlette's plain answer to a failure is replaced by the line; with `noted`, the whole answer
    is held until `noted(status, its JSON value or None)` returned."""
    started, held, unsent = False, [], [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed():  # then waits for the client's disconnect
        return unsent.pop() if unsent else await receive()

    async def tracked(message) -> None:
        nonlocal started
        if noted or held or (message["type"] == "http.response.start" and message["status"] >= 500):
            return held.append(message)
        started = True
        await send(message)

    try:
        await app(scope, receive if body is None else replayed, tracked)
    except asyncio.CancelledError:
        held.clear()  # the server is stopping and cancels the streams still open: nothing to answer, nothing to log
    except Exception as error:  # noqa: BLE001 - any failure of a request is that request's, and is said once
        where = f"{scope.get('method')} {scope.get('path', '')[:80]}"
        print(f"app.py: {where} failed: {type(error).__name__}: {str(error)[:200]}".replace("\n", " "), flush=True)
        if not started:
            held.clear()
            bad = malformed and not isinstance(error, OSError)
            await refuse(
                tracked, 400 if bad else 500, malformed if bad else "The server could not answer this request."
            )
    if noted:
        try:
            value = json.loads(b"".join(message.get("body", b"") for message in held))
        except ValueError:
            value = None
        noted(held[0]["status"] if held else 500, value)
    for message in held:  # an error the app answered without failing goes to the client as it was
        await send(message)


async def body_within(receive, send, most: int, seconds: float, too_large: str, status: int = 413) -> bytes | None:
    """The whole body; None once the client went away or was refused: past `most` bytes (`status`, `too_large`; -1
    refuses any body), the rest read and dropped up to 64 MB so that the client reads the answer, or not all in within
    `seconds` (408, closing the connection: hostile_clients, slow bodies)."""
    parts, seen, more = [], 0, True
    try:
        async with asyncio.timeout(seconds):
            while more and seen <= most + 64_000_000:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                part, more = message.get("body", b""), message.get("more_body", False)
                seen += len(part)
                if seen <= most:
                    parts.append(part)
    except TimeoutError:
        return await refuse(send, 408, f"The request body did not arrive within {seconds:g} s; send it at once.", False)
    if seen > most:
        return await refuse(send, status, too_large, drained=not more)
    return b"".join(parts)


async def refuse(send, status: int, message: str, drained: bool = True) -> None:
    """{"error": message}; the connection closes after it unless the request's body was read to its end."""
    headers = None if drained else {"connection": "close"}
    answer = Response(json.dumps({"error": message}), status, headers, media_type="application/json")
    await send({"type": "http.response.start", "status": status, "headers": answer.raw_headers})
    await send({"type": "http.response.body", "body": answer.body})


class OpenResponses:
    """The responses of each key (a session, an address) open now, each with when it opened."""

    def __init__(self):
        self._opened: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @contextmanager
    def open(self, key: str, most: float = float("inf")):
        """Yields False, counting nothing, if `key` has `most` open; else counts one while the block runs."""
        with self._lock:
            admitted = len(self._opened.get(key, ())) < most
            if admitted:
                self._opened.setdefault(key, []).append(opened := time.monotonic())
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._opened[key].remove(opened)
                    if not self._opened[key]:
                        del self._opened[key]

    def count(self, key: str | None, seconds: float = 0.0) -> int:
        """How many of `key`'s have been open `seconds` or more."""
        since = time.monotonic() - seconds
        with self._lock:
            return sum(opened <= since for opened in self._opened.get(key, ()))

    def is_read(self, key: str | None) -> bool:
        return self.count(key) > 0
