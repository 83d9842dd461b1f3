"""An hour of mixed ordinary use against the running app: does the server's memory stay flat once it is warm?

The app as `benchmarks.arena_attacks` starts it. For `--minutes`, translators, arena players, an Inside user, a
leaderboard reader (each kind from its own address, pages opened as a browser opens them, the next visitor a little
after the last left) and a file job every 30 s. A pass: no failed call, a slope of a few MiB a minute at most over the
second half.

`--trace counts`: the server reports what it holds (glibc's heap, Gradio's sessions counted by type, our containers,
the object types grown, what `malloc_trim(0)` gives back) at `--warm_up` minutes and at the end, through a
`sitecustomize` (app.py unchanged). glibc's settings are tried as `MALLOC_ARENA_MAX=2 python -m ...`.

    OMP_NUM_THREADS=1 nice -n 5 python -m benchmarks.mixed_use --threads 1 [--minutes 60] [--trace counts]
"""

import os
import random
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from contextlib import closing
from functools import partial
from pathlib import Path

import httpx
import psutil

from benchmarks import harness
from benchmarks.arena_attacks import CAPTIONS, better, serve
from benchmarks.load import ORDINARY, Page, attackers, events, file_value, folder_mb, outcome, rss_mib, server_log

TRANSLATORS, PLAYERS, INSIDE_USERS, READERS, FILE_JOBS = (
    "192.0.2.10 203.0.113.5 198.51.100.20 192.0.2.30 198.51.100.40".split()
)
KINDS = ("open", "translate", "arena", "inside", "board", "file")
ATTENTION = ("encoder_self", "decoder_self", "cross")  # the Inside tab's kinds of attention
FILE_LINES = 200  # of each file job

# `sitecustomize.py` in a folder on the server's PYTHONPATH: Python imports it at start-up, before app.py.
IN_THE_SERVER = r'''
"""benchmarks.mixed_use --trace: a report into $MIXED_USE_TRACE.<n> at each SIGUSR1."""
import ctypes, gc, os, signal, sys, threading
import psutil
from collections import Counter
from collections.abc import Sized

LIBC, asked, first = ctypes.CDLL("libc.so.6"), threading.Event(), {}
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


def heap():
    fields = [(name, ctypes.c_size_t) for name in FIELDS.split()]
    LIBC.mallinfo2.restype = type("Info", (ctypes.Structure,), {"_fields_": fields})
    info, mib = LIBC.mallinfo2(), 2**20
    return (f"glibc heap {info.arena / mib:,.0f} MiB ({info.uordblks / mib:,.0f} in use, {info.fordblks / mib:,.0f} "
            f"free), mmapped {info.hblkhd / mib:,.0f} MiB in {info.hblks:,} blocks")


def ours(owner, depth=2):
    """The sizes of our objects' containers, from the app down `depth` levels."""
    lines = []
    for name, part in vars(owner).items():
        if type(part).__module__.startswith("transformer_en_de") and hasattr(part, "__dict__"):
            found = [(n, len(v)) for n, v in vars(part).items() if isinstance(v, Sized) and len(v)]
            lines.append(f"ours: {name}: " + (", ".join(f"{n} {size:,}" for n, size in found) or "all empty"))
            lines += [f"ours: {name}.{line[6:]}" for line in (ours(part, depth - 1) if depth > 1 else [])]
    return lines


def report(number):
    gc.collect()
    types = Counter(type(thing).__qualname__ for thing in gc.get_objects())
    # Gradio keeps a SessionState and a BlocksConfig per page session, closed or not, for its hour
    lines = [heap(), f"gradio sessions kept: {types['SessionState']:,} (BlocksConfig {types['BlocksConfig']:,})"]
    app = getattr(sys.modules.get("__main__"), "APP", None)
    lines += ours(app) if app is not None else ["no APP in __main__"]
    if not first:
        first.update(types=types)
        lines.append("(the first report: later ones say what grew since)")
    else:
        grown = (types - first["types"]).most_common(20)
        lines.append("objects grown by type: " + ", ".join(f"{name} +{count:,}" for name, count in grown))
    if number:  # the last: how much of the resident memory is glibc's free memory, which it gives back if asked
        before = psutil.Process().memory_info().rss / 2**20
        LIBC.malloc_trim(0)
        after = psutil.Process().memory_info().rss / 2**20
        lines.append(f"malloc_trim(0): resident {before:,.0f} -> {after:,.0f} MiB; " + heap())
    path = f"{os.environ['MIXED_USE_TRACE']}.{number}"
    with open(path + ".part", "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(path + ".part", path)


def reporter():
    for number in range(2):
        asked.wait()
        asked.clear()
        report(number)


if os.environ.get("MIXED_USE_TRACE"):
    threading.Thread(target=reporter, daemon=True, name="mixed-use-trace").start()
    signal.signal(signal.SIGUSR1, lambda *_: asked.set())
'''


