"""Attacks on the arena's integrity, against the running app: does a script's flood decide the leaderboard, is a vote
lost when the database is locked, and what does the leaderboard cost on 100,000 votes?

The app with our model and a comparison system that writes nonsense (a tiny random MarianMT), 127.0.0.1 its trusted
proxy (each client names its address in X-Forwarded-For). `--sections`:
- flood: 40 sessions of one address vote for the nonsense as fast as the app lets them, 4 honest visitors of another
  read each battle and vote for the better one, the ordinary visitor translates. A pass: ours first, about a second.
- lock: another process holds the votes database's write lock for 40 s while a visitor votes, then votes again. A
  pass: a quick answer that says the vote was not stored and to vote again, then stored.
- readers: 60 pages of one address read the leaderboard back to back while the honest visitors vote.
- board: the first `Arena.leaderboard` on 100,000 votes in a new process: seconds and memory.

    OMP_NUM_THREADS=1 python -m benchmarks.arena_attacks --threads 1 [--sections flood,lock,board] [--quick]
"""

import itertools
import json
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

from benchmarks import harness, load

# documentation addresses, one per party
SCRIPT, HONEST, ORDINARY, READERS = "198.51.100.7", "203.0.113.5", "192.0.2.10", "198.51.100.20"
READ = 6.0  # seconds an honest visitor reads a battle
CAPTIONS = [
    "A dog runs in the park.",
    "Two men are working on a roof.",
    "A girl in a red dress is smiling.",
    "The children play on the street.",
    "A woman reads a book in the garden.",
]
HOLD_THE_WRITE_LOCK = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("COMMIT")
"""
BOARD_CODE = """
import json, os, sys, time
from benchmarks.load import rss_mib
from transformer_en_de.app.arena.arena import Arena
from transformer_en_de.app.arena.votes import VoteStore
arena = Arena(VoteStore(sys.argv[1]))
before, started = rss_mib(os.getpid()), time.perf_counter()
rows, line = arena.leaderboard({})
first, grew = time.perf_counter() - started, rss_mib(os.getpid()) - before
print(json.dumps({"seconds": first, "grew_mib": grew, "line": line, "order": [row["system"] for row in rows]}))
"""


def options(parser):
    parser.add_argument("--sections", default="flood,lock,board", help="comma-separated: flood, lock, board, readers")
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the flood lasts (default 180)")


def better(first: str, second: str) -> str:
    """A reader's choice: the nonsense system repeats a few letters; German uses many."""
    return "A" if len(set(first)) > len(set(second)) else "B"


def nonsense_first(first: str, second: str) -> str:
    return "B" if better(first, second) == "A" else "A"


def party(url: str, address: str, sessions: int, choose, wait: float, pause: float):
    """`sessions` sessions of `address` battling and voting (`choose`), `wait` s after each battle and `pause` s after
    each vote: the attackers' stop()."""
    stopped = threading.Event()

    def session(number: int):
        turns, visitor = itertools.count(number + 1), []

        def battle_and_vote():
            visitor[:] = visitor or [load.client(url, address)]
            battle_id, first, second, message = visitor[0].predict(CAPTIONS[next(turns) % 5], api_name="/battle")
            if not battle_id:
                stopped.wait(1.0)
                return "no battle: " + (message or first)[:40]
            if stopped.wait(wait):
                return []  # stopped while reading: no vote
            message = visitor[0].predict(battle_id, choose(first, second), api_name="/vote")[2]
            stopped.wait(pause)
            return "stored" if "stored" in message else message[:50]

        return battle_and_vote

    return load.attackers(*map(session, range(sessions)), stopped=stopped)


def ordinary_visits(url: str, seconds: float) -> list[float]:
    """The ordinary visitor's translations in a process of its own, one every 2 s for about `seconds`: latencies."""
    with closing(load.Visitor(url, ORDINARY)) as visitor:
        return visitor.visit([CAPTIONS[n % 5] for n in range(max(1, round(seconds / 2.5)))], 2.0)[0]


def report_visitor(latencies: list[float], more: str = "") -> None:
    p50, p95, most = load.seconds_row(latencies)
    print(f"ordinary visitor: {len(latencies)} translations, median {p50} s, p95 {p95} s, max {most} s{more}")
    print("its latencies in order (s):", " ".join(f"{latency:.1f}" for latency in latencies))


def flood(url: str, votes_db: Path, args) -> None:
    script = party(url, SCRIPT, args.script_sessions, nonsense_first, 0.0, 0.0)
    honest = party(url, HONEST, 4, better, READ, 10.0 - READ)
    latencies = ordinary_visits(url, args.seconds)
    script(), honest()
    board, _ = load.client(url, ORDINARY).predict(api_name="/leaderboard")
    with sqlite3.connect(votes_db) as database:
        by_source = database.execute("SELECT source, COUNT(*) FROM votes GROUP BY source ORDER BY 2 DESC").fetchall()
    print(f"## flood: {args.script_sessions} script sessions (voting at once) vs 4 honest visitors, {args.seconds:g} s")
    print("script told:", dict(script.outcomes.most_common(5)))
    print("honest told:", dict(honest.outcomes.most_common(5)))
    print("votes stored per source:", [count for _, count in by_source])
    order = [line.split("|")[2].strip() for line in board.splitlines() if line.startswith("| ") and "Rank" not in line]
    print("leaderboard order:", order)
    print("leaderboard says:", board.split("\n\n", 1)[-1])
    report_visitor(latencies)


