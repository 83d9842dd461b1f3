"""Hostile clients against the running app, one attack at a time: does an ordinary visitor still get a quick
translation, and do the server's memory and upload folder stay bounded?

Starts `python app.py --backend ...` (our model only, offline) on 127.0.0.1 with its own upload folder. For each attack,
all from 127.0.0.1, the attackers start, and half a second later an ordinary visitor (gradio_client, a page's session)
sends `--ordinary` one-sentence requests at the page's defaults (beam 4, 128 tokens), `--pause` seconds apart; then the
attackers stop. The visitor runs in its own process, as on its own machine (the attackers' threads would otherwise hold
its interpreter). Server and clients share the cores this runs on (`taskset -c 0`: one), unless `--split-cores` gives
the server (and the ordinary visitor, whose work is light) the first and the attackers the others, as a server and
remote clients would be. The attacks:
- none: the visitor alone, for reference;
- queue flood: 4 threads POSTing `/gradio_api/call/translate` (3,000 capitals, beam 8) and never reading;
- session eviction: a visitor's file job (2,000 lines, read) runs while 4 threads send cheap raw calls, each without
  a session (a new one each), read; the file job must come back;
- starvation stream: 4 threads sending tiny greedy requests without a session, never read;
- busy clients: 4 threads sending tiny greedy requests (each thread its session), read: the load of 4 more visitors;
- upload flood: 4 threads uploading 100 kB files in a loop;
- slow connections: `--slow` connections that send part of their headers and never finish;
- bad calls: 4 threads sending unknown API names, unknown fn_index (999, -1), 100,000-deep JSON and `load_example`
  with an example that does not exist; every answer must be one line;
- heavy: 16 heavy raw calls (read), 4 file jobs of 2,000 lines (never read) and one 5 MB reference;
- server files: 4 threads naming server files as file values (/etc/passwd, app.py, .git/config, /proc/self/status,
  /dev/zero, the largest library of torch, a URL) on every call route, with every fn_index; "read" counts an answer
  that was not a refusal;
- held heartbeats: 1,000 `GET /gradio_api/heartbeat/<id>` from 127.0.0.2, never read;
- odd reads: streams of unknown sessions and file downloads with several ranges (both `/file=<path>` and
  `/file/<path>`), 4 threads;
- file job (run second, before the upload flood spends the address's upload quota): a visitor's 2,000-line file
  job (beam 4, read) runs while the visitor translates, until the job has come back (its last part scores every
  line's confidence);
- inside redraws (before the attacks that spend the address's new sessions): 15 gradio_client sessions, each runs
  /inside once and then keeps 3 redraws of its attention pictures in flight (the private events with 4 inputs found
  in /config, posted to queue/join in the session, read from its own stream);
- largest inside views: /inside on 29 different made-up words of rare letters, read in full, 10 times in a row
  (the answer's JSON size, or the one-line refusal); the RSS after it should stay within +300 MB of "at start";
- many files: one upload of 999 tiny files (its status and message), then an upload from 127.0.0.3;
- trickled uploads: 210 uploads declaring a 1 MB multipart body, trickling it (100 bytes a second each); before
  they close, an upload from 127.0.0.3 must be accepted;
- slow bodies: 1,100 connections sending whole headers of a 200-byte call and then its body one byte every 2 s,
  for 35 s (past the server's 30 s for a whole request); the visitor's calls should take under 5 s;
- join flood: 10 new sessions a second for 15 s, each posting 3 ordinary /translate calls to queue/join (fn_index
  from /config), never reading; the answers' HTTP statuses;
- session churn: 100 new sessions a second for 30 s, each joining the cheapest event (the corpus comparison),
  never read;
- killed worker (last; `--backend ctranslate2` only): the server's CTranslate2 worker process is SIGKILLed while it
  decodes the visitor's call (after 1 s); whether a new worker took its place and how many lines the server log grew
  by, counted from when it was last quiet for 3 s (the visitor should lose at most that call, the log a line or two).
- slow links, churn then learners, one session's views, views at once, bad redraws: pages as a browser runs them
  (`benchmarks.page_clients`, which says what each does).
The attacks that last a given time (inside views, many files, slow bodies, join flood, session churn, killed worker,
the file job) keep the visitor visiting, one request at a time, until they end.
It prints, per attack, the visitor's p50 / p95 / max latency and failures (no translation, a notice, an exception) and
what the attackers got; then the server's resident memory and its upload folder's size before and after.

    OMP_NUM_THREADS=1 taskset -c 0 python -m benchmarks.hostile_clients --threads 1 --backend ctranslate2 [--quick]
"""

import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks import harness, page_clients
from benchmarks.app_latency import free_port, percentile, wait_until_up

