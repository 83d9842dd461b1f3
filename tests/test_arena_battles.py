"""The arena's battles and pace, on an injected clock: single use, expiry, the visitor's own, a failed system,
bounded memory, one vote per few seconds per session (a class behind one address is served)."""

import pytest

from transformer_en_de.app.arena.arena import Arena
from transformer_en_de.app.arena.battles import (
    OTHER_VISITOR,
    OVER_ALLOWANCE,
    SYSTEM_FAILED,
    UNKNOWN_BATTLE,
    BattleBook,
    BattleRate,
    BattleRefused,
    DailyAllowance,
    VotePace,
    VoteTooSoon,
)
from transformer_en_de.app.arena.votes import VoteNotStored, VoteStore


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


def issue(book: BattleBook, visitor: str = "visitor-1", **overrides) -> str:
    battle = dict(
        visitor=visitor,
        system_a="ours",
        system_b="marian",
        source_text="A dog runs.",
        translation_a="Ein Hund rennt.",
        translation_b="Ein Hund läuft.",
        decoding_a={"num_beams": 4},
    )
    return book.issue(**battle | overrides)


def test_claim_returns_the_battle_once(clock):
    book = BattleBook(clock=clock)
    battle_id = issue(book)

    battle = book.claim(battle_id, "visitor-1")
    assert (battle.system_a, battle.system_b, battle.translation_b) == ("ours", "marian", "Ein Hund läuft.")
    assert battle.vote("B").decoding_a == {"num_beams": 4}
    with pytest.raises(BattleRefused, match=f"^{UNKNOWN_BATTLE}$"):
        book.claim(battle_id, "visitor-1")


def test_ids_are_unguessable_and_unknown_ones_refused(clock):
    book = BattleBook(clock=clock)
    ids = {issue(book) for _ in range(100)}
    assert len(ids) == 100 and all(len(battle_id) >= 22 for battle_id in ids)  # 16 random bytes
    with pytest.raises(BattleRefused, match="unknown or has expired"):
        book.claim("made-up", "visitor-1")


def test_a_battle_expires(clock):
    book = BattleBook(ttl_seconds=60, clock=clock)
    expired = issue(book)
    clock.advance(30)
    kept = issue(book)
    clock.advance(31)  # the first is 61 s old, the second 31 s

    with pytest.raises(BattleRefused, match="expired"):
        book.claim(expired, "visitor-1")
    assert book.claim(kept, "visitor-1").battle_id == kept


def test_another_session_cannot_spend_a_battle(clock):
    book = BattleBook(clock=clock)
    battle_id = issue(book, visitor="visitor-1")

    with pytest.raises(BattleRefused, match=f"^{OTHER_VISITOR}$"):
        book.claim(battle_id, "visitor-2")
    assert book.claim(battle_id, "visitor-1").battle_id == battle_id  # still open for its own visitor


def test_a_battle_with_a_failed_system_cannot_be_voted_on(clock):
    book = BattleBook(clock=clock)
    battle_id = issue(book, translation_b="(MarianMT failed: out of memory)", failed=("marian",))

    with pytest.raises(BattleRefused, match=f"^{SYSTEM_FAILED}$"):
        book.claim(battle_id, "visitor-1")
    assert len(book) == 0


def test_open_battles_are_bounded_oldest_dropped_and_expired_swept(clock):
    book = BattleBook(ttl_seconds=60, max_open=5, clock=clock)
    ids = [issue(book) for _ in range(8)]

    assert len(book) == 5
    with pytest.raises(BattleRefused):
        book.claim(ids[0], "visitor-1")
    assert book.claim(ids[-1], "visitor-1").battle_id == ids[-1]
    clock.advance(61)
    issue(book)
    assert len(book) == 1  # the expired ones went when the next battle was issued


def test_a_vote_too_soon_is_refused_with_the_wait(clock):
    pace = VotePace(min_seconds=3.0, clock=clock)
    pace.admit("visitor-1")
    clock.advance(0.5)

    with pytest.raises(VoteTooSoon, match=r"wait 3 s") as refused:
        pace.admit("visitor-1")
    assert "\n" not in str(refused.value)
    clock.advance(1.5)
    with pytest.raises(VoteTooSoon, match=r"wait 1 s"):
        pace.admit("visitor-1")  # a refused vote does not restart the wait
    clock.advance(1.0)
    pace.admit("visitor-1")


def test_a_class_behind_one_address_votes_at_its_pace(clock):
    pace = VotePace(min_seconds=3.0, clock=clock)
    students = [f"session-{number}" for number in range(24)]  # one address, 24 sessions
    for _round in range(10):
        for student in students:  # 24 votes spread over 4 seconds, each student once
            pace.admit(student)
            clock.advance(4 / len(students))


def test_paced_visitors_are_forgotten_and_bounded(clock):
    pace = VotePace(min_seconds=3.0, max_visitors=50, clock=clock)
    for number in range(200):
        pace.admit(f"session-{number}")
    assert len(pace) == 50
    clock.advance(3.0)
    pace.admit("late")
    assert len(pace) == 1  # those whose wait is over are forgotten: it changes no answer


