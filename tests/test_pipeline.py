"""One pipeline, two faces: every notebook function and its command give the same summary, apply the
same run-directory policy and mark a failed check the same way; run.json has one writer; the
notebook API is what a researcher would guess (dir(), load_model, load_result, frames that
concatenate, the command's defaults)."""

import ast
import inspect
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from conftest import one_line_error, write_task

import sinklab
from sinklab import cli
from sinklab.cli.args import given_settings
from sinklab.core import configs, keywords, pipeline
from sinklab.core.errors import NumericalCheckFailed, SinklabError
from sinklab.core.results import CAPABILITIES
from sinklab.core.runs import FAILED_CHECK, read_run_info
from sinklab.core.schemas import validate
from sinklab.intervene import MaskSelf, TriggerEditConfig, VarianceAmplify
from sinklab.pretrain import CompareRunsConfig, PretrainConfig
from sinklab.trigger import ConstructConfig

SRC = Path(sinklab.__file__).parent
PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 3
#: Summary keys that are wall-clock measurements: the only ones two runs of one configuration may differ in.
TIMING = {"seconds", "measure_seconds", "train_seconds", "ms", "tokens_per_s", "ms_per_token_by_chunk"}


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


@pytest.fixture(scope="module")
def folder(tiny_model_dir):
    return str(tiny_model_dir("llama", positions=1024))  # compress reads 400 + 257 positions


@pytest.fixture(scope="module")
def loaded(folder):
    """What sinklab.load_model returns for the tiny folder (the model's name is the folder, as on the command line)."""
    return sinklab.load_model(folder)


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "prompt.txt"
    path.write_text(PROMPT)
    return path


#: Per capability: the command's arguments and the notebook call's, for one configuration.
FACES = {
    "scan": (
        ["scan", "--text", "{text}", "--tokens", "24", "--batch", "2"],
        lambda m, text: sinklab.scan_model(m, text=text, tokens=24, batch=2),
    ),
    "intervene": (
        ["intervene", "--prompt", PROMPT, "--tokens", "24", "--mask-self", "5", "--amplify", "4", "--lam", "2"],
        lambda m, text: sinklab.intervene_model(m, None, [MaskSelf(5), VarianceAmplify(4, 2.0)], prompt=PROMPT, tokens=24),
    ),
    "stream": (
        [
            "stream",
            "--corpus",
            "{text}",
            "--tokens",
            "64",
            "--sinks",
            "2",
            "--window",
            "14",
            "--policies",
            "dense,sink",
            "--chunk",
            "32",
            "--latency-steps",
            "2",
        ],
        lambda m, text: sinklab.stream_model(
            m, corpus=text, tokens=64, sinks=2, window=14, policies=("dense", "sink"), chunk=32, latency_steps=2
        ),
    ),
    "adapt": (
        ["adapt", "--tokens", "16", "--windows", "1", "--calibration", "1", "--quant", "w8a8"],
        lambda m, text: sinklab.adapt_model(m, tokens=16, windows=1, calibration=1, schemes=("w8a8",)),
    ),
}


@pytest.mark.parametrize("kind", FACES)
def test_the_notebook_function_and_the_command_give_one_summary(kind, folder, loaded, prompt_file, tmp_path):
    """For one configuration, ``sinklab <command>`` and ``sinklab.<kind>_model`` give equal
    summaries (timing aside). Mutations tried: the API defaulting batch to 1 again (scan's
    summaries differ: no variance curve); stream_model passing bos as a bool again (the API's
    summary says bos_prepended for a stream the command reads the same way, but the config
    differs)."""
    argv, call = FACES[kind]
    out = tmp_path / "cli"
    assert (
        cli.main([argv[0], folder, *[a.replace("{text}", str(prompt_file)) for a in argv[1:]], "--out", str(out), "--quiet"]) == 0
    )
    from_cli = json.loads((out / "summary.json").read_text())
    in_memory = call(loaded, str(prompt_file))
    assert without_timing(in_memory.summary) == without_timing(from_cli)
    assert sinklab.load_result(out).kind == kind


