"""Heavy visitors against the running app: do ordinary visitors still get their translations quickly?

Starts `python app.py` (our model only, offline) on 127.0.0.1 and drives it with real gradio_client clients:
- a heavy visitor with two tabs (two sessions), each sending 3,000 characters in capitals without a full stop at
  the maximum beams and new tokens (the text that made the model loop until its bound), and sending it again as soon
  as the answer comes, for `--heavy-seconds`: two heavy requests are in flight all that time. From the first tab,
  `--flood` more requests at once at the start;
- an ordinary visitor sending one test sentence at a time (the page's defaults: the shipped folder's beams, 128 new
  tokens), reading each answer
  for `--pause` seconds before the next, for as long as heavy requests run.
It reports the ordinary requests' p50 / p95 / max; the heavy requests' count, median and longest time, how many came
back with a translation and how many were cut at the time limit; how the flood was answered; and the server's CPU
seconds beside the wall-clock seconds of the scenario (a busy machine shows as CPU share below 100%). `--busy N` adds
N processes spinning on the same cores for the whole scenario: other tenants of a shared machine, made repeatable.
`--backends torch ctranslate2` runs the scenario once per backend, each with its own server.
Every loop is bounded: no heavy request starts after `--heavy-seconds`, and nothing waits past `--seconds`.

    taskset -c 1 python -m benchmarks.heavy_visitors --threads 1 [--backends torch ctranslate2] [--quick]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import harness, load
from benchmarks.hostile_clients import HEAVY_TEXT


def options(parser):
    parser.add_argument("--model", type=Path, default=harness.SHIPPED_DIR, help="model folder the app serves")
    parser.add_argument("--flood", type=int, default=64, help="extra requests the heavy visitor sends at once")
    parser.add_argument(
        "--heavy-seconds", type=float, default=60.0, help="how long the two tabs keep sending heavy requests"
    )
    parser.add_argument("--seconds", type=float, default=240.0, help="longest the whole scenario may take")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between the ordinary visitor's requests")
    parser.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "ctranslate2"])
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the same cores meanwhile")


def run_scenario(model_folder: Path, sentences: list[str], backend: str, args, flood: int, heavy_seconds: float):
    """One server, one scenario; returns the figures."""
    # Each spins until terminated below, or for `seconds` at most if this process dies first.
    spin = f"import time\nend = time.monotonic() + {args.seconds}\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy)]
    options = ["--model", model_folder, "--comparison-models", "--backend", backend]
    try:
        with load.app_server(*options, threads=args.threads) as (server, url):
            return dict(backend=backend, **scenario(server.pid, url, sentences, flood, heavy_seconds, args))
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.wait(timeout=30)


def scenario(server_pid: int, url: str, sentences: list[str], flood: int, heavy_seconds: float, args) -> dict:
    """Two heavy tabs, a flood from the first, the ordinary visitor meanwhile: the figures."""
    from gradio_client import Client

    ordinary = Client(url, verbose=False)
    tabs = [Client(url, verbose=False) for _ in range(2)]
    ordinary.predict(sentences[0], *load.ORDINARY[1:], api_name="/translate")  # warm-up

    started = time.monotonic()
    cpu_started = load.cpu_ticks(server_pid) / os.sysconf("SC_CLK_TCK")
    stop_heavy, deadline = started + heavy_seconds, started + args.seconds
    heavy = []  # (seconds, our translation, our details + the notice) per heavy request

    def heavy_tab(number: int):
        while time.monotonic() < stop_heavy:
            asked = time.perf_counter()
            job = tabs[number].submit(HEAVY_TEXT, "beam search", 8, 255, "", api_name="/translate")
            try:
                answer = job.result(timeout=max(deadline - time.monotonic(), 1))
            except Exception as error:  # a refusal or a timeout is a figure, not a crash of the benchmark
                heavy.append((time.perf_counter() - asked, "", f"{type(error).__name__}: {error}"[:200]))
                continue
            heavy.append((time.perf_counter() - asked, answer[0], f"{answer[1]} {answer[-1]}".replace("\n", " ")))

    heavy_threads = [threading.Thread(target=heavy_tab, args=(n,)) for n in range(2)]
    for thread in heavy_threads:
        thread.start()
    time.sleep(0.5)  # both heavy requests are in flight
    flood_sentences = (sentences * (flood // len(sentences) + 1))[:flood]
    flood_jobs = [tabs[0].submit(s, *load.ORDINARY[1:], api_name="/translate") for s in flood_sentences]

    latencies, errors = [], []
    index = 1
    while any(thread.is_alive() for thread in heavy_threads) and time.monotonic() < deadline:
        sentence = sentences[index % len(sentences)]
        index += 1
        asked = time.perf_counter()
        try:
            ordinary.predict(sentence, *load.ORDINARY[1:], api_name="/translate")
            latencies.append(time.perf_counter() - asked)
        except Exception as error:  # a refusal (queue full) is a figure, not a crash of the benchmark
            errors.append(type(error).__name__ + ": " + str(error)[:120])
        time.sleep(args.pause)
    for thread in heavy_threads:
        thread.join(timeout=max(deadline - time.monotonic(), 1))
    wall = time.monotonic() - started
    cpu = load.cpu_ticks(server_pid) / os.sysconf("SC_CLK_TCK") - cpu_started

    refused, answered, failed = 0, 0, 0
    for job in flood_jobs:
        try:
            answer = job.result(timeout=max(deadline - time.monotonic(), 1))
            refused += "still running" in answer[-1]
            answered += "still running" not in answer[-1]
        except Exception:
            failed += 1
    return dict(latencies=latencies, errors=errors, heavy=heavy, flood=(refused, answered, failed), wall=wall, cpu=cpu)


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    english, _ = harness.sample_sentences("test_2016_flickr", 50)
    flood = 8 if args.quick else args.flood
    heavy_seconds = 15.0 if args.quick else args.heavy_seconds
    with tempfile.TemporaryDirectory() as scratch:
        model_folder, served = harness.model_folder_to_serve(args.model, Path(scratch))
        scenarios = [
            run_scenario(model_folder, english, backend, args, flood, heavy_seconds) for backend in args.backends
        ]

    print(
        f"# Heavy visitors (server: app.py, model: {served}, {args.threads} torch thread(s), "
        f"{os.cpu_count()} CPU(s) visible, {args.busy} busy process(es) beside it)"
    )
    print(
        f"# heavy: 2 tabs x 3,000 capitals without a full stop, beam 8, 255 new tokens, sent again on each answer for "
        f"{heavy_seconds:g} s; flood: {flood} more requests from the first tab; ordinary: one sentence at a time, "
        f"beam {load.BEAMS}, {load.PAGE_TOKENS} tokens, {args.pause:g} s apart"
    )
    rows = []
    for result in scenarios:
        latencies = result["latencies"] or [float("nan")]
        heavy_times = [seconds for seconds, _, _ in result["heavy"]] or [float("nan")]
        translated = sum(bool(text) for _, text, _ in result["heavy"])
        cut = sum("time limit" in notice for _, _, notice in result["heavy"])
        refused, answered, failed = result["flood"]
        rows.append(
            [
                result["backend"],
                str(len(result["latencies"])),
                f"{statistics.median(latencies):.2f}",
                f"{load.percentile(latencies, 0.95):.2f}",
                f"{max(latencies):.2f}",
                f"{len(result['heavy'])}: {statistics.median(heavy_times):.1f} / {max(heavy_times):.1f}",
                f"{translated} translated, {cut} cut",
                f"{refused} refused, {answered} run, {failed} failed",
                f"{result['cpu']:.0f} / {result['wall']:.0f}",
                str(len(result["errors"])),
            ]
        )
    harness.print_table(
        [
            "backend",
            "ordinary requests",
            "p50 (s)",
            "p95 (s)",
            "max (s)",
            "heavy requests: p50 / max (s)",
            "heavy answers",
            "flood",
            "server CPU / wall (s)",
            "ordinary errors",
        ],
        rows,
    )
    for result in scenarios:
        label = result["backend"]
        for _, text, notice in result["heavy"][:1]:
            print(f"# heavy answer ({label}): {text[:160]!r} | {notice[:400]}")
        for error in result["errors"][:3]:
            print(f"# ordinary error ({label}): {error}")


if __name__ == "__main__":
    main()
