"""The arena's requests: a battle (two systems drawn at random translate the same English, shown as A and B), a vote on
it (the names revealed), and the leaderboards beside each system's corpus BLEU. Only with a real OAuth sign-in
(`sign_in.py`) is a signed-in visitor an account: then the first board ranks the accounts' votes and the anonymous
ones stand apart (many addresses are easy to have). Every message is one bounded line; a refused choice is never echoed.
"""

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from transformer_en_de.decoding.plan import DecodingSettings, decoding_record
from transformer_en_de.hub_access import cause
from transformer_en_de.markdown import markdown_table

from ..serving.limits import keep_latest
from ..translation import RequestContext, translate_text
from . import battles
from .ratings import ACCOUNT_WEIGHT, INTERVAL_SOURCES, NETWORK_WEIGHT, OUTCOMES, Tally, order_agreement
from .ratings import leaderboard_plot as leaderboard_plot  # for the page
from .votes import Refused, VoteNotStored, VoteStore, check_choice

SENTENCES = Path(__file__).with_name("sentences.txt")
CONSENT = (
    "**Before you vote:** the English text, both translations and your vote are stored, with salted hashes of your "
    "page session and of your Hugging Face account if you signed in, else of your network address (never the name or "
    "the address itself), and may be published as a Hugging Face dataset under CC BY 4.0, where the time is rounded "
    "to the hour and the account's or address's hash changes every day."
)
VOTE_RULES_ACCOUNTS = (
    "**What a vote counts for.** Every vote is stored. The leaderboard ranks the votes of visitors signed in with "
    "Hugging Face, each account one person (at most {account_cap} battles' weight and {daily} votes a day). Anonymous "
    "votes are shown on a board of their own below it (one network's votes share {network_cap} battles' weight) and "
    "do not move the first: many addresses are easy to have."
)
VOTE_RULES_ANONYMOUS = (
    "**What a vote counts for.** Every vote is stored. This page has no sign-in, so the leaderboard rests on anonymous "
    "votes, counted by network: all the votes from one address share {network_cap} battles' weight (a class behind "
    "one address is one voice), and a script with many addresses could still move it."
)
# Each board of votes: (its heading, what it says before its first vote).
BOARDS = {
    "all": ("", "No votes yet: vote above to be the first."),
    "signed_in": (
        "Signed-in accounts (the leaderboard)",
        "No signed-in votes yet: sign in with Hugging Face above and vote to be the first.",
    ),
    "anonymous": ("Anonymous votes, apart (they do not move the leaderboard above)", "No anonymous votes yet."),
}
HEADER = ["Rank", "System", "Rating", "95% interval", "Battles", "Won", "Tied", "Lost", "Both bad", "BLEU (test 2016)"]
CAPTION = (
    'Bradley-Terry ratings (ties as half a win; "both bad" counted as a battle, not in the rating); 95% bootstrap '
    f"intervals over the sources, shown once at least {INTERVAL_SOURCES} sources rated a system and differ. Battles, "
    "Won, Tied, Lost and Both bad count this board's stored votes one by one; the ratings weigh each source's votes "
    "down to its bound."
)
# Two throttles, on purpose: `BoardReads` works the boards out again right after a vote here (and this long after one
# of another process), so a voter who looks at once sees it counted or the line saying it waits; the fit (a bootstrap
# over the sources) runs at most this often, so a flood of votes costs one fit per period, not one per vote.
FRESH_SECONDS = 10.0
SESSIONS_REMEMBERED = 4_096  # sessions whose last board is remembered (the least recent go first)
PAGE_LINE_CHARACTERS = 300  # the most a message on the page holds


def vote_rules(accounts: bool = False) -> str:
    rules = VOTE_RULES_ACCOUNTS if accounts else VOTE_RULES_ANONYMOUS
    return rules.format(account_cap=f"{ACCOUNT_WEIGHT:g}", network_cap=f"{NETWORK_WEIGHT:g}", daily=battles.DAILY_VOTES)


def page_line(text: str) -> str:
    return cause(text, PAGE_LINE_CHARACTERS)


def example_sentences(kind: str) -> list[str]:  # "caption" or "everyday"
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1] for line in lines if line.startswith(kind + "\t")]


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'s' * (count != 1)}"


@dataclass(frozen=True)
class Voter:
    session: str
    address: str = ""
    account: str | None = None


@dataclass
class Board:
    heading: str  # "" for none
    rows: list[dict]  # best first
    line: str  # what it rests on, or that it has no votes yet


