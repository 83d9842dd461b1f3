"""Latency and throughput of the running app: one sentence through the "translate" endpoint with gradio_client.

Starts `python app.py --model ... --port ...` as a server process, waits until it answers, then measures
- latency: p50 / p95 over sequential requests, one English sentence each (test_2016_flickr, beam 4, the app's
  default maximum of 128 new tokens), from the client's call to its result;
- throughput: sentences/s with 8 clients sending requests concurrently (the app queues them, running at most
  its concurrency limit at once).

The server serves the shipped model (models/transformer-en-de) when it is there; otherwise a randomly initialised
model of the shipped size is saved to a temporary folder and served, and the figures say so (a random model
rarely stops before the token limit, so its latencies are those of long outputs). No comparison model is served, so
the figures are our model's alone; pass `--comparison_models` to include some.

    python -m benchmarks.app_latency [--quick]
"""

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks import harness


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"app.py exited with code {server.returncode} before serving; see its output above.")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"app.py did not answer at {url} within {timeout:.0f} s.")


def percentile(values: list[float], fraction: float) -> float:
    """Linear-interpolated percentile (fraction in [0, 1])."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--comparison_models", "--comparison-models", nargs="*", default=[],
                        help="comparison models to serve (default: none)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for the throughput figure")
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    from gradio_client import Client

    requests = 8 if args.quick else 40
    per_client = 2 if args.quick else 5
    english, _ = harness.sample_sentences("test_2016_flickr", max(requests, args.clients * per_client))

    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        port = free_port()
        environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
        command = [sys.executable, str(harness.ROOT / "app.py"), "--model", str(model_folder)]
        command += ["--comparison-models", *args.comparison_models, "--port", str(port)]
        launched = time.perf_counter()
        server = subprocess.Popen(command, cwd=harness.ROOT, env=environment, stdout=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_until_up(url, server)
            startup_seconds = time.perf_counter() - launched  # offline start-up to a page that answers

            def call(client, sentence):
                return client.predict(
                    sentence, "beam search", args.num_beams, args.max_new_tokens, "", api_name="/translate"
                )

            client = Client(url, verbose=False)
            call(client, english[0])  # warm-up: first generate() call, first request through the queue
            latencies = []
            for sentence in english[:requests]:
                start = time.perf_counter()
                call(client, sentence)
                latencies.append(time.perf_counter() - start)

            clients = [Client(url, verbose=False) for _ in range(args.clients)]
            errors = []

            def send(client, sentences):
                try:
                    for sentence in sentences:
                        call(client, sentence)
                except Exception as error:  # report after joining; a dead thread must not hang the benchmark
                    errors.append(error)

            threads = [
                threading.Thread(target=send, args=(c, english[i * per_client : (i + 1) * per_client]))
                for i, c in enumerate(clients)
            ]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            concurrent_seconds = time.perf_counter() - start
            if errors:
                raise RuntimeError(f"{len(errors)} concurrent client(s) failed: {errors[0]!r}")
        finally:
            server.terminate()
            server.wait(timeout=30)

    print(
        f"# App latency through gradio_client (server: app.py, model: {served}; comparison models: "
        f"{', '.join(args.comparison_models) or 'none'}; {os.cpu_count()} CPU(s) visible)"
    )
    print(
        f"# beam {args.num_beams}, max_new_tokens {args.max_new_tokens}, test_2016_flickr sentences; "
        f"{requests} sequential requests; {args.clients} clients x {per_client} requests concurrently"
    )
    total = args.clients * per_client
    harness.print_table(
        ["figure", "value"],
        [
            ["offline start-up to a page that answers (s)", f"{startup_seconds:.1f}"],
            ["latency p50 (ms)", f"{1000 * statistics.median(latencies):.0f}"],
            ["latency p95 (ms)", f"{1000 * percentile(latencies, 0.95):.0f}"],
            ["sequential throughput (sentences/s)", f"{requests / sum(latencies):.1f}"],
            [f"throughput with {args.clients} concurrent clients (sentences/s)", f"{total / concurrent_seconds:.1f}"],
        ],
    )


if __name__ == "__main__":
    main()
