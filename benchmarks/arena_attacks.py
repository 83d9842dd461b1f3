"""Attacks on the arena's integrity, against the running app: does a script's flood decide the leaderboard, is a vote
lost when the database is locked, and what does the leaderboard cost on 100,000 votes?

Starts `python app.py` with our model and a comparison system that writes nonsense (a tiny random MarianMT, built
here), trusting 127.0.0.1 as its proxy so that each client names its address in X-Forwarded-For, as a Space's proxy
does. Sections (`--sections`):
- flood: `--script_sessions` page sessions from one address battle and vote for the nonsense system as fast as the
  app lets them (a vote as soon as the battle is shown, then the next battle), while 4 honest visitors from another
  address read each battle (`--read` s) and vote for the better translation every 10 s, and an ordinary visitor from
  a third address translates; for `--seconds`. Then: votes stored per address, the leaderboard's order and what it
  says it rests on, the ordinary visitor's latencies. `--script_waits` makes the script wait as long as a reader
  before each vote (the attacker who knows the rule), and `--honest_signed_in` is not offered here: signing in needs
  the Hub (tests/test_arena_sign_in.py plays it with a loopback Hub).
- lock: another process holds the votes database's write lock for 40 s; a visitor votes: how long it waited, what it
  was told; then, the lock released, the same vote on the same battle.
- readers: 60 pages from one address read the leaderboard (table and plot) back to back for `--seconds` while the 4
  honest visitors vote and the ordinary visitor translates; the server's memory before and after.
- board: 100,000 votes written into a fresh database; `Arena.leaderboard` in a new process: the first answer's
  seconds and the process's growth in resident memory, then an answer after one more vote.

    OMP_NUM_THREADS=1 python -m benchmarks.arena_attacks --threads 1 [--sections flood,lock,board] [--quick]
"""

import json
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from benchmarks import harness, load

# documentation addresses, one per party
SCRIPT, HONEST, ORDINARY, READERS = "198.51.100.7", "203.0.113.5", "192.0.2.10", "198.51.100.20"
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


def options(parser):
    parser.add_argument("--sections", default="flood,lock,board", help="comma-separated: flood, lock, board, readers")
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the flood lasts (default 180)")
    parser.add_argument("--script_sessions", type=int, default=40, help="the script's page sessions (default 40)")
    parser.add_argument("--script_waits", action="store_true", help="the script waits as long as a reader to vote")
    parser.add_argument("--read", type=float, default=6.0, help="seconds an honest visitor reads a battle")
    parser.add_argument("--votes", type=int, default=100_000, help="votes in the board section's database")
    parser.add_argument("--backend", default="torch", help="the app's backend (torch or ctranslate2)")


def client(url: str, address: str):
    """A page's session (gradio_client) whose requests come, through the trusted proxy, from `address`."""
    from gradio_client import Client

    return Client(url, verbose=False, headers={"X-Forwarded-For": address})


def better(first: str, second: str) -> str:
    """A reader's choice: the nonsense system repeats a few letters; German uses many."""
    return "A" if len(set(first)) > len(set(second)) else "B"


class Party:
    """Sessions of one address battling and voting in threads until stopped; counts what they were told."""

    def __init__(self, url: str, address: str, sessions: int, choose, wait: float, pause: float):
        self.url, self.address, self.choose, self.wait, self.pause = url, address, choose, wait, pause
        self.outcomes, self.lock, self.stopped = Counter(), threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.session, args=(turn,), daemon=True) for turn in range(sessions)]

    def start(self) -> "Party":
        for thread in self.threads:
            thread.start()
        return self

    def session(self, number: int) -> None:
        visitor = client(self.url, self.address)
        turn = number
        while not self.stopped.is_set():
            turn += 1
            try:
                battle_id, first, second, _ = visitor.predict(CAPTIONS[turn % len(CAPTIONS)], api_name="/battle")
                if not battle_id:
                    self.count("no battle: " + first[:40])
                    self.stopped.wait(1.0)
                    continue
                if self.stopped.wait(self.wait):
                    break  # stopped while reading: no vote
                _, _, message = visitor.predict(battle_id, self.choose(first, second), api_name="/vote")
                self.count("stored" if "stored" in message else message[:50])
            except Exception as error:  # an error is an outcome to count, not a reason to stop the party
                self.count(type(error).__name__)
            self.stopped.wait(self.pause)

    def count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def stop(self) -> Counter:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=120)
        return self.outcomes


def ordinary_visits(url: str, seconds: float) -> list[float]:
    """An ordinary visitor's translations, one every 2 s, for about `seconds`: their latencies. The visitor runs in a
    process of its own (`load.Visitor`), as a browser would: the script's and the honest sessions' clients in this
    process would otherwise slow its own calls (their start-up at once holds this process's GIL)."""
    visitor = load.Visitor(url, ORDINARY)
    try:
        sentences = [CAPTIONS[number % len(CAPTIONS)] for number in range(max(1, round(seconds / 2.5)))]
        latencies, _ = visitor.visit(sentences, 2.0)
    finally:
        visitor.close()
    return latencies


