"""Hostile API clients against the running app: does an ordinary visitor still get a quick translation, and does the
server's memory stay flat?

Starts `python app.py` (our model only, offline) on 127.0.0.1 and, all from 127.0.0.1, sends raw HTTP to the Gradio
API at once:
- `--heavy` raw calls without a session (`POST /gradio_api/call/translate`, each a new session): 3,000 capitals
  without a full stop, 8 beams, 255 new tokens; their answers are read in the background;
- `--files` file jobs (`/translate_file`, 2,000 lines, 8 beams, 255 tokens) uploaded, posted and never read;
- one request with a `--reference-mb` MB reference;
then, half a second later, an ordinary visitor (gradio_client, a page's session) sends `--ordinary` one-sentence
requests at the page's defaults (beam 4, 128 tokens), `--pause` seconds apart. It reports the ordinary requests'
p50 / p95 / max and how many came back translated, and what each hostile client got (translated, refused, HTTP
status). Then the memory probe: the server's resident memory before and after `--sessions` new sessions each sending a
`--body-mb` MB body, and after as many new sessions each sending a body just under the server's limit (accepted: the
text is cut to 3,000 characters and translated).

    taskset -c 1 python -m benchmarks.hostile_clients --threads 1 [--quick]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from benchmarks import harness
from benchmarks.app_latency import free_port, percentile, wait_until_up

HEAVY_TEXT = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]
FILE_LINE = "A man in a blue jacket is repairing a bicycle on the street while two dogs play in the snow.\n"


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--heavy", type=int, default=16, help="heavy raw calls without a session")
    parser.add_argument("--files", type=int, default=4, help="file jobs of 2,000 lines posted and never read")
    parser.add_argument("--reference-mb", type=float, default=5.0, help="size of the one huge reference")
    parser.add_argument("--ordinary", type=int, default=8, help="the ordinary visitor's one-sentence requests")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the ordinary visitor's requests")
    parser.add_argument("--sessions", type=int, default=200, help="new sessions of the memory probe")
    parser.add_argument("--body-mb", type=float, default=1.0, help="body size of each new session")


def rss_mib(pid: int) -> float:
    """Resident memory of a process, MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def post_call(http, url: str, api: str, body: bytes) -> tuple[int, str]:
    """POST /gradio_api/call/<api>: (HTTP status, event id or the refusal's text)."""
    response = http.post(f"{url}gradio_api/call/{api}", content=body, headers={"Content-Type": "application/json"})
    if response.status_code != 200:
        return response.status_code, response.text[:300]
    return 200, response.json()["event_id"]


def read_call(http, url: str, api: str, event_id: str) -> list | str:
    """The values of the event's `complete` message, or the error text."""
    text = http.get(f"{url}gradio_api/call/{api}/{event_id}", timeout=300).text
    if "event: complete" not in text:
        return text[-300:]
    return json.loads(text.split("event: complete\ndata: ", 1)[1].split("\n", 1)[0])


