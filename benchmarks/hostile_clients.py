"""Hostile clients against the running app, one attack at a time: does an ordinary visitor still get a quick
translation, and do the server's memory and upload folder stay bounded?

Per attack (those that spend the address's upload and session quotas come late, so that each earlier one is refused
for what it is) the ordinary visitor sends 8 sentences (3 --quick), going on while an attack that ends by itself runs.
A pass: no visitor failure, about a second, each attack refused for what it is, memory bounded, no traceback.

    OMP_NUM_THREADS=1 taskset -c 0 python -m benchmarks.hostile_clients --threads 1 --backend ctranslate2 [--quick]
    [--attacks "queue flood" "slow bodies"] [--split-cores]
"""

import itertools
import json
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from contextlib import closing, suppress
from functools import partial
from pathlib import Path

import httpx
import psutil

from benchmarks import harness, load
from benchmarks.load import BEAMS, PAGE_TOKENS, SENTENCE, Page, attackers, counted, in_background, outcome

HEAVY_TEXT = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]
HEAVY = [HEAVY_TEXT, "beam search", 8, 255, ""]  # the text that made the model loop until its bound
FILE_LINE = "A man in a blue jacket is repairing a bicycle on the street while two dogs play in the snow.\n"
TINY = ["A dog.", "greedy", 1, 4, ""]
# 29 made-up words of rare letters: as many pieces as a sentence can give the Inside view.
RARE_WORDS = (
    "jqzjvkv jwzwq jxkvjqq jzkw jzqq jzzv kjzk kkqxkv kvqzj kywzk qxxy vwqkwj vwyxjj vxvz vzqvjy wqqzyvk wvjjk "
    "wvvv wxww wxwxjqq wyjvzx wyqkwxx wzkxjxk xkxxqyq xqjkk xvwwvwj xvzx ykwv yqyvv"
)
# Values outside the Inside tab's choices: an unknown kind, a layer past the last, a head that is no number, ...
ODD_REDRAWS = [("sideways", 1, 0), ("cross", 99, 0), ("cross", 1, "x"), (["cross"], None, 3.5), ({"k": 1}, -4, 10**30)]
BAD_CALLS = [
    ("call/no_such_endpoint", b'{"data": []}'),
    ("queue/join", b'{"data": [], "fn_index": 999, "session_hash": "x"}'),
    ("queue/join", b'{"data": [], "fn_index": -1, "session_hash": "x"}'),
    ("call/translate", b"[" * 100_000 + b"]" * 100_000),
    ("call/load_example", b'{"data": [99]}'),
]
SERVER_FILES = ["/etc/passwd", "app.py", ".git/config", "/proc/self/status", "/dev/zero", "http://127.0.0.1:9/x"]
FILE_ROUTES = [
    ("call/translate_file", lambda v: {"data": [v, None, "greedy", 1, 1]}),
    ("call/translate", lambda v: {"data": [v, "greedy", 1, 1, ""]}),
    ("call/v2/translate_file", lambda v: {"source_file": v, "reference_file": None}),
    ("queue/join", lambda v: {"data": [v, None, "greedy", 1, 1], "session_hash": "reader"}),
]
PAUSE = 0.5  # seconds between the ordinary visitor's requests
UPLOAD = b"POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"


def options(parser):
    parser.add_argument("--backend", choices=["torch", "ctranslate2"], default="torch", help="what decodes")
    parser.add_argument("--split-cores", action="store_true", help="server and visitor on the first core")
    parser.add_argument("--attacks", nargs="*", default=None, help="only these attacks (names as printed)")