HEAVY_TEXT = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]
FILE_LINE = "A man in a blue jacket is repairing a bicycle on the street while two dogs play in the snow.\n"
ATTACKERS = 4
INSIDE_SENTENCE = "A man in a blue jacket is repairing a bicycle."
# 29 different made-up words of rare letters: as many pieces as a sentence can give the Inside view.
RARE_WORDS = " ".join(
    "jqzjvkv jwzwq jxkvjqq jzkw jzqq jzzv kjzk kkqxkv kvqzj kywzk qxxy vwqkwj vwyxjj vxvz vzqvjy wqqzyvk wvjjk "
    "wvvv wxww wxwxjqq wyjvzx wyqkwxx wzkxjxk xkxxqyq xqjkk xvwwvwj xvzx ykwv yqyvv".split()
)


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--backend", choices=["torch", "ctranslate2"], default="torch", help="what decodes")
    parser.add_argument("--ordinary", type=int, default=8, help="the ordinary visitor's requests per attack")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the ordinary visitor's requests")
    parser.add_argument("--split-cores", action="store_true",
                        help="the server and the ordinary visitor on the first core, the attackers on the rest")
    parser.add_argument("--slow", type=int, default=5_000, help="slow connections (headers never finished)")
    parser.add_argument("--attacks", nargs="*", default=None, help="only these attacks (names as printed)")


def rss_mib(pid: int) -> float:
    """Resident memory of a process, MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def folder_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


class Attack:
    """Attackers in threads, each calling `once()` until stopped; outcomes counted by the label `once` returns."""

    def __init__(self, once, threads: int = ATTACKERS):
        self.once, self.outcomes, self.stopped = once, Counter(), threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self):
        while not self.stopped.is_set():
            try:
                label = self.once()
            except Exception as error:  # an attacker's own failure is an outcome, not the benchmark's end
                label = type(error).__name__
            self.outcomes[label] += 1

    def start(self):
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> str:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return ", ".join(f"{count:,} {label}" for label, count in self.outcomes.most_common()) or "none"


def post(http, url: str, route: str, body: bytes, **headers):
    return http.post(f"{url}gradio_api/{route}", content=body, headers={"Content-Type": "application/json", **headers})


def raw_translate(http, url: str, data: list, session: str | None = None, read: bool = True) -> str:
    """A raw call of /translate: its outcome in a word."""
    body = {"data": data} | ({"session_hash": session} if session else {})
    posted = post(http, url, "call/translate", json.dumps(body).encode())
    if posted.status_code != 200:
        return f"HTTP {posted.status_code}"
    if not read:
        return "posted, never read"
    stream = http.get(f"{url}gradio_api/call/translate/{posted.json()['event_id']}", timeout=300)
    if stream.status_code != 200:
        return f"read: HTTP {stream.status_code}"
    return "translated" if "event: complete" in stream.text else "read: error"


def one_line(response) -> str:
    try:
        message = response.json().get("error") or response.json().get("detail")
    except ValueError:
        message = None
    ok = isinstance(message, str) and message and "\n" not in message
    return f"HTTP {response.status_code}, {'one line' if ok else 'NOT one line'}"


def one_shot(*targets):
    """Each target once, in its own thread (a fixed burst, not a loop)."""
    outcomes = Counter()

    def run(target):
        try:
            outcomes[target()] += 1
        except Exception as error:
            outcomes[type(error).__name__] += 1

    threads = [threading.Thread(target=run, args=(target,), daemon=True) for target in targets]
    for thread in threads:
        thread.start()

    def stop():
        for thread in threads:
            thread.join(timeout=300)
        return ", ".join(f"{count} {label}" for label, count in outcomes.most_common())

    return stop


def looped(once):
    """`once` called in a loop by the attackers until stopped."""
    attack = Attack(once).start()
    return attack.stop


def held_heartbeats(url: str):
    """1,000 heartbeat streams of one address, opened and never read."""
    opened = []
    port = int(url.rsplit(":", 1)[1].strip("/"))
    for number in range(1_000):
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            connection.sendall(f"GET /gradio_api/heartbeat/held-{number} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            opened.append(connection)
        except OSError:
            break

    def stop():
        refused = 0
        for connection in opened:
            try:
                connection.settimeout(0.01)
                refused += connection.recv(12).startswith(b"HTTP/1.1 429")
            except OSError:
                pass
            connection.close()
        return f"{len(opened):,} heartbeats held open, {refused:,} answered 429 at once"

    return stop


def file_job(url: str, source: Path):
    """A visitor's file job through gradio_client, read at the end."""
    from gradio_client import Client, handle_file

    job = Client(url, verbose=False).submit(handle_file(source), None, "beam search", 4, 128,
                                            api_name="/translate_file")  # fmt: skip

    def stop():
        try:
            return "the file job came back" if job.result(timeout=600)[0] else "the file job came back empty"
        except Exception as error:  # the benchmark goes on to the next attack
            return f"the file job failed ({type(error).__name__})"

    stop.running = lambda: not job.done()  # the visitor keeps asking until the job's last line is scored
    return stop


def file_visitor(url: str, source: Path):
    from gradio_client import Client, handle_file

    visitor = Client(url, verbose=False)
    return visitor.submit(handle_file(source), None, "greedy", 1, 64, api_name="/translate_file")


def eviction(url: str, source: Path, new_session):
    """New sessions in a loop while a visitor's file job runs: the visitor's session must not be pushed out."""
    job = file_visitor(url, source)
    stop = looped(new_session)

    def stop_and_check():
        outcome = stop()
        try:
            path, summary, _ = job.result(timeout=300)
            kept = "the visitor's file job came back" + ("" if path else f" without a file: {summary[:80]}")
        except Exception as error:
            kept = f"the visitor's file job was lost ({type(error).__name__})"
        return f"{outcome}; {kept}"

    return stop_and_check


