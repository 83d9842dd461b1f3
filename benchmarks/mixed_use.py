"""An hour of mixed ordinary use against the running app: does the server's memory stay flat once it is warm?

Starts `python app.py` offline as `benchmarks.arena_attacks` does (our model and, for the arena's second system, a tiny
random MarianMT; its own votes database; 127.0.0.1 trusted as the proxy), with its own upload folder, then for
`--minutes` runs page-like sessions (`benchmarks.load.Page`: the heartbeat open while the page is, calls
through queue/join, results read from the session's stream), each kind from its own address in X-Forwarded-For. A
page opens as a browser opens it (the page, /config, the corpus table, the status line, the first timer tick) and
closes when its visitor leaves; the next visitor of its kind comes a little later:
- translators (`--translators`): a sentence every 3-8 s, for a visit of 1-4 minutes;
- arena players (`--players`): a battle, 4-10 s reading it, a vote for the better translation, for 2-5 minutes;
- an Inside user: looks inside a sentence (the view, then its pictures), redraws the attention picture three times
  with another kind, layer or head, for 2-4 minutes;
- a leaderboard reader: opens the page, shows the leaderboard, reads it 5-15 s, leaves; again 20-40 s later;
- a file job every 30 s (`--file_lines` lines; the next starts when the last has ended if it took longer): upload,
  translate, download the TSV.
Every minute one line: the minute, the server's resident memory (VmRSS) and threads, calls answered/failed per kind,
the translators' median and largest latency. At the end: the memory at `--warm_up` minutes and at the end, the slope
over the second half (MiB per minute, least squares), what the failed calls were told.

`--trace counts` has the server report (through a `sitecustomize` this script writes; app.py unchanged) at
`--warm_up` minutes and at the end (after the last minute's line), printed here: glibc's heap, Gradio's sessions kept
and the text of the page values they hold, the sizes of Gradio's and our containers; at the end also the object types
that grew since the first report and, last, what glibc gives back when asked (`malloc_trim(0)`). `--trace allocations`
also has tracemalloc trace the server's allocations from the first report on (a slower, bigger server: its latencies
and memory are not the ordinary ones), and the last report says where the allocations made since and still alive were
made (the 3 innermost frames outside the standard library).
The page's own calls count under "open" (5 a page); a file job counts once (its download only if it fails).

The server gives memory back itself (closed pages' state, glibc's free heap: `transformer_en_de/app/serving/memory.py`);
it inherits this process's environment, so glibc's settings are tried as `MALLOC_ARENA_MAX=2 python -m ...`.

    OMP_NUM_THREADS=1 nice -n 5 python -m benchmarks.mixed_use --threads 1 [--minutes 60] [--trace counts|allocations]
"""

import os
import random
import re
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from benchmarks import harness
from benchmarks.arena_attacks import CAPTIONS, better, serve
from benchmarks.load import BEAMS, PAGE_TOKENS, Page, events, folder_mb, outcome, rss_mib

TRANSLATORS, PLAYERS, INSIDE_USERS, READERS, FILE_JOBS = (
    "192.0.2.10",
    "203.0.113.5",
    "198.51.100.20",
    "192.0.2.30",
    "198.51.100.40",
)
KINDS = ("open", "translate", "arena", "inside", "board", "file")
ATTENTION = ("encoder_self", "decoder_self", "cross")  # the Inside tab's kinds of attention

