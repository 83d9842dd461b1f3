"""The one load harness of the attack and load benchmarks (the app's tests use its page client too).

An attack is started by a call that returns its `stop()`, which ends it and says in words what the attackers got;
`stop.running()` says whether an attack that ends by itself is still going. `started` makes that of a generator.
"""

import inspect
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from subprocess import PIPE, Popen

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
SENTENCE = "A dog runs in the park."
SHIPPED_DIR = ROOT / "models" / "transformer-en-de"
PAGE_TOKENS = 128  # the page's default "max new tokens"
BEAMS = json.loads((SHIPPED_DIR / "generation_config.json").read_text())["num_beams"]
ORDINARY = [SENTENCE, "beam search", BEAMS, PAGE_TOKENS, ""]  # /translate at the page's defaults


def pinned_to(cores: set[int] | None):
    """A child's preexec_fn that pins it to `cores` (None: nothing to do)."""
    return None if cores is None else lambda: os.sched_setaffinity(0, cores)


@contextmanager
def app_server(*options, threads: int = 1, log: Path | None = None, cores: set[int] | None = None, **environment):
    """`python app.py *options --port <free>` offline (output into `log`, else stderr), up: yields (process, url)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", OMP_NUM_THREADS=str(threads))
    output = open(log, "w") if log else subprocess.DEVNULL
    command = [sys.executable, str(ROOT / "app.py"), *map(str, options), "--port", str(port)]
    errors = output if log else None
    server = Popen(command, cwd=ROOT, env=env | environment, stdout=output, stderr=errors, preexec_fn=pinned_to(cores))
    url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + 600
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"app.py exited with code {server.returncode} before serving; see its output.")
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"app.py did not answer at {url} within 600 s.") from None
                time.sleep(0.5)
        yield server, url
    finally:
        server.terminate()
        server.wait(timeout=60)
        if log:
            output.close()


def shipped_app(backend: str, **settings):
    """`app_server` of the shipped model alone, decoding with `backend`."""
    return app_server("--model", SHIPPED_DIR, "--comparison-models", "--backend", backend, **settings)


def server_log(log: str) -> str:
    return f"server log: {len(log.encode()):,} bytes, {log.count('Traceback')} tracebacks"


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def cpu_seconds(pid: int) -> float:
    return sum(psutil.Process(pid).cpu_times()[:2])  # user + system


def folder_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def seconds_row(latencies: list[float]) -> list[str]:
    """[p50, p95 (linear-interpolated), max] of latencies, in seconds."""
    latencies = latencies or [float("nan")]
    p95 = statistics.quantiles(latencies, n=20, method="inclusive")[18] if latencies[1:] else latencies[0]
    return [f"{value:.2f}" for value in (statistics.median(latencies), p95, max(latencies))]


def events(url: str) -> tuple[dict, list[tuple[int, str | None]]]:
    """{api_name: fn_index} of the named events, [(fn_index, name)] of the Inside tab's redraws (4 private inputs)."""
    named, redraws = {}, []
    for place, dependency in enumerate(httpx.get(f"{url}config", timeout=30).json()["dependencies"]):
        fn_index, name = dependency.get("id", place), dependency.get("api_name")
        if dependency.get("api_visibility") != "private" and name:
            named[name] = fn_index
        elif len(dependency.get("inputs", [])) == 4:
            redraws.append((fn_index, name))
    return named, redraws


def file_value(path: str) -> dict:
    """A file the server stores, as a call names it."""
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


def call_body(fn_index: int, data: list, session: str | None = None) -> dict:
    """A queue/join or run/predict call as the page sends it (in a new session if none)."""
    session = session or os.urandom(8).hex()
    return {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}


class Page:
    """A page's session as the browser runs it, its heartbeat open while the page is (`settle`: before the first call;
    none for a script posting and leaving). `peer`: the loopback address it connects from; `address`: its
    X-Forwarded-For."""

    def __init__(
        self, url: str, address: str | None = None, peer: str | None = None, heartbeat: bool = True, settle: bool = True
    ):
        self.url, self.session = url, os.urandom(8).hex()
        transport = httpx.HTTPTransport(local_address=peer) if peer else None
        headers = {"X-Forwarded-For": address} if address else {}
        self.http = httpx.Client(timeout=httpx.Timeout(30, read=120), headers=headers, transport=transport)
        self.beating, self.closed = threading.Event(), threading.Event()
        if heartbeat:
            threading.Thread(target=self.heartbeat, daemon=True).start()
            if settle and not self.beating.wait(30):
                raise TimeoutError("the heartbeat did not open")

    def heartbeat(self) -> None:
        try:
            with self.http.stream("GET", f"{self.url}gradio_api/heartbeat/{self.session}") as beat:
                self.beating.set()
                for _ in beat.iter_raw():
                    if self.closed.is_set():
                        return
        except httpx.HTTPError:  # its connection closed with the page
            pass

    def join(self, fn_index: int, data: list) -> httpx.Response:
        return self.http.post(f"{self.url}gradio_api/queue/join", json=call_body(fn_index, data, self.session))

    def messages(self):
        """The session's event stream, message by message, or {"refused": status}."""
        with self.http.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": self.session}) as data:
            if data.status_code != 200:
                yield {"refused": data.status_code}
                return
            for line in data.iter_lines():
                if line.startswith("data:"):
                    yield json.loads(line[5:])

    def read(self, calls: int = 1) -> list[dict]:
        """The `process_completed` messages of the session's next `calls` calls (fewer if the stream ends first), or
        [{"refused": status}]."""
        done = []
        for message in self.messages() if calls else ():
            if "refused" in message:
                return [message]
            done += [message] if message.get("msg") == "process_completed" else []
            if len(done) == calls:
                break
        return done

    def ask(self, fn_index: int, data: list) -> dict:
        """One call, read: its completed message, or {"refused": status}."""
        status = self.join(fn_index, data).status_code
        return (self.read() or [{}])[0] if status == 200 else {"refused": status}

    def run(self, fn_index: int, data: list) -> dict:
        """An event outside the queue: its answer, or {"refused": status}."""
        answer = self.http.post(f"{self.url}gradio_api/run/predict", json=call_body(fn_index, data, self.session))
        return answer.json() if answer.status_code == 200 else {"refused": answer.status_code}

    def close(self) -> None:
        self.closed.set()
        self.http.close()


