"""Publishing the arena's votes against a loopback Hub: the JSON lines of the votes and the card land, a second push
appends, a restart continues where the last file stopped; a new, restored or moved database beside the folder
publishes every vote the folder lacks, once; a published row links as little as it can; without a way to the Hub,
one line says votes stay local."""

import json
import os
import socket
import time
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub is imported; the loopback tests go online

import pytest
import yaml
from conftest import HUB_TOKEN
from huggingface_hub import constants
from loopback_hub import LoopbackHub

from transformer_en_de.app.arena.publish import DATASET_CARD, VotePublisher
from transformer_en_de.app.arena.votes import Vote, VoteStore

TOKEN = HUB_TOKEN
REPO = "someone/arena-votes"


def add_votes(store: VoteStore, *numbers: int) -> None:
    for number in numbers:
        store.add(
            Vote(
                battle_id=f"battle-{number}",
                system_a="ours",
                system_b="marian",
                source_text=f"Dog {number}.",
                translation_a="Hund.",
                translation_b="Der Hund.",
                choice="A",
                visitor=f"visitor-{number}",
                decoding_a={"num_beams": 4},
            )
        )


def published_votes(hub: LoopbackHub) -> list[dict]:
    files = hub.files(REPO, repo_type="dataset")
    lines = [line for path, data in sorted(files.items()) if path.endswith(".jsonl") for line in data.splitlines()]
    return [json.loads(line) for line in lines]


@pytest.fixture
def store(tmp_path):
    opened = VoteStore(tmp_path / "votes.db")
    yield opened
    opened.close()


def start_publisher(store: VoteStore, folder, hub: LoopbackHub) -> VotePublisher:
    return VotePublisher(store, REPO, folder, token=TOKEN, endpoint=hub.endpoint).start()


def test_votes_and_card_land_and_a_second_push_appends(hub, store, tmp_path):
    add_votes(store, 1, 2, 3)
    publisher = start_publisher(store, tmp_path / "published", hub)
    assert publisher.status == f"Votes are published to the dataset {REPO} every 10 minutes."
    try:
        publisher.push_now()
        first = published_votes(hub)
        assert [vote["battle_id"] for vote in first] == ["battle-1", "battle-2", "battle-3"]
        assert first[0] == store.all_votes()[0].published(store.salt)
        assert first[0]["decoding_a"] == {"num_beams": 4} and first[0]["visitor"] == "visitor-1"

        add_votes(store, 4, 5)
        publisher.push_now()
        assert published_votes(hub)[:3] == first  # appended: the old lines are still there
        assert [vote["battle_id"] for vote in published_votes(hub)] == [f"battle-{number}" for number in range(1, 6)]
        assert publisher.push_now() is None  # nothing new, no commit
    finally:
        publisher.stop()

    files = hub.files(REPO, repo_type="dataset")
    assert files["README.md"].decode() == DATASET_CARD
    assert [path for path in files if path != "README.md"] == [
        publisher.votes_file.relative_to(publisher.folder).as_posix()
    ]
    assert publisher.votes_file.name.startswith("votes-") and publisher.votes_file.parent.name == "votes"


def test_the_card_has_the_front_matter_the_hub_reads():
    metadata = yaml.safe_load(DATASET_CARD.split("---")[1])
    assert metadata["license"] == "cc-by-4.0"
    assert metadata["task_categories"] == ["translation"]
    assert metadata["language"] == ["en", "de"]
    assert metadata["pretty_name"]
    for field in ("battle_id", "decoding_a", "source_text", "choice", "visitor"):
        assert f"`{field}`" in DATASET_CARD
    assert "may be published" in DATASET_CARD


def test_a_restart_writes_a_new_file_with_only_the_new_votes(hub, store, tmp_path):
    folder = tmp_path / "published"
    add_votes(store, 1, 2)
    first = start_publisher(store, folder, hub)
    first.stop()
    with first.votes_file.open("a") as file:
        file.write('{"battle_id": "battle-99", "cut short by a cra')  # a crash in the middle of a line

    add_votes(store, 3)
    second = start_publisher(store, folder, hub)
    second.stop()

    assert second.votes_file != first.votes_file
    assert [json.loads(line)["battle_id"] for line in second.votes_file.read_text().splitlines()] == ["battle-3"]
    # Two files now (one per start), the cut line gone from the first: every vote once.
    assert sorted(vote["battle_id"] for vote in published_votes(hub)) == ["battle-1", "battle-2", "battle-3"]


