"""The upload quota (hostile_clients: upload flood, many files, trickled uploads): files counted before Gradio stores
anything, a share of the space per address, each upload deleted after `upload_seconds`."""

import functools
import os
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

from python_multipart.multipart import parse_options_header

from .http_answers import OpenResponses, body_within, contained, refuse
from .limits import Limits

FRAMING_BYTES = 16_000  # a multipart body's framing beside the file
FILES_PER_UPLOAD, UPLOADS_IN_PROGRESS = 4, 4  # the latter per address
BYTES_PER_ADDRESS, BYTES_IN_ALL, DISK_MARGIN = 50_000_000, 200_000_000, 100_000_000
BLOCK_BYTES = 4_096  # what the smallest file costs the disk
MALFORMED = 'This upload could not be read: send multipart/form-data parts named "files", each with a file name.'


def upload_folder() -> str:
    """Where Gradio stores uploads: $GRADIO_TEMP_DIR, else <tmp>/gradio (Gradio's "File access" guide)."""
    return os.environ.get("GRADIO_TEMP_DIR") or os.path.realpath(os.path.join(tempfile.gettempdir(), "gradio"))


def uploaded_path(value, max_bytes: int) -> str | None:
    """The real path of an upload stored here (a regular file of at most `max_bytes` in the upload folder), given as
    its path or as the file value a callback is sent; else None."""
    try:
        found = os.stat(real := os.path.realpath(value.get("path") if isinstance(value, dict) else value))
    except (OSError, TypeError, ValueError):  # no path, or none that exists
        return None
    inside = Path(real).is_relative_to(os.path.realpath(upload_folder()))
    return real if inside and stat.S_ISREG(found.st_mode) and found.st_size <= max_bytes else None


def file_parts(body: bytes, content_type: bytes) -> int | None:
    """How many parts of a multipart body carry a file; None if it is not multipart with a boundary (read as Gradio's
    upload route reads it)."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        return None
    parts = (b"\r\n" + body).split(b"\r\n--" + options[b"boundary"])[1:]
    return sum(b"filename=" in part.partition(b"\r\n\r\n")[0] for part in parts)


class UploadQuota:
    """The uploads kept, each as (address, files, bytes, when) by its path, and those being stored by a key of their
    own (the room they may take)."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self._kept: OrderedDict[object, tuple[str, int, int, float]] = OrderedDict()
        self._reading = OpenResponses()  # bodies being read, by address
        self._lock = threading.Lock()

    def take(self, key: object, address: str, files: int, size: int) -> tuple[int, str] | None:
        """The refusal of an upload of `files` (storing it costs `size` bytes); else None, its room held as `key`."""
        limits, now = self.limits, time.monotonic()
        later = f"uploads are kept {limits.upload_seconds / 60:g} minutes; try again later."
        if files > FILES_PER_UPLOAD:
            return 429, f"An upload here holds at most {FILES_PER_UPLOAD} files; this one has {files:,}."
        with self._lock:
            while self._kept and now - next(iter(self._kept.values()))[3] >= limits.upload_seconds:
                path, _ = self._kept.popitem(last=False)
                if isinstance(path, str):
                    Path(path).unlink(missing_ok=True)
            mine, kept = self.usage(address)
            if mine + files > limits.uploads_per_address or kept + size > BYTES_PER_ADDRESS:
                return 429, f"Your address has {mine} uploads ({kept / 1e6:.1f} MB) here, the most it may keep; {later}"
            if self.usage()[1] + size > BYTES_IN_ALL:
                return 429, f"The server's space for uploads is full; {later}"
            os.makedirs(folder := upload_folder(), exist_ok=True)
            if shutil.disk_usage(folder).free < size + DISK_MARGIN:
                return 507, "The server has no room for uploads now; try again later."
            self._kept[key] = (address, files, size, now)
        return None

    def usage(self, address: str | None = None) -> tuple[int, int]:
        """(files, bytes) kept or being stored, of `address` or of all."""
        entries = [entry for entry in self._kept.values() if address in (None, entry[0])]
        return sum(entry[1] for entry in entries), sum(entry[2] for entry in entries)

    def stored(self, key: object, address: str, status: int, paths) -> None:
        """The room held as `key` given back; the files an upload stored (Gradio answers their paths) kept instead."""
        with self._lock:
            self._kept.pop(key, None)
            for path in paths if status == 200 and isinstance(paths, list) else []:
                if uploaded_path(path, self.limits.max_file_bytes):
                    cost = max(os.path.getsize(path), BLOCK_BYTES)
                    self._kept[path] = (address, 1, cost, time.monotonic())

    async def __call__(self, app, scope, receive, send, address: str):
        limits, headers = self.limits, dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        if not length.isdigit():
            return await refuse(send, 411, "An upload must say its size (a Content-Length header).", False)
        if int(length) > limits.max_file_bytes + FRAMING_BYTES:
            too_large = f"The upload has {int(length):,} bytes; the limit here is {limits.max_file_bytes:,}."
            return await body_within(receive, send, -1, limits.request_seconds, too_large)
        with self._reading.open(address, UPLOADS_IN_PROGRESS) as admitted:
            busy = f"Your address is sending {UPLOADS_IN_PROGRESS} uploads already; wait for one."
            # The server delivers no more than the Content-Length checked above.
            body = await body_within(receive, send, int(length) if admitted else -1, limits.request_seconds, busy, 429)
        if body is None:
            return  # the client went away (or was refused): nothing was stored
        files = file_parts(body, headers.get(b"content-type", b""))
        if files is None:
            return await refuse(send, 400, MALFORMED)
        size, key = files * BLOCK_BYTES + len(body), object()  # an upper bound of what storing it costs
        if refused := self.take(key, address, files, size):
            return await refuse(send, *refused)
        await contained(app, scope, receive, send, body, MALFORMED, functools.partial(self.stored, key, address))
