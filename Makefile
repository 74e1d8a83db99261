# Set-up and the main jobs, from a fresh clone. Everything lives in .venv/ (created on demand).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: build test lint install clean-cache

$(BIN)/kernelforge: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# A pinned CPU torch first (local wheel where available, seconds); an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[build,test]"
	touch $@

install: $(BIN)/kernelforge

# Main job: compile the default specs (all arches) into the checkout's cache/.
build: install
	$(BIN)/kernelforge build

# Lint (config: [tool.ruff] in pyproject.toml). Checks only: never `--fix` over kernelforge/kernels/,
# whose bytes are hashed into cache keys.
lint: install
	$(BIN)/ruff check .

# The test suite (CPU here; GPU tests skip with their reason unless a CUDA GPU is present).
test: install
	$(BIN)/python -m pytest -q

clean-cache: install
	$(BIN)/kernelforge cache clean --all