def readers(url: str, server, args, pages: int = 60) -> None:
    """`pages` pages of one address read the leaderboard back to back while it changes."""
    before, fn_index = load.rss_mib(server.pid), load.events(url)[0]["leaderboard"]
    until = time.monotonic() + args.seconds
    honest = party(url, HONEST, 4, better, READ, 10.0 - READ)

    def reader():
        with closing(load.Page(url, address=READERS)) as page:
            reads = []
            while time.monotonic() < until:
                reads.append(load.outcome(page.ask(fn_index, [])))
            return reads

    reading = load.started(load.in_background(lambda: load.counted(load.in_parallel(pages, reader))))
    latencies = ordinary_visits(url, args.seconds)
    read, _ = reading(), honest()
    print(
        f"## readers: {pages} pages reading the leaderboard back to back for {args.seconds:g} s: {read} reads; "
        f"honest told: {dict(honest.outcomes.most_common(3))}"
    )
    report_visitor(latencies, f"; server {before:.0f} -> {load.rss_mib(server.pid):.0f} MiB")


def lock(url: str, votes_db: Path, args) -> None:
    visitor = load.client(url, HONEST)
    battle_id, first, second, _ = visitor.predict("A man sings on a stage.", api_name="/battle")
    time.sleep(READ)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(votes_db), "40"], stdout=subprocess.PIPE, text=True
    )
    holder.stdout.readline()
    asked = time.perf_counter()
    under_lock = visitor.predict(battle_id, better(first, second), api_name="/vote")
    waited = time.perf_counter() - asked
    holder.wait(timeout=60)
    again = visitor.predict(battle_id, better(first, second), api_name="/vote")
    print(f"## lock: a vote under a 40 s write lock answered in {waited:.2f} s: {under_lock[2]!r}")
    print(f"the same vote once the lock was released: {again[2]!r}")


def board(args, scratch: Path) -> None:
    """A database of `args.votes` votes (2,000 sessions of 500 networks, some voting in 4 s), then the first board."""
    from transformer_en_de.app.arena.votes import VoteStore

    path = scratch / "board.sqlite3"
    VoteStore(path).close()  # the schema
    rows, texts = [], ("A dog runs in the park.", "Ein Hund rennt im Park.", "Ein Hund läuft im Park.")
    for number in range(args.votes):
        pair, when = ("ours", "marian") if number % 3 else ("marian", "ours"), f"2026-11-26T00:00:{number % 60:02d}.000"
        choice, who = ("A", "B", "tie", "both bad")[number % 4], (f"visitor-{number % 2000}", f"network-{number % 500}")
        rows.append((when + "+00:00", f"battle-{number}", *pair, "{}", "{}", *texts, choice, *who, 0, 2.0 + number % 7))
    with sqlite3.connect(path) as database:
        database.executemany(
            "INSERT INTO votes (time, battle_id, system_a, system_b, decoding_a, decoding_b, source_text, "
            "translation_a, translation_b, choice, visitor, source, signed_in, seconds_to_vote) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    command = [sys.executable, "-c", BOARD_CODE, str(path)]
    answer = json.loads(subprocess.check_output(command, cwd=harness.ROOT, text=True).splitlines()[-1])
    print(
        f"## board: {args.votes:,} votes: first leaderboard in {answer['seconds']:.2f} s, resident memory "
        f"+{answer['grew_mib']:.0f} MiB; order {answer['order']}"
    )
    print("it says:", answer["line"])


@contextmanager
def serve(scratch: Path, args):
    """The app with our model and the nonsense system loaded, 127.0.0.1 its proxy: yields (process, url, votes db)."""
    sys.path.insert(0, str(harness.ROOT / "tests"))
    from tiny_marian import build_tiny_marian  # the tests' stand-in for MarianMT: random weights write nonsense

    votes_db, nonsense = scratch / "votes.sqlite3", build_tiny_marian(scratch / "nonsense")
    options = ["--comparison-models", nonsense, "--backend", "torch", "--votes-db", votes_db]
    options += ["--forwarded-allow-ips", "127.0.0.1"]
    with load.app_server(*options, threads=args.threads, log=scratch / "app.log") as (server, url):
        deadline = time.monotonic() + 180
        while "ready" not in load.client(url, ORDINARY).predict(api_name="/status"):
            if time.monotonic() > deadline:
                raise SystemExit("the comparison system did not load: see " + str(scratch / "app.log"))
            time.sleep(0.5)
        yield server, url, votes_db


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    args.script_sessions, args.votes = (10, 20_000) if args.quick else (40, 100_000)
    args.seconds = min(args.seconds, 40.0) if args.quick else args.seconds
    sections = args.sections.split(",")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        if {"flood", "lock", "readers"} & set(sections):
            with serve(scratch, args) as (server, url, votes_db):
                if "flood" in sections:
                    flood(url, votes_db, args)
                if "lock" in sections:
                    lock(url, votes_db, args)
                if "readers" in sections:
                    readers(url, server, args)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{load.server_log((scratch / 'app.log').read_text())}; peak RSS of this process {peak:.0f} MiB")
        if "board" in sections:
            board(args, scratch)


if __name__ == "__main__":
    main()
