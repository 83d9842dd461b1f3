"""The arena's requests: a battle (two systems drawn at random translate the same English, shown as A and B), a vote
on it (the names revealed), and the leaderboard beside each system's corpus BLEU.

A battle runs through the app's one request pipeline (`translation.translate_with_settings`: the same admission,
turns, budget and decoding as a translation, with the settings the page starts with), after its source (a signed-in
account, else the network) has drawn on its battle rate (`battles.BattleRate`); it is issued to the visitor's session
only when both systems translated, so a battle in which a system failed cannot be voted on; the vote stores how each
system decoded, as its plan resolved it (`decoded_with`). A vote is checked and stored by the arena's own rules
(`battles.cast_vote`: single use, in time, the battle's own session, at a person's pace, an account's daily
allowance) in the vote store; one the database cannot take now keeps its battle open and says so in one line.

Who counts as signed in is the arena's to decide (`Arena.accounts`): only where the app's sign-in is a real OAuth app
(`sign_in.py`) is a visitor's account an account; otherwise a vote counts for its network whatever profile came with it.
Many addresses are many sources, so where sign-in counts accounts the first board ranks the signed-in accounts' votes
only, and the anonymous votes are ranked on a board of their own below it (they weigh nothing on the first); without
sign-in there is one board, and it says that it rests on anonymous votes and from how many networks.
The leaderboard reads only the votes stored since it last looked (`ratings.Tally`). Every message for the page is one
line and bounded (`page_line`), shown in a text box that renders nothing; a refused choice is named by its kind,
never echoed.
"""

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformer_en_de.decoding.plan import DecodingSettings, decoding_record
from transformer_en_de.markdown import markdown_table

from ..translation import RequestContext, SystemOutput, translate_with_settings
from .battles import (
    DAILY_VOTES,
    Ballot,
    BattleBook,
    BattleRate,
    BattleRefused,
    DailyAllowance,
    VotePace,
    VoteTooSoon,
    cast_vote,
)
from .ratings import (
    ACCOUNT_WEIGHT,
    INTERVAL_SOURCES,
    NETWORK_WEIGHT,
    Tally,
    leaderboard_plot,
    leaderboard_rows,
    order_agreement,
)
from .votes import CHOICES, VoteNotStored, VoteStore

SENTENCES = Path(__file__).with_name("sentences.txt")
NOT_ENOUGH = "The arena needs two systems on the page and only {count} is loaded, so there is no battle: {when}."
LOADING, FAILED_TO_LOAD = "try again when the others have loaded", "the others could not be loaded"
NO_BATTLE = "Start a battle first: there is nothing to vote on."
FAILED = "{count} system(s) could not translate this text, so there is no battle: try another."
CONSENT = (
    "**Before you vote:** the English text, both translations and your vote are stored, with salted hashes of your "
    "page session and of your Hugging Face account if you signed in, else of your network address (never the name or "
    "the address itself), and may be published as a Hugging Face dataset under CC BY 4.0, where the time is rounded "
    "to the hour and the account's or address's hash changes every day."
)
# What a vote counts for, said on the page (the numbers are the rating's, `ratings.py`).
VOTE_RULES_ACCOUNTS = (
    "**What a vote counts for.** Every vote is stored. The leaderboard ranks the votes of visitors signed in with "
    "Hugging Face: each account counts as one person, together at most {account_cap} battles' weight and {daily} "
    "votes a day. Anonymous votes are counted and shown on a board of their own below it (all the anonymous votes "
    "from one network share {network_cap} battles' weight there), and do not move the first board: many addresses "
    "are easy to have, an account is one person."
)
VOTE_RULES_ANONYMOUS = (
    "**What a vote counts for.** Every vote is stored. This page has no sign-in, so the leaderboard rests on anonymous "
    "votes, counted by network: all the votes from one address share {network_cap} battles' weight (a class behind "
    "one address is one voice), and a script with many addresses could still move it."
)
LEADERBOARD_SECONDS = 10.0  # the ratings (a bootstrap over the sources) are fitted again at most this often
PAGE_LINE_CHARACTERS = 300  # the most a message on the page holds


def vote_rules(accounts: bool = False) -> str:
    """What a vote counts for, in one paragraph of Markdown for the page: with sign-in that counts accounts, or
    without."""
    rules = VOTE_RULES_ACCOUNTS if accounts else VOTE_RULES_ANONYMOUS
    return rules.format(account_cap=f"{ACCOUNT_WEIGHT:g}", network_cap=f"{NETWORK_WEIGHT:g}", daily=DAILY_VOTES)