def test_summary_is_the_same_dict_with_or_without_out(loaded, tmp_path, with_images):
    """Mutation tried: the pipeline stamping the written files into the summary (the old
    ``summary["figures"]``): the dicts differ."""
    plain = sinklab.scan_model(loaded, prompt=PROMPT, tokens=24, batch=2)
    kept = sinklab.scan_model(loaded, prompt=PROMPT, tokens=24, batch=2, out=tmp_path / "run")
    assert without_timing(kept.summary) == without_timing(plain.summary)
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == kept.summary
    assert "figures" not in kept.summary and "first_token_mass.png" in read_run_info(tmp_path / "run")["files"]


def test_out_of_another_configuration_is_refused_by_the_notebook_as_by_the_command(folder, loaded, tmp_path, capsys):
    """The notebook's ``out=`` gets the command's policy: another configuration refused with the
    same one line, the same configuration read back (with a warning), ``overwrite=True`` runs
    it again. Mutation tried: api._run calling the capability's measure and write itself (the
    old run_scan: no claim) lets the notebook write into the other run."""
    out = tmp_path / "run"
    assert cli.main(["scan", folder, "--prompt", PROMPT, "--tokens", "24", "--batch", "2", "--out", str(out), "--quiet"]) == 0
    assert cli.main(["scan", folder, "--prompt", PROMPT, "--tokens", "20", "--batch", "2", "--out", str(out), "--quiet"]) == 2
    from_cli = one_line_error(capsys).split("error: ", 1)[1]
    with pytest.raises(SinklabError) as refused:
        sinklab.scan_model(loaded, prompt=PROMPT, tokens=20, batch=2, out=out)
    assert str(refused.value) == from_cli and "inputs.tokens: 24 there, 20 now" in from_cli
    written = (out / "summary.json").stat().st_mtime_ns
    with pytest.warns(UserWarning, match="already holds this run, finished"):
        again = sinklab.scan_model(loaded, prompt=PROMPT, tokens=24, batch=2, out=out)
    assert again.reused and (out / "summary.json").stat().st_mtime_ns == written
    assert not sinklab.scan_model(loaded, prompt=PROMPT, tokens=20, batch=2, out=out, overwrite=True).reused


@pytest.fixture
def tiny_default(folder, monkeypatch):
    """The built-in default model, as ``sinklab.load_model()`` and a command without MODEL load it,
    played by the tiny folder, with a Hub commit in its config as a Hub model has."""
    from sinklab.models.hf import loading

    from_pretrained = loading._from_pretrained

    def load(*args, **kw):
        loaded = from_pretrained(*args, **kw)
        loaded.model.config._commit_hash = "0123abcd"
        return loaded

    monkeypatch.setattr(loading, "default_gguf_path", lambda: Path(folder) / "model.gguf")
    monkeypatch.setattr(loading, "dequantised_dir", lambda path: Path(folder))
    monkeypatch.setattr(loading, "_from_pretrained", load)


@pytest.mark.parametrize("first", ["command", "notebook"])
def test_one_run_is_recognised_from_either_face(first, tiny_default, tmp_path, capsys):
    """``sinklab scan --out X`` (the default model) and ``scan_model(sinklab.load_model(), out=X)``
    are one configuration, whichever ran first: the second reads the first back. Mutation tried:
    api._run recording the model object's facts again (its name where the command records null
    for the default, its Hub commit where the command records the revision asked, None): refused
    as "another configuration" in both orders."""
    out = tmp_path / "run"
    argv = ["scan", "--prompt", PROMPT, "--tokens", "24", "--batch", "2", "--out", str(out), "--quiet"]

    def notebook():
        return sinklab.scan_model(sinklab.load_model(), prompt=PROMPT, tokens=24, batch=2, out=out)

    if first == "command":
        assert cli.main(argv) == 0
        with pytest.warns(UserWarning, match="already holds this run, finished"):
            assert notebook().reused
    else:
        assert not notebook().reused
        capsys.readouterr()
        assert cli.main(argv) == 0
        assert "holds this run, finished" in capsys.readouterr().out