def slow_connections(url: str, count: int) -> list:
    opened = []
    for _ in range(count):
        try:
            connection = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1].strip("/"))), timeout=5)
            connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            opened.append(connection)
        except OSError:
            break
    return opened


def slow(url: str, count: int):
    """Connections that never finish their request's headers."""
    opened = slow_connections(url, count)

    def stop():
        alive = 0
        for connection in opened:
            try:
                connection.settimeout(0.001)
                alive += connection.recv(1) != b""
            except TimeoutError:
                alive += 1
            except OSError:
                pass
            connection.close()
        return f"{len(opened):,} slow connections opened, {alive:,} still open at the end"

    return stop


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


def events(http, url: str) -> tuple[dict, list]:
    """From /config: {api_name: fn_index} of the events a client may call by name, and [(fn_index, name)] of the Inside
    tab's redraws (private events with 4 inputs: the session's view, kind, layer, head). Gradio 6 numbers an event by
    its dependency's "id" (the same as its place in the list, unless events were rendered later)."""
    dependencies = http.get(f"{url}config").json()["dependencies"]
    named, redraws = {}, []
    for place, dependency in enumerate(dependencies):
        fn_index, name = dependency.get("id", place), dependency.get("api_name")
        if dependency.get("api_visibility") == "private" or not name:
            if len(dependency.get("inputs", [])) == 4:
                redraws.append((fn_index, name))
        else:
            named[name] = fn_index
    return named, redraws


def join_body(fn_index: int, data: list, session: str) -> bytes:
    """A page's `POST /gradio_api/queue/join` body."""
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    return json.dumps(body).encode()


def new_session() -> str:
    return os.urandom(8).hex()


def counted(outcomes: Counter) -> str:
    return ", ".join(f"{count:,} {label}" for label, count in outcomes.most_common()) or "none"


def paced(once, rate: float, seconds: float | None = None, threads: int = ATTACKERS, unit: str = "sessions"):
    """`once` called `rate` times a second in all (the threads take numbered turns), until stopped, or for `seconds`
    (the visitor visits until then); `once` returns the labels to count."""
    outcomes, calls, lock, stopped = Counter(), Counter(), threading.Lock(), threading.Event()
    turns, began = itertools.count(), time.monotonic()

    def loop():
        while not stopped.is_set():
            due = next(turns) / rate
            if seconds is not None and due >= seconds:
                return
            if stopped.wait(max(0.0, began + due - time.monotonic())):
                return
            try:
                labels = once()
            except Exception as error:  # an attacker's own failure is an outcome
                labels = [type(error).__name__]
            with lock:
                calls["done"] += 1
                outcomes.update(labels)

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()

    def stop():
        stopped.set()
        for worker in workers:
            worker.join(timeout=60)
        elapsed = time.monotonic() - began
        return f"{calls['done']:,} {unit} in {elapsed:.0f} s ({calls['done'] / elapsed:.0f}/s): {counted(outcomes)}"

    stop.running = lambda: seconds is not None and time.monotonic() - began < seconds and not stopped.is_set()
    return stop


def in_background(target):
    """`target()` (returning its outcome) once in a thread; the visitor visits until it has returned."""
    outcome = []

    def run():
        try:
            outcome.append(target())
        except Exception as error:  # the benchmark goes on to the next attack
            outcome.append(f"failed ({type(error).__name__}: {str(error)[:120]})")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def stop():
        thread.join(timeout=600)
        return outcome[0] if outcome else "still running after 600 s"

    stop.running = thread.is_alive
    return stop


