# Set-up and everyday commands on a fresh machine (everything runs from the checkout, with .venv/bin/python):
#   make demo        install the app's packages and launch the app on the bundled model (PORT=7860)
#   make install     install what train.py, compare.py and the other scripts need (the train and app extras)
#   make tiny-run    install, then a one-minute training run into runs/tiny (a try of train.py, not a good model)
#   make test        install everything and run the test suite
# TORCH picks the PyTorch build; pass e.g. TORCH=torch==2.13.0 to use a local CPU wheel.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch
PORT ?= 7860
DATA_DIR ?= ../shared/data/multi30k
BIN := $(VENV)/bin

.PHONY: torch install dev test demo tiny-run lint browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

torch: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH)"

install: torch
	$(BIN)/pip install --quiet ".[train,app]"

dev: torch
	$(BIN)/pip install --quiet ".[dev]"

# Chromium for the browser test (Debian package; Playwright drives it, no browser download).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: dev browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

demo: torch
	$(BIN)/pip install --quiet ".[app]"
	$(BIN)/python app.py --port $(PORT)

# 2,000 pairs, one epoch, a small model: about a minute on one CPU core. DATA_DIR= (empty) downloads Multi30k.
tiny-run: install
	$(BIN)/python train.py $(if $(DATA_DIR),--data_dir $(DATA_DIR)) --output_dir runs/tiny --overwrite_output_dir \
		--max_train_samples 2000 --max_eval_samples 200 --max_test_samples 200 --num_train_epochs 1 \
		--d_model 64 --d_ff 256 --encoder_layers 2 --decoder_layers 2 --vocab_size 2000 \
		--per_device_train_batch_size 32 --warmup_steps 30 --generation_num_beams 1

lint: dev
	$(BIN)/ruff check .