def test_a_comparison_by_name_is_recognised_from_either_face(folder, tmp_path):
    """``sinklab scan A B --out X`` then ``sinklab.scan_models([A, B], out=X)``: one configuration,
    read back. Mutations tried: scan_models leaving the load options unresolved (``device: auto``
    where the command records ``cpu``), and its scan settings naming no model where the command's
    name the first: each refused as another configuration."""
    out = tmp_path / "cmp"
    argv = ["scan", folder, folder, "--prompt", PROMPT, "--tokens", "24", "--batch", "2", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    with pytest.warns(UserWarning, match="already holds this run, finished"):
        assert sinklab.scan_models([folder, folder], prompt=PROMPT, tokens=24, batch=2, out=out).reused


def test_a_model_object_on_the_first_gpu_is_the_command_lines_device_auto(folder, tmp_path, monkeypatch):
    """A model loaded without sinklab and sitting on ``cuda:0`` is recorded as ``--device auto``
    records the first GPU (``cuda``), so the command's run is read back (a GPU is played by the
    facts the model reports and the device the command's config.json records there). Mutation
    tried: the facts' device recorded as it is (``cuda:0``): refused as another configuration."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sinklab.models.subjects import HFSubject

    out = tmp_path / "run"
    assert cli.main(["scan", folder, "--prompt", PROMPT, "--tokens", "24", "--batch", "2", "--out", str(out), "--quiet"]) == 0
    config = json.loads((out / "config.json").read_text())
    config["load"]["device"] = "cuda"  # what --device auto records on a machine with a GPU
    (out / "config.json").write_text(json.dumps(config))
    facts = HFSubject.facts
    monkeypatch.setattr(HFSubject, "facts", lambda self: {**facts(self), "device": "cuda:0"})
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.warns(UserWarning, match="already holds this run, finished"):
        assert sinklab.scan_model(model, tokenizer, prompt=PROMPT, tokens=24, batch=2, out=out).reused


def test_a_failed_check_in_the_notebook_marks_the_run_failed(loaded, prompt_file, tmp_path, monkeypatch, capsys):
    """A stream whose one-pass check fails raises NumericalCheckFailed in the notebook too, its
    results kept and run.json marked, so the command runs it again instead of calling it finished.
    Mutations tried: the pipeline recording the run finished before checking (the command then
    skips the failed run: exit 0 with "holds this run, finished"); the pipeline's path without
    ``out`` not checking (the notebook's first call returns quietly)."""
    from sinklab.stream import benchmark

    monkeypatch.setattr(benchmark, "ONE_PASS_TOLERANCE", -1.0)
    settings = dict(corpus=str(prompt_file), tokens=40, sinks=2, window=14, policies=("sink",), chunk=20, latency_steps=1)
    with pytest.raises(NumericalCheckFailed, match="one-pass"):
        sinklab.stream_model(loaded, **settings)  # without out: nothing to mark, the check still raises
    with pytest.raises(NumericalCheckFailed, match="results kept in") as failed:
        sinklab.stream_model(loaded, out=tmp_path / "run", **settings)
    assert failed.value.run_dir == tmp_path / "run" and (tmp_path / "run" / "summary.json").exists()
    assert read_run_info(tmp_path / "run")["status"] == FAILED_CHECK
    monkeypatch.undo()
    result = sinklab.stream_model(loaded, out=tmp_path / "run", **settings)
    assert not result.reused and read_run_info(tmp_path / "run")["status"] == "finished"


def _writes_run_json(node: ast.AST) -> bool:
    """Whether a call writes a file named by RUN_INFO or "run.json"."""
    if not isinstance(node, ast.Call):
        return False
    name = getattr(node.func, "attr", getattr(node.func, "id", ""))
    named = any(
        isinstance(n, ast.Name) and n.id == "RUN_INFO" or isinstance(n, ast.Constant) and n.value == "run.json"
        for a in node.args
        for n in ast.walk(a)
    )
    return named and name in ("write_json", "atomic_path", "write_text", "open", "write_bytes")


def test_run_json_has_one_writer():
    """Nothing in sinklab writes run.json except core.runs._write_run_info. Mutation tried: the
    launcher recording its settings with write_json(run_dir / RUN_INFO, ...) again."""
    writers = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]:
            body = (
                function.body
                if isinstance(function, ast.FunctionDef)
                else [n for n in function.body if not isinstance(n, ast.FunctionDef)]
            )
            if any(_writes_run_json(n) for stmt in body for n in ast.walk(stmt)):
                writers.append(f"{path.relative_to(SRC)}:{getattr(function, 'name', '<module>')}")
    assert sorted(set(writers)) == ["core/runs.py:_write_run_info"], writers


def test_every_write_of_run_json_comes_from_its_one_writer(folder, loaded, prompt_file, tmp_path, monkeypatch):
    """Every write to a file named run.json during runs through the pipeline (a command's scan, a
    notebook intervention, a stream whose check fails) happens inside core.runs._write_run_info,
    whatever name the path was built from. Mutation tried: the pipeline writing run.json itself
    through write_json(out / ("run" + ".json"), ...) after recording the model (missed by the
    test above, which reads names; caught here)."""
    import builtins
    import io
    import os

    from sinklab.stream import benchmark

    writers = []

    def watched(real, target_of, writes=lambda args, kw: True):
        def call(*args, **kw):
            target = target_of(args, kw)
            named = isinstance(target, (str, os.PathLike)) and Path(target).name == "run.json"
            if named and writes(args, kw):
                frames = inspect.stack(context=0)
                writers.append({(f.frame.f_globals.get("__name__"), f.function) for f in frames})
            return real(*args, **kw)

        return call

    opens_for_writing = lambda args, kw: any(c in (args[1] if len(args) > 1 else kw.get("mode", "r")) for c in "wax+")  # noqa: E731
    monkeypatch.setattr(os, "replace", watched(os.replace, lambda args, kw: args[1]))
    monkeypatch.setattr(os, "rename", watched(os.rename, lambda args, kw: args[1]))
    monkeypatch.setattr(builtins, "open", watched(builtins.open, lambda args, kw: args[0], opens_for_writing))
    monkeypatch.setattr(io, "open", watched(io.open, lambda args, kw: args[0], opens_for_writing))
    assert (
        cli.main(["scan", folder, "--prompt", PROMPT, "--tokens", "24", "--batch", "2", "--out", str(tmp_path / "s"), "--quiet"])
        == 0
    )
    sinklab.intervene_model(loaded, None, [MaskSelf(5)], prompt=PROMPT, tokens=24, out=tmp_path / "i")
    monkeypatch.setattr(benchmark, "ONE_PASS_TOLERANCE", -1.0)
    with pytest.raises(NumericalCheckFailed):
        sinklab.stream_model(loaded, corpus=str(prompt_file), tokens=40, sinks=2, window=14, chunk=20, out=tmp_path / "t")
    assert len(writers) >= 9  # start, the model's facts and the end of each of the three runs
    assert all(("sinklab.core.runs", "_write_run_info") in frames for frames in writers)


def test_dir_lists_the_api_and_subpackages_import_on_first_use():
    """Mutations tried: no module __dir__ (dir() lists no function); intervene not among the
    lazily imported subpackages (``sinklab.intervene.MaskSelf`` after a plain import fails)."""
    listed = dir(sinklab)
    for name in (
        "scan_model",
        "scan_models",
        "intervene_model",
        "stream_model",
        "adapt_model",
        "load_model",
        "load_result",
        "RunResult",
        "intervene",
        "scan",
    ):
        assert name in listed
    code = "import sinklab; print(sinklab.intervene.MaskSelf.__name__, sinklab.stream.sink_cache.__name__)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "MaskSelf",
        "sink_cache",
    ]


