"""The trigger lab: the ReLU construction, training behaviour, the BOS cap, runs and the CLI."""

import json
from dataclasses import replace

import pytest
import torch
from conftest import images_on

from sinklab import cli
from sinklab.core.errors import SinklabError
from sinklab.models.native import Transformer
from sinklab.trigger import analyses, lab, run_lab
from sinklab.trigger.config import EVAL_SEED, TriggerConfig, cap_first_key
from sinklab.trigger.evaluate import evaluate_trigger
from sinklab.trigger.task import TriggerTask
from sinklab.trigger.train import AdamStep, CompiledStep, train_trigger


@pytest.mark.parametrize("n, length", [(16, 16), (5, 9)])
def test_relu_construction_is_exact_with_no_weight_on_non_trigger_rows(n, length):
    result = analyses.check_relu_construction(TriggerTask(n=n, length=length, eval_trigger=3), sequences=10_000)
    assert result["max_abs_error"] <= 1e-6
    assert result["non_trigger_rows_exactly_zero"] and result["non_trigger_weight_max"] == 0
    assert result["bos_weight_max"] == 0  # no sink anywhere


def test_softmax_sinks_and_relu_does_not_after_short_training(trigger_pair):
    bos = {}
    for run in trigger_pair[1]["runs"]:
        assert run["converged"] and run["steps"] <= 3000, (
            f"{run['attn']} did not reach the paper's stopping rule in 3,000 steps ({run['steps']})"
        )
        bos[run["attn"]] = run["heads_detail"][0]["bos_mass_nontrigger"]
    assert bos["softmax"] >= 0.95
    assert bos["relu"] <= 0.05


def compile_failing_with(error, after_writing=False):
    """A stand-in for torch.compile whose compiled step raises ``error``: as compiling does,
    before the step runs, or (``after_writing``) after the step has updated its arguments."""

    def fake_compile(fn, **kwargs):
        def compiled(*args):
            if after_writing:
                fn(*args)
            raise error

        return compiled

    return fake_compile


def no_compiler():
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InvalidCxxCompiler

    return BackendCompilerFailed(None, InvalidCxxCompiler(), None)  # how inductor's failure reaches the caller


def dynamo_error(name):
    """Dynamo's error ``name``, made when a test runs (importing torch._dynamo takes 2 s: not at collection)."""

    def make():
        import torch._dynamo.exc

        return getattr(torch._dynamo.exc, name)("cannot trace the step")

    return make


def add_one_step():
    """A step that updates its state in place, as the training steps do."""

    def step(state, x):
        state["w"].add_(x)
        return state["w"].sum()

    return step


@pytest.mark.parametrize(
    "error",
    [no_compiler, dynamo_error("Unsupported"), dynamo_error("InternalTorchDynamoError")],
    ids=["no-compiler", "graph-break", "dynamo-bug"],
)
def test_a_compile_error_runs_the_step_once_uncompiled_and_is_recorded(monkeypatch, error):
    """Every error Dynamo raises while tracing or compiling (a backend's arrives wrapped in
    BackendCompilerFailed) falls back. Mutation tried: catching only BackendCompilerFailed let a
    graph break and Dynamo's own error escape."""
    monkeypatch.setattr(torch, "compile", compile_failing_with(error()))
    state, step = {"w": torch.zeros(2)}, CompiledStep(add_one_step())
    with pytest.warns(UserWarning, match="training uncompiled"):
        assert step(state, torch.ones(2)) == 2
    step(state, torch.ones(2))
    assert torch.equal(state["w"], torch.full((2,), 2.0))  # each step ran exactly once
    assert step.fallback.startswith(type(error()).__name__)


def test_a_tracing_failure_is_recorded_with_its_operator_and_line():
    """Dynamo's refusal to trace a builtin names the operator and the step's line only after its
    first line: the lent GPU's torch 2.11 recorded "Failed to trace builtin operator" and nothing
    more. A real refusal here (``print`` inside the step). Mutation tried: the first line alone."""

    def printing_step(state, x):
        print("step", x.shape)
        state["w"].add_(x)
        return 0

    state, step = {"w": torch.zeros(2)}, CompiledStep(printing_step)
    with pytest.warns(UserWarning, match="training uncompiled"):
        step(state, torch.ones(2))
    reason = step.fallback
    assert torch.equal(state["w"], torch.ones(2)) and reason.startswith("Unsupported: Failed to trace builtin operator")
    assert "builtin operator `print`" in reason and "in printing_step" in reason