def outcome(message: dict) -> str:
    """A page call's outcome in a word or two."""
    if "refused" in message:
        return f"HTTP {message['refused']}"
    if not message.get("success"):
        return "failed"
    text = json.dumps(message["output"]["data"])
    return "cancelled" if "Cancelled" in text else "expired view" if "no longer kept" in text else "answered"


def page_call(url: str, fn_index: int, data: list, **page) -> str:
    """The outcome of a call from a page opened for it."""
    with closing(Page(url, **page)) as visitor:
        return outcome(visitor.ask(fn_index, data))


def counted(outcomes: Counter) -> str:
    return ", ".join(f"{count:,} {label}" for label, count in outcomes.most_common()) or "none"


def in_parallel(count: int, target) -> Counter:
    """`target()` in `count` threads at once; their outcomes counted (an exception as its name)."""
    stop = attackers(*[target] * count, repeat=False)
    stop()
    return stop.outcomes


def one_line(response: httpx.Response) -> str:
    """A refusal's status, and whether its message is one line."""
    try:
        message = response.json().get("error") or response.json().get("detail")
    except ValueError:
        message = None
    ok = isinstance(message, str) and message and "\n" not in message
    return f"HTTP {response.status_code}, {'one line' if ok else 'NOT one line'}"


def upload_from(url: str, peer: str, number: int) -> str:
    """One small upload from `peer` (a loopback address), in words."""
    with httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address=peer)) as http:
        try:
            status = http.post(f"{url}gradio_api/upload", files={"files": ("u.txt", f"A dog {number}.")}).status_code
        except httpx.HTTPError as error:
            return f"an upload from {peer} failed ({type(error).__name__})"
    return f"an upload from {peer}: HTTP {status} ({'accepted' if status == 200 else 'NOT accepted'})"


class Held:
    """The raw connections of the slow clients: up to `count` (as many as the machine lets open) from `peer`, each
    sending `request` (bytes, or a function of its number), then with `drip`, that chunk every `every` s (one thread
    drips on all) until `states()`. A small `receive_buffer` makes a reader that never reads."""

    def __init__(self, url, count=0, request=b"", drip=b"", every=1.0, peer=None, receive_buffer=None):
        self.address, self.source = ("127.0.0.1", int(url.rsplit(":", 1)[1].strip("/"))), (peer or "", 0)
        self.receive_buffer, self.opened = receive_buffer, []
        self.open(count, request)
        self.alive = list(self.opened)
        self.dripping = attackers(partial(self.send, drip), rate=1 / every) if drip else None

    def open(self, count: int, request) -> None:
        for number in range(count):
            try:
                connection = socket.create_connection(self.address, timeout=5, source_address=self.source)
                if self.receive_buffer:
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
                connection.sendall(request(number) if callable(request) else request)
                self.opened.append(connection)
            except OSError:
                break

    def send(self, chunk: bytes) -> list:
        for connection in list(self.alive):
            try:
                connection.settimeout(0.5)
                connection.sendall(chunk)
            except OSError:
                self.alive.remove(connection)
        return []

    def states(self, close: bool = True, timeout: float = 0.001) -> Counter:
        """The drip stopped, each connection: still open (nothing answered within `timeout`), answered (its status),
        or closed by the server; then closed, unless `close` is False."""
        if self.dripping:
            self.dripping()
        found = Counter()
        for connection in self.opened:
            try:
                connection.settimeout(timeout)
                answer = connection.recv(64).split()
                found[f"answered {answer[1].decode(errors='replace')}" if answer[1:] else "closed by the server"] += 1
            except TimeoutError:
                found["still open"] += 1
            except OSError:
                found["closed by the server"] += 1
            if close:
                connection.close()
        return found


