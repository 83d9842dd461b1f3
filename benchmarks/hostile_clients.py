"""Hostile clients against the running app, one attack at a time: does an ordinary visitor still get a quick
translation, and do the server's memory and upload folder stay bounded?

Starts `python app.py --backend ...` (our model only, offline) on 127.0.0.1 with its own upload folder. For each attack,
all from 127.0.0.1, the attackers start, and half a second later an ordinary visitor (gradio_client, a page's session)
sends `--ordinary` one-sentence requests at the page's defaults (beam 4, 128 tokens), `--pause` seconds apart; then the
attackers stop. The attacks:
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
- odd reads: streams of unknown sessions and file downloads with several ranges, 4 threads;
- file job (run second, before the upload flood spends the address's upload quota): a visitor's 2,000-line file
  job (beam 4, read) runs while the visitor translates, until the job has come back (its last part scores every
  line's confidence).
It prints, per attack, the visitor's p50 / p95 / max latency and failures (no translation, a notice, an exception) and
what the attackers got; then the server's resident memory and its upload folder's size before and after.

    taskset -c 1 python -m benchmarks.hostile_clients --threads 1 --backend torch [--quick]
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks import harness
from benchmarks.app_latency import free_port, percentile, wait_until_up

HEAVY_TEXT = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]
FILE_LINE = "A man in a blue jacket is repairing a bicycle on the street while two dogs play in the snow.\n"
ATTACKERS = 4


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--backend", choices=["torch", "ctranslate2"], default="torch", help="what decodes")
    parser.add_argument("--ordinary", type=int, default=8, help="the ordinary visitor's requests per attack")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the ordinary visitor's requests")
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


def attacks(http, url: str, scratch: Path, args) -> dict:
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
        if number % 2:
            return one_line(http.get(f"{url}gradio_api/queue/data", params={"session_hash": f"nobody-{number}"}))
        answer = http.get(f"{url}gradio_api/file={stored[0]}", headers={"Range": "bytes=0-0,5-9"})
        return f"ranges HTTP {answer.status_code}"

    return {
        "none": lambda: lambda: "no attackers",
        "file job": lambda: file_job(url, source),  # before the upload flood, which spends this address's upload quota
        "queue flood": lambda: looped(queue_flood),
        "session eviction": lambda: eviction(url, source, cheap_new_session),
        "starvation stream": lambda: looped(tiny_stream),
        "busy clients": lambda: looped(busy_client),
        "upload flood": lambda: looped(upload),
        "slow connections": lambda: slow(url, args.slow),
        "bad calls": lambda: looped(bad_call),
        "heavy": lambda: one_shot(*[heavy_raw] * 16, *[file_job_never_read] * 4, huge_reference),
        "server files": lambda: looped(server_file),
        "held heartbeats": lambda: held_heartbeats(url),
        "odd reads": lambda: looped(odd_read),
    }


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
    from gradio_client import Client

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
    with open(log, "w") as output:
        server = subprocess.Popen(command, cwd=harness.ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT)
    rows, memory = [], {}
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, server)
        http = httpx.Client(timeout=300, limits=httpx.Limits(max_connections=64))
        ordinary = Client(url, verbose=False)
        ordinary.predict(sentences[0], "beam search", 4, 128, "", api_name="/translate")  # warm-up
        memory["at start"] = (rss_mib(server.pid), folder_mb(uploads))
        chosen = attacks(http, url, scratch, args)
        for name, start in chosen.items():
            if args.attacks and name not in args.attacks:
                continue
            stop = start()
            time.sleep(0.5)
            latencies, failures = visit(ordinary, sentences[1 : args.ordinary + 1], args.pause)
            running, deadline = getattr(stop, "running", lambda: False), time.monotonic() + 600
            while running() and time.monotonic() < deadline:  # an attack that ends by itself: visit until it does
                more, more_failures = visit(ordinary, sentences[1:2], args.pause)
                latencies, failures = latencies + more, failures + more_failures
            rows.append((name, latencies, failures, stop()))
            memory[f"after {name}"] = (rss_mib(server.pid), folder_mb(uploads))
    finally:
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    for part in text.split("Traceback")[1:]:  # what failed, to find it
        print("# server traceback:", " | ".join(line.strip() for line in part.splitlines()[-3:]))
    return dict(rows=rows, memory=memory, tracebacks=text.count("Traceback"), descriptors=text.count("Too many open"),
                log_bytes=len(text.encode()))  # fmt: skip


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.quick:
        args.ordinary, args.slow = 3, 1_000
    english, _ = harness.sample_sentences("test_2016_flickr", args.ordinary + 1)
    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        result = run(model_folder, english, args, Path(scratch))

    print(
        f"# Hostile clients (server: app.py --backend {args.backend}, model: {served}, {args.threads} torch "
        f"thread(s), {os.cpu_count()} CPU(s) visible; everything from 127.0.0.1)"
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
