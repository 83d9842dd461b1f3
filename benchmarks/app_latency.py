"""Latency and throughput of the running app: one sentence through the "translate" endpoint with gradio_client.

Per backend, its own `python app.py`: the start-up to a page that answers, p50 / p95 of sequential one-sentence
requests, and sentences/s with 8 clients at once (the app queues them).

    taskset -c 1 python -m benchmarks.app_latency --threads 1 [--backends torch ctranslate2] [--quick]
"""

import itertools
import os
import statistics
import time

from benchmarks import harness, load

CLIENTS = 8  # at once, for the throughput figure


def options(parser):
    parser.add_argument("--backends", nargs="+", default=["torch", "ctranslate2"], choices=["torch", "ctranslate2"])


def measure(args, english: list[str], backend: str, requests: int, per_client: int) -> list:
    """One server with `backend`: [start-up s, p50 s, p95 s, sequential sentences/s, concurrent sentences/s]."""
    launched = time.perf_counter()
    with load.shipped_app(backend, threads=args.threads) as (_, url):
        startup = time.perf_counter() - launched

        def call(client, sentence):
            return client.predict(sentence, *load.ORDINARY[1:], api_name="/translate")

        client, timings = load.client(url), harness.Timings()
        call(client, english[0])  # warm-up: first decoding, first request through the queue
        for sentence in english[:requests]:
            timings.time(lambda sentence=sentence: call(client, sentence))

        clients, turns = [load.client(url) for _ in range(CLIENTS)], itertools.count()

        def send():  # each thread its client and its sentences
            turn = next(turns)
            for sentence in english[turn * per_client : (turn + 1) * per_client]:
                call(clients[turn], sentence)
            return "answered"

        start = time.perf_counter()
        outcomes = load.in_parallel(CLIENTS, send)
        concurrent = CLIENTS * per_client / (time.perf_counter() - start)
        if outcomes["answered"] != CLIENTS:
            raise RuntimeError(f"concurrent clients failed: {load.counted(outcomes)}")
    latencies = timings.wall
    p95 = statistics.quantiles(latencies, n=20, method="inclusive")[18]
    return [startup, statistics.median(latencies), p95, requests / sum(latencies), concurrent]


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    requests, per_client = (8, 2) if args.quick else (40, 5)
    english, _ = harness.sample_sentences("test_2016_flickr", max(requests, CLIENTS * per_client))
    figures = {backend: measure(args, english, backend, requests, per_client) for backend in args.backends}
    print(
        f"# App latency through gradio_client (server: app.py, model: {load.SHIPPED_DIR}; comparison models: none; "
        f"{args.threads} thread(s); {os.cpu_count()} CPU(s) visible); beam {load.BEAMS}, max_new_tokens "
        f"{load.PAGE_TOKENS}, test_2016_flickr sentences; {requests} sequential requests; {CLIENTS} clients x "
        f"{per_client} requests at once"
    )
    first = figures[args.backends[0]][-1]
    rows = [
        [backend, f"{startup:.1f}", f"{1000 * p50:.0f}", f"{1000 * p95:.0f}", f"{sequential:.1f}", f"{concurrent:.1f}"]
        + [f"{concurrent / first:.2f}x"]
        for backend, (startup, p50, p95, sequential, concurrent) in figures.items()
    ]
    header = ["backend", "start-up (s)", "p50 (ms)", "p95 (ms)", "sequential (sent/s)"]
    harness.print_table(header + [f"{CLIENTS} clients (sent/s)", f"vs {args.backends[0]}"], rows)


if __name__ == "__main__":
    main()