@pytest.mark.parametrize(
    "capability, function",
    [
        ("scan", "scan_model"),
        ("intervene", "intervene_model"),
        ("stream", "stream_model"),
        ("adapt", "adapt_model"),
        ("bench", "bench_models"),
    ],  # fmt: skip
)
def test_the_notebook_and_the_command_line_share_every_default(capability, function):
    """Every setting the command line has is a keyword of the notebook function, with the same
    default, both taken from the one config class; a flag whose default is deferred (None on the
    command line, so that one given where it is not read is refused) ends at the same default once
    ``given_settings`` fills it in. Mutation tried: a notebook signature with its own default
    (batch=1, the old scan_model) fails."""
    cls = CAPABILITIES[capability].config
    parameters = inspect.signature(getattr(sinklab, function)).parameters
    command = cli.build_parser()._subparsers._group_actions[0].choices[capability]
    parsed = command.parse_args([])
    deferred = [action.dest for action in command._actions if hasattr(action, "deferred_default")]
    assert given_settings(parsed, cls, deferred) == []
    for leaf in configs.leaves(cls):
        if leaf.meta["cli"] and leaf.path[0] != "load":
            assert parameters[leaf.name].default == leaf.default() == getattr(parsed, leaf.name), leaf.name


def test_what_load_model_returns_every_function_takes_and_frames_concatenate(loaded, prompt_file):
    """``sinklab.load_model`` (the tokenizer inside) goes straight into every notebook function;
    tables carry the model, its dtype and device, so two scans concatenate into one frame.
    Mutation tried: Subject.from_model refusing a LoadedModel (the old behaviour)."""
    one = sinklab.scan_model(loaded, prompt=PROMPT, tokens=24, batch=2)
    other = sinklab.scan_model(loaded, prompt=PROMPT, tokens=16, batch=2)
    both = pd.concat([one.frame(), other.frame()])
    assert list(both.columns[:3]) == ["model", "dtype", "device"] and set(both.dtype) == {"float32"} and len(both) == 2 * 3 * 4
    for table in one.tables:
        assert list(one.frame(table).columns[:3]) == ["model", "dtype", "device"], table
    assert sinklab.intervene_model(loaded, None, [MaskSelf(5)], prompt=PROMPT, tokens=24).frame().device.unique().tolist() == [
        "cpu"
    ]
    with pytest.raises(SinklabError, match="has no table 'bogus'; its tables: heads, layers, massive_activations, super_neurons"):
        one.frame("bogus")


