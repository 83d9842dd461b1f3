"""What the Gradio app (app.py) does, one job per module: `translation` (the one request pipeline), `translators` (the
models), `text_checks`, `files`, `out_of_depth`, `corpus_report`; `page/` lays out each tab, `serving/` serves and
defends the page, `inside_tab/` and `arena/` are their tabs' work. docs/app.md describes the page and its API."""

import matplotlib

matplotlib.use("Agg")  # no display on a server; before any pyplot import (Gradio's, to close figures)
