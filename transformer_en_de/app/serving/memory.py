"""Memory the server gives back while it runs, so that what it holds stays where warm-up left it.

Two things grew without bound in an hour of mixed use (benchmarks/mixed_use.py; RESULTS.md, round 13):
- **Closed pages' state.** Gradio keeps a session's page state (a copy of every component's config, ~170 kB on this
  page) after its page has closed, deleting only its `gr.State` values after an hour and the rest only when
  `sessions_kept` newer sessions push it out: memory rose with every visitor who came and went. Here a page whose
  heartbeat has ended and that no call has used for `closed_session_seconds` is forgotten, unless its heartbeat or
  stream is open again (a link that dropped and came back); a page that comes back later starts afresh (its next
  Inside redraw asks it to look inside again).
- **glibc's free heap** (`transformer_en_de.heap`). Python's objects come and go in many threads (a callback's, the
  event loop's), and by the hour's end 417 of the heap's 664 MiB were free yet resident: `heap.give_back` returns the
  free pages every `memory_sweep_seconds`, in a worker thread, not the event loop (RESULTS.md, round 14: telling glibc
  to keep 2 arenas, `mallopt(M_ARENA_MAX)`, did not shrink it and was not kept). After the first big answer, a view's
  JSON or a batch's tensors were carved from the heap, where whatever small object outlived them pinned their pages:
  the server keeps blocks of `Limits.own_pages_bytes` or more apart from the heap from its start
  (`heap.large_blocks_apart`).
"""

import asyncio
import contextlib

from transformer_en_de import heap

from .internals import forget_closed_sessions
from .limits import Limits


async def give_back(demo, limits: Limits, is_open) -> None:
    """Every `memory_sweep_seconds`, until cancelled: closed pages' state forgotten (not a page `is_open(session)`
    says is open again: its heartbeat or stream back), the free heap handed back."""
    while True:
        await asyncio.sleep(limits.memory_sweep_seconds)
        forget_closed_sessions(demo, limits.closed_session_seconds, is_open)
        await asyncio.to_thread(heap.give_back)


def giving_back(demo, limits: Limits, is_open):
    """A FastAPI lifespan that keeps large blocks apart from the heap and runs `give_back` while the server runs."""

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        heap.large_blocks_apart(limits.own_pages_bytes)
        task = asyncio.create_task(give_back(demo, limits, is_open))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