#: Kinds not run here (a sweep starts a process pool for its runs): their tables are another kind's,
#: checked here (a sweep's summary is validated by tests/test_benchmark_provenance.py's tiny sweeps).
TABLES_OF = {"pretrain-sweep": "pretrain-compare"}
#: A cheap run of every other kind (``m``: the tiny model loaded; ``text``: a text file; ``lab``: a trigger
#: lab of the default softmax and ReLU models; ``out``: a folder of its own).
CHEAP_RUNS = {
    "scan": lambda m, text, lab, out: sinklab.scan_model(m, prompt=PROMPT, tokens=24, batch=2, layers=(0, 1)),
    "scan-compare": lambda m, text, lab, out: sinklab.scan_models([m, m], prompt=PROMPT, tokens=24, batch=2),
    "intervene": lambda m, text, lab, out: sinklab.intervene_model(
        m,
        None,
        [MaskSelf(5)],
        prompt=PROMPT,
        tokens=24,
        accuracy=(str(write_task(out / "t" / "task.json", n=60)),),
        accuracy_test=8,
    ),
    "stream": lambda m, text, lab, out: sinklab.stream_model(
        m, corpus=text, tokens=40, sinks=2, window=14, chunk=20, latency_steps=1, ablation=(0, 1)
    ),
    "adapt": lambda m, text, lab, out: sinklab.adapt_model(m, tokens=16, windows=1, calibration=1, schemes=("w8a8",)),
    "adapt-finetune": lambda m, text, lab, out: pipeline.run(
        CAPABILITIES["adapt-finetune"],
        configs.build(
            CAPABILITIES["adapt-finetune"].config,
            dict(mitigation="kv_bias", steps=1, seq_len=12, batch=2, tokens=16, windows=1, calibration=1, schemes=("w8a8",)),
        ),
        m,
        out=out / "tune",
    ),
    "compress": lambda m, text, lab, out: sinklab.compress_model(
        m, presses=("knorm",), ratios=(0.5,), keep_sinks=(0, 1), quantizers=(), contexts=(400,), keys=1, outside=None
    ),
    "tune": lambda m, text, lab, out: sinklab.tune_model(
        m, tasks=(str(write_task(out / "t" / "task.json")),), validation=6, test=8
    ),
    "bench": lambda m, text, lab, out: sinklab.bench_models([m.request["model"]], tasks=("sink_rate",), limit="quick"),
    "trigger": lambda m, text, lab, out: sinklab.load_result(lab),
    "trigger-construct": lambda m, text, lab, out: pipeline.run(CAPABILITIES["trigger-construct"], ConstructConfig()),
    "intervene-trigger": lambda m, text, lab, out: pipeline.run(
        CAPABILITIES["intervene-trigger"], TriggerEditConfig(lab_dir=str(lab))
    ),
    "pretrain": lambda m, text, lab, out: pipeline.run(CAPABILITIES["pretrain"], TINY_PRETRAIN, out=out / "pretrain"),
    "pretrain-compare": lambda m, text, lab, out: pipeline.run(
        CAPABILITIES["pretrain-compare"],
        CompareRunsConfig(runs=(str(pipeline.run(CAPABILITIES["pretrain"], TINY_PRETRAIN, out=out / "pretrain").out),)),
    ),
}
TINY_PRETRAIN = PretrainConfig(
    corpus="bb", steps=4, d_model=16, n_layers=1, n_heads=2, seq_len=16, batch=4, warmup=1, eval_every=2, eval_batches=1,
    scan_tokens=8, scan_batch=2,
)  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CAPABILITIES))
def test_every_kind_follows_its_schema_and_leads_its_tables_with_the_model(kind, loaded, prompt_file, trigger_pair, tmp_path):
    """Every kind's summary follows its JSON schema, which refuses a key it does not list (here, in
    a normal test, not only in the suite's closing check of every run directory). Frames of any two
    runs concatenate: every table of every kind starts with model, dtype and device (None where a
    run has no such model, as a trigger lab). A kind is run cheaply here or named in TABLES_OF with
    the kind whose tables it shares (a pretraining summary may hold any per-head extra's switch:
    its unknown keys must be booleans). Mutation tried: a schema without "additionalProperties":
    false (the unlisted key passes). Mutations tried: the stream's chunks
    without table_rows, and the tables of pretrain-compare, trigger, trigger-construct and
    intervene-trigger as they were (no model columns): each fails."""
    assert kind in CHEAP_RUNS or CAPABILITIES[TABLES_OF[kind]].tables == CAPABILITIES[kind].tables, kind
    if kind not in CHEAP_RUNS:
        pytest.skip(f"{kind} launches its runs as jobs of a process pool; its tables are {TABLES_OF[kind]}'s, checked")
    result = CHEAP_RUNS[kind](loaded, str(prompt_file), trigger_pair[0], tmp_path)
    validate(result.summary)
    with pytest.raises(SinklabError, match="breaks its schema at (the top level: Additional properties .*'unlisted'|unlisted)"):
        validate({**result.summary, "unlisted": 1})
    for table in result.tables:
        frame = result.frame(table)
        assert list(frame.columns[:3]) == ["model", "dtype", "device"], (kind, table)