def test_a_new_restored_or_moved_database_publishes_every_vote_the_folder_lacks_once(hub, tmp_path):
    folder = tmp_path / "published"
    old = VoteStore(tmp_path / "old" / "votes.db")
    add_votes(old, 1, 2, 3)
    start_publisher(old, folder, hub).stop()
    old.close()

    # A database started afresh beside the folder: its ids start at 1 again, below the published ones' 3.
    fresh = VoteStore(tmp_path / "fresh" / "votes.db")
    add_votes(fresh, 4)
    start_publisher(fresh, folder, hub).stop()
    assert sorted(vote["battle_id"] for vote in published_votes(hub)) == [f"battle-{number}" for number in range(1, 5)]

    # A copy restored from before vote 3 with a vote of its own since: only that one is new.
    restored = VoteStore(tmp_path / "restored" / "votes.db")
    add_votes(restored, 1, 2, 5)
    publisher = start_publisher(restored, folder, hub)
    try:
        add_votes(restored, 6)
        publisher.push_now()
        assert publisher.write_new_votes() == 0  # nothing left to write
    finally:
        publisher.stop()
    published = [vote["battle_id"] for vote in published_votes(hub)]
    assert sorted(published) == [f"battle-{number}" for number in range(1, 7)]  # each once
    for store in (fresh, restored):
        store.close()


def test_a_published_row_links_little_and_the_card_says_what_each_field_is(store):
    add_votes(store, 1)
    vote = store.all_votes()[0]
    row = vote.published(store.salt)
    assert "id" not in row  # a store's own numbering, which a new store starts again
    assert row["time"] == vote.time[:13] + ":00Z"  # to the hour
    assert row["source"] == ""  # none stored: none published
    sourced = replace(vote, source=store.source_hash(None, "203.0.113.7"), seconds_to_vote=7.4)
    same_day = replace(sourced, time=vote.time[:11] + "23:59:59.000+00:00")
    next_day = replace(sourced, time="2031-01-02T00:00:00.000+00:00")
    assert sourced.published(store.salt)["source"] == same_day.published(store.salt)["source"] != sourced.source
    assert next_day.published(store.salt)["source"] != sourced.published(store.salt)["source"]  # not across days
    assert sourced.published(store.salt)["seconds_to_vote"] == 7
    for field in row:
        assert f"`{field}`" in DATASET_CARD, field  # every published field is described


def test_no_token_keeps_votes_local_in_one_line(online, store, tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))

    publisher = VotePublisher(store, REPO, tmp_path / "published").start()

    assert publisher.status == "Votes are kept locally only: no Hugging Face token (HF_TOKEN)."
    assert publisher.scheduler is None
    add_votes(store, 1)
    assert publisher.push_now() is None and publisher.write_new_votes() == 0
    publisher.stop()
    assert store.count() == 1


def test_offline_keeps_votes_local_without_a_request(store, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.monotonic()
    publisher = VotePublisher(store, REPO, tmp_path / "published", token=TOKEN).start()

    assert time.monotonic() - started < 1
    assert publisher.status == "Votes are kept locally only: the Hub is switched off (HF_HUB_OFFLINE=1)."
    assert not (tmp_path / "published").exists()
    assert (
        VotePublisher(store, None, tmp_path / "published", token=TOKEN)
        .start()
        .status.startswith("Votes are kept locally only: no dataset repo")
    )


def test_an_unreachable_hub_fails_fast_in_one_line(online, store, tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    publisher = VotePublisher(store, REPO, tmp_path / "published", token=TOKEN, endpoint=endpoint).start()

    assert time.monotonic() - started < 5
    assert publisher.status.startswith(f"Votes are kept locally only: the Hub could not take {REPO} (")
    assert "\n" not in publisher.status and publisher.scheduler is None


def test_a_wrong_token_keeps_votes_local(hub, store, tmp_path):
    publisher = VotePublisher(store, REPO, tmp_path / "published", token="hf_wrong", endpoint=hub.endpoint).start()

    assert publisher.scheduler is None
    assert publisher.status.startswith("Votes are kept locally only:") and "\n" not in publisher.status
