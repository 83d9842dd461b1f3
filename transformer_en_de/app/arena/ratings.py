"""The arena's leaderboard: Bradley–Terry (1952) ratings, fitted by Zermelo's iteration (Hunter 2004's MM), on Elo's
scale (1000 + 400 log10 p, mean 1000), with 95% intervals from a cluster bootstrap over the sources, beside BLEU. A tie
is half a win to each side; "both bad" a battle, not in the rating. A source (an account, else a network) weighs at
most `ACCOUNT_WEIGHT` or `NETWORK_WEIGHT` battles: no one source decides the board. The counts run (`Tally`)."""

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

from .votes import Vote, VoteCount

BASE_RATING, SCALE = 1000.0, 400.0
# Every pair of systems is given one virtual tied game (half a win each): a system that never wins, or two systems
# that never met, still get a finite rating, pulled towards the mean by one game's worth of evidence.
PRIOR_GAMES = 1.0
SCORE_OF_A = {"A": 1.0, "B": 0.0, "tie": 0.5}
# The most battles' weight a signed-in account's rated votes have together, and an anonymous network's.
ACCOUNT_WEIGHT, NETWORK_WEIGHT = 20.0, 10.0
INTERVAL_SOURCES = 5  # a system's interval is shown once this many sources rated it
BOOTSTRAP_ROUNDS = 200
OUTCOMES = ("battles", "wins", "ties", "losses", "both_bad")


def fit_ratings(wins: np.ndarray) -> np.ndarray:
    """Bradley–Terry ratings from `wins[..., i, j]` (i's wins over j, ties as halves): (..., k) on the Elo scale."""
    wins = wins + PRIOR_GAMES / 2 * (1 - np.eye(wins.shape[-1]))
    games = wins + np.swapaxes(wins, -1, -2)  # (..., k, k), zero on the diagonal
    total_wins, log_strength = wins.sum(-1), np.zeros(wins.shape[:-1])  # (..., k) each
    for _ in range(10_000):
        strength = np.exp(log_strength)[..., None]  # (..., k, 1)
        updated = np.log(total_wins / (games / (strength + np.swapaxes(strength, -1, -2))).sum(-1))
        updated -= updated.mean(-1, keepdims=True)  # strengths are defined up to a factor: fix their geometric mean
        log_strength, change = updated, np.abs(updated - log_strength).max()
        if change < 1e-10:
            break
    return BASE_RATING + SCALE * log_strength / np.log(10)


@dataclass
class SourceCount:
    signed_in: bool
    rated: int = 0
    wins: Counter = field(default_factory=Counter)  # (winner, loser) -> wins

    @property
    def bound(self) -> float:
        return ACCOUNT_WEIGHT if self.signed_in else NETWORK_WEIGHT

    @property
    def weight(self) -> float:  # each vote's: all of them together at most `bound` battles
        return min(1.0, self.bound / self.rated) if self.rated else 0.0


class Tally:
    """Running counts of what `VoteStore.counts_since` gives: each system's outcomes, each source's rated votes."""

    def __init__(self):
        self.last_id = 0
        self.votes = 0
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.sources: dict[str, SourceCount] = {}
        self.fitted_rows, self.fitted_up_to, self.fitted_at = [], -1, 0.0  # `rows`: the last fit (-1: none yet)

    def add(self, counts: Iterable[VoteCount], last_id: int | None = None) -> None:
        for vote in counts:
            self.votes += vote.count
            for system in {vote.system_a, vote.system_b}:
                own = "A" if vote.system_a == system else "B"
                outcome = {own: "wins", "tie": "ties", "both bad": "both_bad"}.get(vote.choice, "losses")
                self.outcomes[system]["battles"] += vote.count
                self.outcomes[system][outcome] += vote.count
            if vote.choice in SCORE_OF_A and vote.system_a != vote.system_b:  # "both bad" and self-battles: unrated
                source = self.sources.setdefault(vote.source, SourceCount(signed_in=vote.signed_in))
                score = SCORE_OF_A[vote.choice]
                source.rated += vote.count
                source.wins[vote.system_a, vote.system_b] += score * vote.count
                source.wins[vote.system_b, vote.system_a] += (1 - score) * vote.count
        if last_id is not None:
            self.last_id = last_id

    def rows(self, fresh_seconds: float) -> tuple[list[dict], int]:
        """(leaderboard rows, votes added since they were fitted), fitted again at most every `fresh_seconds` (at once
        while there are no rows: the first vote shows)."""
        stale = not self.fitted_rows or time.monotonic() - self.fitted_at >= fresh_seconds
        if self.fitted_up_to < 0 or (self.fitted_up_to != self.last_id and stale):
            self.fitted_rows, self.fitted_up_to, self.fitted_at = leaderboard_rows(self), self.last_id, time.monotonic()
        return self.fitted_rows, self.last_id - self.fitted_up_to

    def summary(self) -> dict:  # what the ratings rest on
        accounts = sum(source.signed_in for source in self.sources.values())
        over_bound = sum(max(0.0, source.rated - source.bound) for source in self.sources.values())
        return dict(
            votes=self.votes,
            rated=sum(source.rated for source in self.sources.values()),
            sources=len(self.sources),
            accounts=accounts,
            anonymous=len(self.sources) - accounts,
            over_bound=round(over_bound),
        )


