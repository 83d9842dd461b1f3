"""What the running server gives back: glibc's free heap (`transformer_en_de.heap`; mixed_use.py: memory flat).

Python's objects come and go in many threads, and by an hour's end 417 of the heap's 664 MiB were free yet resident:
`heap.give_back` returns the free pages every `memory_sweep_seconds`, in a worker thread. A view's JSON or a batch's
tensors were carved from the heap, where whatever small object outlived them pinned their pages: the server keeps
blocks of `Limits.own_pages_bytes` or more apart from the heap from its start (`heap.large_blocks_apart`).
"""

import asyncio
import contextlib

from transformer_en_de import heap

from .limits import Limits


def giving_back(limits: Limits):
    """A FastAPI lifespan: large blocks kept apart from the heap, the free heap handed back every
    `memory_sweep_seconds` while the server runs."""

    async def give_back() -> None:
        while True:
            await asyncio.sleep(limits.memory_sweep_seconds)
            await asyncio.to_thread(heap.give_back)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        heap.large_blocks_apart(limits.own_pages_bytes)
        task = asyncio.create_task(give_back())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