def attackers(*targets, repeat=True, rate=None, seconds=None, unit=None, stopped: threading.Event | None = None):
    """Each target in a thread of its own, called until stopped (once with `repeat=False`), for `seconds` at most;
    with `rate`, that many calls a second in all. Their labels (an exception: its name) are counted; with `unit`, said
    per `unit` and at what pace. `stopped`: the event stop() sets (targets may wait on it)."""
    outcomes, lock, stopped = Counter(), threading.Lock(), stopped or threading.Event()
    turns, done, began = itertools.count(), Counter(), time.monotonic()

    def loop(target):
        while not stopped.is_set():
            due = next(turns) / rate if rate else time.monotonic() - began
            if seconds is not None and due >= seconds:
                return
            if rate and stopped.wait(max(0.0, began + due - time.monotonic())):
                return
            try:
                labels = target()
            except Exception as error:  # an attacker's own failure is an outcome, not the benchmark's end
                labels = type(error).__name__
            with lock:
                done["calls"] += 1
                outcomes.update([labels] if isinstance(labels, str) else labels)
            if not repeat:
                return

    threads = [threading.Thread(target=loop, args=(target,), daemon=True) for target in targets]
    for thread in threads:
        thread.start()

    def stop() -> str:
        if repeat:
            stopped.set()
        for thread in threads:
            thread.join(timeout=60 if repeat else 300)
        if unit is None:
            return counted(outcomes)
        elapsed = time.monotonic() - began
        return f"{done['calls']:,} {unit} in {elapsed:.0f} s ({done['calls'] / elapsed:.0f}/s): {counted(outcomes)}"

    stop.outcomes = outcomes
    stop.running = lambda: seconds is not None and time.monotonic() - began < seconds and not stopped.is_set()
    stop.alive = lambda: any(thread.is_alive() for thread in threads)
    return stop


def in_background(target):
    """`target()` (its outcome in words) once in a thread, as an attack for `started`."""
    outcome = []

    def run():
        try:
            outcome.append(target())
        except Exception as error:  # the benchmark goes on to the next attack
            outcome.append(f"failed ({type(error).__name__}: {str(error)[:120]})")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield thread.is_alive
    thread.join(timeout=600)
    return outcome[0] if outcome else "still running after 600 s"


def started(attack):
    """The stop() of an attack (as is), or of an attack written as a generator: its code to its `yield` starts it (what
    it yields: its `running()`, if it ends by itself), the rest ends it and returns what the attackers got."""
    if not inspect.isgenerator(attack):
        attack.running = getattr(attack, "running", lambda: False)
        return attack
    running = next(attack) or (lambda: False)

    def stop() -> str:
        try:
            next(attack)
        except StopIteration as end:
            return end.value
        raise RuntimeError("an attack yields once")

    stop.running = running
    return stop


class Visitor:
    """The ordinary visitor: one gradio_client session in a process of its own, as on a machine of its own (the
    attackers' threads would hold this interpreter); `address`: its X-Forwarded-For."""

    def __init__(self, url: str, address: str | None = None, cores: set[int] | None = None):
        code = "from benchmarks.load import visitor_process; visitor_process()"
        command = [sys.executable, "-c", code, url, *([address] if address else [])]
        self.process = Popen(command, cwd=ROOT, stdin=PIPE, stdout=PIPE, text=True, preexec_fn=pinned_to(cores))

    def visit(self, sentences: list[str], pause: float, running=lambda: False, more=None) -> tuple[list[float], int]:
        """Each sentence translated at the page's defaults, `pause` s apart, then those of `more` (else the same) in
        turn while `running()`, 600 s at most: (latencies, failures)."""
        self.process.stdin.write(json.dumps({"sentences": sentences, "pause": pause}) + "\n")
        self.process.stdin.flush()
        if not (reply := self.process.stdout.readline()):
            raise RuntimeError("the visitor's process ended")
        latencies, failures = json.loads(reply)
        turns, deadline = itertools.cycle(more or sentences), time.monotonic() + 600
        while (more or sentences) and running() and time.monotonic() < deadline:
            latency, failed = self.visit([next(turns)], pause)
            latencies, failures = latencies + latency, failures + failed
        return latencies, failures

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def client(url: str, address: str | None = None):
    """A gradio_client session (`address`: its X-Forwarded-For, through a trusted proxy)."""
    from gradio_client import Client

    return Client(url, verbose=False, headers={"X-Forwarded-For": address} if address else None)


def visitor_process() -> None:
    """Each line {"sentences": [...], "pause": s} on stdin answered by [latencies, failures] (a failure: an answer
    without a translation, with a notice, or an error)."""
    for attempt in range(3):  # a page opened in a crowd's burst may wait past gradio_client's 5 s for /config
        try:
            session = client(*sys.argv[1:3])
            break
        except httpx.TimeoutException:
            if attempt == 2:
                raise
    for line in sys.stdin:
        asked, latencies, failures = json.loads(line), [], 0
        for sentence in asked["sentences"]:
            began = time.perf_counter()
            try:
                answer = session.predict(sentence, *ORDINARY[1:], api_name="/translate")
                failures += not answer[0] or bool(answer[-1])
            except Exception:
                failures += 1
            latencies.append(time.perf_counter() - began)
            time.sleep(asked["pause"])
        print(json.dumps([latencies, failures]), flush=True)
