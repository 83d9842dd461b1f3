"""The Inside the Transformer tab and the `/inside` endpoint (issue 35): what each part of the paper does with a
visitor's sentence, in every model on the page that returns its attention weights. The numbers come from
`transformer_en_de.inside.inside_view`, the same for a learner in a notebook; this package asks for them and draws them.

- `view_request`: the request, bounded like a translation (the same checks, plan, budget and scheduler job) and by size
  (at most `MAX_PIECES` pieces read and written, at most `MAX_VIEW_BYTES` of JSON in the answer).
- `view_store`: the views the page redraws from, on the server: bounded, expiring, one per session.
- `outputs`: the tab's outputs in the page's order, drawn from a view: what the callbacks return.
- `pictures`: the matplotlib pictures (positional encoding, attention heads), laid out in inches before drawing.
- `markdown`: the notices, the pieces and the beam search (one table of the steps, one of the finished hypotheses).
- `captions`: each picture's line from the paper, and the attention kinds' titles.
"""
