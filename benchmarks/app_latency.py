"""Latency and throughput of the running app: one sentence through the "translate" endpoint with gradio_client.

Starts `python app.py --model ... --port ...` as a server process, waits until it answers, then measures
- latency: p50 / p95 over sequential requests, one English sentence each (test_2016_flickr, `--num-beams`: the
  shipped folder's by default; the app's default maximum of 128 new tokens), from the client's call to its result;
- throughput: sentences/s with 8 clients sending requests concurrently (the app queues them, running at most
  its concurrency limit at once).
Each backend in `--backends` (PyTorch, CTranslate2) is measured with its own server process, one after the other, and
the ratios to the first are printed.

The server serves the shipped model (models/transformer-en-de) when it is there; otherwise a randomly initialised
model of the shipped size is saved to a temporary folder and served, and the figures say so (a random model
rarely stops before the token limit, so its latencies are those of long outputs). No comparison model is served, so
the figures are our model's alone; pass `--comparison_models` to include some.

    taskset -c 1 python -m benchmarks.app_latency --threads 1 [--backends torch ctranslate2] [--quick]
"""

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import harness, load


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument(
        "--comparison_models",
        "--comparison-models",
        nargs="*",
        default=[],
        help="comparison models to serve (default: none)",
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for the throughput figure")
    parser.add_argument("--backends", nargs="+", default=["torch", "ctranslate2"], choices=["torch", "ctranslate2"])
    parser.add_argument("--num-beams", type=int, default=load.BEAMS, help="default: the shipped folder's")
    parser.add_argument("--max-new-tokens", type=int, default=load.PAGE_TOKENS, help="default: the page's")


def measure(args, model_folder: Path, english: list[str], backend: str, requests: int, per_client: int) -> dict:
    """One server process with `backend`: its start-up, sequential latencies and concurrent throughput."""
    from gradio_client import Client

    options = ["--model", model_folder, "--backend", backend, "--comparison-models", *args.comparison_models]
    launched = time.perf_counter()
    with load.app_server(*options, threads=args.threads) as (_, url):
        startup_seconds = time.perf_counter() - launched  # offline start-up to a page that answers

        def call(client, sentence):
            return client.predict(
                sentence, "beam search", args.num_beams, args.max_new_tokens, "", api_name="/translate"
            )

        client = Client(url, verbose=False)
        call(client, english[0])  # warm-up: first decoding, first request through the queue
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
    return dict(
        startup=startup_seconds,
        p50=statistics.median(latencies),
        p95=load.percentile(latencies, 0.95),
        sequential=requests / sum(latencies),
        concurrent=args.clients * per_client / concurrent_seconds,
    )


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    requests = 8 if args.quick else 40
    per_client = 2 if args.quick else 5
    english, _ = harness.sample_sentences("test_2016_flickr", max(requests, args.clients * per_client))

    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        figures = {
            backend: measure(args, model_folder, english, backend, requests, per_client) for backend in args.backends
        }

    print(
        f"# App latency through gradio_client (server: app.py, model: {served}; comparison models: "
        f"{', '.join(args.comparison_models) or 'none'}; {args.threads} thread(s); {os.cpu_count()} CPU(s) visible)"
    )
    print(
        f"# beam {args.num_beams}, max_new_tokens {args.max_new_tokens}, test_2016_flickr sentences; "
        f"{requests} sequential requests; {args.clients} clients x {per_client} requests concurrently; each backend "
        "its own server process, one after the other"
    )
    first = figures[args.backends[0]]
    rows = []
    for backend, figure in figures.items():
        rows.append(
            [
                backend,
                f"{figure['startup']:.1f}",
                f"{1000 * figure['p50']:.0f}",
                f"{1000 * figure['p95']:.0f}",
                f"{figure['sequential']:.1f}",
                f"{figure['concurrent']:.1f}",
                f"{figure['concurrent'] / first['concurrent']:.2f}x",
            ]
        )
    harness.print_table(
        [
            "backend",
            "start-up (s)",
            "p50 (ms)",
            "p95 (ms)",
            "sequential (sent/s)",
            f"{args.clients} clients (sent/s)",
            f"vs {args.backends[0]}",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
