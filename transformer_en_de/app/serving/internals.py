"""Every part of gradio and uvicorn the app relies on that neither documents, named in one place.

Each is here because nothing public does the same job (checked on gradio 6.31, uvicorn 0.54):

- gradio `Blocks.state_holder` (set when the page is mounted or queued): its `capacity` (what
  `launch(state_session_capacity=...)` sets; `mount_gradio_app` has no such setting, and without it Gradio keeps
  10,000 sessions' state in memory), `session_data` (each session's `SessionState`, whose `is_closed` Gradio sets when
  the page's heartbeat ends), `time_last_used`, `lock` and `delete_state()`. Gradio keeps a closed page's state until
  `capacity` newer sessions push it out (only its `gr.State` values go after an hour), and has no setting that
  forgets it sooner.
- gradio `Blocks.max_threads`: what `launch(max_threads=...)` sets: the calls its queue runs at once (read when
  `queue()` makes the queue) and the threads their callbacks run in (an anyio capacity limiter made at start-up);
  `mount_gradio_app` has no such setting, and its 40 would keep every call past the 40th in Gradio's first-come queue,
  a visitor's translation behind a class's or a flood's calls, where the scheduler cannot put it first.
- uvicorn `H11Protocol`, its `conn` (the h11 connection: `their_state` says whether the client's request is in) and
  `on_response_complete()`: uvicorn has no deadline for a whole request (headers and body) and no cap that closes the
  connection of a client still sending (`limit_concurrency` answers 503 but keeps every connection open).

And two things outside Python that the app reads or mirrors:
- the page's config as its `/config` route serves it to every page and client (gradio_client reads it as its
  `config`): each event's `id` (the fn_index a page sends), `api_name` and `inputs`, and each component's `type`,
  `skip_api` (a `gr.State` takes no value from an API client) and a Dataset's `samples`. The HTTP front asks the page
  for it once (`guard.RequestGuard.read_page`) and checks a raw call against the event it will run before the call
  reaches the queue; `get_api_info()` (public) lists the named endpoints, but not the index the page's own calls send.
  An event listener's result (`gr.events.Dependency`, documented as the listener's config) carries the same `id`.
- the documented place of uploads, `$GRADIO_TEMP_DIR`, else `<tmp>/gradio` (Gradio's
  "File access" guide); the check that a file value is an upload compares with it.

tests/test_internals.py checks each of them on the installed releases and fails with the name of what changed.
"""

import datetime
import os
import tempfile

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def upload_folder() -> str:
    """Where Gradio stores uploads and the files callbacks return."""
    return os.environ.get("GRADIO_TEMP_DIR") or os.path.realpath(os.path.join(tempfile.gettempdir(), "gradio"))


def keep_sessions(demo, sessions: int) -> None:
    """Keep the state of the `sessions` latest sessions in memory, as `launch(state_session_capacity=...)` would; once
    the page is mounted or queued (its state holder is made then)."""
    demo.state_holder.capacity = sessions


def forget_closed_sessions(demo, closed_seconds: float, reopened=lambda session: False) -> int:
    """Forget Gradio's state of every session whose page has closed and that no call has used for `closed_seconds`,
    unless `reopened(session)` (Gradio never marks a page open again once its heartbeat ended: a page whose link
    dropped and came back is still "closed" to it); returns how many were forgotten. Nothing before the page is
    mounted."""
    holder = getattr(demo, "state_holder", None)
    if holder is None:
        return 0
    now = datetime.datetime.now()
    with holder.lock:  # the lock Gradio evicts sessions under
        closed = [
            session
            for session, state in holder.session_data.items()
            if state.is_closed and (now - holder.time_last_used.get(session, now)).total_seconds() >= closed_seconds
            and not reopened(session)
        ]
        for session in closed:
            holder.delete_state(session)  # the gr.State values' delete callbacks, as Gradio's own expiry runs them
            del holder.session_data[session]
            holder.time_last_used.pop(session, None)
    return len(closed)


def keep_threads(demo, threads: int) -> None:
    """Run up to `threads` calls at once, each callback in a thread of its own, as `launch(max_threads=...)` would;
    before `demo.queue()`, which takes the number from here."""
    demo.max_threads = threads


def request_received(protocol: H11Protocol) -> bool:
    """Whether the client's request on this connection is all in (headers and body) and not answered yet: the
    server's turn. Otherwise the client is between requests or still sending one (its headers, or its body)."""
    return protocol.conn.their_state not in (h11.IDLE, h11.SEND_BODY)
