"""The arena's requests: a battle (two systems drawn at random translate the same English, shown as A and B), a vote
on it (the names revealed), and the leaderboard beside each system's corpus BLEU.

A battle runs through the app's one request pipeline (`translation.translate_with_settings`: the same admission,
turns, budget and decoding as a translation, with the settings the page starts with), after its source (a signed-in
account, else the network) has drawn on its battle rate (`battles.BattleRate`); it is issued to the visitor's session
only when both systems translated, so a battle in which a system failed cannot be voted on; the vote stores how each
system decoded, as its plan resolved it (`decoded_with`). A vote is checked and stored by the arena's own rules
(`battles.cast_vote`: single use, in time, the battle's own session, at a person's pace, an account's daily
allowance) in the vote store; one the database cannot take now keeps its battle open and says so in one line.
The leaderboard reads only the votes stored since it last looked (`ratings.Tally`).
"""

import random
import threading
import time
from dataclasses import dataclass
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
    NETWORK_WEIGHT,
    READ_SECONDS,
    Tally,
    leaderboard_plot,
    leaderboard_rows,
    order_agreement,
)
from .votes import VoteNotStored, VoteStore

SENTENCES = Path(__file__).with_name("sentences.txt")
NOT_ENOUGH = "The arena needs two systems on the page; only {count} is loaded now. Try again when the others are."
CONSENT = (
    "**Before you vote:** the English text, both translations and your vote are stored, with salted hashes of your "
    "session and of your Hugging Face account if you signed in, else of your network address (never the name or the "
    "address itself), and may be published as a Hugging Face dataset under CC BY 4.0."
)
# What a vote counts for, said on the page (the numbers are the rating's, `ratings.py`).
VOTE_RULES = (
    "**What a vote counts for.** Every vote is stored. Signed in with Hugging Face, your votes count as one person's: "
    "together at most {account_cap} battles' weight in the ratings, and {daily} votes a day. Anonymous votes count by "
    "network: all the anonymous votes from one address share {network_cap} battles' weight (a class behind one "
    "address is one voice: sign in to count as yourself). A vote cast within {read:g} s of the translations appearing "
    "is stored but not rated: nobody reads two translations that fast."
)
LEADERBOARD_SECONDS = 10.0  # the ratings (a bootstrap over the sources) are fitted again at most this often


def vote_rules() -> str:
    """What a vote counts for, in one paragraph of Markdown for the page."""
    return VOTE_RULES.format(account_cap=f"{ACCOUNT_WEIGHT:g}", network_cap=f"{NETWORK_WEIGHT:g}", daily=DAILY_VOTES,
                             read=READ_SECONDS)  # fmt: skip


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