class RedrawSession:
    """A page's session that looked inside (a gradio_client Client ran /inside) and keeps `in_flight` redraws of its
    attention pictures queued: raw queue/join posts of the private redraw events in its session, their results read
    from the session's own stream in a thread (gradio_client refuses private events)."""

    def __init__(self, url: str, redraws: list, outcomes: Counter, stopped: threading.Event, in_flight: int = 3):
        import httpx

        self.url, self.redraws, self.outcomes, self.stopped, self.in_flight = url, redraws, outcomes, stopped, in_flight
        self.http = httpx.Client(timeout=httpx.Timeout(30, read=60))
        self.changed = threading.Condition()
        self.pending, self.finished, self.session, self.stream = {}, {}, None, None

    def count(self, label: str) -> None:
        with self.changed:
            self.outcomes[label] += 1

    def run(self) -> None:
        from gradio_client import Client

        try:
            client = Client(self.url, verbose=False)
            view = client.predict(INSIDE_SENTENCE, "beam search", 4, 128, api_name="/inside")
        except Exception as error:
            self.count(f"/inside failed ({type(error).__name__})")
            return
        self.count("/inside refused" if "message" in view else "/inside answered")
        self.session = client.session_hash
        threading.Thread(target=self.read, daemon=True).start()
        turns = itertools.cycle(self.redraws)
        while not self.stopped.is_set():
            with self.changed:
                self.expire()
                while len(self.pending) >= self.in_flight and not self.stopped.is_set():
                    self.changed.wait(0.5)
                    self.expire()
            if self.stopped.is_set():
                break
            fn_index, _ = next(turns)
            try:
                posted = self.http.post(f"{self.url}gradio_api/queue/join",
                                        content=join_body(fn_index, [None, "cross", 1, 0], self.session),
                                        headers={"Content-Type": "application/json"})  # fmt: skip
            except Exception as error:
                self.count(f"redraw join {type(error).__name__}")
                continue
            if posted.status_code != 200:
                self.count(f"redraw join HTTP {posted.status_code}")
                self.stopped.wait(0.2)
                continue
            event = posted.json()["event_id"]
            with self.changed:
                if event in self.finished:  # read before its post came back
                    self.outcomes[self.finished.pop(event)] += 1
                else:
                    self.pending[event] = time.monotonic()

    def expire(self) -> None:
        for event, posted in list(self.pending.items()):
            if time.monotonic() - posted > 60:
                del self.pending[event]
                self.outcomes["redraws without an answer in 60 s"] += 1

    def read(self) -> None:
        """The session's stream, opened again whenever the server closes it (it does when nothing is pending)."""
        while not self.stopped.is_set():
            try:
                params = {"session_hash": self.session}
                with self.http.stream("GET", f"{self.url}gradio_api/queue/data", params=params) as stream:
                    self.stream = stream
                    if stream.status_code != 200:
                        self.count(f"stream HTTP {stream.status_code}")
                        self.stopped.wait(0.5)
                        continue
                    for line in stream.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        message = json.loads(line[5:])
                        if message.get("msg") == "process_completed":
                            self.completed(message)
                        elif message.get("msg") in ("close_stream", "unexpected_error"):
                            break
            except Exception as error:  # closed at the end, or by the server
                if not self.stopped.is_set():
                    self.count(f"stream {type(error).__name__}")
                    self.stopped.wait(0.5)

    def completed(self, message: dict) -> None:
        if message.get("success"):
            label = "redrawn"
        else:
            error = (message.get("output") or {}).get("error") or message.get("title") or "no message"
            label = f"redraw refused: {str(error).splitlines()[0][:80] if str(error) else 'no message'}"
        with self.changed:
            if self.pending.pop(message.get("event_id"), None) is not None:
                self.outcomes[label] += 1
            else:
                self.finished[message.get("event_id")] = label
            self.changed.notify_all()

    def close(self) -> None:
        try:
            if self.stream is not None:
                self.stream.close()
        except Exception:  # closing a stream another thread reads: whatever it says, it is closed
            pass
        self.http.close()


def inside_redraws(url: str, redraws: list, sessions: int = 15):
    """`sessions` pages that looked inside, each keeping 3 redraws of its pictures in flight."""
    outcomes, stopped = Counter(), threading.Event()
    pages = [RedrawSession(url, redraws, outcomes, stopped) for _ in range(sessions)]
    threads = [threading.Thread(target=page.run, daemon=True) for page in pages]
    for thread in threads:
        thread.start()

    def stop():
        stopped.set()
        for thread in threads:
            thread.join(timeout=60)
        for page in pages:
            page.close()
        found = ", ".join(f"{fn_index} {name}" for fn_index, name in redraws)
        return f"{sessions} sessions (redraw events {found}): {counted(outcomes)}"

    return stop


def largest_inside_views(url: str, times: int = 10) -> str:
    """/inside on 29 different made-up words of rare letters, read in full, `times` in a row, one session."""
    from gradio_client import Client

    client, sizes, messages, failures = Client(url, verbose=False), [], Counter(), Counter()
    for _ in range(times):
        try:
            answer = client.predict(RARE_WORDS, "beam search", 4, 128, api_name="/inside")
        except Exception as error:
            failures[type(error).__name__] += 1
            continue
        sizes.append(len(json.dumps(answer)))
        message = answer.get("message") if isinstance(answer, dict) else None
        if message:
            messages[message] += 1
    size = f"{min(sizes):,} to {max(sizes):,} bytes of JSON" if sizes else "no answers"
    refused = "; ".join(
        f"{count} with {'a one-line' if chr(10) not in message else 'a NOT one-line'} message: '{message[:160]}'"
        for message, count in messages.items()
    )
    return (f"{len(sizes)} answers of {size}; refused: {refused or 'none'}"
            + (f"; failed: {counted(failures)}" if failures else ""))  # fmt: skip


def upload_from(port: int, peer: str, number: int) -> int:
    """One small upload over a connection from `peer` (a loopback address): the status (tests/test_app_server.py)."""
    part = b'--B\r\nContent-Disposition: form-data; name="files"; filename="u.txt"\r\n\r\n'
    body = part + f"A dog {number}.".encode() + b"\r\n--B--\r\n"
    headers = "POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
    headers += f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(peer, 0)) as connection:
        connection.sendall(headers.encode() + b"\r\n" + body)
        return int(connection.recv(64).split()[1])


def other_address_upload(port: int, number: int) -> str:
    try:
        status = upload_from(port, "127.0.0.3", number)
    except Exception as error:
        return f"an upload from 127.0.0.3 failed ({type(error).__name__})"
    return f"an upload from 127.0.0.3: HTTP {status} ({'accepted' if status == 200 else 'NOT accepted'})"