# Written as `sitecustomize.py` into a folder on the server's PYTHONPATH (with `--trace` or a fix tried): Python
# imports it at start-up, before app.py.
IN_THE_SERVER = r'''
"""benchmarks.mixed_use: with $MIXED_USE_TRACE a report into $MIXED_USE_TRACE.<n> at each SIGUSR1 (and with
$MIXED_USE_ALLOCATIONS, tracemalloc from the first on)."""
import ctypes, gc, os, signal, sys, threading, tracemalloc
from collections import Counter

asked, first = threading.Event(), {}
STDLIB = os.path.dirname(os.__file__)


def lengths(owner) -> str:
    found = {}
    for name, value in vars(owner).items():
        try:
            found[name] = len(value)
        except TypeError:
            pass
    return ", ".join(f"{name} {size:,}" for name, size in found.items() if size) or "all empty"


LIBC = ctypes.CDLL("libc.so.6")


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def heap() -> str:
    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    LIBC.mallinfo2.restype = Info
    info, mib = LIBC.mallinfo2(), 2**20
    return (f"glibc heap {info.arena / mib:,.0f} MiB ({info.uordblks / mib:,.0f} in use, {info.fordblks / mib:,.0f} "
            f"free), mmapped {info.hblkhd / mib:,.0f} MiB in {info.hblks:,} blocks")


def text_bytes(value, seen: set) -> int:
    """Bytes of the strings in a page value (a base64 picture is one), each string object counted once."""
    if isinstance(value, (str, bytes)):
        if id(value) in seen:
            return 0
        seen.add(id(value))
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return sum(text_bytes(item, seen) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(text_bytes(item, seen) for item in value)
    return 0


def containers() -> list:
    app = getattr(sys.modules.get("__main__"), "APP", None)
    if app is None:
        return ["no APP in __main__"]
    demo = app.demo
    sessions = getattr(demo, "state_holder", None)
    kept = list(sessions.session_data.values()) if sessions is not None else []
    seen = set()  # a string shared by sessions (the page's own texts, one drawing of the leaderboard) counts once
    held = sum(text_bytes(session.config_values, seen) for session in kept) / 2**20
    closed = sum(session.is_closed for session in kept)
    lines = [f"gradio sessions kept: {len(kept):,} ({closed:,} closed), {held:,.1f} MiB of text in their page values"]
    serving = getattr(app, "serving", app)  # what defends the server: the app's own attributes before app/serving/
    owners = [("gradio queue", demo._queue), ("gradio app", getattr(demo, "server_app", None)),
              ("ours: views", app.views), ("ours: scheduler", serving.scheduler), ("ours: gate", serving.gate),
              ("ours: uploads", serving.uploads), ("ours: arena", app.arena),
              ("ours: board", getattr(app, "board", None))]
    return lines + [f"{label}: {lengths(owner)}" for label, owner in owners if owner is not None]


def allocation_site(traceback) -> tuple:
    """The 3 innermost frames outside the standard library (json, copy, asyncio: how, not who)."""
    outside = [frame for frame in reversed(traceback) if not frame.filename.startswith(STDLIB)]
    return tuple(outside[:3]) or tuple(reversed(traceback))[:3]


def report(number: int) -> None:
    gc.collect()
    types = Counter(type(thing).__qualname__ for thing in gc.get_objects())
    lines = [heap()] + containers()
    if not first:
        first.update(types=types)
        lines.append("(the first report: later ones say what grew since)")
        if os.environ.get("MIXED_USE_ALLOCATIONS"):  # every allocation from here on: those still alive later grew
            tracemalloc.start(6)  # frames enough for `allocation_site`; more slow the server further
    else:
        grown = (types - first["types"]).most_common(20)
        lines.append("objects grown by type: " + ", ".join(f"{name} +{count:,}" for name, count in grown))
    if number and tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        traced, peak = tracemalloc.get_traced_memory()
        lines.append(f"allocated since the first report and alive: {traced / 2**20:,.0f} MiB ({peak / 2**20:,.0f} "
                     "at most)")
        sites = Counter(), Counter()
        for trace in snapshot.traces:
            site = allocation_site(trace.traceback)
            sites[0][site] += trace.size
            sites[1][site] += 1
        for site, size in sites[0].most_common(15):
            lines.append(f"{size / 2**20:,.1f} MiB in {sites[1][site]:,} blocks, allocated at:")
            lines += [f"    {frame.filename}:{frame.lineno}" for frame in site]
    if number:  # the last report: how much of the resident memory is glibc's free memory, which it gives back if asked
        before = resident_mib()
        LIBC.malloc_trim(0)
        lines.append(f"malloc_trim(0): resident {before:,.0f} -> {resident_mib():,.0f} MiB; " + heap())
    path = f"{os.environ['MIXED_USE_TRACE']}.{number}"
    with open(path + ".part", "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(path + ".part", path)


def reporter() -> None:
    number = 0
    while asked.wait():
        asked.clear()
        report(number)
        number += 1


if os.environ.get("MIXED_USE_TRACE"):
    threading.Thread(target=reporter, daemon=True, name="mixed-use-trace").start()
    signal.signal(signal.SIGUSR1, lambda *_: asked.set())
'''