def page_line(text: str, limit: int = PAGE_LINE_CHARACTERS) -> str:
    """`text` as one line of at most `limit` characters (an ellipsis says where it was cut). The page shows it in a
    text box, which renders nothing: no Markdown, no HTML, no link."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def kind_of(value) -> str:
    """What a refused value was, without its content: "nothing", "an empty text", "a text of 102,400 characters",
    "a list"."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return "an empty text" if not value else f"a text of {len(value):,} character{'s' if len(value) != 1 else ''}"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def example_sentences(kind: str) -> list[str]:
    """The arena's offered sentences of one kind ("caption" or "everyday"), written for this app."""
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1] for line in lines if line.startswith(kind + "\t")]


@dataclass(frozen=True)
class Voter:
    """Who asks for a battle or votes: the page's session, the address the request came from (the connection's, or
    the one a trusted proxy names), and the Hub account of a visitor signed in with Hugging Face (None if not)."""

    session: str
    address: str = ""
    account: str | None = None


@dataclass
class Board:
    """One leaderboard: its heading ("" for none), rows best first (`ratings.leaderboard_rows`), the line saying what
    it rests on, and what it says when it has no rows."""

    heading: str
    rows: list[dict]
    line: str
    empty: str = "No votes yet: vote above to be the first."


@dataclass
class _Fit:
    tally: Tally = field(default_factory=Tally)
    rated_up_to: int = -1  # the last vote id the rows were fitted on (-1: never fitted)
    when: float = 0.0
    rows: list[dict] = field(default_factory=list)