def flood(url: str, votes_db: Path, args) -> None:
    nonsense_first = lambda first, second: "B" if better(first, second) == "A" else "A"  # noqa: E731
    script_wait = args.read if args.script_waits else 0.0
    script = Party(url, SCRIPT, args.script_sessions, nonsense_first, script_wait, 0.0).start()
    honest = Party(url, HONEST, 4, better, args.read, 10.0 - args.read).start()
    latencies = ordinary_visits(url, args.seconds)
    script_outcomes, honest_outcomes = script.stop(), honest.stop()
    board, _ = client(url, ORDINARY).predict(api_name="/leaderboard")
    with sqlite3.connect(votes_db) as database:
        by_source = database.execute("SELECT source, COUNT(*) FROM votes GROUP BY source ORDER BY 2 DESC").fetchall()
    pace = f"waiting {args.read:g} s to vote" if args.script_waits else "voting at once"
    print(f"## flood: {args.script_sessions} script sessions ({pace}) vs 4 honest visitors, {args.seconds:g} s")
    print("script told:", dict(script_outcomes.most_common(5)))
    print("honest told:", dict(honest_outcomes.most_common(5)))
    print("votes stored per source:", [count for _, count in by_source])
    order = [line.split("|")[2].strip() for line in board.splitlines() if line.startswith("| ") and "Rank" not in line]
    print("leaderboard order:", order)
    print("leaderboard says:", board.split("\n\n", 1)[-1])
    print(f"ordinary visitor: {load.latencies_line(latencies)}")
    print("its latencies in order (s):", " ".join(f"{latency:.1f}" for latency in latencies))


def leaderboard_readers(url: str, seconds: float, readers: int = 60) -> str:
    """`readers` pages (one address) read the leaderboard (its table and plot) back to back for `seconds`."""
    fn_index, until, reads, lock = (
        load.events(url)[0]["leaderboard"],
        time.monotonic() + seconds,
        Counter(),
        threading.Lock(),
    )

    def reader():
        page = load.Page(url, address=READERS)
        try:
            while time.monotonic() < until:
                label = load.outcome(page.ask(fn_index, []))
                with lock:
                    reads[label] += 1
        finally:
            page.close()

    load.in_parallel(readers, reader)
    return f"{readers} pages reading the leaderboard back to back for {seconds:g} s: {load.counted(reads)} reads"


def readers(url: str, server, args) -> None:
    """60 pages (one address) read the leaderboard back to back while 4 honest visitors vote (the board changes every
    few seconds) and the ordinary visitor translates; the server's memory before and after."""
    before = load.rss_mib(server.pid)
    honest = Party(url, HONEST, 4, better, args.read, 10.0 - args.read).start()
    reading = load.in_background(lambda: leaderboard_readers(url, args.seconds))
    latencies = ordinary_visits(url, args.seconds)
    read, honest_outcomes = reading(), honest.stop()
    print(f"## readers: {read}; honest told: {dict(honest_outcomes.most_common(3))}")
    print(
        f"ordinary visitor: {load.latencies_line(latencies)}; server {before:.0f} -> {load.rss_mib(server.pid):.0f} MiB"
    )
    print("its latencies in order (s):", " ".join(f"{latency:.1f}" for latency in latencies))


def lock(url: str, votes_db: Path, args) -> None:
    visitor = client(url, HONEST)
    battle_id, first, second, _ = visitor.predict("A man sings on a stage.", api_name="/battle")
    time.sleep(args.read)
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


BOARD_CODE = """
import json, os, sys, time
from benchmarks.load import rss_mib
from transformer_en_de.app.arena.arena import Arena
from transformer_en_de.app.arena.votes import VoteStore
arena = Arena(VoteStore(sys.argv[1]))
before = rss_mib(os.getpid())
started = time.perf_counter()
rows, line = arena.leaderboard({})
first = time.perf_counter() - started
grew = rss_mib(os.getpid()) - before
print(json.dumps({"seconds": first, "grew_mib": grew, "line": line, "order": [row["system"] for row in rows]}))
"""


def board(args, scratch: Path) -> None:
    """A database of `--votes` votes (from 2,000 sessions of 500 networks, some in 4 s), then the first leaderboard."""
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
    result = subprocess.run(
        [sys.executable, "-c", BOARD_CODE, str(path)], cwd=harness.ROOT, capture_output=True, text=True, check=True
    )
    answer = json.loads(result.stdout.splitlines()[-1])
    print(
        f"## board: {args.votes:,} votes: first leaderboard in {answer['seconds']:.2f} s, resident memory "
        f"+{answer['grew_mib']:.0f} MiB; order {answer['order']}"
    )
    print("it says:", answer["line"])


@contextmanager
def serve(scratch: Path, args):
    """`python app.py` with our model and the nonsense system, 127.0.0.1 trusted as the proxy, up and its comparison
    system loaded: yields (process, url, votes database)."""
    sys.path.insert(0, str(harness.ROOT / "tests"))
    from tiny_marian import build_tiny_marian  # the tests' stand-in for MarianMT: random weights write nonsense

    votes_db = scratch / "votes.sqlite3"
    nonsense = build_tiny_marian(scratch / "nonsense")
    options = ["--comparison-models", nonsense, "--backend", args.backend, "--votes-db", votes_db]
    proxy = ["--forwarded-allow-ips", "127.0.0.1"]
    with load.app_server(*options, *proxy, threads=args.threads, log=scratch / "app.log") as (server, url):
        deadline = time.monotonic() + 180
        while "ready" not in client(url, ORDINARY).predict(api_name="/status"):
            if time.monotonic() > deadline:
                raise SystemExit("the comparison system did not load: see " + str(scratch / "app.log"))
            time.sleep(0.5)
        yield server, url, votes_db


def main():
    args = harness.parse_args(__doc__.splitlines()[0], options)
    if args.quick:
        args.seconds, args.script_sessions, args.votes = min(args.seconds, 40.0), min(args.script_sessions, 10), 20_000
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
            log = (scratch / "app.log").read_text()
            print(
                f"server log: {len(log.encode()):,} bytes, {log.count('Traceback')} tracebacks; peak RSS of this "
                f"process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
            )
        if "board" in sections:
            board(args, scratch)


if __name__ == "__main__":
    main()
