"""glibc's heap given back (transformer_en_de/heap.py): by the server's settings and by a training run's trims. Each
case runs in a fresh process, so that what glibc has done before (thresholds raised, memory kept) cannot decide it."""

import platform
import subprocess
import sys

import pytest
from test_train import small_corpus, tiny_run_flags  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# 200 MB in blocks below glibc's mmap threshold, each followed by a small block that is kept (over 512 bytes, so that
# it comes from glibc's heap and not from Python's pools of small objects): once the large ones are freed the heap is
# mostly free, yet its top is held, so only a trim can return those pages. (Imports come first: they grow the process
# too.)
FRAGMENTED_HEAP = """
import re
def resident_mb():
    return int(re.search(r"RssAnon:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) // 1024
large, kept = [], []
for _ in range(2000):
    large.append(bytearray(100_000))
    kept.append(bytearray(1024))
del large
before = resident_mb()
"""


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("trim", ["no trim", "heap.give_back()"])
def test_the_free_pages_of_a_fragmented_heap_go_back_only_when_trimmed(trim):
    code = (
        "from transformer_en_de import heap\n"
        + FRAGMENTED_HEAP
        + f"""
given_back = heap.give_back() if {trim != "no trim"} else None
print(given_back, before - resident_mb())
"""
    )
    given_back, freed_mb = run(code).split()
    if trim == "no trim":
        assert int(freed_mb) < 20
    else:
        assert given_back == "True" and int(freed_mb) > 150


def test_a_training_run_trims_the_heap_every_n_steps_and_not_between():
    # The callback train.py gives its Trainer, called as the Trainer calls it after each step.
    code = (
        "from transformer_en_de.training.loop import FreeHeapGivenBack\n"
        + FRAGMENTED_HEAP
        + """
from types import SimpleNamespace
trims = FreeHeapGivenBack(every=50)
trims.on_step_end(None, SimpleNamespace(global_step=49), None)
between = before - resident_mb()
trims.on_step_end(None, SimpleNamespace(global_step=50), None)
print(between, before - resident_mb())
"""
    )
    between, at_step = map(int, run(code).split())
    assert between < 20 and at_step > 150


def test_train_py_trims_the_heap_every_50_steps(small_corpus, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    # A real run of train.py; the trims counted on their way to glibc.
    import train
    from transformer_en_de import heap

    steps_trimmed, give_back = [], heap.give_back
    monkeypatch.setattr(heap, "give_back", lambda: steps_trimmed.append(len(steps_trimmed)) or give_back())
    train.main(
        tiny_run_flags(
            small_corpus, tmp_path / "out", "--max_steps", "101", "--save_strategy", "no", "--eval_strategy", "no"
        )
    )
    assert len(steps_trimmed) == 2  # after steps 50 and 100


@pytest.mark.parametrize("apart", [False, True])
def test_a_large_block_gets_pages_of_its_own_after_a_larger_one_was_freed_only_when_kept_apart(apart):
    # glibc's default raises its threshold to 8 MiB when the first block is freed, and carves the second from the
    # heap; kept apart (the server's setting), the second has pages of its own (counted in mallinfo2's hblkhd).
    code = f"""
import ctypes
from transformer_en_de import heap
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
assert {apart} is False or heap.large_blocks_apart(256 * 1024)
first = bytearray(8 << 20)
del first
before = libc.mallinfo2().hblkhd
second = bytearray(4 << 20)
print(libc.mallinfo2().hblkhd - before >= 4 << 20)
"""
    assert run(code) == str(apart)