class Arena:
    """Battles between the systems on the page, their votes in `store`, and the leaderboard. `accounts`: whether a
    signed-in visitor's account counts as an account (the app's sign-in is a real OAuth app); when it is False every
    vote counts for its network."""

    def __init__(
        self,
        store: VoteStore,
        *,
        book: BattleBook | None = None,
        pace: VotePace | None = None,
        rate: BattleRate | None = None,
        allowance: DailyAllowance | None = None,
        accounts: bool = False,
    ):
        # `is None`, not `or`: an empty book or pace has a length of 0, and would be replaced
        self.store = store
        self.book = BattleBook() if book is None else book
        self.pace = VotePace() if pace is None else pace
        self.rate = BattleRate() if rate is None else rate
        self.allowance = DailyAllowance() if allowance is None else allowance
        self.accounts = accounts
        self.last_id = 0  # the last vote the tallies hold
        # the votes by who cast them: all of them, the signed-in accounts' and the anonymous ones
        self._fits = {"all": _Fit(), "signed_in": _Fit(), "anonymous": _Fit()}
        self._lock = threading.Lock()

    @property
    def tally(self) -> Tally:
        """Every vote's running counts."""
        return self._fits["all"].tally

    def account_of(self, voter: Voter) -> str | None:
        """The account a vote counts for: the voter's, where sign-in counts accounts; else None."""
        return voter.account if self.accounts and voter.account else None

    def source_of(self, voter: Voter) -> str:
        return self.store.source_hash(self.account_of(voter), voter.address)

    def battle(
        self, text, context: RequestContext, settings: DecodingSettings, voter: Voter
    ) -> tuple[str, str, str, str]:
        """(battle_id, translation_a, translation_b, message) of two systems drawn at random from those loaded, both
        decoding with `settings`; with no battle ("", "", "", why in one line) when fewer than two are loaded, the
        source has started too many, or a system failed."""
        loaded = [system for system in context.systems if getattr(system, "translator", system) is not None]
        if len(loaded) < 2:
            loading = any(not getattr(system, "done", True) for system in context.systems)
            when = LOADING if loading else FAILED_TO_LOAD
            return "", "", "", page_line(NOT_ENOUGH.format(count=len(loaded), when=when))
        try:
            self.rate.admit(self.source_of(voter))
        except BattleRefused as refused:
            return "", "", "", page_line(str(refused))
        first, second = (getattr(system, "translator", system) for system in random.sample(loaded, 2))
        # A battle is side work: it takes its turns behind every visitor's translation (scheduler.py).
        pair = RequestContext(
            first, [second], context.scheduler, context.limits, context.session, context.arrived, side=True
        )
        result = translate_with_settings(text, settings, context=pair)
        if result.message:
            return "", "", "", page_line(result.message)
        failed = tuple(output.name for output in result.outputs if output.message or not output.translation)
        if failed:
            return "", "", "", page_line(FAILED.format(count=len(failed)))
        (a, b) = result.outputs
        battle_id = self.book.issue(
            visitor=self.store.visitor_hash(voter.session),
            system_a=a.name,
            system_b=b.name,
            source_text=" ".join(result.sentences),
            translation_a=a.translation,
            translation_b=b.translation,
            decoding_a=decoded_with(a),
            decoding_b=decoded_with(b),
        )
        return battle_id, a.translation, b.translation, "Read both, then vote: which German is better?"

    def vote(self, battle_id, choice, voter: Voter, cast_at: float | None = None) -> tuple[str, str, str]:
        """(system_a, system_b, message): the names revealed once the vote is stored; ("", "", why) if refused.
        `cast_at`: when the vote was sent, on the battle book's clock (default now): a vote that waited in a queue
        was still cast as soon as it was."""
        if not isinstance(battle_id, str) or not battle_id:
            return "", "", NO_BATTLE
        if not isinstance(choice, str) or choice not in CHOICES:
            return "", "", page_line(f"A vote is one of {', '.join(CHOICES)}; this one was {kind_of(choice)}.")
        account = self.account_of(voter)
        ballot = Ballot(
            battle_id[:100],
            self.store.visitor_hash(voter.session),
            choice,
            self.store.source_hash(account, voter.address),
            signed_in=account is not None,
        )
        try:
            battle = cast_vote(
                ballot, book=self.book, pace=self.pace, store=self.store, allowance=self.allowance, cast_at=cast_at
            )
        except (BattleRefused, VoteTooSoon) as error:
            return "", "", page_line(str(error))
        except VoteNotStored as error:
            print(f"arena: a vote was not stored, its battle stays open ({error.__cause__ or error})", flush=True)
            return "", "", page_line(str(error))
        revealed = f"Thank you: your vote ({choice}) is stored. A was {battle.system_a}, B was {battle.system_b}."
        return battle.system_a, battle.system_b, page_line(revealed)

    def boards(self, bleu: dict[str, float]) -> list[Board]:
        """The leaderboards, the one a visitor sees first first: with sign-in counting accounts, the signed-in
        accounts' votes, then the anonymous ones apart; without, one board of every vote. The votes stored since the
        last look are added to the running tallies; a board's ratings are fitted again when it has new votes and
        `LEADERBOARD_SECONDS` have passed (its line says when newer votes are not in it yet)."""
        with self._lock:
            last, counts = self.store.counts_since(self.last_id)
            self._fits["all"].tally.add(counts, last)
            self._fits["signed_in"].tally.add([count for count in counts if count.signed_in], last)
            self._fits["anonymous"].tally.add([count for count in counts if not count.signed_in], last)
            self.last_id = last
            keys = ("signed_in", "anonymous") if self.accounts else ("all",)
            fitted = {key: self._fitted(self._fits[key]) for key in keys}
        boards = []
        for key, (rows, summary, newer) in fitted.items():
            rows = [row | {"bleu": bleu.get(row["system"])} for row in rows]
            line = f"{resting_on(summary, key)} {order_agreement(rows)}"
            if newer > 0:  # a voter who looks at once sees why their vote is not counted yet
                line += (
                    f" {newer:,} newer vote{'s are' if newer != 1 else ' is'} stored; the ratings are fitted again at "
                    f"most every {LEADERBOARD_SECONDS:g} s."
                )
            boards.append(board_of(key, rows, line, self.tally.votes))
        return boards

    def _fitted(self, fit: _Fit) -> tuple[list[dict], dict, int]:
        """(rows, summary, votes stored since the rows were fitted) of one board (the lock held)."""
        stale = fit.rated_up_to != self.last_id and (
            not fit.rows or time.monotonic() - fit.when >= LEADERBOARD_SECONDS
        )  # an empty board is fitted again at once: the first vote shows
        if fit.rated_up_to < 0 or stale:
            fit.rated_up_to, fit.when, fit.rows = self.last_id, time.monotonic(), leaderboard_rows(fit.tally)
        return fit.rows, fit.tally.summary(), self.last_id - fit.rated_up_to

    def leaderboard(self, bleu: dict[str, float]) -> tuple[list[dict], str]:
        """(rows, the line saying what they rest on) of the board a visitor sees first (`boards`)."""
        first = self.boards(bleu)[0]
        return first.rows, first.line


