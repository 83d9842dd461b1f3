"""Memory the server gives back while it runs, so that what it holds stays where warm-up left it.

Two things grew without bound in an hour of mixed use (benchmarks/mixed_use.py; RESULTS.md, round 13):
- **Closed pages' state.** Gradio keeps a session's page state (a copy of every component's config, ~170 kB on this
  page) after its page has closed, deleting only its `gr.State` values after an hour and the rest only when
  `sessions_kept` newer sessions push it out: memory rose with every visitor who came and went. Here a page whose
  heartbeat has ended and that no call has used for `closed_session_seconds` is forgotten, unless its heartbeat or
  stream is open again (a link that dropped and came back); a page that comes back later starts afresh (its next
  Inside redraw asks it to look inside again).
- **glibc's free heap.** Python's objects come and go in many threads (a callback's, the event loop's), and glibc
  keeps freed memory for reuse rather than returning it: by the hour's end 417 of the heap's 664 MiB were free yet
  resident. `malloc_trim(0)` hands the free pages back every `memory_sweep_seconds`, in a worker thread, not the event
  loop; what it cannot return is free memory in fragments between live objects (RESULTS.md, round 14: telling glibc
  to keep 2 arenas, `mallopt(M_ARENA_MAX)`, did not shrink it and was not kept). Where the C library is not glibc
  (musl, macOS) this part does nothing.
- **Large blocks carved from the heap.** glibc gives an allocation of 128 kB or more pages of its own (mmap), returned
  to the system when it is freed, but each time such a block is freed it raises that threshold to the block's size
  (up to 32 MiB): after the first big answer or batch, a view's JSON or a batch's tensors are carved from the heap, and
  whatever small object outlives them there pins their pages. The server fixes the threshold at start
  (`large_blocks_apart`, `Limits.own_pages_bytes`), which also ends glibc's raising it.
"""

import asyncio
import contextlib
import ctypes
import ctypes.util

from .internals import forget_closed_sessions
from .limits import Limits

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter: the size from which a block gets pages of its own


def glibc(name: str, argtypes: list):
    """The C library's function `name` (returning int), or None where it has none (not glibc)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


def large_blocks_apart(size: int) -> bool:
    """Every allocation of `size` bytes or more in pages of its own, handed back when freed, from now on; False where
    the C library is not glibc."""
    mallopt = glibc("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and mallopt(M_MMAP_THRESHOLD, size) == 1


async def give_back(demo, limits: Limits, is_open) -> None:
    """Every `memory_sweep_seconds`, until cancelled: closed pages' state forgotten (not a page `is_open(session)`
    says is open again: its heartbeat or stream back), the free heap handed back."""
    trim = glibc("malloc_trim", [ctypes.c_size_t])
    while True:
        await asyncio.sleep(limits.memory_sweep_seconds)
        forget_closed_sessions(demo, limits.closed_session_seconds, is_open)
        if trim is not None:
            await asyncio.to_thread(trim, 0)


def giving_back(demo, limits: Limits, is_open):
    """A FastAPI lifespan that keeps large blocks apart from the heap and runs `give_back` while the server runs."""

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        large_blocks_apart(limits.own_pages_bytes)
        task = asyncio.create_task(give_back(demo, limits, is_open))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
