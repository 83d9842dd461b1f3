"""The arena's leaderboard: Bradley–Terry ratings, their bootstrap intervals, what ties and "both bad" count for,
the agreement with BLEU, and the plot."""

import itertools

import numpy as np
import pytest

from transformer_en_de.app.arena.ratings import (
    ACCOUNT_WEIGHT,
    BASE_RATING,
    INTERVAL_SOURCES,
    NETWORK_WEIGHT,
    Tally,
    kendall_tau,
    leaderboard_plot,
    leaderboard_rows,
    order_agreement,
    tally_of,
)
from transformer_en_de.app.arena.votes import Vote, VoteStore

_ids = itertools.count()


def battles(
    system_a: str,
    system_b: str,
    source: str | None = None,
    signed_in: bool = False,
    seconds: float | None = 10.0,
    **choices: int,
) -> list[Vote]:
    """`n` votes of each choice (A=, B=, tie=, both_bad=) in battles of system_a (as A) against system_b, each from a
    source of its own unless `source` names one, each cast `seconds` after its battle was shown."""
    votes = []
    for choice, count in choices.items():
        for _ in range(count):
            number = next(_ids)
            votes.append(
                Vote(
                    battle_id=f"battle-{number}",
                    system_a=system_a,
                    system_b=system_b,
                    source_text="A dog.",
                    translation_a="a",
                    translation_b="b",
                    choice=choice.replace("_", " "),
                    visitor="v",
                    source=source or f"source-{number}",
                    signed_in=signed_in,
                    seconds_to_vote=seconds,
                )
            )
    return votes


def by_system(rows: list[dict]) -> dict[str, dict]:
    return {row["system"]: row for row in rows}


def test_the_system_that_wins_most_ranks_first():
    votes = battles("ours", "marian", A=14, B=6) + battles("marian", "baseline", A=15, B=5)
    votes += battles("baseline", "ours", A=3, B=17)

    rows = leaderboard_rows(votes)

    assert [row["system"] for row in rows] == ["ours", "marian", "baseline"]
    assert [row["rank"] for row in rows] == [1, 2, 3]
    assert np.mean([row["rating"] for row in rows]) == pytest.approx(BASE_RATING)
    ours = by_system(rows)["ours"]
    assert (ours["battles"], ours["wins"], ours["losses"], ours["ties"], ours["votes"]) == (40, 31, 9, 0, 40)


def test_symmetric_results_give_equal_ratings():
    votes = battles("ours", "marian", A=10, B=10, tie=4) + battles("marian", "ours", A=3, B=3)

    ours, marian = leaderboard_rows(votes)

    assert ours["rating"] == pytest.approx(marian["rating"]) == pytest.approx(BASE_RATING)


def test_a_tie_is_half_a_win_to_each_side():
    with_ties = by_system(leaderboard_rows(battles("ours", "marian", A=10, tie=10)))
    as_halves = by_system(leaderboard_rows(battles("ours", "marian", A=15, B=5)))

    assert with_ties["ours"]["rating"] == pytest.approx(as_halves["ours"]["rating"])
    assert with_ties["ours"]["ties"] == with_ties["marian"]["ties"] == 10


def test_both_bad_counts_as_a_battle_but_not_in_the_rating():
    plain = by_system(leaderboard_rows(battles("ours", "marian", A=12, B=8)))
    with_both_bad = by_system(leaderboard_rows(battles("ours", "marian", A=12, B=8, both_bad=30)))

    assert with_both_bad["ours"]["rating"] == pytest.approx(plain["ours"]["rating"])
    assert (with_both_bad["ours"]["battles"], with_both_bad["ours"]["both_bad"], with_both_bad["ours"]["votes"]) == (
        50,
        30,
        20,
    )


def test_intervals_contain_the_rating_and_shrink_with_more_votes():
    few = by_system(leaderboard_rows(battles("ours", "marian", A=6, B=4)))
    many = by_system(leaderboard_rows(battles("ours", "marian", A=600, B=400)))

    for rows in (few, many):
        for row in rows.values():
            assert row["lower"] <= row["rating"] <= row["upper"]
            assert row["lower"] < row["upper"]
    assert many["ours"]["upper"] - many["ours"]["lower"] < (few["ours"]["upper"] - few["ours"]["lower"]) / 5


def test_a_system_that_never_wins_has_a_finite_rating():
    rows = by_system(leaderboard_rows(battles("ours", "broken", A=50) + battles("marian", "broken", A=50)))

    assert all(np.isfinite([row["rating"], row["lower"], row["upper"]]).all() for row in rows.values())
    assert rows["broken"]["rating"] < rows["ours"]["rating"] - 400  # far below, yet finite


def test_no_votes_and_only_both_bad():
    assert leaderboard_rows([]) == []
    rows = leaderboard_rows(battles("ours", "marian", both_bad=3))
    summary = [(row["rating"], row["lower"], row["upper"], row["battles"]) for row in rows]
    assert summary == [(BASE_RATING, None, None, 3)] * 2  # no rated vote: no interval


def test_the_bootstrap_is_seeded():
    votes = battles("ours", "marian", A=7, B=5, tie=2) + battles("marian", "baseline", A=4, B=4)
    assert leaderboard_rows(votes) == leaderboard_rows(votes)