class Target:
    """The running app as the attacks see it: its events, a raw client of its API, a long file to send."""

    def __init__(self, url: str, scratch: Path, server, log: Path):
        self.url, self.server, self.log, self.turn = url, server, log, itertools.count()
        self.http = httpx.Client(base_url=f"{url}gradio_api/", timeout=300, limits=httpx.Limits(max_connections=64))
        self.named, self.redraws = load.events(url)
        self.source = scratch / "long.txt"
        self.source.write_text(FILE_LINE * 2_000, encoding="utf-8")
        # Stored before the upload flood spends the address's upload quota: odd reads download it with ranges
        self.stored = self.upload("r.txt", b"0123456789" * 10).json()

    def upload(self, name: str, content) -> httpx.Response:
        return self.http.post("upload", files={"files": (name, content, "text/plain")})

    def post(self, route: str, body) -> httpx.Response:
        """A POST of JSON (bytes sent as they are) to /gradio_api/`route`."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(route, content=content, headers={"Content-Type": "application/json"})

    def translate(self, data: list, session: str | None = None, read: bool = True) -> str:
        """The outcome of a call of /translate without a page."""
        posted = self.post("call/translate", {"data": data} | ({"session_hash": session} if session else {}))
        if posted.status_code != 200:
            return f"HTTP {posted.status_code}"
        if not read:
            return "posted, never read"
        if (stream := self.http.get(f"call/translate/{posted.json()['event_id']}")).status_code != 200:
            return f"read: HTTP {stream.status_code}"
        return "translated" if "event: complete" in stream.text else "read: error"

    def join(self, fn_index: int, data: list, session: str | None = None) -> str:
        """The status of a queue/join never read (in a new session if none)."""
        return f"HTTP {self.post('queue/join', load.call_body(fn_index, data, session)).status_code}"

    def log_since(self, size: int) -> list[str]:
        return self.log.read_bytes()[size:].decode(errors="replace").splitlines()

    def file_job(self, *decoding):
        """A visitor's file job through gradio_client."""
        from gradio_client import handle_file

        return load.client(self.url).submit(handle_file(self.source), None, *decoding, api_name="/translate_file")


def inside(sentence: str = SENTENCE) -> list:
    return [sentence, "beam search", BEAMS, PAGE_TOKENS]


def file_job(target: Target):
    """A visitor's file job at the page's defaults; the visitor asks until its last line is done."""
    job = target.file_job("beam search", BEAMS, PAGE_TOKENS)
    yield lambda: not job.done()
    try:
        return "the file job came back" if job.result(timeout=600)[0] else "the file job came back empty"
    except Exception as error:  # the benchmark goes on to the next attack
        return f"the file job failed ({type(error).__name__})"


def session_eviction(target: Target):
    """New sessions in a loop while a visitor's greedy file job runs: the visitor's session must not be pushed out."""
    job = target.file_job("greedy", 1, 64)
    stop_flood = attackers(*[partial(target.translate, TINY)] * 4)
    yield
    flooded = stop_flood()
    try:
        path, summary, _ = job.result(timeout=300)
        kept = "the visitor's file job came back" + ("" if path else f" without a file: {summary[:80]}")
    except Exception as error:
        kept = f"the visitor's file job was lost ({type(error).__name__})"
    return f"{flooded}; {kept}"


def redraw_told(message: dict) -> str:
    if "refused" in message:
        return f"stream HTTP {message['refused']}"
    error = str((message.get("output") or {}).get("error") or message.get("title") or "no message")
    return "redrawn" if message.get("success") else f"redraw refused: {error.splitlines()[0][:80]}"


def redraw_session(target: Target, stopped: threading.Event, in_flight: int = 3) -> Counter:
    """A page looks inside, then redraws its pictures, `in_flight` at a time, until `stopped`: what it was told."""
    told, redraws = Counter(), itertools.cycle(target.redraws)
    try:
        with closing(Page(target.url)) as page:
            view = page.ask(target.named["inside"], inside("A man in a blue jacket is repairing a bicycle."))
            shown = outcome(view) == "answered" and "message" not in view["output"]["data"][0]
            told[f"/inside {'answered' if shown else 'refused'}"] += 1
            while not stopped.is_set():
                heard = []
                try:  # the server closes the stream when nothing is pending: opened again each round
                    joined = [page.join(next(redraws)[0], [None, "cross", 1, 0]).status_code for _ in range(in_flight)]
                    heard += [f"redraw join HTTP {status}" for status in joined if status != 200]
                    heard += map(redraw_told, page.read(joined.count(200)))
                except Exception as error:  # closed by the server: the page goes on
                    heard.append(f"stream {type(error).__name__}")
                told.update(heard)
                if set(heard) - {"redrawn"}:  # refused: a pause before the next round
                    stopped.wait(0.5)
    except Exception as error:
        told[f"/inside failed ({type(error).__name__})"] += 1
    return told


