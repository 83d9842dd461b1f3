"""What the Gradio app (app.py) does, one job per module.

- `text_checks`: input validation (text, decoding settings) and sentence splitting.
- `limits`: the work a request may take (estimated CPU seconds of decoding) and the plan that keeps it in bounds.
- `scheduler`: turns on the CPU, shared fairly between visitors; cancellation and deadlines.
- `translators`: a loaded model, our model's loading, and comparison models loaded in the background.
- `translation`: a text through every system via the engine, and what each panel shows.
- `files`: uploaded files in, a TSV of translations out (in Gradio's cache).
- `attention`: cross-attention maps and their heatmaps.
- `corpus_report`: the corpus-level table from eval_results.json and compare.py's JSON.
"""