def test_cast_vote_stores_the_battle_and_a_vote_too_soon_keeps_it_open(clock, tmp_path):
    book, pace, store = BattleBook(clock=clock), VotePace(clock=clock), VoteStore(tmp_path / "votes.db")
    arena = Arena(store, book=book, pace=pace)
    first, second = issue(book), issue(book)
    clock.advance(7.5)

    battle = arena.cast_vote(first, "visitor-1", "tie", "net-1")
    assert battle.system_a == "ours"
    with pytest.raises(VoteTooSoon):
        arena.cast_vote(second, "visitor-1", "A", "net-1")
    clock.advance(3)
    arena.cast_vote(second, "visitor-1", "A", "net-1")
    with pytest.raises(ValueError, match="one of"):
        arena.cast_vote(issue(book), "visitor-1", "C")

    stored = [
        (vote.battle_id, vote.choice, vote.visitor, vote.source, vote.seconds_to_vote) for vote in store.all_votes()
    ]
    assert stored == [(first, "tie", "visitor-1", "net-1", 7.5), (second, "A", "visitor-1", "net-1", 10.5)]
    store.close()


def test_a_vote_the_database_refuses_reopens_its_battle_and_counts_nothing(clock, tmp_path):
    book, pace, store = BattleBook(clock=clock), VotePace(clock=clock), VoteStore(tmp_path / "votes.db")
    allowance = DailyAllowance(per_day=1, clock=clock)
    arena = Arena(store, book=book, pace=pace, allowance=allowance)
    long_text = issue(book, source_text="A dog runs. " * 2000)  # a row that needs pages of its own
    pages = store._connection.execute("PRAGMA page_count").fetchone()[0]
    store._connection.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: as a full disk
    ballot = (long_text, "visitor-1", "B", "account-1", True)
    with pytest.raises(VoteNotStored, match="full"):
        arena.cast_vote(*ballot)

    store._connection.execute("PRAGMA max_page_count = 1073741823")
    # At once (the pace took nothing back), the same battle (reopened), within the day's one vote (given back):
    arena.cast_vote(*ballot)
    clock.advance(3)
    with pytest.raises(BattleRefused, match="votes for today"):
        arena.cast_vote(issue(book), "visitor-1", "A", "account-1", True)
    assert [vote.battle_id for vote in store.all_votes()] == [long_text]
    store.close()


def test_a_signed_in_account_is_paced_across_its_sessions_and_allowed_so_many_votes_a_day(clock, tmp_path):
    book, pace, store = BattleBook(clock=clock), VotePace(clock=clock), VoteStore(tmp_path / "votes.db")
    allowance = DailyAllowance(per_day=2, clock=clock)
    arena = Arena(store, book=book, pace=pace, allowance=allowance)
    first, second = issue(book, visitor="session-1"), issue(book, visitor="session-2")
    arena.cast_vote(first, "session-1", "A", "account-1", True)
    with pytest.raises(VoteTooSoon):  # another session of the same account
        arena.cast_vote(second, "session-2", "A", "account-1", True)
    clock.advance(3)
    arena.cast_vote(second, "session-2", "A", "account-1", True)
    clock.advance(3)
    third = issue(book, visitor="session-1")
    with pytest.raises(BattleRefused) as refused:
        arena.cast_vote(third, "session-1", "A", "account-1", True)
    assert str(refused.value) == OVER_ALLOWANCE
    clock.advance(86_400)  # the next UTC day (the refused vote's battle has expired meanwhile)
    fourth = issue(book, visitor="session-1")
    arena.cast_vote(fourth, "session-1", "A", "account-1", True)
    assert len(store.all_votes()) == 3
    store.close()


def test_battle_rate_is_per_source_with_a_burst_for_a_class(clock):
    rate = BattleRate(per_second=2.0, burst=60, clock=clock)
    for _ in range(60):  # a class of 60 behind one address, all at once
        rate.admit("school")
    with pytest.raises(BattleRefused, match="try again in 1 s"):
        rate.admit("school")
    rate.admit("elsewhere")  # another source has its own bucket
    clock.advance(0.5)
    rate.admit("school")  # refilled at its rate
    with pytest.raises(BattleRefused):
        rate.admit("school")


def test_a_vote_is_timed_from_the_battle_shown_to_the_vote_sent_not_to_its_turn(clock, tmp_path):
    book, pace, store = BattleBook(clock=clock), VotePace(clock=clock), VoteStore(tmp_path / "votes.db")
    arena = Arena(store, book=book, pace=pace)
    battle_id = issue(book)
    clock.advance(1.0)
    sent = clock()  # the visitor voted one second after the translations appeared
    clock.advance(9.0)  # and the call waited in the queue for its turn
    arena.cast_vote(battle_id, "visitor-1", "A", "net-1", cast_at=sent)
    assert [vote.seconds_to_vote for vote in store.all_votes()] == [1.0]
    store.close()


def test_the_board_is_worked_out_again_after_a_stored_vote_or_once_stale_and_drawn_when_it_changed(clock):
    from transformer_en_de.app.arena.arena import FRESH_SECONDS, BoardReads

    votes, drawn = ["A"], []
    reads = BoardReads(
        lambda: (list(votes), f"{len(votes)} votes"), lambda rows: drawn.append(rows) or len(drawn), clock=clock
    )
    assert not reads.is_fresh() and reads.read("page-1") == ("1 votes", 1) and reads.is_fresh()
    votes.append("B")  # stored by another process: this one is not told
    clock.advance(FRESH_SECONDS / 2)
    assert reads.read("page-1") is None and reads.read("page-2") == ("1 votes", 1)
    clock.advance(FRESH_SECONDS / 2)  # stale: worked out again, and drawn again since the table changed
    assert reads.read("page-1") == ("2 votes", 2)
    reads.vote_stored()  # a vote of this process: worked out at the next read; the same table is not drawn again
    assert not reads.is_fresh()
    assert reads.read("page-1") is None and drawn == [["A"], ["A", "B"]]
    votes.append("tie")
    reads.vote_stored()
    assert reads.read(None) == ("3 votes", 3)  # a caller without a session is always answered
