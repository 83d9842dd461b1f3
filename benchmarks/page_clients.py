"""Attacks and visitors shaped like pages, for `benchmarks.hostile_clients` (issue 50: counting people, not scripts).

A `Page` is a session as the browser runs it: its heartbeat open while the page is, calls posted to queue/join, their
results read from the session's event stream. The attacks, each run once in the background while the ordinary visitor
visits (each returns what its pages got, in words):
- slow links: 20 pages each ask a translation and open their event stream 4 s later (a slow mobile link);
- churn then learners: a script makes 20 new sessions a second from the address (a corpus-table join each, never read);
  once its sessions are refused, 60 learners open the page from that address (their heartbeat alongside their first
  call, as a browser sends it), and again 5 s later;
- one session's views: a visitor looks inside; another session asks for 66 views; the visitor redraws;
- bad redraws: a page looks inside, then sends 20 redraws with values no control offers; the server log's growth;
- views at once: 90 pages from one address each look inside at once, read (a class on the Inside tab);
- leaderboard readers (benchmarks.arena_attacks): 60 pages read the leaderboard back to back;
- unread views: 100 sessions each ask for an Inside view of a 20-word sentence and open their event stream, never
  read, for 20 s; the server's memory while they are open.
"""

import json
import os
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

SENTENCE = "A dog runs in the park."
# Values outside the Inside tab's choices: an unknown kind, a layer past the last, a head that is no number, ...
ODD_REDRAWS = [("sideways", 1, 0), ("cross", 99, 0), ("cross", 1, "x"), (["cross"], None, 3.5), ({"k": 1}, -4, 10**30)]


class Page:
    """A page's session: the heartbeat opens alongside the first call unless `settle` (then before it). With `address`,
    every request names it in X-Forwarded-For (the visitor behind a proxy the server trusts)."""

    def __init__(self, url: str, settle: bool = True, address: str | None = None):
        self.url, self.session = url, os.urandom(8).hex()
        headers = {"X-Forwarded-For": address} if address else {}
        self.http = httpx.Client(timeout=httpx.Timeout(30, read=120), headers=headers)
        self.beating, self.closed = threading.Event(), threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        if settle:
            self.beating.wait(30)

    def _heartbeat(self) -> None:
        try:
            with self.http.stream("GET", f"{self.url}gradio_api/heartbeat/{self.session}") as beat:
                self.beating.set()
                for _ in beat.iter_raw():
                    if self.closed.is_set():
                        return
        except httpx.HTTPError:  # closed with the page
            pass

    def body(self, fn_index: int, data: list) -> dict:
        """A call of this page's session, as the page sends it."""
        return {"data": data, "fn_index": fn_index, "session_hash": self.session, "event_data": None,
                "trigger_id": None}  # fmt: skip

    def join(self, fn_index: int, data: list) -> int:
        return self.http.post(f"{self.url}gradio_api/queue/join", json=self.body(fn_index, data)).status_code

    def read(self) -> dict:
        """The session's stream until a call completes: its `process_completed` message ({} if none)."""
        with self.http.stream("GET", f"{self.url}gradio_api/queue/data", params={"session_hash": self.session}) as data:
            for line in data.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("msg") == "process_completed":
                    return message
        return {}

    def ask(self, fn_index: int, data: list) -> dict:
        """One call, read: its completed message, or {"refused": status}."""
        status = self.join(fn_index, data)
        return self.read() if status == 200 else {"refused": status}

    def run(self, fn_index: int, data: list) -> dict:
        """An event outside the queue (`queue=False`), as the page calls it: its answer, or {"refused": status}."""
        answer = self.http.post(f"{self.url}gradio_api/run/predict", json=self.body(fn_index, data))
        return answer.json() if answer.status_code == 200 else {"refused": answer.status_code}

    def close(self) -> None:
        self.closed.set()
        self.http.close()


def outcome(message: dict) -> str:
    """A call's outcome in a word or two."""
    if "refused" in message:
        return f"HTTP {message['refused']}"
    if not message.get("success"):
        return "failed"
    text = json.dumps(message["output"]["data"])
    return "cancelled" if "Cancelled" in text else "expired view" if "no longer kept" in text else "answered"


def in_parallel(count: int, target) -> Counter:
    """`target()` in `count` threads at once; their outcomes counted."""
    outcomes, lock = Counter(), threading.Lock()

    def run():
        try:
            label = target()
        except Exception as error:  # a page's own failure is an outcome
            label = type(error).__name__
        with lock:
            outcomes[label] += 1

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return outcomes


def counted(outcomes: Counter) -> str:
    return ", ".join(f"{count} {label}" for label, count in outcomes.most_common()) or "none"


def slow_links(url: str, named: dict, pages: int = 20, late: float = 4.0) -> str:
    def page_on_a_slow_link():
        page = Page(url)
        try:
            if (status := page.join(named["translate"], [SENTENCE, "beam search", 4, 128, ""])) != 200:
                return f"HTTP {status}"
            time.sleep(late)
            return outcome(page.read())
        finally:
            page.close()

    return f"{pages} pages reading {late:g} s late: {counted(in_parallel(pages, page_on_a_slow_link))}"