def test_several_models_from_the_notebook_by_name_or_object(folder, loaded, tmp_path):
    """``sinklab.scan_models`` is ``sinklab scan A B``: labels as the user gave them, each model's
    scan under out/models/ when out is given. Mutation tried: labels from the model's name
    instead of the dict's keys."""
    compared = sinklab.scan_models({"mine": loaded, "theirs": folder}, prompt=PROMPT, tokens=24, batch=2, out=tmp_path / "cmp")
    frame = compared.frame()
    assert compared.kind == "scan-compare" and list(frame.label.unique()) == ["mine", "theirs"] and set(frame.model) == {folder}
    assert [e["run"] for e in compared.summary["models"]] == ["models/0-mine", "models/1-theirs"]
    alone = sinklab.load_result(tmp_path / "cmp" / "models" / "1-theirs")
    assert alone.summary["first_token_mass_by_layer"] == compared.summary["models"][1]["first_token_mass_by_layer"]
    in_memory = sinklab.scan_models([loaded, loaded], prompt=PROMPT, tokens=24, batch=2)
    assert [e["label"] for e in in_memory.summary["models"]] == [folder, folder]


def test_a_notebook_argument_that_does_not_exist_is_one_line(loaded):
    with pytest.raises(SinklabError, match="scan_model: unknown argument max_token; known: .*tokens"):
        sinklab.scan_model(loaded, max_token=24)
    with pytest.raises(SinklabError, match="give tokens= or its old spelling max_tokens=, not both"):
        sinklab.scan_model(loaded, tokens=24, max_tokens=24)
    with pytest.raises(SinklabError, match="no such text file: To be.*give it as --prompt / prompt="):
        sinklab.scan_model(loaded, text=PROMPT)
    with pytest.raises(SinklabError, match="not an intervention: .*give objects such as MaskSelf"):
        sinklab.intervene_model(loaded, None, [{"mask_self": [5]}], prompt=PROMPT, tokens=24)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: sinklab.scan_model(m, dtype="bfloat16", device="cuda", revision="v9"),
            "scan_model: device, dtype, revision say ",
        ),
        (lambda m: sinklab.stream_model(m, device_map="auto"), "stream_model: device_map say how to load a model"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, batch=2.5), "scan_model: batch takes an integer, got 2.5"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, tokens="32"), "scan_model: tokens takes an integer, got '32'"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, batch=True), "scan_model: batch takes an integer, got True"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, tokens=None), "scan_model: tokens takes an integer, not None"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, layers=[0, "1"]), "each item of layers takes an integer, got '1'"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, layers=1), "layers takes a list or tuple (each an integer), got 1"),
        (lambda m: sinklab.scan_model(m, prompt=PROMPT, bos="maybe"), "bos takes one of auto, yes, no, got 'maybe'"),
        (lambda m: sinklab.stream_model(m, policies=("sink", "snk")), "each item of policies takes one of dense, "),
        (lambda m: sinklab.intervene_model(m, None, 3, prompt=PROMPT), "interventions takes a list or tuple, got 3"),
    ],
    ids=["loading", "device-map", "float", "text", "bool", "none", "item", "bare-int", "choice", "item-choice", "not-a-list"],
)
def test_a_notebook_argument_of_the_wrong_type_is_one_line(loaded, call, message):
    """Loading settings given with a loaded model are refused (they were ignored), and every value
    is checked against its setting's type (batch=2.5 ended in a TypeError deep in the run,
    policies="sink" in "unknown policy s, i, n, k"). Mutations tried: api._run without the
    loading check (the first two calls run, ignoring them); from_kwargs without checked() (each
    other call ends in another error or none)."""
    with pytest.raises(SinklabError) as refused:
        call(loaded)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_bare_name_and_a_single_intervention_are_one_item(loaded, prompt_file):
    """``policies="sink"`` is ``("sink",)`` (not the letters s, i, n, k) and one intervention is a
    list of one; an int for a float setting is that float. Mutation tried: a bare string kept as it
    is (the stream says "unknown policy s, i, n, k")."""
    stream = dict(corpus=str(prompt_file), tokens=40, sinks=2, window=14, chunk=20, latency_steps=1)
    assert without_timing(sinklab.stream_model(loaded, policies="sink", **stream).summary) == without_timing(
        sinklab.stream_model(loaded, policies=("sink",), **stream).summary
    )
    one = sinklab.intervene_model(loaded, None, MaskSelf(5), prompt=PROMPT, tokens=24)
    assert without_timing(one.summary) == without_timing(
        sinklab.intervene_model(loaded, None, [MaskSelf(5)], prompt=PROMPT, tokens=24).summary
    )
    cfg = keywords.from_kwargs(CAPABILITIES["scan"].config, {"massive_absolute": 50})
    assert cfg.settings.massive_absolute == 50.0 and isinstance(cfg.settings.massive_absolute, float)


