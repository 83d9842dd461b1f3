"""A board many addresses cannot buy: 30 anonymous addresses voting for a system that writes nonsense, at a human pace
(a battle every 8-15 s, each vote 5-8 s after it, for 4 minutes), against 4 signed-in voters who vote for ours. The
arena's own objects (battle book, pace, battle rate, daily allowance, the vote store, the tallies and ratings) run on
a simulated clock, so four minutes take a second; every vote goes through `Arena.vote` into a real SQLite store.

Where sign-in counts accounts, the first board ranks the signed-in accounts' votes and the anonymous ones stand apart;
where it does not (no sign-in, or Gradio's stand-in), a profile that came with a vote counts for nothing and the one
board says it rests on anonymous votes."""

import heapq
import itertools
import random

import pytest

from transformer_en_de.app.arena.arena import Arena, Voter, leaderboard_markdown
from transformer_en_de.app.arena.battles import BattleBook, BattleRate, DailyAllowance, VotePace
from transformer_en_de.app.arena.votes import VoteStore

OURS, GIBBERISH = "Transformer (ours)", "gibberish"
MINUTES = 4


class Clock:
    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def arena_on(store: VoteStore, clock: Clock, accounts: bool) -> Arena:
    return Arena(
        store,
        book=BattleBook(clock=clock),
        pace=VotePace(clock=clock),
        rate=BattleRate(clock=clock),
        allowance=DailyAllowance(clock=lambda: 86_400 * 20_000 + clock()),
        accounts=accounts,
    )


def campaign(arena: Arena, clock: Clock, seed: int = 0) -> dict[str, int]:
    """30 anonymous addresses for the nonsense, 4 signed-in voters for ours, for MINUTES simulated minutes; returns
    how many votes of each kind were stored."""
    rng = random.Random(seed)
    voters = [(Voter(f"script-session-{n}", f"198.51.100.{n + 1}"), GIBBERISH, (8, 15)) for n in range(30)]
    voters += [(Voter(f"person-{n}", f"203.0.113.{n + 1}", account=f"person-{n}"), OURS, (15, 30)) for n in range(4)]
    order = itertools.count()
    events = [(rng.uniform(0, 10), next(order), "battle", number) for number in range(len(voters))]
    heapq.heapify(events)
    stored = {"signed in": 0, "anonymous": 0}
    open_battles = {}
    while events:
        when, _, kind, number = heapq.heappop(events)
        if when > MINUTES * 60:
            break
        clock.now = 1_000.0 + when
        voter, preferred, (low, high) = voters[number]
        if kind == "battle":
            arena.rate.admit(arena.source_of(voter))
            a, b = rng.sample([OURS, GIBBERISH], 2)
            open_battles[number] = (
                arena.book.issue(
                    visitor=arena.store.visitor_hash(voter.session),
                    system_a=a,
                    system_b=b,
                    source_text="A dog runs.",
                    translation_a=f"{a} writes",
                    translation_b=f"{b} writes",
                ),
                "A" if a == preferred else "B",
            )
            heapq.heappush(events, (when + rng.uniform(5, 8), next(order), "vote", number))
        else:
            battle_id, choice = open_battles.pop(number)
            system_a, _, message = arena.vote(battle_id, choice, voter, cast_at=clock())
            assert system_a, message
            stored["signed in" if voter.account else "anonymous"] += 1
            heapq.heappush(events, (when + rng.uniform(low, high) - 6, next(order), "battle", number))
    return stored


@pytest.fixture
def clock():
    return Clock()


def test_thirty_anonymous_addresses_leave_the_signed_in_voters_order_on_the_first_board(tmp_path, clock):
    store = VoteStore(tmp_path / "votes.sqlite3")
    arena = arena_on(store, clock, accounts=True)
    stored = campaign(arena, clock)
    assert stored["anonymous"] > 400 and 30 < stored["signed in"] < 80  # the script outvotes the people many times

    first, anonymous = arena.boards({})
    assert [row["system"] for row in first.rows] == [OURS, GIBBERISH]  # the honest order, first
    assert first.heading.startswith("Signed-in accounts")
    assert "of 4 signed-in accounts" in first.line
    # The first board's counts are its own votes, the signed-in ones: the script's are not in them.
    assert sum(row["battles"] for row in first.rows) == 2 * stored["signed in"]
    # The anonymous votes are stored, counted and shown apart: there the script's system leads, and says so.
    assert [row["system"] for row in anonymous.rows] == [GIBBERISH, OURS]
    assert sum(row["battles"] for row in anonymous.rows) == 2 * stored["anonymous"]
    assert "from 30 networks" in anonymous.line and "do not move" in anonymous.heading
    assert store.count() == stored["anonymous"] + stored["signed in"]
    assert arena.leaderboard({})[0] == first.rows  # the board a client asks for is the first one
    page = leaderboard_markdown([first, anonymous])
    assert page.index("Signed-in accounts") < page.index(OURS) < page.index("Anonymous votes")
    store.close()


def test_on_one_board_of_every_vote_the_same_campaign_would_have_won(tmp_path, clock):
    # What the first board keeps out: ranked together, 30 networks of weight 10 outweigh 4 accounts of weight 20.
    store = VoteStore(tmp_path / "votes.sqlite3")
    campaign(arena_on(store, clock, accounts=True), clock)
    (everything,) = arena_on(store, clock, accounts=False).boards({})
    assert [row["system"] for row in everything.rows] == [GIBBERISH, OURS]
    assert everything.line.startswith("This page has no sign-in: the ratings rest on")
    assert "4 signed-in accounts of an earlier run" in everything.line and "30 anonymous networks" in everything.line
    store.close()


def test_without_accounts_a_profile_counts_for_nothing(tmp_path, clock):
    # No sign-in, or Gradio's stand-in (which signs anyone in as the machine's account, under a cookie key anyone can
    # compute): a vote that comes with a profile is the network's.
    store = VoteStore(tmp_path / "votes.sqlite3")
    arena = arena_on(store, clock, accounts=False)
    claimed = Voter("session-1", "198.51.100.7", account="someone-else")
    battle_id = arena.book.issue(
        visitor=store.visitor_hash("session-1"),
        system_a=OURS,
        system_b=GIBBERISH,
        source_text="A dog.",
        translation_a="Ein Hund.",
        translation_b="x",
    )
    clock.now += 10
    assert arena.vote(battle_id, "A", claimed)[0] == OURS
    (vote,) = store.all_votes()
    assert not vote.signed_in and vote.source == store.source_hash(None, "198.51.100.7")
    (board,) = arena.boards({})
    assert board.heading == "" and "1 source (1 anonymous network)" in board.line
    store.close()