def connection_states(opened: list) -> Counter:
    """Each connection: still open (nothing answered), answered (its status), or closed by the server."""
    states = Counter()
    for connection in opened:
        try:
            connection.settimeout(0.001)
            answer = connection.recv(64).split()
            states[f"answered {answer[1].decode(errors='replace')}" if len(answer) > 1 else "closed by the server"] += 1
        except TimeoutError:
            states["still open"] += 1
        except OSError:
            states["closed by the server"] += 1
    return states


def dripping(url: str, count: int, request: bytes, chunk: bytes, every: float, seconds: float | None = None):
    """`count` connections from 127.0.0.1, each sending `request` (headers and the start of a body) and then `chunk`
    every `every` seconds (one thread drips on all of them), for `seconds` (else the visitor's run); the stop function
    returns (the connections, their states), before closing them."""
    opened, stopped, began = [], threading.Event(), time.monotonic()
    for _ in range(count):
        try:
            connection = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
            connection.sendall(request)
            opened.append(connection)
        except OSError:
            break

    def drip():
        alive = list(opened)
        while alive and not stopped.wait(every):
            for connection in list(alive):
                try:
                    connection.settimeout(0.5)
                    connection.sendall(chunk)
                except OSError:
                    alive.remove(connection)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()

    def stop():
        stopped.set()
        dripper.join(timeout=30)
        return opened, connection_states(opened)

    stop.running = lambda: seconds is not None and time.monotonic() - began < seconds
    return stop


def close_all(connections: list) -> None:
    for connection in connections:
        connection.close()


def slow_bodies(url: str, count: int = 1_100, seconds: float = 35.0):
    """Complete headers of a 200-byte call, then its body one byte every 2 s: past the server's 30 s for a request."""
    request = b"POST /gradio_api/call/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    stop_dripping = dripping(url, count, request + b"Content-Length: 200\r\n\r\n", b" ", 2.0, seconds)

    def stop():
        opened, states = stop_dripping()
        close_all(opened)
        return f"{len(opened):,} connections opened, after {seconds:g} s: {counted(states)}"

    stop.running = stop_dripping.running
    return stop


def trickled_uploads(url: str, count: int = 210):
    """Uploads declaring 1 MB that trickle their body (100 bytes a second each); before they close, an upload from
    another address."""
    part = b'--B\r\nContent-Disposition: form-data; name="files"; filename="t.txt"\r\nContent-Type: text/plain\r\n\r\n'
    headers = b"POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
    stop_dripping = dripping(url, count, headers + b"Content-Length: 1000000\r\n\r\n" + part, b"A" * 100, 1.0)

    def stop():
        opened, states = stop_dripping()
        other = other_address_upload(port_of(url), 1)
        close_all(opened)
        return f"{len(opened):,} connections opened: {counted(states)}; then {other}"

    return stop


def many_files(http, url: str, count: int = 999) -> str:
    """One upload of `count` tiny files, then an upload from another address."""
    files = [("files", (f"f{number}.txt", f"{number}\n".encode(), "text/plain")) for number in range(count)]
    answer = http.post(f"{url}gradio_api/upload", files=files)
    text = answer.text.strip()
    shown = text[:150] + ("..." if len(text) > 150 else "") if "\n" not in text else f"NOT one line: {text[:100]}"
    return f"{count} files in one upload: HTTP {answer.status_code} ({shown}); {other_address_upload(port_of(url), 2)}"


def process_children(pid: int) -> list[int]:
    found = set()
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.update(int(child) for child in path.read_text().split())
        except OSError:
            pass
    return sorted(found)


def ctranslate2_workers(server_pid: int) -> list[int]:
    """The server's child processes running the CTranslate2 worker (a killed one, a zombie, has no command line)."""
    workers = []
    for child in process_children(server_pid):
        try:
            if b"ctranslate2_worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass
    return workers


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def quiet_log(log: Path, quiet: float = 3.0, longest: float = 60.0) -> int:
    """The log's size once it has not grown for `quiet` seconds (what the attack before wrote is not counted)."""
    size, since, deadline = log.stat().st_size, time.monotonic(), time.monotonic() + longest
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.2)
        if log.stat().st_size != size:
            size, since = log.stat().st_size, time.monotonic()
    return size