def inside_redraws(target: Target, sessions: int = 15):
    """`sessions` pages that looked inside, each keeping 3 redraws of its pictures in flight."""
    stopped = threading.Event()
    stop_pages = attackers(*[partial(redraw_session, target, stopped)] * sessions, repeat=False)
    yield
    stopped.set()
    found = ", ".join(f"{fn_index} {name}" for fn_index, name in target.redraws)
    return f"{sessions} sessions (redraw events {found}): {stop_pages()}"


def largest_inside_views(target: Target, times: int = 10) -> str:
    """/inside on 29 made-up words of rare letters, read in full, `times` in a row, one session."""
    with closing(Page(target.url)) as page:
        answers = [page.ask(target.named["inside"], inside(RARE_WORDS)) for _ in range(times)]
    views = [answer["output"]["data"][0] for answer in answers if outcome(answer) == "answered"]
    failures = Counter(outcome(answer) for answer in answers if outcome(answer) != "answered")
    sizes = [len(json.dumps(view)) for view in views]
    messages = Counter(view["message"] for view in views if isinstance(view, dict) and view.get("message"))
    size = f"{min(sizes):,} to {max(sizes):,} bytes of JSON" if sizes else "no answers"
    refused = "; ".join(
        f"{count} with {'a NOT one-line' if chr(10) in text else 'a one-line'} message: '{text[:160]}'"
        for text, count in messages.items()
    )
    failed = f"; failed: {counted(failures)}" if failures else ""
    return f"{len(sizes)} answers of {size}; refused: {refused or 'none'}{failed}"


def many_files(target: Target, count: int = 999) -> str:
    """One upload of `count` tiny files, then an upload from another address."""
    files = [("files", (f"f{number}.txt", f"{number}\n".encode(), "text/plain")) for number in range(count)]
    answer = target.http.post("upload", files=files)
    shown = answer.text.strip()
    shown = shown[:150] + ("..." if len(shown) > 150 else "") if "\n" not in shown else f"NOT one line: {shown[:100]}"
    other = load.upload_from(target.url, "127.0.0.3", 2)
    return f"{count} files in one upload: HTTP {answer.status_code} ({shown}); {other}"


def trickled_uploads(target: Target, count: int = 210):
    """Uploads declaring 1 MB that trickle their body, 100 bytes a second; before they close, an upload from another
    address."""
    part = b'--B\r\nContent-Disposition: form-data; name="files"; filename="t.txt"\r\nContent-Type: text/plain\r\n\r\n'
    held = load.Held(target.url, count, UPLOAD + b"Content-Length: 1000000\r\n\r\n" + part, b"A" * 100, 1.0)
    yield
    found = held.states(close=False)
    other = load.upload_from(target.url, "127.0.0.3", 1)
    held.states()
    return f"{len(held.opened):,} connections opened: {counted(found)}; then {other}"


def slow_bodies(target: Target, count: int = 1_100, seconds: float = 35.0):
    """Complete headers of a 200-byte call, then its body one byte every 2 s: past the server's 30 s for a request."""
    request = b"POST /gradio_api/call/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    held = load.Held(target.url, count, request + b"Content-Length: 200\r\n\r\n", b" ", 2.0)
    ends = time.monotonic() + seconds
    yield lambda: time.monotonic() < ends
    return f"{len(held.opened):,} connections opened, after {seconds:g} s: {counted(held.states())}"


