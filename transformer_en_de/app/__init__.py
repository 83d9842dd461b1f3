"""What the Gradio app (app.py) does, one job per module, and the rooms that serve and lay out its page.

- `text_checks`: input validation (text, decoding settings) and sentence splitting.
- `serving/`: everything that defends the server, behind one `Serving` per page (events of work registered at the
  admission point, each callback admitted, the server built): the limits (`limits.py`), the scheduler
  (`scheduler.py`), the HTTP front (`guard.py`, `http_answers.py`), the upload quota (`uploads.py`), the server
  (`server.py`), the undocumented parts of gradio and uvicorn relied on (`internals.py`); its `__init__.py` says which
  names the page and the features use.
- `page/`: the page's layout, a module per tab with its wiring (`translate`, `file`, `inside`, `arena`) and its CSS
  (`style`); app.py assembles them.
- `translators`: a loaded model (and what decodes it), our model's loading, comparison models loaded in the background.
- `translation`: the one request pipeline (text and files): every system via the engine; the text tab's panels.
- `out_of_depth`: whether our model is out of its depth on a sentence.
- `files`: uploaded files in, a TSV of translations (and our model's confidence) out.
- `inside_tab/`: what the Inside tab and `/inside` show: the request and its size bound (`view_request.py`;
  `transformer_en_de.inside` computes), the views the page redraws from (`view_store.py`), the pictures
  (`pictures.py`), the Markdown (`markdown.py`), the captions (`captions.py`), the tab's outputs (`outputs.py`).
- `arena/`: blind votes between the systems: battles and votes (`arena.py`), the vote database (`votes.py`), the rules a
  vote passes (`battles.py`), the leaderboard (`ratings.py`), publishing to a Hub dataset (`publish.py`).
- `sign_in`: whether the arena's visitors can sign in with Hugging Face (a Space's OAuth app, or Gradio's local
  stand-in), checked before the app starts.
- `corpus_report`: the corpus-level table from eval_results.json and compare.py's JSON.
"""
