"""What the Gradio app (app.py) does, one job per module.

- `text_checks`: input validation (text, decoding settings) and sentence splitting.
- `limits`: every limit of the app, and the estimate that narrows a request's plan to its budget of work.
- `scheduler`: the admission point's one order: turns on the CPU, fair by visitor, translations before side work
  before heavy requests; unread calls dropped, cancellation and deadlines.
- `guard`: the HTTP front: bodies bounded, calls checked (one line each), sessions and raw calls admitted per address.
- `http_answers`: one-line answers and the small ASGI pieces the front and the uploads share.
- `uploads`: uploads counted before they are stored, within a share per address, deleted after their time.
- `server`: the page mounted in our FastAPI app and served by uvicorn: its proxy rule, bounded connections.
- `internals`: every undocumented part of gradio and uvicorn the app relies on, named, with an upgrade test.
- `translators`: a loaded model (and what decodes it), our model's loading, comparison models loaded in the background.
- `translation`: the one request pipeline (text and files): every system via the engine; the text tab's panels.
- `out_of_depth`: whether our model is out of its depth on a sentence.
- `files`: uploaded files in, a TSV of translations (and our model's confidence) out.
- `inside_tab/`: the Inside tab and `/inside`: the request and its size bound (`view_request.py`;
  `transformer_en_de.inside` computes), the views the page redraws from (`view_store.py`), the pictures
  (`pictures.py`), the Markdown (`markdown.py`), the captions (`captions.py`), the tab's outputs (`outputs.py`).
- `arena/`: blind votes between the systems: battles and votes (`arena.py`), the vote database (`votes.py`), the rules a
  vote passes (`battles.py`), the leaderboard (`ratings.py`), publishing to a Hub dataset (`publish.py`).
- `sign_in`: whether the arena's visitors can sign in with Hugging Face (a Space's OAuth app, or Gradio's local
  stand-in), checked before the app starts.
- `corpus_report`: the corpus-level table from eval_results.json and compare.py's JSON.
"""
