"""The serving front: a page goes through one `Serving` (server.py); work takes turns in `FairScheduler`
(scheduler.py) within `Limits` (limits.py); `guard.py` is the HTTP front, `uploads.py` the upload quota.

What Gradio and uvicorn offer no public way to do, and what it costs:
- A mounted page's queue runs at most 40 calls at once (`launch(max_threads=...)` has no `mount_gradio_app`
  counterpart; gradio-app/gradio#7734 brought other settings over): translations have 24 slots and side work 14, so
  that 90 looks inside cannot hold a translation (hostile_clients: views at once).
- A mounted page keeps 10,000 sessions' state (no `state_session_capacity`; gradio-app/gradio#13756 left that bound
  as Gradio's one limit on it), each a copy of every block's config (~150 kB for this page); a closed page's `gr.State`
  goes an hour after its last change (gradio-app/gradio#7829), nothing public forgets it sooner (gradio-app/gradio#3852,
  open): memory grows with every visitor until 10,000 have come (mixed_use.py).
- A mounted page does not check that a file value sent to a callback is an upload (only `launch()` does): the front
  does (`guard.check_file_value`; hostile_clients: server files).
- Gradio publishes no table of its client routes (its curl guide documents them): `guard.py` recognizes them, and
  answers bad calls in one line where Gradio answers a traceback or its own `detail` shape.
- uvicorn has no deadline on a request's headers (Kludex/uvicorn#157): a client that never ends them holds a
  descriptor; the process raises its descriptor limit to the hard one (hostile_clients: slow connections).
"""

from .limits import Budget as Budget
from .limits import Limits as Limits
from .scheduler import Busy as Busy
from .scheduler import Cancelled as Cancelled
from .scheduler import FairScheduler as FairScheduler
from .server import SPACE_PROXY_NETWORKS as SPACE_PROXY_NETWORKS
from .server import Serving as Serving
from .server import forwarded_allow_ips_by_default as forwarded_allow_ips_by_default
from .uploads import upload_folder as upload_folder
from .uploads import uploaded_path as uploaded_path
