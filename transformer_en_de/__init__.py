"""What the scripts and the app of this project share, one room per job:

- `decoding/`: what every caller decodes with: loading a model (`loading`), the engine, its PyTorch and CTranslate2
  backends, int8 weights for the CPU;
- `training/`: what only train.py and average_checkpoints.py use: the training loop, the training set, the flags,
  checkpoints;
- `publishing/`: pushing a folder to the Hub (`push`) and the model card;
- `app/`: what the app's callbacks do;
- beside them, what several commands use: `data`, `evaluation`, `comparison` (compare.py and deploy_space.py),
  `precision` (bf16 where the machine has it), `hub_access` (whether the Hub answers), and `inside` (a look inside a
  model, `inside.inside_view`).

Run from the checkout (nothing of the project is installed into site-packages): `python train.py`, `python app.py`,
`python -m pytest`. `modeling/` and `tokenizer/` stand beside this package; `modeling/` also travels with every
saved model folder to the Hub.
"""
