"""The quickstart notebook runs as a user would run it: executed cell by cell in a fresh kernel
(nbclient) on the default model, and kept in step with its jupytext script.

It caught a real bug: sinklab switched matplotlib to the Agg backend when imported, so the
notebook's inline plot never showed (the image assertion fails with ``matplotlib.use("Agg")``
back in ``sinklab.core.figures``)."""

import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("name", ["quickstart", "tune"])
def test_each_notebook_and_its_script_hold_the_same_cells(name):
    jupytext = pytest.importorskip("jupytext")
    script = jupytext.read(EXAMPLES / f"{name}.py")
    notebook = jupytext.read(EXAMPLES / f"{name}.ipynb")
    assert [(c.cell_type, c.source) for c in script.cells] == [(c.cell_type, c.source) for c in notebook.cells], (
        f"examples/{name}.ipynb is out of date: jupytext --sync examples/{name}.py"
    )


@pytest.mark.slow
@pytest.mark.integration
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


@pytest.mark.slow
@pytest.mark.integration
def test_the_tune_notebook_runs_on_a_model_and_task_given_as_its_parameters(tmp_path, tiny_model_dir):
    """The tuning notebook executed as a user would, its parameters cell (the default model and the
    suite, which the suite cannot fetch) replaced as papermill would replace it: a tiny Llama and a
    task file. The tuned accuracy read inside the notebook's ``applied`` block is the run's."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from conftest import write_task

    task = write_task(tmp_path / "tiny" / "task.json", n=60)
    notebook = nbformat.read(EXAMPLES / "tune.ipynb", as_version=4)
    (parameters,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    parameters.source = f"MODEL = {str(tiny_model_dir('llama'))!r}\nTASKS = {str(task)!r}\nVALIDATION, TEST = 6, 8"
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert "acc_change_low" in [o for o in outputs if o["output_type"] == "execute_result"][0]["data"]["text/plain"]
    (printed,) = [o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout"]
    inside, reported = (float(part.split()[-1]) for part in printed.strip().split(";")[1].split(","))
    assert printed.startswith("tiny: ") and inside == reported
    assert (tmp_path / "tiny.json").exists()
