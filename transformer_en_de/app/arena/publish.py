"""Publishing the arena's votes to a Hub dataset, with `huggingface_hub.CommitScheduler`.

The SQLite store stays the record; the publisher copies the votes not yet published into an append-only JSON-lines
file (one per process start: `votes/votes-<UTC time>-<random>.jsonl`, one vote a line, in its published form:
`Vote.published`) under the scheduler's lock, just before each of the scheduler's pushes, beside a dataset card. The
folder should persist with the database (a Space's /data). What is published is known by the battles' ids in the
folder's files, read at a start, never by the database's row ids: a database started afresh, restored from an older
copy or moved beside the folder has every vote the folder lacks published, once.

Without a way to the Hub (`HF_HUB_OFFLINE=1`, no token, no repo, the Hub refusing) `start` says so in one line in
`status` and publishes nothing, at once: voting goes on, into the local database only.
"""

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from huggingface_hub import CommitScheduler, HfApi, get_token, is_offline_mode

from ...markdown import markdown_table
from .votes import VoteStore

DATASET_CARD_TEMPLATE = """---
license: cc-by-4.0
task_categories:
- translation
language:
- en
- de
pretty_name: English→German translation arena votes
configs:
- config_name: default
  data_files: votes/*.jsonl
---

# English→German translation arena votes

Blind votes from the Arena tab of the transformer-en-de demo. A visitor typed English text, was shown two German
translations by two systems whose names were hidden (shown as A and B), and voted for the better one, a tie, or
"both bad"; the names were revealed after the vote. Visitors were told that their text and their vote are stored and
may be published here.

Each line of `votes/*.jsonl` is one vote:

{fields}

Each field is here for a use: the texts, systems, decoding and choice are the comparison itself; `battle_id` makes a
vote count once however often the files are copied; `visitor`, `source` and `signed_in` let a reader weigh votes as
the arena does (one session, one account or network, is one voice) without naming anyone; `time` and
`seconds_to_vote` show when and how the votes came. What need not be exact is rounded: the time to the hour, the
seconds to whole ones. The salt of the hashes is a secret of the arena, so a hash cannot be traced back to a session,
an account or an address; a `source` changes every UTC day, so one address's or account's votes are linked within a
day and never across days. The visitors were asked before they voted (the page says that their text and vote are
stored and may be published here). The arena's leaderboard bounds each source's weight (an account at most 20
battles, an anonymous network 10) and, where visitors can sign in, ranks the signed-in accounts' votes apart from the
anonymous ones; the votes themselves are all here.
"""

# What each line of votes/*.jsonl holds: (field, what it is), the dataset card's table.
VOTE_FIELDS = [
    ("`time`", "when the vote was cast, UTC, rounded down to the hour (e.g. `2026-11-28T21:00Z`)"),
    ("`battle_id`", "a random id of the battle (one vote per battle): the vote's identity"),
    ("`system_a`, `system_b`", "the systems shown as A and as B"),
    ("`decoding_a`, `decoding_b`", 'how each system decoded (e.g. `{"num_beams": 4, "length_penalty": 0.6}`)'),
    ("`source_text`", "the English text the visitor typed"),
    ("`translation_a`, `translation_b`", "the two translations shown"),
    ("`choice`", "`A`, `B`, `tie` or `both bad`"),
    (
        "`visitor`",
        "a salted hash of the visitor's page session (16 hex characters; a new one each time the page is "
        "opened), never an address",
    ),
    (
        "`source`",
        "who the leaderboard counts the vote for, hashed with the vote's UTC day: the voter's Hugging Face "
        "account when signed in, else the network the vote came from (an IPv4 address, an IPv6 /64); the same within a "
        "day, different across days; empty for votes cast before this field existed",
    ),
    ("`signed_in`", "whether the voter was signed in with Hugging Face (through the Space's OAuth app)"),
    (
        "`seconds_to_vote`",
        "whole seconds from the two translations being shown to the vote (null for votes cast "
        "before this field existed)",
    ),
]
DATASET_CARD = DATASET_CARD_TEMPLATE.format(fields=markdown_table(["field", "what it is"], VOTE_FIELDS))