def killed_worker(server_pid: int, log: Path, after: float = 1.0, latest: float = 4.0, then: float = 3.0):
    """SIGKILL the server's CTranslate2 worker while it decodes the visitor's call (the first moment after `after` s
    that it spends CPU, at `latest` s at the latest); the visitor goes on for `then` s more. Reports whether a new
    worker was started and how many lines the server log grew by from when it was last quiet for 3 s."""
    before = quiet_log(log)
    workers = ctranslate2_workers(server_pid)
    if not workers:
        return lambda: f"no CTranslate2 worker among the server's children {process_children(server_pid)}"
    victim, killed, began = workers[0], {}, time.monotonic()

    def kill():
        last = cpu_ticks(victim)
        while True:
            time.sleep(0.005)
            elapsed, ticks = time.monotonic() - began, cpu_ticks(victim)
            busy, last = ticks > last, ticks
            if (elapsed >= after and busy) or elapsed >= latest:
                os.kill(victim, signal.SIGKILL)
                killed.update(at=elapsed, busy=busy, when=time.monotonic())
                return

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()

    def stop():
        killer.join(timeout=30)
        if not killed:
            return f"worker {victim} was not killed"
        now = ctranslate2_workers(server_pid)
        lines = log.read_bytes()[before:].decode(errors="replace").splitlines()
        restarted = f"restarted as {', '.join(map(str, now))}" if now and victim not in now else "NOT restarted"
        first = f": {lines[0].strip()[:160]}" if lines else ""
        doing = "while decoding" if killed["busy"] else "idle"
        grown = f"server log +{len(lines)} line(s){first}"
        return f"worker {victim} SIGKILLed {killed['at']:.1f} s in ({doing}); {restarted}; {grown}"

    stop.running = lambda: not killed or time.monotonic() - killed["when"] < then
    return stop


