"""Publishing the arena's votes to a Hub dataset with `huggingface_hub.CommitScheduler`; the SQLite store stays the
record. What is published is known by the battle ids in the folder, never by row ids, so a new, restored or moved
database publishes every vote the folder lacks, once (the folder should persist with it)."""

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from huggingface_hub import CommitScheduler, HfApi, get_token, is_offline_mode

from ...hub_access import cause
from .votes import VoteStore, published_rows

DATASET_CARD = Path(__file__).with_name("dataset_card.md").read_text(encoding="utf-8")  # what each field is, and why
EVERY_MINUTES = 10


class VoteScheduler(CommitScheduler):
    """Brings the votes file up to date before each push (huggingface_hub's guide overrides `push_to_hub`)."""

    def __init__(self, before_push: Callable[[CommitScheduler], int], **kwargs):
        self.before_push = before_push  # set first: the parent's __init__ starts the thread that pushes
        super().__init__(**kwargs)

    def push_to_hub(self):
        self.before_push(self)
        return super().push_to_hub()


class VotePublisher:
    """The votes of `store`, pushed to the dataset `repo_id` every `EVERY_MINUTES` from the local `folder`."""

    def __init__(self, store: VoteStore, repo_id: str | None, folder, token=None, endpoint=None):
        self.store, self.repo_id, self.token, self.endpoint = store, repo_id, token, endpoint
        self.folder = Path(folder).expanduser().resolve()  # resolved, as the scheduler keys its files
        self.scheduler: CommitScheduler | None = None
        self.status = "Votes are kept locally only: publishing has not started."
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.votes_file = self.folder / "votes" / f"votes-{stamp}-{secrets.token_hex(4)}.jsonl"
        self.published: set[str] = set()  # the battle ids of the votes in the folder
        self.last_seen_id = 0  # the store's last vote already compared with `published`

    def start(self) -> "VotePublisher":
        """Start publishing, or say in `status` why votes stay local (checked before any request: no retries)."""
        if self.scheduler is not None:
            return self
        token = self.token or get_token()
        if not self.repo_id:
            self.status = "Votes are kept locally only: no dataset repo to publish them to."
        elif is_offline_mode():
            self.status = "Votes are kept locally only: the Hub is switched off (HF_HUB_OFFLINE=1)."
        elif not token:
            self.status = "Votes are kept locally only: no Hugging Face token (HF_TOKEN)."
        else:
            rows = published_rows(self.folder, cut_torn=True)
            self.published, self.last_seen_id = {json.loads(row)["battle_id"] for row in rows}, 0
            card = self.folder / "README.md"
            if not card.exists() or card.read_text() != DATASET_CARD:  # rewritten only when changed: no empty commits
                self.folder.mkdir(parents=True, exist_ok=True)
                card.write_text(DATASET_CARD)
            try:
                self.scheduler = VoteScheduler(
                    self.write_new_votes,
                    repo_id=self.repo_id,
                    repo_type="dataset",
                    folder_path=self.folder,
                    every=EVERY_MINUTES,
                    token=token,
                    hf_api=HfApi(endpoint=self.endpoint, token=token),
                )
            except Exception as error:  # any failure to reach or use the Hub: the arena goes on without publishing
                self.status = f"Votes are kept locally only: the Hub could not take {self.repo_id} ({cause(error)})."
                return self
            self.status = f"Votes are published to the dataset {self.repo_id} every {EVERY_MINUTES} minutes."
        return self

    def write_new_votes(self, scheduler: CommitScheduler | None = None) -> int:
        """Append the votes stored since the last call to this process's file; how many. The scheduler is passed in by
        its first push, which runs before its constructor has returned."""
        scheduler = scheduler or self.scheduler
        if scheduler is None:
            return 0
        with scheduler.lock:  # the scheduler lists and sizes the files under this lock: it never sees half a line
            stored = self.store.votes_since(self.last_seen_id)
            votes = [vote for vote in stored if vote.battle_id not in self.published]
            if votes:
                self.votes_file.parent.mkdir(parents=True, exist_ok=True)
                rows = [json.dumps(vote.published(self.store.salt), ensure_ascii=False) + "\n" for vote in votes]
                with self.votes_file.open("a", encoding="utf-8") as file:
                    file.write("".join(rows))
                self.published.update(vote.battle_id for vote in votes)
                # A second write within the file system's timestamp granularity would look unchanged to the scheduler.
                scheduler.last_uploaded.pop(self.votes_file, None)
            self.last_seen_id = stored[-1].id if stored else self.last_seen_id  # once written: a failure is retried
            return len(votes)

    def push_now(self):  # and wait: the CommitInfo, or None if nothing changed or publishing is off
        return self.scheduler.trigger().result() if self.scheduler is not None else None

    def stop(self) -> None:  # the last votes pushed
        if self.scheduler is not None:
            try:
                self.push_now()
            finally:
                self.scheduler.stop()
