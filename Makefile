# Set-up and the main jobs, from a fresh clone. Everything lives in .venv/ (created on demand).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: build test lint install clean-cache install-example test-example install-quack test-quack

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
# then the example op families' (test-example, test-quack).
test: lint install-example
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory test-example
	$(MAKE) --no-print-directory test-quack

# The example third-party op family (examples/kernelforge-silu-quant), installed editable into an
# overlay venv on top of .venv (build/example-venv sees .venv's packages, .venv does not see it:
# kernelforge's own tests and `make build` stay plugin-free). test-example builds its sm_90a
# variants on the CPU into a scratch cache (build/example-cache) and runs its CPU tests against it.
EXAMPLE := examples/kernelforge-silu-quant
EXAMPLE_VENV := build/example-venv
EXAMPLE_CACHE := build/example-cache
OVERLAY_VENV := $(EXAMPLE)/ci/overlay_venv.py

# $(call install_overlay,VENV,PACKAGE,PINNED_DEPS): the overlay venv VENV on top of .venv, the pinned
# requirements .venv lacks (if any), then PACKAGE editable; the recipe of VENV/.installed.
define install_overlay
	$(BIN)/python $(OVERLAY_VENV) $(1)
	$(if $(3),$(1)/bin/python -m pip install -q --no-deps $(3))
	$(1)/bin/python -m pip install -q --no-deps \
		$$($(BIN)/python -c 'import setuptools' 2>/dev/null && echo --no-build-isolation) -e $(2)
	touch $(1)/.installed
endef

$(EXAMPLE_VENV)/.installed: $(BIN)/kernelforge $(EXAMPLE)/pyproject.toml $(OVERLAY_VENV)
	$(call install_overlay,$(EXAMPLE_VENV),$(EXAMPLE))

install-example: $(EXAMPLE_VENV)/.installed

test-example: install-example
	$(EXAMPLE_VENV)/bin/python -m kernelforge build -q -j 2 --cache $(EXAMPLE_CACHE) --arch sm_90a --only 'silu_mul_quantize.*'
	KF_SILU_QUANT_TEST_CACHE=$(CURDIR)/$(EXAMPLE_CACHE) $(EXAMPLE_VENV)/bin/python -m pytest -q $(EXAMPLE)/tests

# quack's kernels as kernelforge families (examples/kernelforge-quack), in an overlay venv of their
# own (build/quack-venv) that also holds the pinned quack-kernels and what quack imports that .venv
# lacks: einops, and triton (imported by quack's autotuner module; nothing of it runs on a CPU).
# test-quack builds the families' sm_90a variants on the CPU into build/quack-cache and runs the
# package's CPU tests against it.
QUACK := examples/kernelforge-quack
QUACK_VENV := build/quack-venv
QUACK_CACHE := build/quack-cache
QUACK_DEPS := quack-kernels==0.6.5 einops==0.8.2 triton==3.9.0

$(QUACK_VENV)/.installed: $(BIN)/kernelforge $(QUACK)/pyproject.toml $(OVERLAY_VENV)
	$(call install_overlay,$(QUACK_VENV),$(QUACK),$(QUACK_DEPS))

install-quack: $(QUACK_VENV)/.installed

test-quack: install-quack
	$(QUACK_VENV)/bin/python -m kernelforge build -q -j 2 --cache $(QUACK_CACHE) --arch sm_90a --only 'quack_*'
	KF_QUACK_TEST_CACHE=$(CURDIR)/$(QUACK_CACHE) $(QUACK_VENV)/bin/python -m pytest -q $(QUACK)/tests

clean-cache: install
	$(BIN)/kernelforge cache clean --all