def slow_connections(target: Target, count: int):
    """Connections that never finish their request's headers (slowloris)."""
    held = load.Held(target.url, count, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    yield
    alive = len(held.opened) - held.states()["closed by the server"]
    return f"{len(held.opened):,} slow connections opened, {alive:,} still open at the end"


def held_heartbeats(target: Target, count: int = 1_000):
    """`count` heartbeat streams of one address (127.0.0.2), opened and never read."""
    request = "GET /gradio_api/heartbeat/held-{} HTTP/1.1\r\nHost: x\r\n\r\n".format
    held = load.Held(target.url, count, lambda number: request(number).encode(), peer="127.0.0.2")
    yield
    refused = held.states(timeout=0.01)["answered 429"]
    began = time.perf_counter()  # every page closed at once: the server must not stall on their ends
    target.http.get("info")
    return (
        f"{len(held.opened):,} heartbeats held open, {refused:,} answered 429 at once; all closed, the next request "
        f"answered in {time.perf_counter() - began:.2f} s"
    )


def heavy(target: Target):
    """16 heavy raw calls (read), 4 file jobs never read, one 5 MB reference: each once, at once."""

    def file_job_never_read():
        with open(target.source, "rb") as handle:
            uploaded = target.upload("long.txt", handle)
        if uploaded.status_code != 200:
            return f"upload HTTP {uploaded.status_code}"
        job = [load.file_value(uploaded.json()[0]), None, "beam search", 8, 255]
        return f"file job HTTP {target.post('call/translate_file', {'data': job}).status_code}, never read"

    def huge_reference():
        reference = "Ein Mann in einer blauen Jacke repariert ein Fahrrad. " * 92_600  # 5 MB
        answer = target.post("call/translate", {"data": ["A man.", "greedy", 1, 8, reference]})
        return f"5 MB reference HTTP {answer.status_code}"

    heavy_raw = partial(target.translate, HEAVY)
    return attackers(*[heavy_raw] * 16, *[file_job_never_read] * 4, huge_reference, repeat=False)


def server_file(target: Target, files: list[str]) -> str:
    """A server file named as a file value, every file on every call route, with every fn_index: "read" counts an
    answer that is not a refusal."""
    number = next(target.turn)
    path, (route, body) = files[number % len(files)], FILE_ROUTES[number // 7 % len(FILE_ROUTES)]
    answer = target.post(route, body(load.file_value(path)) | {"fn_index": number // 28 % 8})
    return "read" if answer.status_code == 200 else load.one_line(answer)


def odd_read(target: Target) -> str:
    """A stream of an unknown session, or a stored file downloaded with several ranges by one of Gradio's routes."""
    number = next(target.turn)
    if number % 3 == 1:
        return load.one_line(target.http.get("queue/data", params={"session_hash": f"nobody-{number}"}))
    form = "file=" if number % 3 == 0 else "file/"
    answer = target.http.get(f"{form}{target.stored[0]}", headers={"Range": "bytes=0-0,5-9"})
    return f"ranges on {form}<path> HTTP {answer.status_code}"


def slow_links(target: Target, pages: int = 20, late: float = 4.0) -> str:
    """`pages` pages each ask a translation and open their event stream `late` s later (a slow mobile link)."""

    def page_on_a_slow_link():
        with closing(Page(target.url)) as page:
            if (status := page.join(target.named["translate"], load.ORDINARY).status_code) != 200:
                return f"HTTP {status}"
            time.sleep(late)
            return outcome((page.read() or [{}])[0])

    return f"{pages} pages reading {late:g} s late: {counted(load.in_parallel(pages, page_on_a_slow_link))}"


def churn_then_learners(target: Target, rate: int = 20, learners: int = 60) -> str:
    """`rate` new sessions a second from the address until they are refused; then a class of `learners` pages opens
    from it, twice: every learner must be answered."""

    def churn():
        time.sleep(1.0)
        return target.join(target.named["comparison"], [])

    stop_churn = attackers(*[churn] * rate)
    script, deadline = stop_churn.outcomes, time.monotonic() + 120
    while not script["HTTP 429"] and time.monotonic() < deadline:  # the address's new sessions are spent
        time.sleep(0.2)
    learner = partial(load.page_call, target.url, target.named["comparison"], [], settle=False)
    first = load.in_parallel(learners, learner)
    time.sleep(5)
    again = load.in_parallel(learners, learner)
    stop_churn()
    made = ", ".join(f"{count} {status}" for status, count in sorted(script.items()))
    return f"script's sessions: {made}; {learners} learners: {counted(first)}; 5 s later: {counted(again)}"


def one_sessions_views(target: Target, views: int = 66) -> str:
    """A visitor looks inside; another session asks for `views` views; the visitor's view must still redraw."""
    with closing(Page(target.url)) as visitor, closing(Page(target.url)) as other:
        outcome(visitor.ask(target.named["inside"], inside()))
        asked = Counter(
            outcome(other.ask(target.named["inside"], inside(f"A dog number {n} runs."))) for n in range(views)
        )
        redrawn = outcome(visitor.ask(target.redraws[-1][0], [None, "cross", 1, 0]))
    return f"one session's {views} views: {counted(asked)}; the visitor's redraw: {redrawn}"


def views_at_once(target: Target, views: int = 90) -> str:
    """`views` pages each look inside at once, as a class on the Inside tab does, and read their answer."""
    started = time.monotonic()
    outcomes = load.in_parallel(views, partial(load.page_call, target.url, target.named["inside"], inside()))
    return f"{views} Inside views at once: {counted(outcomes)}, all in {time.monotonic() - started:.1f} s"


def unread_views(target: Target, views: int = 100, hold: float = 20.0) -> str:
    """`views` sessions each ask /inside and open their event stream, never read, for `hold` s: the server's RSS."""
    before, largest, held = load.rss_mib(target.server.pid), 0.0, load.Held(target.url, receive_buffer=4_096)
    for _ in range(views):
        session = os.urandom(8).hex()
        if target.join(target.named["inside"], inside(FILE_LINE.strip()), session) == "HTTP 200":
            held.open(1, f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    ends = time.monotonic() + hold
    while time.monotonic() < ends:
        largest = max(largest, load.rss_mib(target.server.pid))
        time.sleep(0.5)
    held.states()
    rss = f"server RSS {before:,.0f} -> at most {largest:,.0f} MiB"
    return f"{len(held.opened)} views asked, streams never read for {hold:g} s: {rss}"


def bad_redraws(target: Target, count: int = 20) -> str:
    """A page looks inside, then sends `count` redraws with values no control offers: the server log's growth."""
    with closing(Page(target.url)) as page:
        outcome(page.ask(target.named["inside"], inside()))
        time.sleep(0.5)
        before = target.log.stat().st_size
        odd = [[None, *ODD_REDRAWS[n % len(ODD_REDRAWS)]] for n in range(count)]
        answers = Counter(outcome(page.ask(target.redraws[-1][0], redraw)) for redraw in odd)
        time.sleep(0.5)
        grown = target.log_since(before)
    grew = f"server log +{len(grown)} lines, {sum('Traceback' in line for line in grown)} tracebacks"
    return f"{count} redraws outside the choices: {counted(answers)}; {grew}"


def ctranslate2_workers(server_pid: int) -> tuple[list[int], list[int]]:
    """(the server's child processes, those running the CTranslate2 worker; a killed one has no command line)."""
    children, workers = psutil.Process(server_pid).children(), []
    for child in children:
        with suppress(psutil.Error):  # a child may end while it is read
            workers += [child.pid] if "ctranslate2_worker" in str(child.cmdline()) else []
    return [child.pid for child in children], workers


def killed_worker(target: Target, after: float = 1.0, latest: float = 4.0, then: float = 3.0):
    """SIGKILL the server's CTranslate2 worker while it decodes the visitor's call (the first moment after `after` s
    that it spends CPU, at `latest` s at the latest); the visitor goes on for `then` s more. A pass: the worker is
    started again, the visitor loses at most one call, the log says so in a line or two."""
    pid, log = target.server.pid, target.log
    size, since = log.stat().st_size, time.monotonic()
    while time.monotonic() - since < 3.0:  # what the attack before writes to the log is not counted
        time.sleep(0.2)
        if log.stat().st_size != size:
            size, since = log.stat().st_size, time.monotonic()
    children, workers = ctranslate2_workers(pid)
    if not workers:
        yield
        return f"no CTranslate2 worker among the server's children {children}"
    victim, killed, began = workers[0], {}, time.monotonic()

    def kill():
        last = load.cpu_seconds(victim)
        while not killed:
            time.sleep(0.005)
            elapsed, used = time.monotonic() - began, load.cpu_seconds(victim)
            busy, last = used > last, used
            if (elapsed >= after and busy) or elapsed >= latest:
                os.kill(victim, signal.SIGKILL)
                killed.update(at=elapsed, busy=busy, when=time.monotonic())

    killer = load.started(in_background(kill))
    yield lambda: not killed or time.monotonic() - killed["when"] < then
    killer()
    if not killed:
        return f"worker {victim} was not killed"
    now, lines = ctranslate2_workers(pid)[1], target.log_since(size)
    restarted = f"restarted as {', '.join(map(str, now))}" if now and victim not in now else "NOT restarted"
    first = f": {lines[0].strip()[:160]}" if lines else ""
    doing = "while decoding" if killed["busy"] else "idle"
    grew = f"server log +{len(lines)} line(s){first}"
    return f"worker {victim} SIGKILLed {killed['at']:.1f} s in ({doing}); {restarted}; {grew}"


def upload(target: Target) -> str:
    """A 100 kB upload, each distinct (Gradio keeps one copy of identical uploads)."""
    content = b"A dog runs in the park.\n" * 4_200 + f"\n{next(target.turn)}".encode()
    return f"upload HTTP {target.upload('u.txt', content).status_code}"


def bad_call(target: Target) -> str:
    route, body = BAD_CALLS[next(target.turn) % len(BAD_CALLS)]
    return load.one_line(target.post(route, body))


def join_flood(target: Target) -> list[str]:
    """A new session joining 3 ordinary /translate calls, never read."""
    session = os.urandom(8).hex()
    return [target.join(target.named["translate"], load.ORDINARY, session) for _ in range(3)]


def attacks(target: Target, args) -> dict:
    """name -> start() (a generator, see `load.started`, or its stop()), in the order they run. The floods are 4
    threads each: queue flood (3,000 capitals at beam 8), starvation stream (tiny greedy calls without a session), busy
    clients (tiny calls, each thread its session, read); session churn: 100 new sessions a second, each joining the
    corpus comparison."""
    churn = partial(target.join, target.named["comparison"], [])
    torch_lib = max((Path(__import__("torch").__file__).parent / "lib").glob("*.so*"), key=lambda p: p.stat().st_size)

    def four(call, *arguments, **pace):
        return lambda: attackers(*[partial(call, target, *arguments)] * 4, **pace)

    def beside(attack):  # an attack that returns its outcome in words
        return lambda: in_background(partial(attack, target))

    def on(attack, *arguments):
        return partial(attack, target, *arguments)

    chosen = {
        "none": lambda: lambda: "no attackers",
        "file job": on(file_job),
        "inside redraws": on(inside_redraws),
        "largest inside views": beside(largest_inside_views),
        "queue flood": lambda: attackers(*[partial(target.translate, HEAVY, read=False)] * 4),
        "session eviction": on(session_eviction),
        "starvation stream": lambda: attackers(*[partial(target.translate, TINY, read=False)] * 4),
        "busy clients": lambda: attackers(*[partial(target.translate, TINY, session=f"tiny-{n}") for n in range(4)]),
        "many files": beside(many_files),
        "trickled uploads": on(trickled_uploads),
        "upload flood": four(upload),
        "slow connections": on(slow_connections, args.slow),
        "slow bodies": on(slow_bodies),
        "bad calls": four(bad_call),
        "heavy": on(heavy),
        "server files": four(server_file, [*SERVER_FILES, str(torch_lib)]),
        "held heartbeats": on(held_heartbeats),
        "odd reads": four(odd_read),
        "join flood": four(join_flood, rate=10, seconds=15, unit="sessions"),
        "session churn": lambda: attackers(*[churn] * 8, rate=100, seconds=30, unit="sessions"),
        "slow links": beside(slow_links),
        "churn then learners": beside(churn_then_learners),
        "one session's views": beside(one_sessions_views),
        "views at once": beside(views_at_once),
        "unread views": beside(unread_views),
        "bad redraws": beside(bad_redraws),
    }
    if args.backend == "ctranslate2":  # last: if no worker is started again, nothing decodes
        chosen["killed worker"] = on(killed_worker)
    return chosen


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    args.ordinary, args.slow = (3, 1_000) if args.quick else (8, 5_000)  # visitor's requests, slow connections
    sentences, _ = harness.sample_sentences("test_2016_flickr", args.ordinary + 1)
    cores = os.sched_getaffinity(0)
    server_cores = {min(cores)} if args.split_cores and len(cores) > 1 else cores
    client_cores = cores - server_cores or cores
    rows, told, memory = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        uploads, log = scratch / "gradio", scratch / "app.log"
        serving = load.shipped_app(
            args.backend, threads=args.threads, log=log, cores=server_cores, GRADIO_TEMP_DIR=str(uploads)
        )
        with serving as (server, url):
            os.sched_setaffinity(0, client_cores)  # this process and the visitor's
            # Split, the visitor is not on the attackers' cores (a browser elsewhere): beside the server (light work)
            with closing(load.Visitor(url, cores=server_cores if args.split_cores else None)) as visitor:
                visitor.visit(sentences[:1], 0.0)  # warm-up
                memory.append(["at start", f"{load.rss_mib(server.pid):,.0f}", f"{load.folder_mb(uploads):,.1f}"])
                target = Target(url, scratch, server, log)
                found = ", ".join(f"{fn_index} {name}" for fn_index, name in target.redraws) or "none"
                print(
                    f"# /config: translate is fn_index {target.named.get('translate')}, comparison "
                    f"{target.named.get('comparison')}; the redraw events (private, 4 inputs): {found}"
                )
                for name, start in attacks(target, args).items():
                    if args.attacks and name not in args.attacks:
                        continue
                    stop = load.started(start())
                    time.sleep(0.5)
                    latencies, failures = visitor.visit(sentences[1 : args.ordinary + 1], PAUSE, stop.running)
                    rows.append([name, len(latencies), failures, *load.seconds_row(latencies)])
                    told.append(f"# {name}: {stop()}")
                    memory.append(
                        [f"after {name}", f"{load.rss_mib(server.pid):,.0f}", f"{load.folder_mb(uploads):,.1f}"]
                    )
        log = log.read_text()  # the server's output, read before its folder goes
    for part in log.split("Traceback")[1:]:  # what failed, to find it
        print("# server traceback:", " | ".join(line.strip() for line in part.splitlines()[-3:]))
    server, clients = (", ".join(map(str, sorted(cores))) for cores in (server_cores, client_cores))
    print(
        f"# Hostile clients (server: app.py --backend {args.backend}, model: {load.SHIPPED_DIR}, {args.threads} torch "
        f"thread(s), {os.cpu_count()} CPU(s) visible; everything from 127.0.0.1; server on CPU {server}, clients on "
        f"CPU {clients}{', the ordinary visitor beside the server' if args.split_cores else ''})"
    )
    print(
        f"# per attack, an ordinary visitor: {args.ordinary} one-sentence requests, beam {BEAMS}, {PAGE_TOKENS} "
        f"tokens, {PAUSE:g} s apart; a failure is an answer without a translation, with a notice, or an exception"
    )
    harness.print_table(["attack", "requests", "failures", "p50 (s)", "p95 (s)", "max (s)"], rows)
    for line in told:
        print(line)
    harness.print_table(["server", "RSS (MiB)", "upload folder (MB)"], memory)
    print(f"# {load.server_log(log)}, {log.count('Too many open')} 'Too many open files'")
    print(f"# {harness.describe_machine(args.threads)}")


if __name__ == "__main__":
    main()