def board_of(key: str, rows: list[dict], line: str, all_votes: int) -> Board:
    """The board of the votes `key` names ("all", "signed_in", "anonymous"), with its heading and empty text."""
    if key == "signed_in":
        empty = "No signed-in votes yet: sign in with Hugging Face above and vote to be the first." + (
            " The anonymous votes are below." if all_votes else ""
        )
        return Board("Signed-in accounts (the leaderboard)", rows, line, empty)
    if key == "anonymous":
        return Board(
            "Anonymous votes, apart (they do not move the leaderboard above)", rows, line, "No anonymous votes yet."
        )
    return Board("", rows, line)


def decoded_with(output: SystemOutput) -> dict:
    """How a system decoded its side of a battle, as its plan resolved it (beams, length penalty, bound, ...): what
    the vote stores beside it."""
    return decoding_record(output.run.plan)


def resting_on(summary: dict, key: str = "all") -> str:
    """What a board's ratings rest on, and which votes weigh less and why, in one or two sentences."""
    plural = lambda count, word: f"{count:,} {word}{'s' if count != 1 else ''}"  # noqa: E731
    if key == "signed_in":
        line = (
            f"These ratings rest on {plural(summary['rated'], 'vote')} of "
            f"{plural(summary['accounts'], 'signed-in account')}."
        )
    elif key == "anonymous":
        line = (
            f"These ratings rest on {plural(summary['rated'], 'anonymous vote')} from "
            f"{plural(summary['anonymous'], 'network')}, each a source; many addresses can move them."
        )
    else:
        line = (
            f"This page has no sign-in: the ratings rest on {plural(summary['rated'], 'vote')} from "
            f"{plural(summary['sources'], 'source')} ({plural(summary['anonymous'], 'anonymous network')}"
            + (f", {plural(summary['accounts'], 'signed-in account')} of an earlier run" if summary["accounts"] else "")
            + "), and many addresses can move them."
        )
    if summary["over_bound"]:
        line += (
            f" {summary['over_bound']:,} votes' worth is beyond their sources' bounds and not counted (an account "
            f"weighs at most {ACCOUNT_WEIGHT:g} battles, an anonymous network {NETWORK_WEIGHT:g})."
        )
    return line


HEADER = ["Rank", "System", "Rating", "95% interval", "Battles", "Won", "Tied", "Lost", "Both bad", "BLEU (test 2016)"]
CAPTION = (
    'Bradley-Terry ratings (ties as half a win; "both bad" counted as a battle, not in the rating); 95% bootstrap '
    f"intervals over the sources, shown once at least {INTERVAL_SOURCES} sources rated a system and differ. Battles, "
    "Won, Tied, Lost and Both bad count this board's stored votes one by one; the ratings weigh each source's votes "
    "down to its bound."
)


def leaderboard_markdown(boards: list[Board], bleu_line: str = "") -> str:
    """The leaderboards as Markdown, the first first: each a table, best first, with what it rests on and each
    system's BLEU (`bleu_line`: the decoding each was scored with)."""
    parts = []
    for board in boards:
        if board.heading:
            parts.append(f"#### {board.heading}")
        if not board.rows:
            parts.append(board.empty)
            continue
        table = [
            [
                row["rank"],
                row["system"],
                f"{row['rating']:.0f}",
                "-" if row.get("lower") is None else f"{row['lower']:.0f}-{row['upper']:.0f}",
                row["battles"],
                row["wins"],
                row["ties"],
                row["losses"],
                row["both_bad"],
                f"{row['bleu']:.2f}" if row.get("bleu") is not None else "-",
            ]
            for row in board.rows
        ]
        parts.append(markdown_table(HEADER, table, "rl" + "r" * 8))
        parts.append(" ".join(part for part in (CAPTION, bleu_line, board.line) if part))
    return "\n\n".join(parts)


__all__ = [
    "Arena",
    "Board",
    "Voter",
    "vote_rules",
    "CONSENT",
    "example_sentences",
    "leaderboard_markdown",
    "leaderboard_plot",
    "page_line",
]