def options(parser):
    parser.add_argument("--minutes", type=int, default=60, help="how long the use lasts (default 60)")
    parser.add_argument("--warm_up", type=int, default=5, help="the minute after which memory should stay flat")
    parser.add_argument("--translators", type=int, default=3, help="translators on the page at once (default 3)")
    parser.add_argument("--players", type=int, default=2, help="arena players at once (default 2)")
    parser.add_argument("--file_lines", type=int, default=200, help="lines of each file job (default 200)")
    parser.add_argument("--trace", choices=["counts", "allocations"], help="the server reports what it holds")
    parser.add_argument("--backend", default="torch", help="the app's backend (torch or ctranslate2)")


class Tally:
    """Calls answered and failed per kind and the translators' latencies since the last minute's line; what the failed
    calls were told and every kind's latencies, over the whole run."""

    def __init__(self):
        self.lock, self.calls, self.latencies, self.failures = threading.Lock(), Counter(), [], Counter()
        self.seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}

    def count(self, kind: str, label: str, seconds: float | None = None) -> None:
        with self.lock:
            self.calls[kind, label == "answered"] += 1
            if label != "answered":
                self.failures[kind, label] += 1
            if seconds is not None:
                self.seconds[kind].append(seconds)
                if kind == "translate":
                    self.latencies.append(seconds)

    def take(self) -> tuple[Counter, list]:
        with self.lock:
            calls, latencies, self.calls, self.latencies = self.calls, self.latencies, Counter(), []
        return calls, latencies


class Site:
    """The running app as its visitors see it: its address, its events and the sentences they type."""

    def __init__(self, url: str, sentences: list[str], tally: Tally, stopped: threading.Event):
        self.url, self.sentences, self.tally, self.stopped = url, sentences, tally, stopped
        self.named, redraws = events(url)
        dependencies = httpx.get(f"{url}config", timeout=30).json()["dependencies"]
        inside = self.named["inside"]
        after_inside = {d.get("id", n) for n, d in enumerate(dependencies) if d.get("trigger_after") == inside}
        self.draw_inside = next(fn_index for fn_index, _ in redraws if fn_index in after_inside)
        self.redraws = [fn_index for fn_index, _ in redraws if fn_index not in after_inside]
        # The Translate tab's timer: a private event outside the queue with no inputs, which the page calls each second
        # until the comparison models are loaded (its first answer stops it).
        ticks = [
            d.get("id", n)
            for n, d in enumerate(dependencies)
            if not d.get("queue", True) and not d.get("inputs") and not d.get("api_name")
        ]
        self.tick = ticks[0] if ticks else None

    def open(self, address: str) -> Page:
        """A page opened as a browser opens it: the page, its config, the events that run when it loads."""
        page = Page(self.url, address=address)
        for path in ("", "config"):
            answer = page.http.get(f"{self.url}{path}")
            self.tally.count("open", "answered" if answer.status_code == 200 else f"HTTP {answer.status_code}")
        self.ask(page, "open", self.named["comparison"], [])
        for fn_index in (self.named["status"], self.tick):
            if fn_index is not None:
                answer = page.run(fn_index, [])
                self.tally.count("open", "answered" if "data" in answer else f"HTTP {answer.get('refused')}")
        return page

    def ask(self, page: Page, kind: str, fn_index: int, data: list) -> list:
        """One call of the page, counted and timed: its output data ([] if it failed)."""
        asked = time.perf_counter()
        message = page.ask(fn_index, data)
        label = outcome(message)
        self.tally.count(kind, label, time.perf_counter() - asked)
        return message["output"]["data"] if label == "answered" else []

    def sentence(self) -> str:
        return random.choice(self.sentences)

    def pause(self, low: float, high: float) -> bool:
        """Waits a visitor's while; True once the run is over."""
        return self.stopped.wait(random.uniform(low, high))