def hostile_load(http, url: str, args, scratch: Path, results: dict) -> list[threading.Thread]:
    """Start every hostile client at once; their outcomes land in `results`."""
    threads = []

    def heavy():
        body = json.dumps({"data": [HEAVY_TEXT, "beam search", 8, 255, ""]}).encode()
        status, event = post_call(http, url, "translate", body)
        if status != 200:
            results["heavy"].append(f"HTTP {status}")
            return
        answer = read_call(http, url, "translate", event)
        if isinstance(answer, str):
            results["heavy"].append("error")
        elif "as many long requests" in answer[-2]:
            results["heavy"].append("refused at once")
        else:
            results["heavy"].append("translated" if answer[0] else "empty")

    source = scratch / "long.txt"
    source.write_text(FILE_LINE * 2_000, encoding="utf-8")

    def file_job():
        with open(source, "rb") as handle:
            uploaded = http.post(f"{url}gradio_api/upload", files={"files": ("long.txt", handle, "text/plain")})
        path = uploaded.json()[0]
        payload = {"path": path, "meta": {"_type": "gradio.FileData"}}
        body = json.dumps({"data": [payload, None, "beam search", 8, 255]}).encode()
        status, _ = post_call(http, url, "translate_file", body)  # never read
        results["files"].append(f"HTTP {status}, never read")

    def huge_reference():
        reference = "Ein Mann in einer blauen Jacke repariert ein Fahrrad. " * int(args.reference_mb * 1e6 / 54)
        body = json.dumps({"data": ["A man repairs a bicycle.", "beam search", 4, 128, reference]}).encode()
        status, answer = post_call(http, url, "translate", body)
        results["reference"].append(
            f"HTTP {status}" + (f": {json.loads(answer)['error'][:60]}…" if status != 200 else "")
        )

    for target, count in ((heavy, args.heavy), (file_job, args.files), (huge_reference, 1)):
        threads += [threading.Thread(target=target, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def new_sessions(http, url: str, count: int, size: int) -> dict:
    """`count` raw calls, each with a new session and a body of about `size` bytes (a one-sentence text and a long
    reference); read to the end when accepted. HTTP status -> count."""
    statuses = {}
    reference = ("Ein Hund rennt im Park. " * (size // 24 + 1))[:size]
    for _ in range(count):
        data = ["A dog runs in the park.", "greedy", 1, 16, reference]
        body = json.dumps({"data": data, "session_hash": uuid.uuid4().hex}).encode()
        status, event = post_call(http, url, "translate", body)
        if status == 200:
            read_call(http, url, "translate", event)
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def run(model_folder: Path, sentences: list[str], args, scratch: Path) -> dict:
    import httpx
    from gradio_client import Client

    port = free_port()
    environment = dict(
        os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", OMP_NUM_THREADS=str(args.threads)
    )
    command = [sys.executable, str(harness.ROOT / "app.py"), "--model", str(model_folder), "--comparison-models"]
    log = scratch / "app.log"
    with open(log, "w") as output:
        server = subprocess.Popen(
            command + ["--port", str(port)], cwd=harness.ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, server)
        http = httpx.Client(timeout=300)
        ordinary = Client(url, verbose=False)
        ordinary.predict(sentences[0], "beam search", 4, 128, "", api_name="/translate")  # warm-up
        memory = {"at start": rss_mib(server.pid)}

        results = {"heavy": [], "files": [], "reference": []}
        hostile = hostile_load(http, url, args, scratch, results)
        time.sleep(0.5)
        latencies, answers = [], []
        for sentence in sentences[1 : args.ordinary + 1]:
            asked = time.perf_counter()
            answer = ordinary.predict(sentence, "beam search", 4, 128, "", api_name="/translate")
            latencies.append(time.perf_counter() - asked)
            answers.append(answer)
            time.sleep(args.pause)
        for thread in hostile:
            thread.join(timeout=300)
        status = ordinary.predict(api_name="/status")

        memory["before the sessions"] = rss_mib(server.pid)
        limit_bytes = 250_000  # just under the server's 256,000-byte limit, with the JSON around the text
        big = new_sessions(http, url, args.sessions, int(args.body_mb * 1e6))
        memory[f"after {args.sessions} sessions x {args.body_mb:g} MB"] = rss_mib(server.pid)
        under = new_sessions(http, url, args.sessions, limit_bytes)
        memory[f"after {args.sessions} more x {limit_bytes / 1000:g} kB"] = rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    translated = sum(bool(answer[0]) and not answer[-1] for answer in answers)
    cancelled = log.read_text().count("nobody reads a request's results any more")
    return dict(
        latencies=latencies,
        translated=translated,
        answers=answers,
        results=results,
        status=status,
        memory=memory,
        sessions=(big, under),
        cancelled=cancelled,
    )


def counts(outcomes: list[str]) -> str:
    return ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes))) or "none"


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.quick:
        args.sessions = 20
    english, _ = harness.sample_sentences("test_2016_flickr", args.ordinary + 1)
    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        result = run(model_folder, english, args, Path(scratch))

    latencies = result["latencies"]
    print(
        f"# Hostile clients (server: app.py, model: {served}, {args.threads} torch thread(s), {os.cpu_count()} CPU(s) "
        "visible; everything from 127.0.0.1)"
    )
    print(
        f"# at once: {args.heavy} heavy raw calls without a session (3,000 capitals, beam 8, 255 tokens), {args.files} "
        f"file jobs of 2,000 lines never read, one {args.reference_mb:g} MB reference; then an ordinary visitor: "
        f"{args.ordinary} one-sentence requests, beam 4, 128 tokens, {args.pause:g} s apart"
    )
    harness.print_table(
        ["ordinary requests", "translated", "p50 (s)", "p95 (s)", "max (s)"],
        [
            [
                len(latencies),
                result["translated"],
                f"{statistics.median(latencies):.2f}",
                f"{percentile(latencies, 0.95):.2f}",
                f"{max(latencies):.2f}",
            ]
        ],
    )
    print(f"# ordinary latencies (s), in order: {' '.join(f'{seconds:.2f}' for seconds in latencies)}")
    print(f"# heavy raw calls: {counts(result['results']['heavy'])}")
    print(f"# file jobs: {counts(result['results']['files'])}; cancelled as unread: {result['cancelled']}")
    print(f"# huge reference: {counts(result['results']['reference'])}")
    print(f"# status after: {result['status']}")
    big, under = result["sessions"]
    print(f"# new sessions: {args.body_mb:g} MB bodies answered {big}; bodies under the limit answered {under}")
    harness.print_table(["server memory", "RSS (MiB)"], [[k, f"{v:,.0f}"] for k, v in result["memory"].items()])
    for answer in result["answers"][:2]:
        print(f"# ordinary answer: {answer[0][:100]!r} {answer[-1][:200]!r}")


if __name__ == "__main__":
    main()
