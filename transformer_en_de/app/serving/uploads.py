"""The upload quota (hostile_clients: upload flood, many files, trickled uploads): files counted before Gradio stores
anything, a share of the space per address, each upload deleted after `upload_seconds`."""

import os
import shutil
import stat
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from email.message import Message
from pathlib import Path

from .http_answers import OpenResponses, RecordedAnswer, body_within, contained, drain, refuse, replay
from .limits import Limits

FRAMING_BYTES = 16_000  # a multipart body's framing beside the file
FILES_PER_UPLOAD, UPLOADS_IN_PROGRESS = 4, 4  # the latter per address
BYTES_PER_ADDRESS, BYTES_IN_ALL, DISK_MARGIN = 50_000_000, 200_000_000, 100_000_000
BLOCK_BYTES = 4_096  # what the smallest file costs the disk
MALFORMED = 'This upload could not be read: send multipart/form-data parts named "files", each with a file name.'
NO_ROOM = "The server has no room for uploads now; try again later."


def upload_folder() -> str:
    """Where Gradio stores uploads: $GRADIO_TEMP_DIR, else <tmp>/gradio (Gradio's "File access" guide)."""
    return os.environ.get("GRADIO_TEMP_DIR") or os.path.realpath(os.path.join(tempfile.gettempdir(), "gradio"))


def stored_upload(path, max_bytes: int) -> str | None:
    """The real path of `path` if it names a regular file of at most `max_bytes` in the upload folder, else None."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    try:
        found = os.stat(real := os.path.realpath(path))
    except OSError:
        return None
    inside = Path(real).is_relative_to(os.path.realpath(upload_folder()))
    return real if inside and stat.S_ISREG(found.st_mode) and found.st_size <= max_bytes else None


def uploaded_path(payload, max_bytes: int) -> str | None:
    """The server path of an upload as sent to a callback (inputs as sent), if it is one stored here."""
    return stored_upload(payload.get("path") if isinstance(payload, dict) else None, max_bytes)


def file_parts(body: bytes, content_type: bytes) -> int | None:
    """How many parts of a multipart body carry a file; None if it is not multipart with a boundary."""
    header = Message()
    header["content-type"] = content_type.decode("latin-1")
    boundary = header.get_param("boundary") if header.get_content_type() == "multipart/form-data" else None
    if not isinstance(boundary, str) or not boundary:
        return None
    parts = (b"\r\n" + body).split(b"\r\n--" + boundary.encode("latin-1"))[1:]
    return sum(b"filename=" in part.partition(b"\r\n\r\n")[0] for part in parts)


class UploadQuota:
    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self._kept: OrderedDict[str, tuple[str, int, float]] = OrderedDict()  # path → (address, bytes, time)
        self._reading = OpenResponses()  # bodies being read, by address
        self._reserved = Counter()  # address → bytes of uploads read and not yet stored
        self._lock = threading.Lock()

    def usage(self, address: str | None = None) -> tuple[int, int]:
        with self._lock:
            self.expire()
            kept = [size for who, size, _ in self._kept.values() if address in (None, who)]
            reserved = sum(size for who, size in self._reserved.items() if address in (None, who))
        return len(kept), sum(kept) + reserved

    def refusal(self, address: str, files: int, size: int) -> str:
        limits = self.limits
        later = f"uploads are kept {limits.upload_seconds / 60:g} minutes; try again later."
        if files > FILES_PER_UPLOAD:
            return f"An upload here holds at most {FILES_PER_UPLOAD} files; this one has {files:,}."
        mine, my_bytes = self.usage(address)
        if mine + files > limits.uploads_per_address or my_bytes + size > BYTES_PER_ADDRESS:
            return f"Your address has {mine} uploads ({my_bytes / 1e6:.1f} MB) here, the most it may keep; {later}"
        _, stored = self.usage()
        if stored + size > BYTES_IN_ALL:
            return f"The server's space for uploads is full; {later}"
        folder = upload_folder()
        os.makedirs(folder, exist_ok=True)
        if shutil.disk_usage(folder).free < size + DISK_MARGIN:
            return NO_ROOM
        return ""

    def expire(self) -> None:
        now = time.monotonic()
        while self._kept:
            path, (_, _, when) = next(iter(self._kept.items()))
            if now - when < self.limits.upload_seconds:
                break
            self._kept.popitem(last=False)
            Path(path).unlink(missing_ok=True)

    async def __call__(self, app, scope, receive, send, address: str):
        limits = self.limits
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        if not length.isdigit():
            return await refuse(send, 411, "An upload must say its size (a Content-Length header).", False)
        if int(length) > limits.max_file_bytes + FRAMING_BYTES:
            message = f"The upload has {int(length):,} bytes; the limit here is {limits.max_file_bytes:,}."
            return await refuse(send, 413, message, await drain(receive))
        with self._reading.open(address, UPLOADS_IN_PROGRESS) as admitted:
            if not admitted:
                message = f"Your address is sending {UPLOADS_IN_PROGRESS} uploads already; wait for one."
                return await refuse(send, 429, message, await drain(receive))
            # The server delivers no more than the Content-Length checked above.
            body = await body_within(receive, send, int(length), limits.request_seconds, "")
        if body is None:
            return  # the client went away (or its connection's deadline closed it): nothing was stored
        files = file_parts(body, headers.get(b"content-type", b""))
        if files is None:
            return await refuse(send, 400, MALFORMED)
        size = files * BLOCK_BYTES + len(body)  # an upper bound of what storing it costs
        refused = self.refusal(address, files, size)
        if refused:
            return await refuse(send, 507 if refused == NO_ROOM else 429, refused)
        with self._lock:
            self._reserved[address] += size
        answer = RecordedAnswer(forward=send)
        try:
            await contained(app, scope, replay(body, receive), answer, MALFORMED)
        finally:
            with self._lock:
                self._reserved[address] -= size
                self._reserved += Counter()  # drops the addresses at zero
                if answer.status == 200:
                    self.record(answer.value(), address)

    def record(self, paths, address: str) -> None:
        """Count the files an upload stored (Gradio answers their paths) against `address`."""
        for path in paths if isinstance(paths, list) else []:
            if stored_upload(path, self.limits.max_file_bytes):
                cost = max(os.path.getsize(path), BLOCK_BYTES)
                self._kept[path] = (address, cost, time.monotonic())
