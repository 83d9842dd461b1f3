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
- `memory`: what the running server gives back: closed pages' state, glibc's free heap.
- `server`: the page mounted in our FastAPI app and served by uvicorn: its proxy rule, bounded connections (why in a
  protocol subclass, not a middleware: its docstring).
- `internals`: every undocumented part of gradio and uvicorn the app relies on, named, with an upgrade test.
"""

from .internals import upload_folder
from .limits import Budget, Limits
from .scheduler import Busy, Cancelled, FairScheduler
from .server import SPACE_PROXY_NETWORKS, forwarded_allow_ips_by_default, start_in_thread
from .serving import Serving
from .uploads import uploaded_path

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