def options(parser):
    parser.add_argument("--minutes", type=int, default=60, help="how long the use lasts (default 60)")
    parser.add_argument("--warm_up", type=int, default=5, help="the minute after which memory should stay flat")
    parser.add_argument("--trace", choices=["counts"], help="the server reports what it holds")


class Site:
    """The running app as its visitors see it, and their calls in order: (kind, outcome, seconds if queued)."""

    def __init__(self, url: str, sentences: list[str]):
        self.url, self.sentences, self.stopped, self.calls = url, sentences, threading.Event(), []
        self.named, redraws = events(url)
        dependencies = httpx.get(f"{url}config", timeout=30).json()["dependencies"]
        found = [(d.get("id", n), d) for n, d in enumerate(dependencies)]
        after_inside = {fn_index for fn_index, d in found if d.get("trigger_after") == self.named["inside"]}
        self.draw_inside = next(fn_index for fn_index, _ in redraws if fn_index in after_inside)
        self.redraws = [fn_index for fn_index, _ in redraws if fn_index not in after_inside]
        # The Translate tab's timer: a private event outside the queue without inputs, called each second until the
        # comparison models are loaded
        timer = [n for n, d in found if not (d.get("queue", True) or d.get("inputs") or d.get("api_name"))]
        self.tick = timer[0] if timer else None

    def count(self, kind: str, label: str, seconds: float | None = None) -> None:
        self.calls.append((kind, label, seconds))  # one append: safe from the visitors' threads

    def open(self, address: str) -> Page:
        """A page opened as a browser opens it: the page, its config, the events that run when it loads."""
        page = Page(self.url, address=address)
        for path in ("", "config"):
            answer = page.http.get(f"{self.url}{path}")
            self.count("open", "answered" if answer.status_code == 200 else f"HTTP {answer.status_code}")
        self.ask(page, "open", self.named["comparison"], [])
        for fn_index in (self.named["status"], self.tick):
            if fn_index is not None:
                answer = page.run(fn_index, [])
                self.count("open", "answered" if "data" in answer else f"HTTP {answer.get('refused')}")
        return page

    def ask(self, page: Page, kind: str, fn_index: int, data: list) -> list:
        """One call of the page, counted and timed: its output data ([] if it failed)."""
        asked = time.perf_counter()
        message = page.ask(fn_index, data)
        self.count(kind, outcome(message), time.perf_counter() - asked)
        return message["output"]["data"] if outcome(message) == "answered" else []

    def pause(self, low: float, high: float) -> bool:
        """Waits a visitor's while; True once the run is over."""
        return self.stopped.wait(random.uniform(low, high))


def seconds(calls: list, kind: str) -> list[float]:
    """The seconds of the queued calls of `kind`."""
    return [took for asked, _, took in calls if asked == kind and took is not None]


