# Two set-up commands that work on a fresh machine:
#   make demo   install and launch the app on the bundled model
#   make test   install and run the test suite
# TORCH picks the PyTorch build; pass e.g. TORCH=torch==2.13.0 to use a local CPU wheel.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch
BIN := $(VENV)/bin

.PHONY: install test demo lint browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev]"

# Chromium for the browser test (Debian package; Playwright drives it, no browser download).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: install browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

demo: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[app]"
	$(BIN)/python app.py

lint: install
	$(BIN)/ruff check .