@dataclass
class Arena:
    store: VoteStore
    book: battles.BattleBook = field(default_factory=battles.BattleBook)
    pace: battles.VotePace = field(default_factory=battles.VotePace)
    rate: battles.BattleRate = field(default_factory=battles.BattleRate)
    allowance: battles.DailyAllowance = field(default_factory=battles.DailyAllowance)
    accounts: bool = False  # a signed-in visitor counts as an account (a real OAuth app); if not, as its network

    def __post_init__(self):
        self.tallies = {key: Tally() for key in BOARDS}
        self._lock = threading.Lock()

    def account_of(self, voter: Voter) -> str | None:
        return voter.account if self.accounts and voter.account else None

    def source_of(self, voter: Voter) -> str:
        return self.store.source_hash(self.account_of(voter), voter.address)

    def battle(self, text, context: RequestContext, settings: DecodingSettings, voter: Voter) -> tuple[str, ...]:
        """(battle_id, translation_a, translation_b, message); ("", "", "", why) when there is no battle."""
        loaded = [system.translator for system in context.systems if system.translator is not None]
        if len(loaded) < 2:
            loading = any(not getattr(system, "done", True) for system in context.systems)
            when = "try again when the others have loaded" if loading else "the others could not be loaded"
            why = f"The arena needs two systems on the page and only {len(loaded)} is loaded, so there is no battle"
            return "", "", "", page_line(f"{why}: {when}.")
        try:
            self.rate.admit(self.source_of(voter))
        except Refused as refused:
            return "", "", "", page_line(str(refused))
        first, second = random.sample(loaded, 2)
        pair = replace(context, ours=first, comparisons=[second], side=True)  # behind every visitor's translation
        result = translate_text(text, settings, context=pair)
        failed = [output for output in result.outputs if output.message or not output.translation]
        if result.message or failed:
            why = f"{len(failed)} system(s) could not translate this text, so there is no battle: try another."
            return "", "", "", page_line(result.message or why)
        a, b = result.outputs
        battle_id = self.book.issue(
            visitor=self.store.visitor_hash(voter.session),
            system_a=a.name,
            system_b=b.name,
            source_text=" ".join(result.sentences),
            translation_a=a.translation,
            translation_b=b.translation,
            decoding_a=decoding_record(a.run.plan),  # as each system's plan resolved it
            decoding_b=decoding_record(b.run.plan),
        )
        return battle_id, a.translation, b.translation, "Read both, then vote: which German is better?"

    def vote(self, battle_id, choice, voter: Voter, cast_at: float | None = None) -> tuple[str, str, str]:
        """(system_a, system_b, message): the names revealed once the vote is stored; ("", "", why) if refused."""
        if not isinstance(battle_id, str) or not battle_id:
            return "", "", "Start a battle first: there is nothing to vote on."
        visitor, signed_in = self.store.visitor_hash(voter.session), self.account_of(voter) is not None
        try:
            battle = self.cast_vote(battle_id[:100], visitor, choice, self.source_of(voter), signed_in, cast_at)
        except Refused as error:
            if isinstance(error, VoteNotStored):
                print(f"arena: a vote was not stored, its battle stays open ({error.__cause__ or error})", flush=True)
            return "", "", page_line(str(error))
        revealed = f"Thank you: your vote ({choice}) is stored. A was {battle.system_a}, B was {battle.system_b}."
        return battle.system_a, battle.system_b, page_line(revealed)

    def cast_vote(self, battle_id, visitor, choice, source="", signed_in=False, cast_at=None) -> battles.Battle:
        """Check a vote against every rule and store it; the battle, to reveal its systems. A signed-in `source` is
        paced and bounded as its account; `cast_at` (the book's clock): when the vote was sent, if it waited in a queue.
        A vote the database refused puts everything back, to be cast again at once."""
        check_choice(choice)
        limits = [(self.pace, source if signed_in else visitor)] + [(self.allowance, source)] * signed_in
        with ExitStack() as undo:
            for limit, key in limits:
                limit.admit(key)
                undo.callback(limit.give_back, key)
            battle = self.book.claim(battle_id, visitor)
            undo.callback(self.book.reopen, battle)
            seconds = (self.book.clock() if cast_at is None else cast_at) - battle.issued_at
            self.store.add(battle.vote(choice, source, signed_in, seconds))
            undo.pop_all()
        return battle

    def boards(self, bleu: dict[str, float]) -> list[Board]:
        """With accounts, the signed-in votes' board (the leaderboard) then the anonymous ones'; without, one."""
        with self._lock:
            last, counts = self.store.counts_since(self.tallies["all"].last_id)
            for key, tally in self.tallies.items():
                tally.add([count for count in counts if key == "all" or count.signed_in == (key == "signed_in")], last)
            keys = ("signed_in", "anonymous") if self.accounts else ("all",)
            fitted = {key: (*self.tallies[key].rows(FRESH_SECONDS), self.tallies[key].summary()) for key in keys}
        boards = []
        for key, (rows, newer, summary) in fitted.items():
            heading, line = BOARDS[key]
            rows = [row | {"bleu": bleu.get(row["system"])} for row in rows]
            if rows:
                line = f"{resting_on(summary, key)} {order_agreement(rows)}"
            elif key == "signed_in" and self.tallies["all"].votes:
                line += " The anonymous votes are below."
            if newer > 0:  # a voter who looks at once sees why their vote is not counted yet
                line += (
                    f" {newer:,} newer vote{'s are' if newer != 1 else ' is'} stored; the ratings are fitted again at "
                    f"most every {FRESH_SECONDS:g} s."
                )
            boards.append(Board(heading, rows, line))
        return boards

    def leaderboard(self, bleu: dict[str, float]) -> tuple[list[dict], str]:  # the first board's
        first = self.boards(bleu)[0]
        return first.rows, first.line