def visits(site: Site, kind: str, address: str, visit, gap: tuple[float, float]) -> None:
    """One visitor after another until the run ends: a page opened, `visit(site, page)`, the page closed."""
    while not site.stopped.is_set():
        page = None
        try:
            page = site.open(address)
            visit(site, page)
        except Exception as error:  # a page's own failure is an outcome, and the next visitor comes
            site.tally.count(kind, type(error).__name__)
        finally:
            if page is not None:
                page.close()
        site.pause(*gap)


def translator(site: Site, page: Page) -> None:
    ends = time.monotonic() + random.uniform(60, 240)
    while time.monotonic() < ends:
        site.ask(page, "translate", site.named["translate"], [site.sentence(), "beam search", BEAMS, PAGE_TOKENS, ""])
        if site.pause(3, 8):
            return


def arena_player(site: Site, page: Page) -> None:
    ends = time.monotonic() + random.uniform(120, 300)
    while time.monotonic() < ends:
        battle = site.ask(page, "arena", site.named["battle"], [site.sentence()])
        if battle and battle[0] and not site.pause(4, 10):
            site.ask(page, "arena", site.named["vote"], [battle[0], better(battle[1], battle[2])])
        if site.pause(3, 8):
            return


def inside_user(site: Site, page: Page) -> None:
    ends = time.monotonic() + random.uniform(120, 240)
    while time.monotonic() < ends:
        if site.ask(page, "inside", site.named["inside"], [site.sentence(), "beam search", BEAMS, PAGE_TOKENS]):
            # The pictures: the button's `.then`, which the page runs once the view has come
            site.ask(page, "inside", site.draw_inside, [None, "cross", 1, 0])
            for _ in range(3):
                if site.pause(3, 8):
                    return
                choice = [None, random.choice(ATTENTION), random.randint(1, 3), random.randint(0, 4)]
                site.ask(page, "inside", random.choice(site.redraws), choice)
        if site.pause(10, 20):
            return


def leaderboard_reader(site: Site, page: Page) -> None:
    site.ask(page, "board", site.named["leaderboard"], [])
    site.pause(5, 15)