def visits(site: Site, kind: str, address: str, step, stay: tuple[float, float], gap: tuple[float, float]) -> None:
    """One visitor after another until the run ends: a page opened, `step(site, page)` (True once the run is over)
    again and again for `stay` s, the page closed."""
    while not site.stopped.is_set():
        try:
            with closing(site.open(address)) as page:
                ends = time.monotonic() + random.uniform(*stay)
                while not step(site, page) and time.monotonic() < ends:
                    pass
        except Exception as error:  # a page's own failure is an outcome, and the next visitor comes
            site.count(kind, type(error).__name__)
        site.pause(*gap)


def translating(site: Site, page: Page) -> bool:
    sentence = random.choice(site.sentences)
    site.ask(page, "translate", site.named["translate"], [sentence, *ORDINARY[1:]])
    return site.pause(3, 8)


def playing(site: Site, page: Page) -> bool:
    battle = site.ask(page, "arena", site.named["battle"], [random.choice(site.sentences)])
    if battle and battle[0] and not site.pause(4, 10):
        site.ask(page, "arena", site.named["vote"], [battle[0], better(battle[1], battle[2])])
    return site.pause(3, 8)


def looking_inside(site: Site, page: Page) -> bool:
    if site.ask(page, "inside", site.named["inside"], [random.choice(site.sentences), *ORDINARY[1:4]]):
        site.ask(page, "inside", site.draw_inside, [None, "cross", 1, 0])  # the pictures, once the view has come
        for _ in range(3):
            if site.pause(3, 8):
                return True
            choice = [None, random.choice(ATTENTION), random.randint(1, 3), random.randint(0, 4)]
            site.ask(page, "inside", random.choice(site.redraws), choice)
    return site.pause(10, 20)


def reading_the_board(site: Site, page: Page) -> bool:
    site.ask(page, "board", site.named["leaderboard"], [])
    return site.pause(5, 15)


def filing(site: Site, page: Page, lines: int) -> bool:
    """A file job (upload, translate, download: counted only if it fails), the next 30 s after this one began."""
    started = time.monotonic()
    text = "".join(random.choice(site.sentences) + "\n" for _ in range(lines))
    stored = page.http.post(f"{site.url}gradio_api/upload", files={"files": ("job.txt", text.encode())})
    if stored.status_code != 200:
        site.count("file", f"upload HTTP {stored.status_code}")
        return site.stopped.wait(max(0.0, 30 - (time.monotonic() - started)))
    job = [file_value(stored.json()[0]), None, *ORDINARY[1:4]]
    if (result := site.ask(page, "file", site.named["translate_file"], job)) and result[0]:
        if (status := page.http.get(result[0]["url"]).status_code) != 200:
            site.count("file", f"download HTTP {status}")
    return site.stopped.wait(max(0.0, 30 - (time.monotonic() - started)))


