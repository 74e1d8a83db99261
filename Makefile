# Set-up and the main jobs, from a fresh clone. Everything lives in .venv/ (created on demand).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: build test lint install clean-cache install-example test-example

$(BIN)/kernelforge: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# A pinned CPU torch first (local wheel where available, seconds); an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[build,test]"
	touch $@

install: $(BIN)/kernelforge

# Main job: compile the specs a release builds (specs/, all arches) into the checkout's cache/.
build: install
	$(BIN)/kernelforge build --spec specs

# Lint (config: [tool.ruff] in pyproject.toml) and the import layers ([tool.importlinter]). Checks
# only: never `--fix` over kernel sources, whose bytes are hashed into cache keys.
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# Lint, the test suite (CPU here; GPU tests skip with their reason unless a CUDA GPU is present),
# then the example op family's (test-example).
test: lint install-example
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory test-example

# The example third-party op family (examples/kernelforge-silu-quant), installed editable into an
# overlay venv on top of .venv (build/example-venv sees .venv's packages, .venv does not see it:
# kernelforge's own tests and `make build` stay plugin-free). test-example builds its sm_90a
# variants on the CPU into a scratch cache (build/example-cache) and runs its CPU tests against it.
EXAMPLE := examples/kernelforge-silu-quant
EXAMPLE_VENV := build/example-venv
EXAMPLE_CACHE := build/example-cache

$(EXAMPLE_VENV)/.installed: $(BIN)/kernelforge $(EXAMPLE)/pyproject.toml $(EXAMPLE)/ci/overlay_venv.py
	$(BIN)/python $(EXAMPLE)/ci/overlay_venv.py $(EXAMPLE_VENV)
	$(EXAMPLE_VENV)/bin/python -m pip install -q --no-deps \
		$$($(BIN)/python -c 'import setuptools' 2>/dev/null && echo --no-build-isolation) -e $(EXAMPLE)
	touch $@

install-example: $(EXAMPLE_VENV)/.installed

test-example: install-example
	$(EXAMPLE_VENV)/bin/python -m kernelforge build -q -j 2 --cache $(EXAMPLE_CACHE) --arch sm_90a --only 'silu_mul_quantize.*'
	KF_SILU_QUANT_TEST_CACHE=$(CURDIR)/$(EXAMPLE_CACHE) $(EXAMPLE_VENV)/bin/python -m pytest -q $(EXAMPLE)/tests

clean-cache: install
	$(BIN)/kernelforge cache clean --all
