"""The arena's requests: a battle (two systems drawn at random translate the same English, shown as A and B), a vote
on it (the names revealed), and the leaderboard beside each system's corpus BLEU.

A battle runs through the app's one request pipeline (`translation.translate_text`: the same admission, turns,
budget and decoding as a translation); it is issued to the visitor's session only when both systems translated, so a
battle in which a system failed cannot be voted on. A vote is checked and stored by the arena's own rules
(`battles.cast_vote`: single use, in time, the battle's own session, at a person's pace) in the vote store.
"""

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from transformer_en_de.markdown import markdown_table

from ..translation import RequestContext, translate_text
from .battles import DAILY_VOTES, BattleBook, BattleRefused, VotePace, VoteTooSoon, cast_vote
from .ratings import ACCOUNT_WEIGHT, NETWORK_WEIGHT, READ_SECONDS, leaderboard_plot, leaderboard_rows, order_agreement
from .votes import VoteStore

SENTENCES = Path(__file__).with_name("sentences.txt")
NOT_ENOUGH = "The arena needs two systems on the page; only {count} is loaded now. Try again when the others are."
CONSENT = (
    "**Before you vote:** the English text, both translations and your vote are stored, with a salted hash of your "
    "session (never your address), and may be published as a Hugging Face dataset under CC BY 4.0."
)
# What a vote counts for, said on the page (the numbers are the rating's, `ratings.py`).
VOTE_RULES = (
    "**What a vote counts for.** Every vote is stored. Signed in with Hugging Face, your votes count as one person's: "
    "together at most {account_cap} battles' weight in the ratings, and {daily} votes a day. Anonymous votes count by "
    "network: all the anonymous votes from one address share {network_cap} battles' weight (a class behind one "
    "address is one voice: sign in to count as yourself). A vote cast within {read:g} s of the translations appearing "
    "is stored but not rated: nobody reads two translations that fast."
)
LEADERBOARD_SECONDS = 30.0  # the leaderboard (a bootstrap of every vote) is computed again at most this often


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

    def __init__(self, store: VoteStore, *, book: BattleBook | None = None, pace: VotePace | None = None):
        self.store, self.book, self.pace = store, book or BattleBook(), pace or VotePace()
        self._board: tuple[int, float, tuple] | None = None  # (votes, when, (rows, table, agreement))
        self._lock = threading.Lock()

    def battle(self, text, context: RequestContext, decoding: tuple[str, int, int], voter: Voter) -> tuple[str, str, str]:
        """(battle_id, translation_a, translation_b) of two systems drawn at random from those loaded; no battle
        ("", the reason in one line, "") when fewer than two are or a system failed."""
        loaded = [system for system in context.systems if getattr(system, "translator", system) is not None]
        if len(loaded) < 2:
            return "", NOT_ENOUGH.format(count=len(loaded)), ""
        first, second = (getattr(system, "translator", system) for system in random.sample(loaded, 2))
        pair = RequestContext(first, [second], context.scheduler, context.limits, context.session, context.arrived)
        result = translate_text(text, *decoding, "", context=pair)
        if result.message:
            return "", result.message, ""
        failed = tuple(output.name for output in result.outputs if output.message or not output.translation)
        if failed:
            return "", f"{len(failed)} system(s) could not translate this text, so there is no battle: try another.", ""
        (a, b) = result.outputs
        record = {"decoding": decoding[0], "num_beams": decoding[1], "max_new_tokens": decoding[2]}
        battle_id = self.book.issue(
            visitor=self.store.visitor_hash(voter.session), system_a=a.name, system_b=b.name,
            source_text=" ".join(result.sentences), translation_a=a.translation, translation_b=b.translation,
            decoding_a=record, decoding_b=record,
        )  # fmt: skip
        return battle_id, a.translation, b.translation

    def vote(self, battle_id, choice, voter: Voter) -> tuple[str, str, str]:
        """(system_a, system_b, message): the names revealed once the vote is stored; ("", "", why) if refused."""
        if not isinstance(battle_id, str) or not battle_id:
            return "", "", "Start a battle first: there is nothing to vote on."
        try:
            battle = cast_vote(
                battle_id, self.store.visitor_hash(voter.session), choice, book=self.book, pace=self.pace,
                store=self.store,
            )  # fmt: skip
        except (BattleRefused, VoteTooSoon, ValueError) as error:
            return "", "", str(error).splitlines()[0]
        revealed = f"Thank you: your vote ({choice}) is stored. A was {battle.system_a}, B was {battle.system_b}."
        return battle.system_a, battle.system_b, revealed

    def leaderboard(self, bleu: dict[str, float]) -> tuple[list[dict], str]:
        """(rows, the line saying whether the votes' order agrees with BLEU's), computed again only when there are new
        votes and `LEADERBOARD_SECONDS` have passed; the line says so when votes came since."""
        votes = self.store.count()
        with self._lock:
            fresh = self._board is not None and (
                self._board[0] == votes or time.monotonic() - self._board[1] < LEADERBOARD_SECONDS
            )
            if not fresh:
                rows = leaderboard_rows(self.store.all_votes(), bleu)
                self._board = (votes, time.monotonic(), (rows, order_agreement(rows)))
            rated, _, (rows, agreement) = self._board
        if votes > rated:  # a voter who looks at once sees why their vote is not counted yet
            agreement += (
                f" {votes - rated:,} newer vote{'s are' if votes - rated != 1 else ' is'} stored; the ratings are "
                f"computed again at most every {LEADERBOARD_SECONDS:g} s."
            )
        return rows, agreement


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
    votes = sum(row["battles"] for row in rows) // 2
    return markdown_table(header, table, "rl" + "r" * 8) + (
        f"\n\nBradley-Terry ratings from {votes:,} vote{'s' if votes != 1 else ''} (ties as half a win; \"both bad\" "
        f"counted as a battle, not in the rating), 95% bootstrap intervals. {agreement}"
    )


__all__ = ["Arena", "Voter", "vote_rules", "CONSENT", "example_sentences", "leaderboard_markdown", "leaderboard_plot"]
