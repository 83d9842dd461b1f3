"""One-line answers and the small ASGI pieces the front (guard.py) and the upload quota (uploads.py) share."""

import asyncio
import json
import threading
import time
from contextlib import contextmanager


def replay(body: bytes, receive):
    """An ASGI `receive` that gives `body` (already read) once, then waits for the client's disconnect."""
    unsent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again():
        return unsent.pop() if unsent else await receive()

    return receive_again


class RecordedAnswer:
    """An ASGI `send` that keeps an answer's status and body, passing each message on to `forward` if given."""

    def __init__(self, forward=None):
        self.status, self.parts, self.forward = 500, [], forward

    async def __call__(self, message) -> None:
        self.status = message.get("status", self.status)
        self.parts.append(message.get("body", b""))
        if self.forward is not None:
            await self.forward(message)

    def value(self):
        try:
            return json.loads(b"".join(self.parts))
        except ValueError:
            return None


async def contained(app, scope, receive, send, malformed: str = "") -> None:
    """The wrapped app run; its failure is one log line and, if nothing was answered yet, one line to the client (400
    `malformed` if given and not an OSError, else 500). A 5xx start is held until the app returns, so that Starlette's
    plain answer to a failure is replaced by the line."""
    started, held = False, []

    async def tracked(message) -> None:
        nonlocal started
        if held or (message["type"] == "http.response.start" and message["status"] >= 500):
            held.append(message)
            return
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, receive, tracked)
    except asyncio.CancelledError:
        return  # the server is stopping and cancels the streams still open: nothing to answer, nothing to log
    except Exception as error:  # noqa: BLE001 - any failure of a request is that request's, and is said once
        where = f"{scope.get('method')} {scope.get('path', '')[:80]}"
        print(f"app.py: {where} failed: {type(error).__name__}: {str(error)[:200]}".replace("\n", " "), flush=True)
        if not started:
            bad = malformed and not isinstance(error, OSError)
            await refuse(send, 400 if bad else 500, malformed if bad else "The server could not answer this request.")
        return
    for message in held:  # an error the app answered without failing goes to the client as it was
        await send(message)


async def body_within(receive, send, most: int, seconds: float, too_large: str) -> bytes | None:
    """The whole body; None once the client went away or was refused: past `most` bytes (413, `too_large`), or not
    all in within `seconds` (408, closing the connection: hostile_clients, slow bodies)."""
    parts, seen, more, drained = [], 0, True, None
    try:
        async with asyncio.timeout(seconds):
            while more and drained is None:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                parts.append(message.get("body", b""))
                seen += len(parts[-1])
                more = message.get("more_body", False)
                if seen > most:
                    drained = not more or await drain(receive)  # if not, the answer closes the connection
    except TimeoutError:
        return await refuse(send, 408, f"The request body did not arrive within {seconds:g} s; send it at once.", False)
    if drained is not None:
        return await refuse(send, 413, too_large, drained)
    return b"".join(parts)


async def drain(receive, most: int = 64_000_000) -> bool:
    """Whether the rest of a refused body was read and dropped (so that the client reads the answer) within `most`."""
    seen, more = 0, True
    while more and seen <= most:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        seen += len(message.get("body", b""))
        more = message.get("more_body", False)
    return not more


async def answer(send, status: int, value, close: bool = False) -> None:
    body = json.dumps(value).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def refuse(send, status: int, message: str, drained: bool = True) -> None:
    await answer(send, status, {"error": message}, close=not drained)


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
