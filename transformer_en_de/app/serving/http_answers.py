"""One-line answers and the small ASGI pieces the HTTP front and the upload quota share: a body read once and replayed,
an answer recorded, the wrapped app run so that any failure is one line, a refused body drained."""

import asyncio
import json

# A refused body is read and dropped up to this size, so that the client gets the message; past it, the connection
# closes. Nothing of it is kept.
DRAIN_BYTES = 64_000_000


def replay(body: bytes, receive):
    """An ASGI `receive` that gives `body` (already read) once, then waits for the client's disconnect."""
    sent = False

    async def receive_again():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_again


class RecordedAnswer:
    """An ASGI `send` that keeps the status and body of the wrapped app's answer, passing each message on to `forward`
    (the client's `send`) when there is one."""

    def __init__(self, forward=None):
        self.status, self.parts, self.forward = 500, [], forward

    async def __call__(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.parts.append(message.get("body", b""))
        if self.forward is not None:
            await self.forward(message)

    def value(self):
        """The JSON the answer holds, or None."""
        try:
            return json.loads(b"".join(self.parts))
        except ValueError:
            return None


async def contained(app, scope, receive, send, malformed: str = "") -> None:
    """Run the wrapped app; a failure inside it (an unknown session's stream, a malformed upload) is one log line and,
    when nothing was answered yet, one line to the client, not a traceback in the log: `malformed` (400) where the
    caller knows that a failure other than the server's own (OSError) comes from what the client sent, else 500.
    An error answer (5xx) is held until the app returns: an app that fails sends its plain "Internal Server Error"
    first (Starlette's), and it is replaced by the one line."""
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
        if not started and malformed and not isinstance(error, OSError):
            await refuse(send, 400, malformed)
        elif not started:
            await refuse(send, 500, "The server could not answer this request.")
        return
    for message in held:  # an error the app answered without failing goes to the client as it was
        await send(message)


class TooLarge(Exception):
    """A body past its bound; `drained`: whether the rest of it was read (if not, the answer closes the connection)."""

    def __init__(self, drained: bool):
        super().__init__("the request body is over its bound")
        self.drained = drained


async def body_within(receive, send, most: int, seconds: float, too_large: str) -> bytes | None:
    """The whole body; or None once the client went away, or was refused in one line: past `most` bytes (413,
    `too_large`), or not all in within `seconds` (408; hostile_clients: slow bodies: the answer closes the connection,
    which frees its descriptor)."""
    try:
        return await read_body(receive, most, seconds)
    except TooLarge as error:
        await refuse(send, 413, too_large, error.drained)
    except TimeoutError:
        await refuse(send, 408, f"The request body did not arrive within {seconds:g} s; send it at once.", False)
    return None


async def read_body(receive, most: int, seconds: float) -> bytes | None:
    """The whole body, or None if the client went away first; TooLarge past `most` bytes (the rest drained),
    TimeoutError past `seconds`."""
    parts, seen, more = [], 0, True
    async with asyncio.timeout(seconds):
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            parts.append(message.get("body", b""))
            seen += len(parts[-1])
            more = message.get("more_body", False)
            if seen > most:
                raise TooLarge(not more or await drain(receive))
    return b"".join(parts)


async def asked_of(app, scope, path: str):
    """The JSON the wrapped `app` answers to a GET of `path` (None if it is not JSON), asked in-process, as a client on
    the connection of `scope` (the request now served) would ask it."""
    headers = [(key, value) for key, value in scope.get("headers", []) if key == b"host"]
    request = dict(scope, method="GET", path=path, raw_path=path.encode(), query_string=b"", headers=headers)
    answered = RecordedAnswer()

    async def no_body():
        return {"type": "http.request", "body": b"", "more_body": False}

    await app(request, no_body, answered)
    return answered.value() if answered.status == 200 else None


async def drain(receive, most: int = DRAIN_BYTES) -> bool:
    """Read and drop the rest of a refused body (so that the client, still sending, reads the answer instead of a
    broken pipe), up to `most` bytes; True if it was all read."""
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