class _VoteScheduler(CommitScheduler):
    """A CommitScheduler that brings the votes file up to date before each push (overriding `push_to_hub` is how
    huggingface_hub's guide extends it)."""

    def __init__(self, before_push: Callable[[CommitScheduler], None], **kwargs):
        self.before_push = before_push  # set first: the parent's __init__ starts the thread that pushes
        super().__init__(**kwargs)

    def push_to_hub(self):
        self.before_push(self)
        return super().push_to_hub()


class VotePublisher:
    """The votes of `store`, pushed to the dataset `repo_id` every `every_minutes` from the local `folder`."""

    def __init__(
        self,
        store: VoteStore,
        repo_id: str | None,
        folder: str | Path,
        every_minutes: float = 10,
        token: str | None = None,
        endpoint: str | None = None,
    ):
        self.store = store
        self.repo_id = repo_id
        self.folder = Path(folder).expanduser().resolve()  # resolved, as the scheduler keys its files
        self.every_minutes = every_minutes
        self.token = token
        self.endpoint = endpoint
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
            return self._start_scheduler(token)
        return self

    def _start_scheduler(self, token: str) -> "VotePublisher":
        self.published, self.last_seen_id = self._published_in_folder(), 0
        card = self.folder / "README.md"
        if not card.exists() or card.read_text() != DATASET_CARD:  # rewritten only when changed: no empty commits
            self.folder.mkdir(parents=True, exist_ok=True)
            card.write_text(DATASET_CARD)
        try:
            self.scheduler = _VoteScheduler(
                self._append_new_votes,
                repo_id=self.repo_id,
                repo_type="dataset",
                folder_path=self.folder,
                every=self.every_minutes,
                token=token,
                hf_api=HfApi(endpoint=self.endpoint, token=token),
            )
        except Exception as error:  # any failure to reach or use the Hub: the arena goes on without publishing
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            self.status = f"Votes are kept locally only: the Hub could not take {self.repo_id} ({first_line})."
            return self
        self.status = f"Votes are published to the dataset {self.repo_id} every {self.every_minutes:g} minutes."
        return self

    def _published_in_folder(self) -> set[str]:
        """The battle ids of the votes the files of this folder hold; a line cut short by a crash is cut off."""
        published = set()
        for path in sorted((self.folder / "votes").glob("*.jsonl")):
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                data = data[: data.rfind(b"\n") + 1]
                path.write_bytes(data)  # its vote is in the database: it goes into this process's file
            for line in data.splitlines():
                if line.strip():
                    published.add(json.loads(line)["battle_id"])
        return published

    def write_new_votes(self) -> int:
        """Append the votes stored since the last call to this process's file (each push does); returns how many."""
        return self._append_new_votes(self.scheduler) if self.scheduler is not None else 0

    def _append_new_votes(self, scheduler: CommitScheduler) -> int:
        # The scheduler is passed in: its first push runs before its constructor has returned to `start`.
        with scheduler.lock:  # the scheduler lists and sizes the files under this lock: it never sees half a line
            stored = self.store.votes_since(self.last_seen_id)
            votes = [vote for vote in stored if vote.battle_id not in self.published]
            if not votes:
                self.last_seen_id = stored[-1].id if stored else self.last_seen_id
                return 0
            self.votes_file.parent.mkdir(parents=True, exist_ok=True)
            rows = [json.dumps(vote.published(self.store.salt), ensure_ascii=False) + "\n" for vote in votes]
            with self.votes_file.open("a", encoding="utf-8") as file:
                file.write("".join(rows))
            self.published.update(vote.battle_id for vote in votes)
            self.last_seen_id = stored[-1].id  # only once written: a failed write is tried again at the next push
            # The scheduler uploads a file whose mtime changed; two writes within the file system's timestamp
            # granularity would look unchanged, so the file is marked as not uploaded.
            scheduler.last_uploaded.pop(self.votes_file, None)
            return len(votes)

    def push_now(self):
        """Push what is new now and wait: the CommitInfo, or None if nothing changed or publishing is off."""
        return self.scheduler.trigger().result() if self.scheduler is not None else None

    def stop(self) -> None:
        """Push the last votes and stop the schedule."""
        if self.scheduler is not None:
            try:
                self.push_now()
            finally:
                self.scheduler.stop()