def attacks(http, url: str, scratch: Path, args, server=None, log: Path | None = None) -> dict:
    """name → (start, stop): start the attack, stop it and return what the attackers got."""

    sessions = iter(range(1_000_000))
    local = threading.local()
    source = scratch / "long.txt"
    source.write_text(FILE_LINE * 2_000, encoding="utf-8")
    hundred_kb = b"A dog runs in the park.\n" * 4_200

    def queue_flood():
        return raw_translate(http, url, [HEAVY_TEXT, "beam search", 8, 255, ""], read=False)

    def cheap_new_session():
        return raw_translate(http, url, ["A dog.", "greedy", 1, 4, ""])

    def tiny_stream():
        return raw_translate(http, url, ["A dog.", "greedy", 1, 4, ""], read=False)

    def busy_client():
        local.session = getattr(local, "session", None) or f"tiny-{next(sessions)}"
        return raw_translate(http, url, ["A dog.", "greedy", 1, 4, ""], session=local.session)

    def upload():
        distinct = hundred_kb + f"{next(sessions)}\n".encode()  # Gradio keeps one copy of identical uploads
        response = http.post(f"{url}gradio_api/upload", files={"files": ("u.txt", distinct, "text/plain")})
        return f"upload HTTP {response.status_code}"

    bad = [
        ("call/no_such_endpoint", b'{"data": []}'),
        ("queue/join", b'{"data": [], "fn_index": 999, "session_hash": "x"}'),
        ("queue/join", b'{"data": [], "fn_index": -1, "session_hash": "x"}'),
        ("call/translate", b"[" * 100_000 + b"]" * 100_000),
        ("call/load_example", b'{"data": [99]}'),
    ]
    turn = iter(range(10**9))

    def bad_call():
        route, body = bad[next(turn) % len(bad)]
        return one_line(post(http, url, route, body))

    def heavy_raw():
        return raw_translate(http, url, [HEAVY_TEXT, "beam search", 8, 255, ""])

    def file_job_never_read():
        with open(source, "rb") as handle:
            uploaded = http.post(f"{url}gradio_api/upload", files={"files": ("long.txt", handle, "text/plain")})
        if uploaded.status_code != 200:
            return f"upload HTTP {uploaded.status_code}"
        payload = {"path": uploaded.json()[0], "meta": {"_type": "gradio.FileData"}}
        body = json.dumps({"data": [payload, None, "beam search", 8, 255]}).encode()
        return f"file job HTTP {post(http, url, 'call/translate_file', body).status_code}, never read"

    def huge_reference():
        reference = "Ein Mann in einer blauen Jacke repariert ein Fahrrad. " * 92_600  # 5 MB
        body = json.dumps({"data": ["A man.", "greedy", 1, 8, reference]}).encode()
        return f"5 MB reference HTTP {post(http, url, 'call/translate', body).status_code}"

    torch_lib = max((Path(__import__("torch").__file__).parent / "lib").glob("*.so*"), key=lambda p: p.stat().st_size)
    server_files = ["/etc/passwd", "app.py", ".git/config", "/proc/self/status", "/dev/zero", str(torch_lib),
                    "http://127.0.0.1:9/x"]  # fmt: skip
    routes = [("call/translate_file", lambda v: {"data": [v, None, "greedy", 1, 1]}),
              ("call/translate", lambda v: {"data": [v, "greedy", 1, 1, ""]}),
              ("call/v2/translate_file", lambda v: {"source_file": v, "reference_file": None}),
              ("queue/join", lambda v: {"data": [v, None, "greedy", 1, 1], "session_hash": "reader"})]  # fmt: skip

    def server_file():
        number = next(turn)
        path, (route, body) = server_files[number % len(server_files)], routes[number // 7 % len(routes)]
        value = {"path": path, "meta": {"_type": "gradio.FileData"}}
        fn_index = number // 28 % 8
        answer = post(http, url, route, json.dumps(body(value) | {"fn_index": fn_index}).encode())
        return "read" if answer.status_code == 200 else one_line(answer)

    stored = http.post(f"{url}gradio_api/upload", files={"files": ("r.txt", b"0123456789" * 10, "text/plain")}).json()

    odd = iter(range(10**9))

    def odd_read():
        number = next(odd)
        if number % 3 == 1:
            return one_line(http.get(f"{url}gradio_api/queue/data", params={"session_hash": f"nobody-{number}"}))
        form = "file=" if number % 3 == 0 else "file/"  # Gradio serves both: /file=<path> and /file/<path>
        answer = http.get(f"{url}gradio_api/{form}{stored[0]}", headers={"Range": "bytes=0-0,5-9"})
        return f"ranges on {form}<path> HTTP {answer.status_code}"

    named, redraws = events(http, url)
    found = ", ".join(f"{fn_index} {name}" for fn_index, name in redraws) or "none"
    print(f"# /config: translate is fn_index {named.get('translate')}, comparison {named.get('comparison')}; "
          f"the redraw events (private, 4 inputs): {found}")  # fmt: skip

    def join_flood():
        session = new_session()
        data = ["A dog runs in the park.", "beam search", 4, 128, ""]
        return [f"HTTP {post(http, url, 'queue/join', join_body(named['translate'], data, session)).status_code}"
                for _ in range(3)]  # fmt: skip

    def session_churn():
        return [f"HTTP {post(http, url, 'queue/join', join_body(named['comparison'], [], new_session())).status_code}"]

    chosen = {
        "none": lambda: lambda: "no attackers",
        "file job": lambda: file_job(url, source),  # before the upload flood, which spends this address's upload quota
        # Before the attacks that make new sessions in a loop, which spend this address's new sessions for a while
        "inside redraws": lambda: inside_redraws(url, redraws),
        "largest inside views": lambda: in_background(lambda: largest_inside_views(url)),
        "queue flood": lambda: looped(queue_flood),
        "session eviction": lambda: eviction(url, source, cheap_new_session),
        "starvation stream": lambda: looped(tiny_stream),
        "busy clients": lambda: looped(busy_client),
        # Before the upload flood spends this address's upload quota: refused for what they are, not for the quota
        "many files": lambda: in_background(lambda: many_files(http, url)),
        "trickled uploads": lambda: trickled_uploads(url),
        "upload flood": lambda: looped(upload),
        "slow connections": lambda: slow(url, args.slow),
        "slow bodies": lambda: slow_bodies(url),
        "bad calls": lambda: looped(bad_call),
        "heavy": lambda: one_shot(*[heavy_raw] * 16, *[file_job_never_read] * 4, huge_reference),
        "server files": lambda: looped(server_file),
        "held heartbeats": lambda: held_heartbeats(url),
        "odd reads": lambda: looped(odd_read),
        "join flood": lambda: paced(join_flood, 10, seconds=15),
        "session churn": lambda: paced(session_churn, 100, seconds=30, threads=8),
        "slow links": lambda: in_background(lambda: page_clients.slow_links(url, named)),
        "churn then learners": lambda: in_background(lambda: page_clients.churn_then_learners(url, named)),
        "one session's views": lambda: in_background(lambda: page_clients.one_sessions_views(url, named, redraws)),
        "views at once": lambda: in_background(lambda: page_clients.views_at_once(url, named)),
    }
    if server is not None:
        rss = lambda: rss_mib(server.pid)  # noqa: E731
        views = lambda: page_clients.unread_views(url, named, FILE_LINE.strip(), rss)  # noqa: E731
        chosen["unread views"] = lambda: in_background(views)
    if log is not None:
        chosen["bad redraws"] = lambda: in_background(lambda: page_clients.bad_redraws(url, named, redraws, log))
    if args.backend == "ctranslate2" and server is not None and log is not None:  # last: if not restarted, none decodes
        chosen["killed worker"] = lambda: killed_worker(server.pid, log)
    return chosen


class Visitor:
    """The ordinary visitor in a process of its own (`visitor_process`): one gradio_client session for the whole run."""

    def __init__(self, url: str, address: str | None = None, cores: set[int] | None = None):
        """`address`: the visitor's, in X-Forwarded-For (a server that trusts the benchmark's proxy); else its own.
        `cores`: where its process runs (default: where this one does)."""
        code = "from benchmarks.hostile_clients import visitor_process; visitor_process()"
        command = [sys.executable, "-c", code, url, *([address] if address else [])]
        pinned = None if cores is None else lambda: os.sched_setaffinity(0, cores)
        self.process = subprocess.Popen(command, cwd=harness.ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, preexec_fn=pinned)  # fmt: skip

    def visit(self, sentences: list[str], pause: float) -> tuple[list[float], int]:
        self.process.stdin.write(json.dumps({"sentences": sentences, "pause": pause}) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the visitor's process ended")
        answer = json.loads(reply)
        return answer["latencies"], answer["failures"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def visitor_process() -> None:
    """The visitor's process: each line on stdin asks {"sentences": [...], "pause": seconds}; each is answered by one
    line {"latencies": [...], "failures": n} (`visit`)."""
    from gradio_client import Client

    headers = {"X-Forwarded-For": sys.argv[2]} if len(sys.argv) > 2 else None
    client = Client(sys.argv[1], verbose=False, headers=headers)
    for line in sys.stdin:
        asked = json.loads(line)
        latencies, failures = visit(client, asked["sentences"], asked["pause"])
        print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)


def visit(client, sentences: list[str], pause: float) -> tuple[list[float], int]:
    """The ordinary visitor's requests: (latencies, failures)."""
    latencies, failures = [], 0
    for sentence in sentences:
        asked = time.perf_counter()
        try:
            answer = client.predict(sentence, "beam search", 4, 128, "", api_name="/translate")
            failures += not answer[0] or bool(answer[-1])
        except Exception:
            failures += 1
        latencies.append(time.perf_counter() - asked)
        time.sleep(pause)
    return latencies, failures


def run(model_folder: Path, sentences: list[str], args, scratch: Path) -> dict:
    import httpx

    port = free_port()
    uploads = scratch / "gradio"
    environment = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        OMP_NUM_THREADS=str(args.threads),
        GRADIO_TEMP_DIR=str(uploads),
    )
    command = [sys.executable, str(harness.ROOT / "app.py"), "--model", str(model_folder), "--comparison-models"]
    command += ["--backend", args.backend, "--port", str(port)]
    log = scratch / "app.log"
    server_cores, client_cores = split_cores(args.split_cores)
    with open(log, "w") as output:
        server = subprocess.Popen(command, cwd=harness.ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT,
                                  preexec_fn=lambda: os.sched_setaffinity(0, server_cores))  # fmt: skip
    os.sched_setaffinity(0, client_cores)  # this process and the visitor's
    rows, memory, ordinary = [], {}, None
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, server)
        http = httpx.Client(timeout=300, limits=httpx.Limits(max_connections=64))
        # Split, the visitor is not on the attackers' core (a browser elsewhere): beside the server, its work is light.
        ordinary = Visitor(url, cores=server_cores if args.split_cores else None)
        ordinary.visit(sentences[:1], 0.0)  # warm-up
        memory["at start"] = (rss_mib(server.pid), folder_mb(uploads))
        chosen = attacks(http, url, scratch, args, server=server, log=log)
        for name, start in chosen.items():
            if args.attacks and name not in args.attacks:
                continue
            stop = start()
            time.sleep(0.5)
            latencies, failures = ordinary.visit(sentences[1 : args.ordinary + 1], args.pause)
            running, deadline = getattr(stop, "running", lambda: False), time.monotonic() + 600
            while running() and time.monotonic() < deadline:  # an attack that ends by itself: visit until it does
                more, more_failures = ordinary.visit(sentences[1:2], args.pause)
                latencies, failures = latencies + more, failures + more_failures
            rows.append((name, latencies, failures, stop()))
            memory[f"after {name}"] = (rss_mib(server.pid), folder_mb(uploads))
    finally:
        if ordinary is not None:
            ordinary.close()
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    for part in text.split("Traceback")[1:]:  # what failed, to find it
        print("# server traceback:", " | ".join(line.strip() for line in part.splitlines()[-3:]))
    return dict(rows=rows, memory=memory, tracebacks=text.count("Traceback"), descriptors=text.count("Too many open"),
                log_bytes=len(text.encode()), cores=(server_cores, client_cores))  # fmt: skip


