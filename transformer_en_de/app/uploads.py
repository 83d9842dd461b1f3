"""Uploads within a quota: how many files and bytes each address and the server as a whole keep, and for how long.

Gradio stores any upload up to `max_file_size` from anyone and keeps it an hour; a client that uploads in a loop fills
the disk, and then every visitor's work fails. Here an upload is refused in one line (429) before it is read when it
would take its address past `uploads_per_address` files, or the server past `uploads_total` files or
`upload_total_bytes`; each upload is deleted after `upload_seconds`, which frees its share of the quota.
"""

import json
import os
import stat
import threading
import time
from collections import OrderedDict
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .internals import upload_folder
from .limits import Limits

# A multipart body holds the file and a few hundred bytes of framing; a body past the file cap and this is refused.
FRAMING_BYTES = 16_000
MALFORMED = (
    'This upload could not be read: send multipart/form-data whose parts named "files" are files, each with a file '
    "name."
)


def stored_upload(path, max_bytes: int) -> str | None:
    """The real path of `path` if it names a regular file of at most `max_bytes` inside Gradio's upload folder (after
    every symbolic link and `..` is resolved), else None. Nothing is opened or read."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    real = os.path.realpath(path)
    if not Path(real).is_relative_to(os.path.realpath(upload_folder())):
        return None
    try:
        found = os.stat(real)
    except OSError:
        return None
    return real if stat.S_ISREG(found.st_mode) and found.st_size <= max_bytes else None


def is_file_value(value) -> bool:
    """Whether Gradio would take `value` for a file (a FileData object, or the older bare {"path": ...})."""
    if not isinstance(value, dict):
        return False
    meta = value.get("meta")
    return "path" in value or "url" in value or (isinstance(meta, dict) and meta.get("_type") == "gradio.FileData")


def file_values_problem(payload, max_bytes: int) -> str:
    """One line if any file value anywhere in a call's values is not an upload stored here, else "".

    Gradio copies every file value of a call into its cache before the callback runs, whatever the input it is sent
    to (a text box too), and reads a path or fetches a URL to do it. Its own check that a path lies in the upload folder
    is active only in an app started by `launch()`, and this app is mounted (`server.py`). So every value is walked
    here, at the front, for every route: a file value must name, by its resolved real path, a regular file in the
    upload folder of at most `max_bytes` (no device, pipe or other server file; no URL to fetch)."""
    pending = [payload]
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending += value
        elif isinstance(value, dict):
            if is_file_value(value):
                problem = _file_value_problem(value, max_bytes)
                if problem:
                    return problem
            pending += value.values()
    return ""


def _file_value_problem(value: dict, max_bytes: int) -> str:
    path, url = value.get("path"), value.get("url")
    if stored_upload(path, max_bytes) is None:
        return "A file value must be a file uploaded to this server (through /gradio_api/upload)."
    # The page sends the URL this server gave the upload (.../gradio_api/file=PATH); no other URL is accepted.
    if url is not None and not (isinstance(url, str) and unquote(urlsplit(url).path).endswith(f"/file={path}")):
        return "A file value's url must be the one this server gave its upload (or null): no other URL is fetched."
    return ""


class UploadQuota:
    """Counts the uploads kept (by address) and deletes each after its time; called by the HTTP front for
    `/gradio_api/upload`."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self._kept: OrderedDict[str, tuple[str, int, float]] = OrderedDict()  # path → (address, bytes, time)
        self._reserved: dict[str, int] = {}  # address → bytes of uploads in progress
        self._lock = threading.Lock()

    def usage(self, address: str | None = None) -> tuple[int, int]:
        """(files, bytes) kept and in progress, of `address` or (None) of the server."""
        with self._lock:
            self.expire()
            kept = [(size, who) for who, size, _ in self._kept.values() if address in (None, who)]
            reserved = [size for who, size in self._reserved.items() if address in (None, who)]
        return len(kept) + len(reserved), sum(size for size, _ in kept) + sum(reserved)

    def refusal(self, address: str, size: int) -> str:
        """ "" if an upload of `size` bytes from `address` fits the quota; else why not, in one line."""
        limits = self.limits
        files, stored = self.usage()
        mine, _ = self.usage(address)
        later = f"uploads are kept {limits.upload_seconds / 60:g} minutes; try again later."
        if mine >= limits.uploads_per_address:
            return f"Your address has {mine} uploads on this server, the most it may keep; {later}"
        if files >= limits.uploads_total or stored + size > limits.upload_total_bytes:
            return f"The server's space for uploads is full; {later}"
        return ""

    def expire(self) -> None:
        """Delete the uploads older than `upload_seconds` (lock held)."""
        now = time.monotonic()
        while self._kept:
            path, (_, _, when) = next(iter(self._kept.items()))
            if now - when < self.limits.upload_seconds:
                break
            self._kept.popitem(last=False)
            Path(path).unlink(missing_ok=True)

    async def __call__(self, app, scope, receive, send, address: str):
        # The HTTP front's helpers (it imports this module's class lazily too).
        from .guard import RecordedAnswer, contained, drain, refuse

        length = dict(scope["headers"]).get(b"content-length", b"")
        if not length.isdigit():
            return await refuse(send, 411, "An upload must say its size (a Content-Length header).", False)
        size = int(length)
        if size > self.limits.max_file_bytes + FRAMING_BYTES:
            message = f"The upload has {size:,} bytes; the limit here is {self.limits.max_file_bytes:,}."
            return await refuse(send, 413, message, await drain(receive))
        refused = self.refusal(address, size)
        if refused:
            return await refuse(send, 429, refused, await drain(receive))
        with self._lock:
            self._reserved[address] = self._reserved.get(address, 0) + size
        answer = RecordedAnswer(forward=send)
        try:
            await contained(app, scope, receive, answer, MALFORMED)
        finally:
            with self._lock:
                self._reserved[address] -= size
                if not self._reserved[address]:
                    del self._reserved[address]
                if answer.status == 200:
                    self.record(answer.body, address)

    def record(self, answer: bytes, address: str) -> None:
        """Count the files an upload stored (Gradio answers their paths) against `address` (lock held)."""
        try:
            paths = json.loads(answer)
        except ValueError:
            return
        folder = os.path.realpath(upload_folder())
        for path in paths if isinstance(paths, list) else []:
            if isinstance(path, str) and Path(os.path.realpath(path)).is_relative_to(folder) and Path(path).is_file():
                self._kept[path] = (address, Path(path).stat().st_size, time.monotonic())
