# Set-up and everyday commands on a fresh machine (everything runs from the checkout, with .venv/bin/python):
#   make demo        install the app's packages and launch the app on the bundled model (PORT=7860)
#   make install     install what train.py, compare.py and the other scripts need (the train and app extras)
#   make tiny-run    install, then a one-minute training run into runs/tiny (a try of train.py, not a good model)
#   make test        install everything and run the test suite
#   make lock        take in the newest releases the project's ranges allow, write space_requirements.lock anew
#   make shipped-code  copy modeling/ into models/transformer-en-de (the code that folder carries to the Hub)
# PyTorch, where .venv has none: with no GPU (no nvidia-smi), its CPU build from PyTorch's CPU index (the CUDA build
# from PyPI is about 5 GB more), or from the default index where that index cannot be reached (it says so); with a GPU,
# the default index. TORCH picks the version: e.g. TORCH=torch==2.13.0.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PORT ?= 7860
DATA_DIR ?= ../shared/data/multi30k
BIN := $(VENV)/bin

.PHONY: torch install dev test demo tiny-run lint browser lock shipped-code

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The index is probed first (5 s at most), so that an unreachable one costs no pip retries.
torch: $(BIN)/python
	@if $(BIN)/python -c "import torch" 2>/dev/null; then exit 0; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
		echo "A GPU is here (nvidia-smi): installing $(TORCH) from the default index."; \
		$(BIN)/pip install --quiet "$(TORCH)"; \
	elif $(BIN)/python -c "import urllib.request; urllib.request.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=5)" \
			2>/dev/null; then \
		echo "No GPU here (no nvidia-smi): installing $(TORCH) from PyTorch's CPU index, $(TORCH_CPU_INDEX)."; \
		$(BIN)/pip install --quiet --index-url $(TORCH_CPU_INDEX) "$(TORCH)"; \
	else \
		echo "No GPU here, but PyTorch's CPU index ($(TORCH_CPU_INDEX)) cannot be reached: installing $(TORCH)" \
			"from the default index instead (from PyPI that is the CUDA build, several GB)."; \
		$(BIN)/pip install --quiet "$(TORCH)"; \
	fi

# Every install is held to the versions the tests ran with (space_requirements.lock, which the Space installs too),
# so that a release on the registry changes nothing here until `make lock` takes it in. torch is left out: the
# `torch` step chose it (the lock has the CPU build; a GPU machine keeps its own).
CONSTRAINTS := $(VENV)/constraints.txt
$(CONSTRAINTS): space_requirements.lock | $(BIN)/python
	grep -v '^torch==' $< > $@

install: torch $(CONSTRAINTS)
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) ".[train,app]"

dev: torch $(CONSTRAINTS)
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) ".[dev]"

# The newest releases within pyproject.toml's ranges (torch stays as installed), then the lock written from them;
# run `make test` after it and commit the lock with what it changed.
lock: torch
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/torch-as-installed.txt
	$(BIN)/pip install --quiet --upgrade --upgrade-strategy eager --constraint $(VENV)/torch-as-installed.txt ".[dev]"
	$(BIN)/python deploy_space.py --write_lock

# Chromium for the browser test (Debian package; Playwright drives it, no browser download).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: dev browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

demo: torch $(CONSTRAINTS)
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) ".[app]"
	$(BIN)/python app.py --port $(PORT)

# 2,000 pairs, one epoch, a small model: about 25 s of one CPU core once installed (`/usr/bin/time taskset -c 1
# make tiny-run`: 21 s user + 2 s system; the wall time is longer on a busy core). DATA_DIR= (empty) downloads Multi30k.
tiny-run: install
	$(BIN)/python train.py $(if $(DATA_DIR),--data_dir $(DATA_DIR)) --output_dir runs/tiny --overwrite_output_dir \
		--max_train_samples 2000 --max_eval_samples 200 --max_test_samples 200 --num_train_epochs 1 \
		--d_model 64 --d_ff 256 --encoder_layers 2 --decoder_layers 2 --vocab_size 2000 \
		--per_device_train_batch_size 32 --warmup_steps 30 --generation_num_beams 1

# The shipped folder loads with trust_remote_code from its own copy of modeling/ (without __init__.py, which registers
# the classes inside the project); tests/test_shipped_model.py fails while the copy differs.
SHIPPED_MODEL ?= models/transformer-en-de
shipped-code:
	rm -f $(SHIPPED_MODEL)/*.py
	cp $(filter-out modeling/__init__.py,$(wildcard modeling/*.py)) $(SHIPPED_MODEL)/

lint: dev
	$(BIN)/ruff check .