def churn_then_learners(url: str, named: dict, rate: float = 20, learners: int = 60) -> str:
    stopped, script = threading.Event(), Counter()

    def churn():  # one of `rate` threads, a new session a second each
        with httpx.Client(timeout=30) as http:
            while not stopped.wait(1.0):
                body = {"data": [], "fn_index": named["comparison"], "session_hash": os.urandom(8).hex()}
                script[http.post(f"{url}gradio_api/queue/join", json=body).status_code] += 1

    churners = [threading.Thread(target=churn, daemon=True) for _ in range(int(rate))]
    for churner in churners:
        churner.start()
    deadline = time.monotonic() + 120
    while not script[429] and time.monotonic() < deadline:  # the address's new sessions are spent
        time.sleep(0.2)

    def learner():
        page = Page(url, settle=False)
        try:
            return outcome(page.ask(named["comparison"], []))
        finally:
            page.close()

    first = in_parallel(learners, learner)
    time.sleep(5)
    again = in_parallel(learners, learner)
    stopped.set()
    for churner in churners:
        churner.join(timeout=30)
    made = ", ".join(f"{count} HTTP {status}" for status, count in sorted(script.items()))
    return f"script's sessions: {made}; {learners} learners: {counted(first)}; 5 s later: {counted(again)}"


def one_sessions_views(url: str, named: dict, redraws: list, views: int = 66) -> str:
    visitor, other = Page(url), Page(url)
    try:
        outcome(visitor.ask(named["inside"], [SENTENCE, "beam search", 4, 128]))
        asked = Counter(outcome(other.ask(named["inside"], [f"A dog number {n} runs.", "beam search", 4, 128]))
                        for n in range(views))  # fmt: skip
        redrawn = outcome(visitor.ask(redraws[-1][0], [None, "cross", 1, 0]))
    finally:
        visitor.close()
        other.close()
    return f"one session's {views} views: {counted(asked)}; the visitor's redraw: {redrawn}"


def bad_redraws(url: str, named: dict, redraws: list, log: Path, count: int = 20) -> str:
    page = Page(url)
    try:
        outcome(page.ask(named["inside"], [SENTENCE, "beam search", 4, 128]))
        time.sleep(0.5)
        before = log.read_bytes()
        answers = Counter(outcome(page.ask(redraws[-1][0], [None, *ODD_REDRAWS[n % len(ODD_REDRAWS)]]))
                          for n in range(count))  # fmt: skip
        time.sleep(0.5)
        grown = log.read_bytes()[len(before) :].decode(errors="replace")
    finally:
        page.close()
    return (f"{count} redraws outside the choices: {counted(answers)}; server log +{len(grown.splitlines())} lines, "
            f"{grown.count('Traceback')} tracebacks")  # fmt: skip


def unread_views(url: str, named: dict, sentence: str, server_rss, views: int = 100, hold: float = 20.0) -> str:
    """`views` sessions each ask /inside on `sentence` and open their event stream, which they never read, for `hold`
    seconds; the server's RSS (`server_rss()`, MiB) before and at its largest while they are open."""
    before, largest, held = server_rss(), 0.0, []
    address = url.split("//")[1].rstrip("/")
    host, port = address.rsplit(":", 1)
    with httpx.Client(timeout=30) as http:
        for _ in range(views):
            session = os.urandom(8).hex()
            body = {"data": [sentence, "beam search", 4, 128], "fn_index": named["inside"], "session_hash": session}
            if http.post(f"{url}gradio_api/queue/join", json=body).status_code != 200:
                continue
            stream = socket.create_connection((host, int(port)), timeout=30)
            stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4_096)  # a reader that never reads
            stream.sendall(f"GET /gradio_api/queue/data?session_hash={session} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            held.append(stream)
    ends = time.monotonic() + hold
    while time.monotonic() < ends:
        largest = max(largest, server_rss())
        time.sleep(0.5)
    for stream in held:
        stream.close()
    return (f"{len(held)} views asked, streams never read for {hold:g} s: server RSS {before:,.0f} -> at most "
            f"{largest:,.0f} MiB")  # fmt: skip


def views_at_once(url: str, named: dict, views: int = 90, address: str | None = None) -> str:
    """`views` pages (from `address`, through the trusted proxy) each look inside at once, as a class on the Inside tab
    does, and read their answer; their outcomes and how long the last took."""

    def page_looks_inside():
        page = Page(url, address=address)
        try:
            return outcome(page.ask(named["inside"], [SENTENCE, "beam search", 4, 128]))
        finally:
            page.close()

    started = time.monotonic()
    outcomes = in_parallel(views, page_looks_inside)
    return f"{views} Inside views at once: {counted(outcomes)}, all in {time.monotonic() - started:.1f} s"


def leaderboard_readers(url: str, named: dict, readers: int = 60, seconds: float = 60.0,
                        address: str | None = None) -> str:  # fmt: skip
    """`readers` pages read the leaderboard (its table and plot) back to back for `seconds`; the reads answered."""
    until, reads, lock = time.monotonic() + seconds, Counter(), threading.Lock()

    def reader():
        page = Page(url, address=address)
        try:
            while time.monotonic() < until:
                label = outcome(page.ask(named["leaderboard"], []))
                with lock:
                    reads[label] += 1
        finally:
            page.close()

    in_parallel(readers, reader)
    return f"{readers} pages reading the leaderboard back to back for {seconds:g} s: {counted(reads)} reads"