def test_load_result_reads_every_kind_it_wrote(loaded, prompt_file, tmp_path):
    """Every finished run directory comes back by its kind, with its data. Mutation tried:
    read_data not registered for stream (``.data`` comes back empty)."""
    sinklab.stream_model(
        loaded,
        corpus=str(prompt_file),
        tokens=48,
        sinks=2,
        window=14,
        policies=("dense", "sink"),
        chunk=24,
        latency_steps=1,
        out=tmp_path / "s",
    )
    back = sinklab.load_result(tmp_path / "s")
    assert (
        back.kind == "stream"
        and set(back.data["nll"]) == {"dense", "dense.positions", "sink", "sink.positions"}
        and not back.frame().empty
    )
    with pytest.raises(SinklabError, match="holds no finished run"):
        sinklab.load_result(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text('{"kind": "bogus"}')
    with pytest.raises(SinklabError, match="of kind 'bogus', which this sinklab cannot read"):
        sinklab.load_result(tmp_path / "x")


def test_load_result_warns_of_a_failed_check_and_names_a_missing_file(loaded, prompt_file, tmp_path, monkeypatch):
    """A run whose numerical check failed comes back with a warning (run.json says so), and a run
    directory that lost a data file is one line. Mutations tried: load_result without reading
    run.json (no warning) and without catching the missing file (safetensors' FileNotFoundError)."""
    from sinklab.stream import benchmark

    monkeypatch.setattr(benchmark, "ONE_PASS_TOLERANCE", -1.0)
    with pytest.raises(NumericalCheckFailed):
        sinklab.stream_model(loaded, corpus=str(prompt_file), tokens=40, sinks=2, window=14, chunk=20, out=tmp_path / "s")
    with pytest.warns(UserWarning, match="failed its numerical check .*: these results did not pass it"):
        assert sinklab.load_result(tmp_path / "s").kind == "stream"
    sinklab.scan_model(loaded, prompt=PROMPT, tokens=24, batch=2, out=tmp_path / "scan")
    (tmp_path / "scan" / "record.safetensors").unlink()
    with pytest.raises(SinklabError, match="scan lacks a file its scan run writes .*record.safetensors.*--overwrite$"):
        sinklab.load_result(tmp_path / "scan")


def test_a_notebook_without_ipywidgets_gets_text_progress_bars():
    """tqdm.auto warns "IProgress not found" on every bar where ipywidgets is missing."""
    import importlib.util

    from sinklab.core import progress

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        progress.progress_bar(range(2), desc="x").close()
    if importlib.util.find_spec("ipywidgets") is None:
        assert progress.tqdm.__module__ == "tqdm.std"
