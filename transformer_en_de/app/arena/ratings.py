"""The arena's leaderboard: Bradley–Terry ratings from the votes, with bootstrap intervals, beside BLEU.

Bradley–Terry (1952) gives each system a strength p, and system i beats system j with probability p_i / (p_i + p_j).
The strengths are fitted by Zermelo's iteration, the minorization–maximization algorithm of Hunter (2004): p_i <-
W_i / sum_j n_ij / (p_i + p_j), with W_i i's wins and n_ij the games of i and j. They are reported on Elo's scale,
1000 + 400 log10 p, with the mean rating anchored at 1000, so 400 points are odds of 10 to 1.

What a vote counts for: "A" or "B" is a win and a loss, a tie half a win to each side. "both bad" says nothing about
which system is better, so it is left out of the ratings; it still counts as a battle of both systems (`both_bad`).
The 95% interval is the 2.5th to 97.5th percentile of the ratings refitted on votes resampled with replacement.
"""

from collections.abc import Iterable, Mapping

import numpy as np
from matplotlib.figure import Figure

from .votes import Vote

BASE_RATING, SCALE = 1000.0, 400.0
# Every pair of systems is given one virtual tied game (half a win each): a system that never wins, or two systems
# that never met, still get a finite rating, pulled towards the mean by one game's worth of evidence.
PRIOR_GAMES = 1.0
SCORE_OF_A = {"A": 1.0, "B": 0.0, "tie": 0.5}
# No one source decides the board: a signed-in account's rated votes weigh together at most ACCOUNT_WEIGHT battles,
# all the anonymous votes from one network address at most NETWORK_WEIGHT; a vote cast under READ_SECONDS after its
# battle was shown is stored and set aside (a person reads two translations slower than that).
ACCOUNT_WEIGHT, NETWORK_WEIGHT = 20.0, 10.0
READ_SECONDS = 4.0


def fit_ratings(wins: np.ndarray, iterations: int = 10_000, tolerance: float = 1e-10) -> np.ndarray:
    """Bradley–Terry ratings from `wins[..., i, j]` (i's wins over j, ties as halves): (..., k) on the Elo scale."""
    wins = wins + PRIOR_GAMES / 2 * (1 - np.eye(wins.shape[-1]))
    games = wins + np.swapaxes(wins, -1, -2)  # (..., k, k), zero on the diagonal
    total_wins = wins.sum(-1)  # (..., k)
    log_strength = np.zeros(wins.shape[:-1])
    for _ in range(iterations):
        strength = np.exp(log_strength)
        denominator = (games / (strength[..., :, None] + strength[..., None, :])).sum(-1)
        updated = np.log(total_wins / denominator)
        updated -= updated.mean(-1, keepdims=True)  # strengths are defined up to a factor: fix their geometric mean
        converged = np.abs(updated - log_strength).max() < tolerance
        log_strength = updated
        if converged:
            break
    return BASE_RATING + SCALE * log_strength / np.log(10)


def _win_matrix(first: np.ndarray, second: np.ndarray, score: np.ndarray, systems: int) -> np.ndarray:
    """wins[i, j] from rated votes: `first` scored `score` against `second`, and `second` the rest."""
    wins = np.bincount(first * systems + second, weights=score, minlength=systems * systems)
    wins += np.bincount(second * systems + first, weights=1 - score, minlength=systems * systems)
    return wins.reshape(systems, systems)


def leaderboard_rows(
    votes: Iterable[Vote], bleu: Mapping[str, float] | None = None, rounds: int = 200, seed: int = 0
) -> list[dict]:
    """One row per system, best first: rank, system, rating, lower, upper (the 95% interval), battles, wins, ties,
    losses, both_bad, votes (those the rating rests on) and bleu (None where `bleu` has no score)."""
    votes = list(votes)
    systems = sorted({vote.system_a for vote in votes} | {vote.system_b for vote in votes})
    index = {system: number for number, system in enumerate(systems)}
    # A system against itself says nothing about it: such a vote counts as its battle, not in its rating.
    rated = [vote for vote in votes if vote.choice in SCORE_OF_A and vote.system_a != vote.system_b]
    first = np.array([index[vote.system_a] for vote in rated], dtype=int)
    second = np.array([index[vote.system_b] for vote in rated], dtype=int)
    score = np.array([SCORE_OF_A[vote.choice] for vote in rated], dtype=float)
    k = len(systems)

    ratings = fit_ratings(_win_matrix(first, second, score, k)) if k > 1 else np.full(k, BASE_RATING)
    lower, upper = ratings, ratings
    if k > 1 and rated:
        rng = np.random.default_rng(seed)
        resampled = [rng.integers(0, len(rated), len(rated)) for _ in range(rounds)]
        boot = fit_ratings(np.stack([_win_matrix(first[take], second[take], score[take], k) for take in resampled]))
        lower, upper = np.percentile(boot, [2.5, 97.5], axis=0)

    rows = []
    for number, system in enumerate(systems):
        row = dict(system=system, rating=float(ratings[number]), lower=float(lower[number]),
                   upper=float(upper[number]), battles=0, wins=0, ties=0, losses=0, both_bad=0)  # fmt: skip
        for vote in votes:
            if system not in (vote.system_a, vote.system_b):
                continue
            row["battles"] += 1
            own = "A" if vote.system_a == system else "B"
            outcome = {own: "wins", "tie": "ties", "both bad": "both_bad"}.get(vote.choice, "losses")
            row[outcome] += 1
        row["votes"] = row["wins"] + row["ties"] + row["losses"]
        row["bleu"] = (bleu or {}).get(system)
        rows.append(row)
    rows.sort(key=lambda row: (-row["rating"], row["system"]))
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]


def kendall_tau(rows: list[dict]) -> float | None:
    """Kendall's tau between the rating order and the BLEU order of the systems that have both (None under 2)."""
    scored = [(row["rating"], row["bleu"]) for row in rows if row["bleu"] is not None]
    pairs = [(a, b) for number, a in enumerate(scored) for b in scored[number + 1:]]
    if not pairs:
        return None
    signs = [np.sign(a[0] - b[0]) * np.sign(a[1] - b[1]) for a, b in pairs]
    return float(np.mean(signs))


def order_agreement(rows: list[dict]) -> str:
    """One line: whether the votes and BLEU put the systems in the same order."""
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
    spread = [ratings - [row["lower"] for row in rows], [row["upper"] for row in rows] - ratings]
    axes.errorbar(ratings, positions, xerr=spread, fmt="o", capsize=4)
    labels = [f"{row['system']} ({row['battles']} battle{'s' if row['battles'] != 1 else ''})" for row in rows]
    axes.set_yticks(positions, labels=labels)
    axes.axvline(BASE_RATING, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("rating (Bradley–Terry on the Elo scale, 95% bootstrap interval)")
    axes.set_ylim(-0.6, len(rows) - 0.4)
    return figure