def tally_of(votes: Iterable[Vote]) -> Tally:  # as the store's `COUNTS` counts them
    tally = Tally()
    tally.add(
        VoteCount(v.system_a, v.system_b, v.choice, v.source or f"session:{v.visitor}", v.signed_in) for v in votes
    )
    return tally


def leaderboard_rows(votes: Iterable[Vote] | Tally, bleu: Mapping | None = None) -> list[dict]:
    """One row per system, best first: rank, system, rating, lower and upper (the 95% interval, or None), battles,
    wins, ties, losses, both_bad (every vote), votes (its rated ones), sources (that rated it) and bleu (or None)."""
    tally = votes if isinstance(votes, Tally) else tally_of(votes)
    systems = sorted(tally.outcomes)
    index, k = {system: number for number, system in enumerate(systems)}, len(systems)
    ordered = [tally.sources[key] for key in sorted(tally.sources)]  # one order, however the votes arrived
    wins = np.zeros((len(ordered), k, k))  # each source's win matrix
    for number, source in enumerate(ordered):
        for (winner, loser), count in source.wins.items():
            wins[number, index[winner], index[loser]] = count
    weights = np.array([source.weight for source in ordered])
    ratings = fit_ratings(np.tensordot(weights, wins, axes=1)) if k > 1 else np.full(k, BASE_RATING)
    lower, upper = ratings, ratings
    if k > 1 and len(weights):
        rng = np.random.default_rng(0)  # the same votes, the same intervals
        draws = rng.multinomial(len(weights), np.full(len(weights), 1 / len(weights)), size=BOOTSTRAP_ROUNDS)
        boot = fit_ratings(np.tensordot(draws * weights, wins, axes=1))
        lower, upper = np.percentile(boot, [2.5, 97.5], axis=0)

    rows = []
    for number, system in enumerate(systems):
        counts = {name: tally.outcomes[system][name] for name in OUTCOMES}
        sources = sum(any(system in pair for pair in source.wins) for source in tally.sources.values())
        # a zero-width interval (every source voted alike) would claim a certainty the votes do not have
        interval = sources >= INTERVAL_SOURCES and k > 1 and upper[number] - lower[number] >= 1
        low, high = (float(lower[number]), float(upper[number])) if interval else (None, None)
        rated = counts["wins"] + counts["ties"] + counts["losses"]
        row = dict(system=system, rating=float(ratings[number]), lower=low, upper=high)
        rows.append(row | counts | dict(sources=sources, votes=rated, bleu=(bleu or {}).get(system)))
    rows.sort(key=lambda row: (-row["rating"], row["system"]))
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]


def kendall_tau(rows: list[dict]) -> float | None:
    """Kendall's tau between the rating order and the BLEU order of the systems that have both (None under 2)."""
    scored = [(row["rating"], row["bleu"]) for row in rows if row["bleu"] is not None]
    pairs = [(a, b) for number, a in enumerate(scored) for b in scored[number + 1 :]]
    return float(np.mean([np.sign(a[0] - b[0]) * np.sign(a[1] - b[1]) for a, b in pairs])) if pairs else None


def order_agreement(rows: list[dict]) -> str:
    tau = kendall_tau(rows)
    if tau is None:
        return "Fewer than two systems have both a rating and a BLEU score: nothing to compare."
    count = sum(row["bleu"] is not None for row in rows)
    if tau == 1.0:
        return f"The votes and BLEU rank the {count} systems in the same order."
    return f"The votes and BLEU rank the {count} systems differently (Kendall's tau {tau:.2f})."


def leaderboard_plot(rows: list[dict]) -> Figure:
    """The ratings as dots with their 95% intervals, best at the top."""
    figure = Figure(figsize=(6.4, 1.2 + 0.45 * max(len(rows), 1)), layout="constrained")
    axes = figure.subplots()
    if not rows:
        axes.text(0.5, 0.5, "No votes yet.", ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
        return figure
    positions = np.arange(len(rows))[::-1]  # rows come best first; the best goes on top
    ratings = np.array([row["rating"] for row in rows])
    # a system without an interval (too few sources) is a dot alone
    lower = np.array([row["rating"] if row.get("lower") is None else row["lower"] for row in rows])
    upper = np.array([row["rating"] if row.get("upper") is None else row["upper"] for row in rows])
    axes.errorbar(ratings, positions, xerr=[ratings - lower, upper - ratings], fmt="o", capsize=4)
    labels = [f"{row['system']} ({row['battles']} battle{'s' if row['battles'] != 1 else ''})" for row in rows]
    axes.set_yticks(positions, labels=labels)
    axes.axvline(BASE_RATING, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel(f"rating (Bradley–Terry on the Elo scale; 95% bootstrap interval from {INTERVAL_SOURCES} sources)")
    axes.set_ylim(-0.6, len(rows) - 0.4)
    return figure