@pytest.mark.parametrize(
    "error, after_writing",
    [
        (lambda: torch.OutOfMemoryError("CUDA out of memory"), False),
        (lambda: RuntimeError("a bug in the step"), False),
        (no_compiler, True),
    ],
    ids=["out-of-memory", "bug", "compile-error-after-a-write"],
)
def test_other_errors_and_a_compile_error_after_a_write_are_raised_not_retried(monkeypatch, error, after_writing):
    """Mutations tried: catching every ``Exception`` again reran the out-of-memory and bug steps
    uncompiled; without the version check the step that had written ran twice (w = 2)."""
    monkeypatch.setattr(torch, "compile", compile_failing_with(error(), after_writing))
    state, step = {"w": torch.zeros(2)}, CompiledStep(add_one_step())
    with pytest.raises(type(error())):
        step(state, torch.ones(2))
    assert step.fallback is None
    assert torch.equal(state["w"], torch.full((2,), float(after_writing)))


@pytest.mark.parametrize("seeds", [(0,), (0, 1)], ids=["alone", "ensemble"])
def test_a_compile_failure_is_recorded_in_the_run(monkeypatch, tmp_path, seeds):
    monkeypatch.setattr(torch, "compile", compile_failing_with(no_compiler()))
    base = TriggerConfig(layers=2, heads=1, n=6, length=6, eval_trigger=3, max_steps=3, compile="on")
    configs = [replace(base, seed=s) for s in seeds]
    with pytest.warns(UserWarning, match="No working C\\+\\+ compiler"):
        summary = run_lab(configs, tmp_path / "lab", workers=1, ensembles=len(seeds) > 1).summary
    mode = "ensemble-compiled" if len(seeds) > 1 else "compiled"
    assert [r["step_mode"] for r in summary["runs"]] == [mode] * len(seeds)
    assert list(summary["compile_fallbacks"]) == [cfg.key for cfg in configs]
    for reason in summary["compile_fallbacks"].values():
        assert reason.startswith("BackendCompilerFailed (InvalidCxxCompiler: No working C++ compiler found")


def test_a_converged_batch_leaves_the_weights_untouched():
    cfg = TriggerConfig(n=6, length=6, eval_trigger=3)
    torch.manual_seed(0)
    model = Transformer(cfg.model_config())
    before = [p.clone() for p in model.parameters()]
    for mode in AdamStep.MODES[:2]:
        AdamStep(model, lr=1.0, stop_below=1e9, mode=mode)(*cfg.task.sample(4)[:2], 1)
        for a, b in zip(before, model.parameters()):
            assert torch.equal(a, b)


def test_bos_cap_hook_caps_rows_and_keeps_their_sum():
    w = torch.softmax(torch.randn(2, 1, 5, 5) * 4, -1).tril()
    w = w / w.sum(-1, keepdim=True)

    class Point:
        q_start = 0

    capped = cap_first_key(0.3)(w, Point)
    assert capped[..., 1:, 0].max() <= 0.3 + 1e-6
    torch.testing.assert_close(capped[..., 0, 0], w[..., 0, 0])  # row 0 sees only BOS
    torch.testing.assert_close(capped.sum(-1), w.sum(-1))
    assert torch.all(capped >= 0)


def test_capped_training_reports_bos_mass_at_most_the_cap():
    cfg = TriggerConfig(bos_cap=0.6, max_steps=200, eval_sequences=100)
    model, log = train_trigger(cfg)
    head = evaluate_trigger(model, cfg)["heads_detail"][0]
    assert head["bos_mass_nontrigger_min"] <= head["bos_mass_nontrigger"] <= 0.6 + 1e-5


def test_nan_stops_training_with_a_clear_message(monkeypatch):
    original = TriggerTask.sample

    def poisoned(self, *args, **kwargs):
        batch = original(self, *args, **kwargs)
        batch.x[0, 1, 2] = float("nan")
        return batch

    monkeypatch.setattr(TriggerTask, "sample", poisoned)
    with pytest.raises(SinklabError, match="diverged"):
        train_trigger(TriggerConfig(max_steps=5))