def file_jobs(site: Site, lines: int) -> None:
    """A file job every 30 s (the next at once if one took longer), each from a page of its own."""
    while not site.stopped.is_set():
        started = time.monotonic()
        page = None
        try:
            page = site.open(FILE_JOBS)
            text = "\n".join(site.sentence() for _ in range(lines)) + "\n"
            stored = page.http.post(f"{site.url}gradio_api/upload", files={"files": ("job.txt", text.encode())})
            if stored.status_code != 200:
                site.tally.count("file", f"upload HTTP {stored.status_code}")
            else:
                source = {"path": stored.json()[0], "meta": {"_type": "gradio.FileData"}}
                result = site.ask(
                    page, "file", site.named["translate_file"], [source, None, "beam search", BEAMS, PAGE_TOKENS]
                )
                if result and result[0]:
                    download = page.http.get(result[0]["url"])  # counted only if it fails: the job was counted
                    if download.status_code != 200:
                        site.tally.count("file", f"download HTTP {download.status_code}")
        except Exception as error:  # the next job comes all the same
            site.tally.count("file", type(error).__name__)
        finally:
            if page is not None:
                page.close()
        site.stopped.wait(max(0.0, 30 - (time.monotonic() - started)))


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of (minute, MiB)."""
    minutes = [minute for minute, _ in points]
    mean_minute, mean_mib = statistics.fmean(minutes), statistics.fmean(mib for _, mib in points)
    spread = sum((minute - mean_minute) ** 2 for minute in minutes)
    return sum((minute - mean_minute) * (mib - mean_mib) for minute, mib in points) / spread if spread else 0.0


def server_threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))


def minute_line(minute: int, mib: float, threads: int, calls: Counter, latencies: list[float]) -> str:
    counts = "  ".join(f"{calls[kind, True]:>3}/{calls[kind, False]:<2}" for kind in KINDS)
    waited = f"{statistics.median(latencies):5.2f} {max(latencies):5.2f}" if latencies else "    -     -"
    return f"{minute:>4} {mib:>8,.0f} {threads:>7}  {counts}  {waited}"


def traced(server_pid: int, trace: Path, number: int, when: str) -> None:
    """Asks the traced server for its report `number` and prints it."""
    os.kill(server_pid, signal.SIGUSR1)
    path = Path(f"{trace}.{number}")
    deadline = time.monotonic() + 300
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(1)
    text = path.read_text() if path.exists() else "(no report within 300 s)\n"
    print(f"## the server's report {when}\n{text}", flush=True)


def crowd(server, url: str, sentences: list[str], args, trace: Path) -> tuple[list, "Tally", float]:
    """The visitors for `--minutes`, a line a minute: (memory per minute, the tally, the upload folder's MB)."""
    tally, stopped = Tally(), threading.Event()
    site = Site(url, sentences, tally, stopped)
    kinds = [(translator, "translate", TRANSLATORS, (5, 30))] * args.translators
    kinds += [(arena_player, "arena", PLAYERS, (5, 30))] * args.players
    kinds += [(inside_user, "inside", INSIDE_USERS, (5, 30)), (leaderboard_reader, "board", READERS, (20, 40))]
    threads = [
        threading.Thread(target=visits, args=(site, kind, address, visit, gap), daemon=True)
        for visit, kind, address, gap in kinds
    ]
    threads.append(threading.Thread(target=file_jobs, args=(site, args.file_lines), daemon=True))
    print(
        f"# server pid {server.pid}, {url}; {args.minutes} minutes; {len(kinds)} visitors at once and a file job "
        f"of {args.file_lines} lines every 30 s; calls answered/failed per kind",
        flush=True,
    )
    print(
        f"{'min':>4} {'RSS MiB':>8} {'threads':>7}  "
        + "  ".join(f"{kind:<6}" for kind in KINDS)
        + "  visitor p50 / max s",
        flush=True,
    )
    memory = [(0, rss_mib(server.pid))]
    reports = sorted({args.warm_up, args.minutes})  # when the traced server reports
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        for minute in range(1, args.minutes + 1):
            time.sleep(max(0.0, started + 60 * minute - time.monotonic()))
            if server.poll() is not None:
                raise SystemExit(f"the server exited with code {server.returncode}: see its app.log")
            memory.append((minute, rss_mib(server.pid)))
            print(minute_line(minute, memory[-1][1], server_threads(server.pid), *tally.take()), flush=True)
            if args.trace and minute in reports:
                traced(server.pid, trace, reports.index(minute), f"at minute {minute}")
    finally:
        stopped.set()
        for thread in threads:
            thread.join(timeout=150)
    return memory, tally, folder_mb(Path(os.environ["GRADIO_TEMP_DIR"]))  # before the server stops: Gradio empties it


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
        if args.trace == "allocations":
            os.environ["MIXED_USE_ALLOCATIONS"] = "1"
        with serve(scratch, args) as (server, url, _):
            memory, tally, uploads = crowd(server, url, sentences, args, trace)
        log = (scratch / "app.log").read_text(errors="replace")
        warm = dict(memory).get(args.warm_up, memory[-1][1])
        half = [point for point in memory if point[0] >= args.minutes / 2]
        print(
            f"RSS at minute {args.warm_up}: {warm:,.0f} MiB; at the end (minute {memory[-1][0]}): "
            f"{memory[-1][1]:,.0f} MiB ({memory[-1][1] - warm:+,.0f}); slope over the second half "
            f"{slope(half):+.2f} MiB/minute"
        )
        told = ", ".join(f"{kind}: {count:,} {label}" for (kind, label), count in tally.failures.most_common())
        print(f"failed calls: {told or 'none'}")
        timed = ", ".join(
            f"{kind} {statistics.median(seconds):.2f} / {max(seconds):.2f}"
            for kind, seconds in tally.seconds.items()
            if seconds
        )
        print(f"queued calls' seconds over the run, median / max: {timed}")
        print(
            f"server log: {len(log.encode()):,} bytes, {log.count('Traceback')} tracebacks; upload folder "
            f"{uploads:,.1f} MB"
        )


if __name__ == "__main__":
    main()
