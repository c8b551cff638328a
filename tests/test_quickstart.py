"""The quickstart notebook runs as a user would run it: executed cell by cell in a fresh kernel
(nbclient) on the default model, and kept in step with its jupytext script.

It caught a real bug: sinklab switched matplotlib to the Agg backend when imported, so the
notebook's inline plot never showed (the image assertion fails with ``matplotlib.use("Agg")``
back in ``sinklab.core.figures``)."""

import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_the_notebook_and_its_script_hold_the_same_cells():
    jupytext = pytest.importorskip("jupytext")
    script = jupytext.read(EXAMPLES / "quickstart.py")
    notebook = jupytext.read(EXAMPLES / "quickstart.ipynb")
    assert [(c.cell_type, c.source) for c in script.cells] == [(c.cell_type, c.source) for c in notebook.cells], (
        "examples/quickstart.ipynb is out of date: jupytext --sync examples/quickstart.py"
    )


@pytest.mark.slow
def test_the_quickstart_notebook_runs_in_under_a_minute(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    seconds = time.perf_counter() - start
    outputs = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "largest logit change after the edit" in outputs and "tokens kept in the cache: 31" in outputs
    assert any("image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", [])), (
        "the first-token mass plot is missing"
    )
    assert seconds < 60, f"the quickstart took {seconds:.0f} s"
