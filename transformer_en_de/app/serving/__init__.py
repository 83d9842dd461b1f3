"""The serving front: the page goes through one `Serving` (server.py): `work` registers an event that spends CPU,
`admitted` / `run_side_work` run its callback, `queue` and `server` bound Gradio's queue and build the uvicorn server.
The features take turns in `FairScheduler` (scheduler.py) within `Limits` (limits.py); `guard.py` is the HTTP front and
`Visitors` what it knows of them, `uploads.py` the upload quota.

What Gradio and uvicorn offer no public way to do, and what it costs:
- A mounted page's queue runs at most 40 calls at once (`launch(max_threads=...)`; `mount_gradio_app` has no such
  setting, gradio-app/gradio#7734 brought other `launch` settings to it): translations have 24 slots and side work 14
  of its own, so that 90 looks inside cannot hold a translation in Gradio's first-come queue (hostile_clients: views
  at once); the 25th translation of a class waits there in order of arrival.
- A mounted page keeps 10,000 sessions' state (`launch(state_session_capacity=...)` is not offered either). A closed
  page's `gr.State` values go an hour after their last change (gradio-app/gradio#7829; Gradio 6.31 puts that hour in
  place of any `time_to_live` once the page closes), the rest of its session when newer ones push it out; nothing
  public forgets it sooner (gradio-app/gradio#3852, open: `Blocks.unload` runs a callback, `delete_cache` deletes
  files). Memory grows with every visitor until 10,000 have come (mixed_use.py over an hour).
- A mounted page does not check that a file value sent to a callback is an upload (Gradio checks it only in an app
  started by `launch()`): the front does (`uploads.file_values_problem`; hostile_clients: server files).
- Gradio publishes no table of its client routes (queue/join, queue/data, call, heartbeat, upload, file=: the curl
  guide documents them), so the front recognizes those paths itself (`guard.py`).
- uvicorn has no deadline on a request's headers (Kludex/uvicorn#157) and ASGI sees a request only once they are in:
  a client that never ends its headers holds a descriptor until it leaves (hostile_clients: slow connections). The
  process raises its descriptor limit to the hard one; past it, new connections wait.
"""

from .limits import Budget, Limits
from .scheduler import Busy, Cancelled, FairScheduler
from .server import SPACE_PROXY_NETWORKS, Serving, forwarded_allow_ips_by_default, start_in_thread
from .uploads import upload_folder, uploaded_path

__all__ = [
    "SPACE_PROXY_NETWORKS",
    "Budget",
    "Busy",
    "Cancelled",
    "FairScheduler",
    "Limits",
    "Serving",
    "forwarded_allow_ips_by_default",
    "start_in_thread",
    "uploaded_path",
    "upload_folder",
]
