"""The Inside the Transformer tab (issue 35): `view_request` asks `transformer_en_de.inside` for the numbers, bounded,
and keeps the views the page redraws from; `outputs` draws them."""