def test_agreement_with_bleu():
    votes = battles("ours", "marian", A=14, B=6) + battles("marian", "baseline", A=15, B=5)

    same = leaderboard_rows(votes, bleu={"ours": 42.3, "marian": 40.1, "baseline": 20.0})
    assert by_system(same)["ours"]["bleu"] == 42.3
    assert kendall_tau(same) == 1.0
    assert order_agreement(same) == "The votes and BLEU rank the 3 systems in the same order."

    swapped = leaderboard_rows(votes, bleu={"ours": 30.0, "marian": 40.1})  # baseline has no BLEU: left out
    assert by_system(swapped)["baseline"]["bleu"] is None
    assert kendall_tau(swapped) == -1.0
    assert "differently" in order_agreement(swapped)

    assert kendall_tau(leaderboard_rows(votes, bleu={"ours": 1.0})) is None
    assert "nothing to compare" in order_agreement(leaderboard_rows(votes))


def test_the_plot_has_one_point_per_system():
    votes = battles("ours", "marian", A=14, B=6) + battles("marian", "baseline", A=15, B=5)
    rows = leaderboard_rows(votes)

    figure = leaderboard_plot(rows)

    (axes,) = figure.axes
    (errorbars,) = axes.containers
    points = errorbars.lines[0]
    assert list(points.get_xdata()) == [row["rating"] for row in rows]
    labels = dict(zip(axes.get_yticks(), [label.get_text() for label in axes.get_yticklabels()], strict=True))
    top_down = [labels[position] for position in sorted(points.get_ydata(), reverse=True)]
    assert top_down == ["ours (20 battles)", "marian (40 battles)", "baseline (20 battles)"]  # the best on top
    assert leaderboard_plot([]).axes[0].texts[0].get_text() == "No votes yet."


def test_one_network_s_flood_is_bounded_and_four_signed_in_voters_decide_the_order():
    # A script's sessions behind one address vote 2,800 times for a system that writes nonsense, each vote made to look
    # read (5 s after its battle); four people, signed in, vote 20 times each for ours.
    flood = battles("gibberish", "ours", source="network-script", A=2800)
    honest = [
        vote
        for number in range(4)
        for vote in battles("ours", "gibberish", source=f"account-{number}", signed_in=True, A=20)
    ]
    tally = tally_of(flood + honest)

    rows = leaderboard_rows(tally)

    assert [row["system"] for row in rows] == ["ours", "gibberish"]
    assert by_system(rows)["gibberish"]["wins"] == 2800  # every vote still counted as a battle: none thrown away
    summary = tally.summary()
    assert (summary["sources"], summary["accounts"], summary["anonymous"]) == (5, 4, 1)
    assert summary["over_bound"] == 2800 - NETWORK_WEIGHT
    assert summary["votes"] == summary["rated"] == 2880


def test_unbounded_the_same_flood_would_have_decided_the_order():
    # The bound is what decides: with every vote from a source of its own, the flood wins.
    flood = battles("gibberish", "ours", A=2800)
    honest = battles("ours", "gibberish", A=80)
    assert leaderboard_rows(flood + honest)[0]["system"] == "gibberish"


def test_an_interval_is_given_only_from_enough_sources():
    # One vote, then four sources: a bootstrap over so few sources cannot say how far a rating could be off.
    one = leaderboard_rows(battles("ours", "marian", source="net-1", A=1))
    assert all(row["lower"] is None and row["upper"] is None for row in one)
    few = leaderboard_rows(battles("ours", "marian", A=INTERVAL_SOURCES - 1))
    assert all(row["lower"] is None and row["sources"] == INTERVAL_SOURCES - 1 for row in few)
    alike = leaderboard_rows(battles("ours", "marian", A=INTERVAL_SOURCES + 2))  # enough sources, all voting alike
    assert all(row["lower"] is None for row in alike)  # a zero-width interval would claim certainty
    enough = leaderboard_rows(battles("ours", "marian", A=INTERVAL_SOURCES + 3, B=2))
    for row in enough:
        assert row["sources"] == INTERVAL_SOURCES + 5
        assert row["lower"] < row["rating"] < row["upper"]
    # The plot draws a dot alone where there is no interval.
    errorbars = leaderboard_plot(one).axes[0].containers[0]
    assert errorbars.lines[0].get_xdata().tolist() == [row["rating"] for row in one]


def test_a_source_s_votes_share_its_bound_an_account_s_larger_than_a_network_s():
    network = tally_of(battles("ours", "marian", source="network-1", A=30))
    account = tally_of(battles("ours", "marian", source="account-1", signed_in=True, A=30))
    assert network.sources["network-1"].weight == pytest.approx(NETWORK_WEIGHT / 30)
    assert account.sources["account-1"].weight == pytest.approx(ACCOUNT_WEIGHT / 30)
    few = tally_of(battles("ours", "marian", source="network-1", A=4))
    assert few.sources["network-1"].weight == 1.0  # under the bound every vote counts whole


def test_the_tally_of_a_store_read_as_votes_come_gives_what_one_count_of_them_gives(tmp_path):
    votes = battles("ours", "marian", A=14, B=6) + battles("marian", "baseline", source="net", A=15, B=5, both_bad=2)
    votes += battles("ours", "baseline", source="net", seconds=1.0, B=4) + battles("ours", "marian", seconds=None, A=3)
    store, running = VoteStore(tmp_path / "votes.db"), Tally()
    for start in range(0, len(votes), 7):
        for vote in votes[start : start + 7]:
            store.add(vote)
        last, counts = store.counts_since(running.last_id)
        running.add(counts, last)
    assert running.last_id == len(votes)
    assert leaderboard_rows(running) == leaderboard_rows(votes)
    assert running.summary() == tally_of(votes).summary()
    store.close()
