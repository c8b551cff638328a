"""The recipe of docs/contributing/recipes/benchmark-task.md, followed: a new benchmark task is one
file (a registered ``BenchTask`` and the new suite that holds it), and the bench runs it on a model
folder with ``--limit quick``, its metrics in the model's results file."""

import importlib.util
import json
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab
from sinklab import cli
from sinklab.bench import SUITES, TASKS
from sinklab.core import schemas
from sinklab.scan import InputSpec, build_inputs

#: The new file, as a contributor would write it: the strongest first-token sink among the heads.
STRONGEST = textwrap.dedent(
    '''
    """The strongest sink head: the largest first-token mass of any (layer, head) (the head-level
    view of Xiao et al. 2024's first-token mass), and the layer it is in."""

    from sinklab.bench import SUITES, BenchTask, metric, register
    from sinklab.scan import SCAN


    def read(result):
        mass = result.summary["first_token_mass"]  # (layers, heads)
        best = max((value, layer) for layer, row in enumerate(mass) for value in row if value is not None)
        return {
            "metrics": {"max": metric(best[0], better=None), "layer": metric(best[1])},
            "profiles": {"strongest_head_by_layer": [max(row) for row in mass]},
        }


    TASK = register(
        BenchTask(
            name="strongest_sink_head",
            version=1,
            group="sinking",
            title="the strongest first-token sink among the heads",
            paper="Xiao et al. 2024 (ICLR), Efficient Streaming Language Models with Attention Sinks",
            capability=SCAN,
            settings={"bos": "auto", "corpus": "shakespeare", "tokens": 16, "batch": 4, "seed": 0, "min_query": 1},
            quick={"batch": 2},
            read=read,
            positions=lambda s: s["tokens"],
            headline="max",
        )
    )
    SUITES["sinks-v3"] = (*SUITES["sinks-v2"], TASK.name)  # a new task, a new suite
    '''
)


@pytest.fixture
def strongest(tmp_path, monkeypatch):
    """The new file's module, imported from a folder of its own; afterwards the task and its suite
    are gone (the run directories name them only as strings, so they still validate)."""
    try:
        path = tmp_path / "strongest_sink_head.py"
        path.write_text(STRONGEST)
        spec = importlib.util.spec_from_file_location("strongest_sink_head", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "strongest_sink_head", module)
        spec.loader.exec_module(module)  # registers it
        yield module
    finally:
        TASKS.pop("strongest_sink_head", None)
        SUITES.pop("sinks-v3", None)


def direct_first_token_mass(folder: str) -> torch.Tensor:
    """(layers, heads) the mean attention queries 1..T-1 put on position 0, from transformers'
    eager attention on the task's quick inputs."""
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    spec = InputSpec(corpus="shakespeare", tokens=16, batch=2, seed=0, bos="auto")
    ids = build_inputs(spec, tokenizer, model.config.max_position_embeddings, model.config.vocab_size).ids
    assert ids.shape == (2, 16)
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions  # per layer (B, H, T, T)
    return torch.stack([a[:, :, 1:, 0].mean(dim=(0, -1)) for a in attentions])


def test_a_new_benchmark_task_is_one_file_that_the_bench_runs(strongest, tiny_model_dir, tmp_path):
    """The task and its suite are registered, the bench runs it alone (``tasks=(name,)``, ``limit
    quick``: two sequences) on a model folder, and the model's results file holds its metrics: the
    largest first-token mass of the 12 heads and its layer, as transformers' eager attention on
    the same tokens gives them. Mutation tried: the file's ``read`` taking the mean over the heads
    instead of the max fails the value. (``sinklab.bench_models`` runs it here; the next test runs
    the command.)"""
    assert TASKS["strongest_sink_head"] is strongest.TASK and SUITES["sinks-v3"][-1] == "strongest_sink_head"
    folder, out = str(tiny_model_dir("llama")), tmp_path / "run"
    result = sinklab.bench_models([folder], suite="sinks-v3", tasks=("strongest_sink_head",), limit="quick", out=str(out))
    (results_file,) = (out / "results").glob("*.json")
    results = json.loads(results_file.read_text())
    assert results["suite"] == "sinks-v3" and results["limit"] == "quick"
    schemas.validate(results)
    schemas.validate(json.loads((out / "summary.json").read_text()))
    entry = results["tasks"]["strongest_sink_head"]
    assert entry["not_applicable"] is None and entry["version"] == 1 and entry["config"]["inputs"]["batch"] == 2

    mass = direct_first_token_mass(folder)
    best = int(mass.argmax())
    assert entry["metrics"]["max"]["value"] == pytest.approx(mass.max().item(), abs=1e-5)
    assert entry["metrics"]["layer"]["value"] == best // mass.shape[1]
    assert entry["profiles"]["strongest_head_by_layer"] == pytest.approx(mass.amax(-1).tolist(), abs=1e-5)
    assert result.frame().loc[0, "strongest_sink_head/max"] == pytest.approx(mass.max().item(), abs=1e-5)  # the headline


def test_the_command_runs_a_new_suite_registered_in_one_file(strongest, tiny_model_dir, tmp_path):
    """``sinklab bench --suite sinks-v3 --tasks strongest_sink_head --limit quick``: the parser
    reads the suites when it is built, so a suite registered in one file is a choice (it was
    refused as an invalid choice while the choices were a tuple made at import)."""
    out = tmp_path / "run"
    argv = ["bench", str(tiny_model_dir("llama")), "--suite", "sinks-v3", "--tasks", "strongest_sink_head"]
    try:
        code = cli.main([*argv, "--limit", "quick", "--out", str(out), "--quiet"])
    except SystemExit as exc:  # the parser's usage error
        code = exc.code
    assert code == 0
    assert (out / "results").is_dir()
