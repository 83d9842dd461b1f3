"""glibc's heap in the processes that run for hours (the app's server, a training run): what it keeps, given back.

glibc keeps freed memory for reuse rather than returning it to the system. A block of 128 kB or more gets pages of its
own (mmap), returned when it is freed, but each time such a block is freed glibc raises that threshold to the block's
size (up to 32 MiB) and carves the blocks below it from the heap. Where sizes change from one request or batch to the
next, a freed block seldom fits the next one: the heap grows, and what is free in it stays resident. Two remedies:
- `give_back()`: `malloc_trim(0)` returns every whole free page of the heap to the system, whatever lies around it.
  What is in use stays where it is; pages freed and touched again cost a page fault each.
- `large_blocks_apart(size)`: the threshold fixed at `size` (which also ends glibc's raising it): blocks of that size
  or more never come from the heap. Each such block then costs a system call and fresh zeroed pages: nothing
  measurable for the server's answers, but about 1.5x the time of a training step, which allocates and frees its
  activations every step (docs/notebook.md, model round 7). So the server keeps large blocks apart, and a training
  run trims.
Where the C library is not glibc (musl, macOS) both do nothing.
"""

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter: the size from which a block gets pages of its own


@functools.cache
def c_library() -> ctypes.CDLL:
    """The C library, looked up once (`find_library` may run `ldconfig`; a trim runs every minute or 50 steps)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or None)


def glibc(name: str, argtypes: list):
    """The C library's function `name` (returning int), or None where it has none (not glibc)."""
    try:
        function = getattr(c_library(), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


def large_blocks_apart(size: int) -> bool:
    """Every allocation of `size` bytes or more in pages of its own, handed back when freed, from now on; False where
    the C library is not glibc."""
    mallopt = glibc("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and mallopt(M_MMAP_THRESHOLD, size) == 1


def give_back() -> bool:
    """The heap's free pages returned to the system now; False where there were none, or the C library is not
    glibc."""
    trim = glibc("malloc_trim", [ctypes.c_size_t])
    return trim is not None and trim(0) == 1
