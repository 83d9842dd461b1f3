"""The server's limits: how much one request may take, and every other bound of the app, in one place.

A request's CPU seconds are spent by decoding, estimated as the engine spends them (`decoding/budget.py`: the cost of
a step, `StepCost`, and the beams and sentences that fit, `fit_budget`); the clock backs the estimate up.
"""

from dataclasses import dataclass

from transformer_en_de.decoding.budget import StepCost


@dataclass(frozen=True)
class Budget:
    """What one request may take: estimated CPU seconds of decoding (`budget.StepCost`), and seconds on the clock
    (from its start, waiting for turns included; at 80% it starts no new batch, at 100% the batch in progress ends)."""

    cpu_seconds: float
    seconds: float


@dataclass(frozen=True)
class Limits:
    """Every limit of the app in one place (defaults measured on the shipped model, one CPU core)."""

    max_beams: int = 8
    max_new_tokens: int = 255
    max_input_chars: int = 3_000  # a longer text is cut here (and says so) before anything else looks at it
    # A reference is scored, never cut (a cut reference gives wrong scores): a longer one is not scored, and says so.
    max_reference_chars: int = 10_000
    max_reference_lines: int = 200
    # Every request body but an upload's (`max_file_bytes` caps those): a bigger one is refused before it is read.
    # 3,000 characters of emoji, JSON-escaped, are 36 kB; a reference at its limit 120 kB.
    max_body_bytes: int = 256_000
    # A sentence longer than this (no full stop in 3,000 characters) is translated in parts: the model was trained on
    # sentences of up to about 40 words, and a source past its 256 positions would be cut.
    max_sentence_words: int = 30
    max_file_bytes: int = 1_000_000  # also the server's upload cap: a bigger upload is refused before it is stored
    max_file_lines: int = 2_000
    # 8 s is 3,000 characters in 30-word parts at 8 beams (an estimate of ~7 s; ~2 s in fact, most parts end early).
    text: Budget = Budget(cpu_seconds=8.0, seconds=25.0)
    file: Budget = Budget(cpu_seconds=60.0, seconds=120.0)
    step_cost: StepCost = StepCost()
    batch_size: int = 8  # sentences per engine batch
    # Admission by work (scheduler.py): a request estimated at no more than this many CPU seconds is ordinary (a few
    # sentences at the page's defaults: one sentence at 4 beams is about 0.2 s); only `heavy_jobs` heavier ones are in
    # flight at once, more are refused at once.
    ordinary_cpu_seconds: float = 1.5
    heavy_jobs: int = 2
    # Scoring a reference (sacreBLEU's BLEU and chrF): CPU seconds per character of reference and translation,
    # measured on one core (about 0.5 s for 200 kB); it counts against the request's budget like decoding.
    score_seconds_per_char: float = 2.5e-6
    # The admission point (`Serving.work`): the work group's callbacks at once and the calls that may wait beyond them
    # in Gradio's queue (past that, refused at once in one line). A call in its callback that waits for the CPU costs a
    # thread and nothing else; what runs, and in what order, the scheduler decides. So the slots are as many as a
    # mounted page's queue runs at once (40, its threads: no public setting, `__init__.py`), less two for the events
    # outside the groups, shared between translations and side work (`side_jobs`: its own group, so that 90 looks
    # inside at once leave translations their slots).
    concurrent_jobs: int = 24
    side_jobs: int = 14
    queue_size: int = 128  # with the 38 in callbacks, about as many calls held as 96 + 64 were: 90 views at once wait
    # A call whose results no stream reads within this long of its arrival, and whose page is not open (a script's), is
    # dropped before it runs; a running one nobody reads any more stops after `unread_grace_seconds` (scheduler.py).
    stream_wait_seconds: float = 2.0
    unread_grace_seconds: float = 5.0
    # An address whose clients leave this many event streams unread (a send waiting this long: streams.py) gets no more
    # side work until they read: a 200 kB view drains in 5 s over a slow mobile link.
    stalled_send_seconds: float = 10.0
    stalled_streams_per_address: int = 8
    memory_sweep_seconds: float = 60.0  # glibc's free heap is given back this often (memory.py)
    # A block of this many bytes or more gets pages of its own, handed back when freed (memory.py): a view's answer, a
    # batch's tensors, never carved from the heap where what outlives them pins its pages.
    own_pages_bytes: int = 262_144
    # New sessions per address (guard.py), a backstop against one machine: a class opening the page is within the
    # burst; an address making sessions in a loop is far too slow to push a visitor's out of Gradio's 10,000.
    new_sessions_per_address_per_second: float = 2.0
    new_sessions_per_address_burst: int = 100
    # Leaderboard reads per address (app/page/arena.py; guard.py refuses beyond): a class shows it at once, then it
    # changes only as votes come; 45 reads a second from one address held the event loop from a visitor's translation.
    board_reads_per_address_burst: int = 60
    board_reads_per_address_per_second: float = 1.0
    # Calls queued or running per session (guard.py): a page runs one at a time, and refusing a second at the front
    # costs nothing of the queue's.
    calls_per_session: int = 1
    # Uploads (uploads.py): files an upload, bodies read at once and files and bytes kept per address (a share of the
    # total), what the smallest file counts for, the free disk an upload leaves, and how long uploads are kept.
    files_per_upload: int = 4
    uploads_in_progress_per_address: int = 4
    uploads_per_address: int = 100
    upload_bytes_per_address: int = 50_000_000
    upload_total_bytes: int = 200_000_000
    upload_block_bytes: int = 4_096
    upload_disk_margin_bytes: int = 100_000_000
    upload_seconds: float = 900.0
    # Connections (server.py): open at once (past them a request is answered 503), seconds to send a whole body (1 MB
    # at 300 kbit/s), seconds a kept-alive connection may idle, bytes of headers.
    max_connections: int = 10_000
    request_seconds: float = 30.0
    keep_alive_seconds: float = 5.0
    max_header_bytes: int = 16_384
    # Responses that stay open (streams, heartbeats, downloads) per address (guard.py): a class of 30 holds about 60.
    streams_per_address: int = 256
