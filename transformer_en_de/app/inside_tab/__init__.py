"""The Inside the Transformer tab and the `/inside` endpoint (issue 35). The numbers come from
`transformer_en_de.inside.inside_view`, the same for a learner in a notebook; `view_request` asks for them, bounded like
a translation and by size, `view_store` keeps the views the page redraws from, `outputs` and `pictures` draw them."""