def resting_on(summary: dict, key: str) -> str:
    rated, accounts, networks = summary["rated"], plural(summary["accounts"], "signed-in account"), summary["anonymous"]
    earlier = f", {accounts} of an earlier run" * bool(summary["accounts"])
    line = {
        "signed_in": f"These ratings rest on {plural(rated, 'vote')} of {accounts}.",
        "anonymous": f"These ratings rest on {plural(rated, 'anonymous vote')} from {plural(networks, 'network')}, "
        "each a source; many addresses can move them.",
        "all": f"This page has no sign-in: the ratings rest on {plural(rated, 'vote')} from "
        f"{plural(summary['sources'], 'source')} ({plural(networks, 'anonymous network')}{earlier}), and many "
        "addresses can move them.",
    }[key]
    if summary["over_bound"]:
        line += (
            f" {summary['over_bound']:,} votes' worth is beyond their sources' bounds and not counted (an account "
            f"weighs at most {ACCOUNT_WEIGHT:g} battles, an anonymous network {NETWORK_WEIGHT:g})."
        )
    return line


def leaderboard_markdown(boards: list[Board], bleu_line: str = "") -> str:  # `bleu_line`: how each BLEU was decoded
    parts = []
    for board in boards:
        parts += [f"#### {board.heading}"] if board.heading else []
        if not board.rows:
            parts.append(board.line)
            continue
        table = [
            [
                row["rank"],
                row["system"],
                f"{row['rating']:.0f}",
                "-" if row["lower"] is None else f"{row['lower']:.0f}-{row['upper']:.0f}",
                *(row[name] for name in OUTCOMES),
                "-" if row.get("bleu") is None else f"{row['bleu']:.2f}",
            ]
            for row in board.rows
        ]
        parts.append(markdown_table(HEADER, table, "rl" + "r" * 8))
        parts.append(" ".join(part for part in (CAPTION, bleu_line, board.line) if part))
    return "\n\n".join(parts)


class BoardReads:
    """The leaderboard as pages read it: `table()` (the board's rows, its Markdown) worked out again after a vote
    stored here or `FRESH_SECONDS` after the last time, `draw(rows)` only when the table changed, and sent to a session
    only when it changed since that session saw it: sixty pages reading back to back cost one working-out."""

    def __init__(self, table: Callable, draw: Callable, clock: Callable[[], float] = time.monotonic):
        self.table, self.draw, self.clock = table, draw, clock
        self._answer: tuple[str, object] | None = None
        self._version, self._worked_out = 0, float("-inf")
        self._seen: OrderedDict[str, int] = OrderedDict()  # session -> the version it was sent
        self._lock = threading.Lock()  # one reader works the board out; the others wait for it and share it

    def vote_stored(self) -> None:
        with self._lock:
            self._worked_out = float("-inf")

    def is_fresh(self) -> bool:
        """Whether a read now costs nothing but a comparison (the caller may then skip its turn on the CPU)."""
        with self._lock:
            return self._answer is not None and self.clock() - self._worked_out < FRESH_SECONDS

    def read(self, session: str | None) -> tuple[str, object] | None:
        """(table, picture), or None when `session` was sent this one already."""
        with self._lock:
            now = self.clock()
            if self._answer is None or now - self._worked_out >= FRESH_SECONDS:
                rows, table = self.table()
                if self._answer is None or table != self._answer[0]:
                    self._answer, self._version = (table, self.draw(rows)), self._version + 1
                self._worked_out = now
            if session is None:
                return self._answer
            seen = self._seen.get(session)
            keep_latest(self._seen, session, self._version, SESSIONS_REMEMBERED)
            return None if seen == self._version else self._answer
