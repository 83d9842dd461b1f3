"""The serving room: everything that defends the server, behind the few names the page and the features use.

The page (app.py, `app/page/`) holds one `Serving` per page and goes through it only:
- `Serving.work(listener, fn, inputs, outputs, **options)`: an event that spends CPU (a button's click, a load, an
  event's `then`), registered at the admission point and counted by the HTTP front;
- `with Serving.admitted(request) as arrived`: a work event's callback, admitted (`arrived`: when its call entered the
  queue); `Serving.arrival(request)` the same time outside the block; `Serving.side_work(request, work, dropped)`:
  a picture, a table or a vote in the scheduler's side lane, admitted;
- `Serving.queue(demo)`, then `Serving.server(demo, css=..., host=..., port=..., forwarded_allow_ips=...)`: the page's
  queue bounded, and the uvicorn server that serves it behind the front (`.run()`; `start_in_thread` for tests);
- `forwarded_allow_ips_by_default(os.environ)`, `SPACE_PROXY_NETWORKS`: whose X-Forwarded-For is trusted by default.
The features (translation, files, the Inside tab, the arena) take turns through `FairScheduler` (`Busy`, `Cancelled`)
and read their bounds from `Limits` (`Budget`); a callback takes an upload's path through `uploaded_path` and writes its
files to `upload_folder()`.

The modules, one job each:
- `serving`: the `Serving` face above.
- `limits`: every limit of the app, and the estimate that narrows a request's plan to its budget of work.
- `scheduler`: the admission point's one order: turns on the CPU, fair by visitor, translations before side work
  before heavy requests; unread calls dropped, cancellation and deadlines.
- `guard`: the HTTP front: bodies bounded, calls checked (one line each), sessions and raw calls admitted per address.
- `streams`: the responses that stay open, counted by key, and the event streams an address leaves unread.
- `http_answers`: one-line answers and the small ASGI pieces the front and the uploads share.
- `uploads`: uploads counted before they are stored, within a share per address, deleted after their time.
- `memory`: glibc's free heap given back while the server runs.
- `server`: the page mounted in our FastAPI app (its API as MCP tools too) and served by uvicorn's public settings.

Every part of Gradio and uvicorn used here is public. What they offer no public way to do, and what it costs:
- A mounted page's queue runs at most 40 calls at once (`Blocks.launch(max_threads=...)` sets more; `mount_gradio_app`
  has no such setting): translations have 24 (`Limits.concurrent_jobs`) and side work a group of its own with 14
  (`side_jobs`), so that 90 looks inside at once cannot hold a translation in Gradio's first-come queue, where the
  scheduler cannot put it first (hostile_clients: views at once); the 25th translation of a class waits there in order
  of arrival (a class of 60: churn then learners). Upstream: gradio-app/gradio#7734 brought `launch`'s `allowed_paths`,
  `blocked_paths`, `show_error` and `favicon_path` to `mount_gradio_app`; `max_threads` and `state_session_capacity`
  were not among them, and no issue asks for them yet (#1442 gave `launch` its `max_threads`).
- A mounted page keeps 10,000 sessions' state (`launch(state_session_capacity=...)` is not offered either), and a closed
  page's state stays until newer sessions push it out (only its `gr.State` values go, after an hour:
  gradio-app/gradio#7829); nothing public forgets it sooner (gradio-app/gradio#3852, open). Memory grows with every
  visitor who came and went until 10,000 have (mixed_use.py over an hour: RESULTS.md, round 13, before the sweep that
  did this through Gradio's internals was dropped).
- A mounted page does not check that a file value sent to a callback is an upload (Gradio's check is active only in an
  app started by `launch()`): the front does (`uploads.file_values_problem`; hostile_clients: server files).
- uvicorn has no deadline on a request's headers (Kludex/uvicorn#157, closed in 2026 asking for a new issue for what
  is left), and ASGI sees a request only once its headers are in: a client that opens connections and never ends its
  headers (hostile_clients: slow connections) holds a descriptor each until it leaves. The process raises its soft
  descriptor limit to the hard one (`server.raise_descriptor_limit`); past that, new connections wait.
"""

from .limits import Budget, Limits
from .scheduler import Busy, Cancelled, FairScheduler
from .server import SPACE_PROXY_NETWORKS, forwarded_allow_ips_by_default, start_in_thread
from .serving import Serving
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
