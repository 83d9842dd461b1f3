"""What the scripts of this project share: the translation engine, evaluation, data, the Hub, the model card, and a
look inside a model (`inside`).

Run from the checkout (nothing of the project is installed into site-packages): `python train.py`, `python app.py`,
`python -m pytest`. `modeling/` and `tokenizer/` stand beside this package; `modeling/` also travels with every
saved model folder to the Hub.
"""