def test_lab_run_directory_contract_and_resume(tmp_path, monkeypatch):
    configs = lab.paper_configs([0, 1], TriggerConfig(max_steps=20, eval_sequences=50), shapes=[(1, 1)])
    with images_on():  # the first run's PNGs are checked, not the resumed runs'
        summary = run_lab(configs, tmp_path, workers=1).summary
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["sink_threshold"] == 0.5 and len(saved["runs"]) == 4
    for run in saved["runs"]:
        assert {"attn", "layers", "heads", "seed", "steps", "eval_mse", "eval_max_abs_error", "heads_detail"} <= set(run)
        for head in run["heads_detail"]:
            assert {"layer", "head", "bos_mass_nontrigger", "bos_mass_nontrigger_min", "bos_mass_trigger", "sinks"} <= set(head)
    assert {row["attn"] for row in saved["across_seeds"]} == {"softmax", "relu"}
    files = json.loads((tmp_path / "run.json").read_text())["files"]
    assert any(f.startswith("attention_") for f in files) and all((tmp_path / f).exists() for f in files)
    assert (tmp_path / "config.json").exists()

    def must_not_train(job, device="cpu"):
        raise AssertionError("a finished model was trained again")

    monkeypatch.setattr(lab, "run_members", must_not_train)
    assert run_lab(configs, tmp_path, workers=1).reused  # finished: read back
    (tmp_path / "summary.json").unlink()  # killed after training, before its summary: the models are kept
    again = run_lab(configs, tmp_path, workers=1).summary
    assert again["runs"] == summary["runs"]
    model = lab.load_trigger_model(tmp_path, configs[0])
    assert isinstance(model, Transformer)


def test_cap_sweep_error_falls_as_the_cap_approaches_one(tmp_path, with_images):
    base = TriggerConfig(max_steps=500, eval_sequences=200)
    summary = run_lab(lab.cap_configs([0.5, 0.9, 1.0], [0], base), tmp_path, "cap_sweep", workers=1).summary
    errors = [row["best_eval_mse"] for row in summary["cap_tradeoff"]]
    assert errors[0] > errors[1] > errors[2]
    assert (tmp_path / "cap_tradeoff.png").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--attn", "softmax,bogus"], "choose from: softmax, relu"),
        (["--n", "2"], "at least 3"),
        (["--length", "3"], "at least 4"),
        (["--eval-trigger", "20"], "outside the sequence"),
        (["--n-layers", "0"], "--n-layers must be at least 1"),
        (["--heads", "-1"], "--n-heads must be at least 1"),  # --heads: the old spelling
    ],
)
def test_cli_bad_input_is_one_clear_line(argv, message, capsys, tmp_path):
    assert run_cli(["trigger", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_unwritable_output_directory(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["trigger", "--construct", "--out", str(blocker / "sub")]) == 2
    assert "not writable" in capsys.readouterr().err


def test_cli_construct(capsys, tmp_path):
    assert cli.main(["trigger", "--construct", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["relu_construction"]["max_abs_error"] <= 1e-6


def run_cli(argv) -> int:
    """The exit status of ``sinklab argv`` (argparse errors exit through SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def test_bad_config_values():
    with pytest.raises(SinklabError, match="BOS cap"):
        TriggerConfig(bos_cap=1.5)
    with pytest.raises(SinklabError, match="compile"):
        TriggerConfig(compile="maybe")
    for seed in (EVAL_SEED - 1, 2**32 + EVAL_SEED - 1):  # a CPU generator keeps the low 32 bits
        with pytest.raises(SinklabError, match="would train on the evaluation set"):
            TriggerConfig(seed=seed)


def test_a_lab_record_from_before_the_value_gate_is_reused_and_summarised(tmp_path):
    """Records saved before an extra existed lack its switch: the lab reuses them (they ran with it
    off) rather than retraining, and the seed statistics and run lookups read them. Mutation tried:
    comparing the saved config as written (the record is then retrained)."""
    from sinklab.trigger.evaluate import summarise_seeds
    from sinklab.trigger.report import runs_of

    cfg = TriggerConfig(max_steps=5)
    old = json.loads(json.dumps(cfg.to_dict()))
    del old["attention"]["value_gate"]
    record = {"key": cfg.key, "attn": "softmax", "gate": False, "head_norm": False, "layers": 1, "heads": 1, "seed": 0}
    record |= {"bos_cap": None, "steps": 5, "converged": False, "train_seconds": 0.1, "eval_mse": 0.1, "eval_max_abs_error": 0.2}
    record["heads_detail"] = [{"layer": 0, "sinks": 1, "bos_mass_nontrigger": 0.9}]
    (tmp_path / "records").mkdir()
    (tmp_path / "maps").mkdir()
    (tmp_path / "records" / f"{cfg.key}.json").write_text(json.dumps({"config": old, "record": record}))
    (tmp_path / "maps" / f"{cfg.key}.safetensors").write_bytes(b"")
    assert lab._load_record(tmp_path, cfg) == record
    assert not lab._load_record(tmp_path, replace(cfg, max_steps=6))  # another configuration is not reused
    (row,) = summarise_seeds([record])
    assert row["value_gate"] is False and row["n_seeds"] == 1
    keys = {"attn": "softmax", "gate": False, "head_norm": False, "value_gate": False, "layers": 1, "heads": 1, "bos_cap": None}
    assert runs_of({**keys, "seeds": [0]}, [record]) == [record]