def cpus(cores: set[int]) -> str:
    return ", ".join(map(str, sorted(cores)))


def split_cores(split: bool) -> tuple[set[int], set[int]]:
    """(the server's cores, the clients'): all of this process's, or split, the first for the server."""
    cores = os.sched_getaffinity(0)
    if not split or len(cores) < 2:
        return cores, cores
    return {min(cores)}, cores - {min(cores)}


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.quick:
        args.ordinary, args.slow = 3, 1_000
    english, _ = harness.sample_sentences("test_2016_flickr", args.ordinary + 1)
    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        result = run(model_folder, english, args, Path(scratch))

    server, clients = result["cores"]
    print(
        f"# Hostile clients (server: app.py --backend {args.backend}, model: {served}, {args.threads} torch "
        f"thread(s), {os.cpu_count()} CPU(s) visible; everything from 127.0.0.1; server on CPU {cpus(server)}, "
        f"clients on CPU {cpus(clients)}{', the ordinary visitor beside the server' if args.split_cores else ''})"
    )
    print(
        f"# per attack, an ordinary visitor: {args.ordinary} one-sentence requests, beam 4, 128 tokens, "
        f"{args.pause:g} s apart; a failure is an answer without a translation, with a notice, or an exception"
    )
    harness.print_table(
        ["attack", "requests", "failures", "p50 (s)", "p95 (s)", "max (s)"],
        [
            [
                name,
                len(latencies),
                failures,
                f"{statistics.median(latencies):.2f}",
                f"{percentile(latencies, 0.95):.2f}",
                f"{max(latencies):.2f}",
            ]
            for name, latencies, failures, _ in result["rows"]
        ],
    )
    for name, _, _, outcome in result["rows"]:
        print(f"# {name}: {outcome}")
    harness.print_table(
        ["server", "RSS (MiB)", "upload folder (MB)"],
        [[when, f"{rss:,.0f}", f"{size:,.1f}"] for when, (rss, size) in result["memory"].items()],
    )
    print(
        f"# server log: {result['log_bytes']:,} bytes, {result['tracebacks']} tracebacks, {result['descriptors']} "
        "'Too many open files'"
    )
    print(f"# {harness.describe_machine(args.threads)}")


if __name__ == "__main__":
    main()
