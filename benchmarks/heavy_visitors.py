"""Heavy visitors against the running app: do ordinary visitors still get their translations quickly?

A heavy visitor with two tabs sends 3,000 capitals without a full stop at the most beams and tokens (the text that
made the model loop until its bound), again on each answer, for 60 s, and 64 more requests at once from its first tab;
meanwhile the ordinary visitor translates one sentence at a time. A pass: no ordinary failure, and about a second.
`--busy N` adds N processes spinning on the same cores (other tenants of a shared machine).

    taskset -c 1 python -m benchmarks.heavy_visitors --threads 1 [--backends torch ctranslate2] [--quick]
"""

import os
import statistics
import subprocess
import sys
import time
from functools import partial

import httpx

from benchmarks import harness, load
from benchmarks.hostile_clients import HEAVY

LONGEST, PAUSE = 240.0, 0.5  # seconds the whole scenario may take; between the ordinary visitor's requests


def options(parser):
    parser.add_argument("--backends", nargs="+", default=["torch"], choices=["torch", "ctranslate2"])
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the same cores meanwhile")


def flood_answer(job, timeout: float) -> str:
    """Whether a call of a tab whose request is running ran, was refused for it (by the front, before the queue), or
    failed otherwise."""
    try:
        return "refused" if "still running" in job.result(timeout=timeout)[-1] else "run"
    except httpx.HTTPStatusError as error:
        return "refused" if "still running" in error.response.text else "failed"
    except Exception:  # a timeout or the queue's refusal is a figure
        return "failed"


def scenario(sentences: list[str], backend: str, args) -> list:
    """One server: two heavy tabs, a flood from the first, the ordinary visitor meanwhile; the table's row."""
    spin = f"import time\nend = time.monotonic() + {LONGEST}\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy)]
    with load.shipped_app(backend, threads=args.threads) as (server, url):
        visitor, tabs = load.Visitor(url), [load.client(url) for _ in range(2)]
        visitor.visit(sentences[:1], 0.0)  # warm-up
        started, cpu = time.monotonic(), load.cpu_seconds(server.pid)
        heavy = []  # (seconds, translation, notice)

        def heavy_call(tab) -> str:
            asked = time.perf_counter()
            try:
                answer = tab.submit(*HEAVY, api_name="/translate").result(timeout=LONGEST)
                heavy.append((time.perf_counter() - asked, answer[0], f"{answer[1]} {answer[-1]}"))
            except Exception as error:  # a refusal or a timeout is a figure
                heavy.append((time.perf_counter() - asked, "", f"{type(error).__name__}: {error}"[:200]))
            return "heavy"

        stop_heavy = load.attackers(*[partial(heavy_call, tab) for tab in tabs], seconds=args.heavy_seconds)
        time.sleep(0.5)  # both heavy requests are in flight
        flood = [tabs[0].submit(s, *load.ORDINARY[1:], api_name="/translate") for s in sentences[: args.flood]]

        def running() -> bool:
            return stop_heavy.alive() and time.monotonic() < started + LONGEST

        latencies, failures = visitor.visit([], PAUSE, running, more=sentences[1:])
        stop_heavy()
        wall, cpu = time.monotonic() - started, load.cpu_seconds(server.pid) - cpu
        told = [flood_answer(job, max(started + LONGEST - time.monotonic(), 1)) for job in flood]
        visitor.close()
    for spinner in spinners:
        spinner.terminate()
    times = [seconds for seconds, _, _ in heavy] or [float("nan")]
    for _, text, notice in heavy[:1]:
        print(f"# heavy answer ({backend}): {text[:160]!r} | {notice[:400]}".replace("\n", " "))
    return [
        backend,
        len(latencies),
        *load.seconds_row(latencies),
        f"{len(heavy)}: {statistics.median(times):.1f} / {max(times):.1f}",
        f"{sum(bool(text) for _, text, _ in heavy)} translated, {sum('time limit' in n for _, _, n in heavy)} cut",
        f"{told.count('refused')} refused, {told.count('run')} run, {told.count('failed')} failed",
        f"{cpu:.0f} / {wall:.0f}",
        failures,
    ]


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    args.flood, args.heavy_seconds = (8, 15.0) if args.quick else (64, 60.0)  # extra requests at once; heavy for s
    english, _ = harness.sample_sentences("test_2016_flickr", max(50, args.flood))
    rows = [scenario(english, backend, args) for backend in args.backends]
    print(
        f"# Heavy visitors (server: app.py, model: {load.SHIPPED_DIR}, {args.threads} torch thread(s), "
        f"{os.cpu_count()} CPU(s) visible, {args.busy} busy process(es) beside it); heavy: 2 tabs x 3,000 capitals, "
        f"beam 8, 255 new tokens, sent again on each answer for {args.heavy_seconds:g} s; flood: {args.flood} more "
        f"requests from the first tab; ordinary: one sentence at a time, beam {load.BEAMS}, {load.PAGE_TOKENS} "
        f"tokens, {PAUSE:g} s apart"
    )
    header = ["backend", "ordinary requests", "p50 (s)", "p95 (s)", "max (s)", "heavy requests: p50 / max (s)"]
    header += ["heavy answers", "flood", "server CPU / wall (s)", "ordinary failures"]
    harness.print_table(header, rows)


if __name__ == "__main__":
    main()