def crowd(server, url: str, sentences: list[str], args, trace: Path) -> tuple[Site, list, float]:
    """The visitors for `--minutes`, a line a minute: (the site, the memory per minute, the upload folder's MB)."""
    site = Site(url, sentences)
    kinds = [("translate", TRANSLATORS, translating, (60, 240), (5, 30))] * 3
    kinds += [("arena", PLAYERS, playing, (120, 300), (5, 30))] * 2
    kinds += [("inside", INSIDE_USERS, looking_inside, (120, 240), (5, 30))]
    kinds += [("board", READERS, reading_the_board, (0, 0), (20, 40))]
    jobs = [("file", FILE_JOBS, partial(filing, lines=FILE_LINES), (0, 0), (1, 1))]
    header = f"{'min':>4} {'RSS MiB':>8} {'threads':>7}  " + "  ".join(f"{kind:<6}" for kind in KINDS)
    print(
        f"# server pid {server.pid}, {url}; {args.minutes} minutes; {len(kinds)} visitors at once and a file job of "
        f"{FILE_LINES} lines every 30 s; calls answered/failed per kind\n{header}  visitor p50 / max s",
        flush=True,
    )
    memory, reports, started = [(0, rss_mib(server.pid))], sorted({args.warm_up, args.minutes}), time.monotonic()
    seen = 0  # the calls told in the minutes' lines
    visitors = attackers(*[partial(visits, site, *kind) for kind in kinds + jobs], repeat=False)
    try:
        for minute in range(1, args.minutes + 1):
            time.sleep(max(0.0, started + 60 * minute - time.monotonic()))
            if server.poll() is not None:
                raise SystemExit(f"the server exited with code {server.returncode}: see its app.log")
            memory.append((minute, rss_mib(server.pid)))
            threads_now = psutil.Process(server.pid).num_threads()
            taken = site.calls[seen:]  # a copy: the visitors go on appending
            seen += len(taken)
            calls = Counter((kind, label == "answered") for kind, label, _ in taken)
            latencies = seconds(taken, "translate")
            counts = "  ".join(f"{calls[kind, True]:>3}/{calls[kind, False]:<2}" for kind in KINDS)
            waited = f"{statistics.median(latencies):5.2f} {max(latencies):5.2f}" if latencies else "    -     -"
            print(f"{minute:>4} {memory[-1][1]:>8,.0f} {threads_now:>7}  {counts}  {waited}", flush=True)
            if args.trace and minute in reports:
                os.kill(server.pid, signal.SIGUSR1)  # the traced server's report
                path, deadline = Path(f"{trace}.{reports.index(minute)}"), time.monotonic() + 300
                while not path.exists() and time.monotonic() < deadline:
                    time.sleep(1)
                text = path.read_text() if path.exists() else "(no report within 300 s)\n"
                print(f"## the server's report at minute {minute}\n{text}", flush=True)
    finally:
        site.stopped.set()
        visitors()
    return site, memory, folder_mb(Path(os.environ["GRADIO_TEMP_DIR"]))  # before the server stops: Gradio empties it


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    data = harness.DATA_DIR / "test_2016_flickr.en"
    sentences = data.read_text(encoding="utf-8").splitlines() if data.exists() else CAPTIONS
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        os.environ["GRADIO_TEMP_DIR"] = str(scratch / "uploads")  # the server's upload folder, this run's own
        trace = scratch / "trace" / "report"
        if args.trace:
            trace.parent.mkdir()
            (trace.parent / "sitecustomize.py").write_text(IN_THE_SERVER)
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(trace.parent), os.environ.get("PYTHONPATH")]))
            os.environ["MIXED_USE_TRACE"] = str(trace)
        with serve(scratch, args) as (server, url, _):
            site, memory, uploads = crowd(server, url, sentences, args, trace)
        log = (scratch / "app.log").read_text(errors="replace")
    warm, (last, end) = dict(memory).get(args.warm_up, memory[-1][1]), memory[-1]
    half = [point for point in memory if point[0] >= args.minutes / 2]
    slope = statistics.linear_regression(*zip(*half, strict=True)).slope if len(half) > 1 else 0.0
    print(
        f"RSS at minute {args.warm_up}: {warm:,.0f} MiB; at the end (minute {last}): {end:,.0f} MiB "
        f"({end - warm:+,.0f}); slope over the second half {slope:+.2f} MiB/minute"
    )
    failures = Counter((kind, label) for kind, label, _ in site.calls if label != "answered")
    told = ", ".join(f"{kind}: {count:,} {label}" for (kind, label), count in failures.most_common())
    print(f"failed calls: {told or 'none'}")
    timed = [f"{kind} {statistics.median(s):.2f} / {max(s):.2f}" for kind in KINDS if (s := seconds(site.calls, kind))]
    print(f"queued calls' seconds over the run, median / max: {', '.join(timed)}")
    print(f"{server_log(log)}; upload folder {uploads:,.1f} MB")


if __name__ == "__main__":
    main()
