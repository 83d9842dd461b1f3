"""Heavy visitors against the running app: do ordinary visitors still get their translations quickly?

Starts `python app.py` (our model only, offline) on 127.0.0.1 and drives it with real gradio_client clients:
- a heavy visitor with two tabs (two sessions), each sending 3,000 all-caps characters at the maximum beams and new
  tokens (the text that made the model loop until its bound), and from the first tab `--flood` more requests at once;
- an ordinary visitor sending one test sentence at a time (page defaults: beam 4, 128 new tokens), reading each answer
  for `--pause` seconds before the next, for as long as the heavy requests run.
It reports the ordinary requests' p50 / p95 / max, how long each heavy request took, and how the flood was answered.
With `--before` it runs the same scenario a second time with the fair scheduling off
(TRANSFORMER_MT_FAIR_SCHEDULING=0: no turns, no limit per visitor, two requests at a time), which is the app as it was.
Every loop is bounded: the ordinary visitor stops when the heavy requests end or after `--seconds`.

    taskset -c 1 python -m benchmarks.heavy_visitors --threads 1 [--before] [--quick]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from benchmarks import harness
from benchmarks.app_latency import free_port, percentile, wait_until_up
from modeling import TransformerMTForConditionalGeneration

HEAVY_TEXT = ("A MAN IN A BLUE JACKET IS REPAIRING A BICYCLE WHILE TWO DOGS PLAY IN THE SNOW AND " * 40)[:3_000]


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--flood", type=int, default=64, help="extra requests the heavy visitor sends at once")
    parser.add_argument("--seconds", type=float, default=240.0, help="longest the ordinary visitor keeps asking")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the ordinary visitor's requests")
    parser.add_argument("--before", action="store_true", help="also run the scenario with fair scheduling off")


def run_scenario(model_folder: Path, sentences: list[str], *, fair: bool, threads: int, flood: int,
                 seconds: float, pause: float) -> dict:
    """One server, one scenario; returns the figures."""
    from gradio_client import Client

    port = free_port()
    environment = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
                       OMP_NUM_THREADS=str(threads), TRANSFORMER_MT_FAIR_SCHEDULING="1" if fair else "0")
    command = [sys.executable, str(harness.ROOT / "app.py"), "--model", str(model_folder), "--comparison-models",
               "--port", str(port)]
    server = subprocess.Popen(command, cwd=harness.ROOT, env=environment, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_up(url, server)
        ordinary = Client(url, verbose=False)
        tabs = [Client(url, verbose=False) for _ in range(2)]
        ordinary.predict(sentences[0], "beam search", 4, 128, "", api_name="/translate")  # warm-up

        heavy_seconds, heavy_notices = [None, None], [None, None]

        def heavy(number: int):
            started = time.perf_counter()
            answer = tabs[number].predict(HEAVY_TEXT, "beam search", 8, 255, "", api_name="/translate")
            heavy_seconds[number] = time.perf_counter() - started
            heavy_notices[number] = (answer[1] + answer[-1]).replace("\n\n", " ")

        threads_ = [threading.Thread(target=heavy, args=(n,)) for n in range(2)]
        for thread in threads_:
            thread.start()
        time.sleep(0.5)  # both heavy requests are in flight
        flood_jobs = [tabs[0].submit(s, "beam search", 4, 128, "", api_name="/translate")
                      for s in (sentences * (flood // len(sentences) + 1))[:flood]]

        latencies, errors = [], []
        deadline = time.monotonic() + seconds
        index = 1
        while any(thread.is_alive() for thread in threads_) and time.monotonic() < deadline:
            sentence = sentences[index % len(sentences)]
            index += 1
            started = time.perf_counter()
            try:
                ordinary.predict(sentence, "beam search", 4, 128, "", api_name="/translate")
                latencies.append(time.perf_counter() - started)
            except Exception as error:  # a refusal (queue full) is a figure, not a crash of the benchmark
                errors.append(type(error).__name__ + ": " + str(error)[:120])
            time.sleep(pause)
        for thread in threads_:
            thread.join(timeout=max(deadline - time.monotonic(), 1))

        refused, answered, failed = 0, 0, 0
        for job in flood_jobs:
            try:
                answer = job.result(timeout=max(deadline - time.monotonic(), 1))
                refused += "still running" in answer[-1]
                answered += "still running" not in answer[-1]
            except Exception:
                failed += 1
    finally:
        server.terminate()
        server.wait(timeout=30)
    return dict(fair=fair, latencies=latencies, errors=errors, heavy_seconds=heavy_seconds,
                heavy_notices=heavy_notices, flood=(refused, answered, failed))


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    english, _ = harness.sample_sentences("test_2016_flickr", 50)
    flood = 8 if args.quick else args.flood
    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = args.model, str(args.model)
        if not (model_folder / "config.json").is_file():
            model_folder, served = Path(scratch) / "model", "random weights, shipped size"
            tokenizer = harness.benchmark_tokenizer()
            torch.manual_seed(0)
            TransformerMTForConditionalGeneration(harness.shipped_config(tokenizer)).save_pretrained(model_folder)
            tokenizer.save_pretrained(model_folder)
        scenarios = [run_scenario(model_folder, english, fair=True, threads=args.threads, flood=flood,
                                  seconds=args.seconds, pause=args.pause)]
        if args.before:
            scenarios.append(run_scenario(model_folder, english, fair=False, threads=args.threads, flood=flood,
                                          seconds=args.seconds, pause=args.pause))

    print(f"# Heavy visitors (server: app.py, model: {served}, {args.threads} torch thread(s), "
          f"{os.cpu_count()} CPU(s) visible)")
    print("# heavy: 2 tabs x 3,000 all-caps characters, beam 8, 255 new tokens; "
          f"flood: {flood} more requests from the first tab; ordinary: one sentence at a time, beam 4, 128 tokens, "
          f"{args.pause:g} s apart")
    rows = []
    for result in scenarios:
        latencies = result["latencies"] or [float("nan")]
        refused, answered, failed = result["flood"]
        rows.append([
            "fair turns (now)" if result["fair"] else "fairness off (before)",
            str(len(result["latencies"])),
            f"{statistics.median(latencies):.2f}",
            f"{percentile(latencies, 0.95):.2f}",
            f"{max(latencies):.2f}",
            " / ".join("unfinished" if s is None else f"{s:.1f}" for s in result["heavy_seconds"]),
            f"{refused} refused, {answered} run, {failed} failed",
            str(len(result["errors"])),
        ])
    harness.print_table(
        ["scenario", "ordinary requests", "p50 (s)", "p95 (s)", "max (s)", "heavy requests (s)", "flood",
         "ordinary errors"],
        rows,
    )
    for result in scenarios:
        for notice in result["heavy_notices"]:
            print(f"# heavy answer ({'fair' if result['fair'] else 'before'}): {str(notice)[:300]}")
        for error in result["errors"][:3]:
            print(f"# ordinary error ({'fair' if result['fair'] else 'before'}): {error}")


if __name__ == "__main__":
    main()