class Arena:
    """Battles between the systems on the page, their votes in `store`, and the leaderboard."""

    def __init__(self, store: VoteStore, *, book: BattleBook | None = None, pace: VotePace | None = None,
                 rate: BattleRate | None = None, allowance: DailyAllowance | None = None):  # fmt: skip
        self.store, self.book, self.pace = store, book or BattleBook(), pace or VotePace()
        self.rate, self.allowance = rate or BattleRate(), allowance or DailyAllowance()
        self.tally = Tally()
        self._board: tuple[int, float, list[dict]] | None = None  # (the tally's last vote id, when, rows)
        self._lock = threading.Lock()

    def source_of(self, voter: Voter) -> str:
        return self.store.source_hash(voter.account, voter.address)

    def battle(self, text, context: RequestContext, settings: DecodingSettings, voter: Voter) -> tuple[str, str, str]:
        """(battle_id, translation_a, translation_b) of two systems drawn at random from those loaded, both decoding
        with `settings`; no battle ("", the reason in one line, "") when fewer than two are or a system failed."""
        loaded = [system for system in context.systems if getattr(system, "translator", system) is not None]
        if len(loaded) < 2:
            return "", NOT_ENOUGH.format(count=len(loaded)), ""
        try:
            self.rate.admit(self.source_of(voter))
        except BattleRefused as refused:
            return "", str(refused), ""
        first, second = (getattr(system, "translator", system) for system in random.sample(loaded, 2))
        # A battle is side work: it takes its turns behind every visitor's translation (scheduler.py).
        pair = RequestContext(first, [second], context.scheduler, context.limits, context.session, context.arrived,
                              side=True)  # fmt: skip
        result = translate_with_settings(text, settings, context=pair)
        if result.message:
            return "", result.message, ""
        failed = tuple(output.name for output in result.outputs if output.message or not output.translation)
        if failed:
            return "", f"{len(failed)} system(s) could not translate this text, so there is no battle: try another.", ""
        (a, b) = result.outputs
        battle_id = self.book.issue(
            visitor=self.store.visitor_hash(voter.session), system_a=a.name, system_b=b.name,
            source_text=" ".join(result.sentences), translation_a=a.translation, translation_b=b.translation,
            decoding_a=decoded_with(a), decoding_b=decoded_with(b),
        )  # fmt: skip
        return battle_id, a.translation, b.translation

    def vote(self, battle_id, choice, voter: Voter, cast_at: float | None = None) -> tuple[str, str, str]:
        """(system_a, system_b, message): the names revealed once the vote is stored; ("", "", why) if refused.
        `cast_at`: when the vote was sent, on the battle book's clock (default now): a vote that waited in a queue
        was still cast as soon as it was."""
        if not isinstance(battle_id, str) or not battle_id:
            return "", "", "Start a battle first: there is nothing to vote on."
        ballot = Ballot(battle_id, self.store.visitor_hash(voter.session), choice, self.source_of(voter),
                        signed_in=voter.account is not None)  # fmt: skip
        try:
            battle = cast_vote(ballot, book=self.book, pace=self.pace, store=self.store, allowance=self.allowance,
                               cast_at=cast_at)  # fmt: skip
        except (BattleRefused, VoteTooSoon, ValueError) as error:
            return "", "", str(error).splitlines()[0]
        except VoteNotStored as error:
            print(f"arena: a vote was not stored, its battle stays open ({error.__cause__ or error})", flush=True)
            return "", "", str(error)
        revealed = f"Thank you: your vote ({choice}) is stored. A was {battle.system_a}, B was {battle.system_b}."
        return battle.system_a, battle.system_b, revealed

    def leaderboard(self, bleu: dict[str, float]) -> tuple[list[dict], str]:
        """(rows, what they rest on and whether the votes' order agrees with BLEU). The votes stored since the last
        look are added to the running tally; the ratings are fitted again when there are new ones and
        `LEADERBOARD_SECONDS` have passed (the line says when newer votes are not in them yet)."""
        with self._lock:
            last, counts = self.store.counts_since(self.tally.last_id, READ_SECONDS)
            self.tally.add(counts, last)
            fitted = self._board is not None and (
                self._board[0] == self.tally.last_id
                or (self._board[2] and time.monotonic() - self._board[1] < LEADERBOARD_SECONDS)
            )  # an empty board is fitted again at once: the first vote shows
            if not fitted:
                self._board = (self.tally.last_id, time.monotonic(), leaderboard_rows(self.tally))
            rated_up_to, _, rows = self._board
            summary = self.tally.summary()
        rows = [row | {"bleu": bleu.get(row["system"])} for row in rows]
        line = f"{resting_on(summary)} {order_agreement(rows)}"
        newer = self.tally.last_id - rated_up_to
        if newer > 0:  # a voter who looks at once sees why their vote is not counted yet
            line += (
                f" {newer:,} newer vote{'s are' if newer != 1 else ' is'} stored; the ratings are fitted again at "
                f"most every {LEADERBOARD_SECONDS:g} s."
            )
        return rows, line


def decoded_with(output: SystemOutput) -> dict:
    """How a system decoded its side of a battle, as its plan resolved it (beams, length penalty, bound, ...): what
    the vote stores beside it."""
    return decoding_record(output.run.plan.generation_config, output.run.plan.settings)


def resting_on(summary: dict) -> str:
    """What the ratings rest on, and what they set aside and why, in one or two sentences."""
    plural = lambda count, word: f"{count:,} {word}{'s' if count != 1 else ''}"  # noqa: E731
    line = (
        f"The ratings rest on {plural(summary['rated'], 'vote')} from {plural(summary['sources'], 'source')} "
        f"({plural(summary['accounts'], 'signed-in account')}, {plural(summary['anonymous'], 'anonymous network')})."
    )
    set_aside = []
    if summary["over_bound"]:
        set_aside.append(f"{summary['over_bound']:,} beyond their source's bound (an account weighs at most "
                         f"{ACCOUNT_WEIGHT:g} battles, an anonymous network {NETWORK_WEIGHT:g})")  # fmt: skip
    if summary["too_quick"]:
        set_aside.append(f"{summary['too_quick']:,} cast within {READ_SECONDS:g} s of their battle")
    if set_aside:
        line += f" Stored but set aside: {'; '.join(set_aside)}."
    return line


def leaderboard_markdown(rows: list[dict], agreement: str) -> str:
    """The leaderboard as a Markdown table, best first, with the votes it rests on and each system's BLEU."""
    if not rows:
        return "No votes yet: be the first (the Arena tab)."
    header = ["Rank", "System", "Rating", "95% interval", "Battles", "Wins", "Ties", "Losses", "Both bad",
              "BLEU (test 2016)"]  # fmt: skip
    table = [
        [row["rank"], row["system"], f"{row['rating']:.0f}", f"{row['lower']:.0f}-{row['upper']:.0f}", row["battles"],
         row["wins"], row["ties"], row["losses"], row["both_bad"],
         f"{row['bleu']:.2f}" if row.get("bleu") is not None else "-"]
        for row in rows
    ]  # fmt: skip
    return markdown_table(header, table, "rl" + "r" * 8) + (
        "\n\nBradley-Terry ratings (ties as half a win; \"both bad\" counted as a battle, not in the rating), 95% "
        f"bootstrap intervals over the sources. {agreement}"
    )


__all__ = ["Arena", "Voter", "vote_rules", "CONSENT", "example_sentences", "leaderboard_markdown", "leaderboard_plot"]
