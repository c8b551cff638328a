"""Trigger ensembles: members follow their seeds trained alone, stop on their own, are planned over
workers within memory, and are summarised over seeds; the --seeds and --device errors."""

import json
from pathlib import Path

import pytest
import torch
from conftest import CONVERGES_FAST, images_on, seeds_of

from sinklab import cli
from sinklab.core.attention import AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.trigger import ensemble, lab, run_lab
from sinklab.trigger.config import TriggerConfig
from sinklab.trigger.ensemble import Ensemble, Placement, check_memory
from sinklab.trigger.evaluate import summarise_seeds
from sinklab.trigger.task import TriggerTask
from sinklab.trigger.train import train_trigger


def test_an_eager_ensemble_stops_each_member_where_its_seed_stops_alone():
    """One-layer ensembles run uncompiled (vmap), against torch.optim.Adam alone: the same steps."""
    configs = seeds_of(TriggerConfig(lr=CONVERGES_FAST, max_steps=3000, eval_sequences=10), (0, 1))
    members = Ensemble(configs).train()
    assert [log.step_mode for _, log in members] == ["ensemble-fused"] * 2
    for cfg, (model, log) in zip(configs, members):
        alone, alone_log = train_trigger(cfg)
        assert log.converged and log.steps == alone_log.steps
        for a, b in zip(model.parameters(), alone.parameters()):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)  # Adam magnifies rounding on near-zero gradients


def test_a_member_stops_with_the_weights_it_had_before_its_stopping_step():
    """The stopping step's batch already meets the rule, so its update is masked: a member keeps
    the weights of the step before, while the others train on. Mutation tried: the update applied
    to every member (mask all true) leaves each member with the weights after its stopping step."""
    configs = seeds_of(TriggerConfig(lr=CONVERGES_FAST, max_steps=3000, eval_sequences=10), (0, 1, 2, 3))
    run = Ensemble(configs)
    before_step, kept = {}, {}
    step, keep_weights = run._step, run._keep_weights

    def snapshot_then_step(params, *rest):
        before_step.update({name: p.clone() for name, p in params.items()})
        return step(params, *rest)

    def record_stop(slot, member):
        kept[member] = {name: p[slot] for name, p in before_step.items()}
        keep_weights(slot, member)

    run._step, run._keep_weights = snapshot_then_step, record_stop
    members = run.train()
    assert all(log.converged for _, log in members) and len({log.steps for _, log in members}) > 1
    for member, (model, _) in enumerate(members):
        for name, p in model.named_parameters():
            assert torch.equal(p, kept[member][name]), (member, name)


def test_a_diverging_member_stops_the_ensemble_with_its_name(monkeypatch):
    original = TriggerTask.sample_stacked

    def poisoned(self, batch, generators):
        stacked = original(self, batch, generators)
        stacked.x[1, 0, 1, 2] = float("nan")  # the second member's first sequence
        return stacked

    monkeypatch.setattr(TriggerTask, "sample_stacked", poisoned)
    with pytest.raises(SinklabError, match="training softmax_1x1_seed1 diverged"):
        Ensemble(seeds_of(TriggerConfig(max_steps=5), (0, 1))).train()


def test_ensembles_are_planned_per_configuration_and_fill_the_workers():
    softmax = seeds_of(TriggerConfig(), range(8))
    relu = seeds_of(TriggerConfig(attention=AttentionSpec("relu")), range(3))
    plan = Placement(workers=2, ensembles=True)
    jobs = plan.jobs(softmax + relu)
    assert sorted(len(j) for j in jobs) == [3, 8]
    assert all(len({ensemble.ensemble_key(c) for c in job}) == 1 for job in jobs)
    assert sorted(len(j) for j in plan.jobs(softmax)) == [4, 4]
    assert sorted(len(j) for j in plan.jobs(softmax[:1])) == [1]
    many = seeds_of(TriggerConfig(), range(ensemble.MAX_MEMBERS + 1))
    assert sorted(len(j) for j in Placement(workers=1, ensembles=True).jobs(many)) == [1, ensemble.MAX_MEMBERS]
    with pytest.raises(SinklabError, match="only in their seed"):
        Ensemble(softmax[:1] + relu[:1])


def test_ensembles_are_the_default_on_a_gpu_and_single_models_on_a_cpu():
    seeds = seeds_of(TriggerConfig(), range(8))
    assert [len(j) for j in Placement(workers=2).jobs(seeds)] == [1] * 8
    gpu = Placement(workers=2, device="cuda")
    assert gpu.processes == 1 and [len(j) for j in gpu.jobs(seeds)] == [8]


def test_members_that_would_not_fit_in_memory_are_refused_with_the_estimate():
    big = seeds_of(TriggerConfig(n=512, length=2048, eval_trigger=7, batch=4096), range(4))
    with pytest.raises(
        SinklabError,
        match=r"training softmax_1x1 with 4 seed\(s\) per job, 1 job\(s\) at a time, needs about [\d.]+ GiB \(estimate\)",
    ):
        check_memory([big], parallel=1)
    check_memory([seeds_of(TriggerConfig(), range(32))], parallel=2)  # the default shapes fit easily


MEASURE_PEAK = """
from pathlib import Path
from sinklab.trigger.config import TriggerConfig
from sinklab.trigger.ensemble import Ensemble, estimate_bytes

def status_kb(field):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

configs = [TriggerConfig(layers=2, heads=2, n=64, length=64, batch=256, max_steps=2, compile="off", seed=s) for s in range(4)]
Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to what is resident now
before = status_kb("VmRSS")
Ensemble(configs).train()
print(status_kb("VmHWM") - before, estimate_bytes(configs[0], 4))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's resettable peak resident size")
def test_the_memory_estimate_covers_the_peak_of_a_real_ensemble():
    """In a fresh process whose peak resident size is reset just before training (imports can
    leave a higher peak than the step): 4 members of a 2x2 model with wide tokens and long
    sequences, so that the step's activations dominate. Uncompiled: eager autograd keeps the most
    intermediates, and compiling adds a one-off cost per process (tracing and code generation)
    that the per-member estimate does not cover."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", MEASURE_PEAK], capture_output=True, text=True, check=True)
    peak, estimate = map(int, result.stdout.split())
    assert peak > 50 * 2**20, "the check needs a step whose memory stands out of the noise"
    assert estimate >= peak


def record(layers, sinks_by_layer, converged=True, seed=0, attn="softmax"):
    """A run record with one entry per head: ``sinks_by_layer`` lists each layer's head flags."""
    heads = [
        {"layer": layer, "head": h, "sinks": flag, "bos_mass_nontrigger": 0.9 if flag else 0.1}
        for layer, flags in enumerate(sinks_by_layer)
        for h, flag in enumerate(flags)
    ]
    return {
        **AttentionSpec(attn).flags(),
        "layers": layers,
        "heads": len(sinks_by_layer[0]),
        "bos_cap": None,
        "seed": seed,
        "steps": 100 * (seed + 1),
        "train_seconds": 1.0,
        "converged": converged,
        "eval_mse": 1e-4 * (seed + 1),
        "eval_max_abs_error": 1e-2,
        "heads_detail": heads,
    }


def test_statistics_over_seeds_count_the_paper_pattern_per_seed():
    runs = [
        record(2, [[True, False], [False, True]], seed=0),  # every layer has a sinking head
        record(2, [[True, True], [False, False]], seed=1, converged=False),  # layer 1 does not sink
        record(2, [[False, False], [False, False]], seed=2),  # no head sinks
    ]
    (row,) = summarise_seeds(runs)
    assert row["n_seeds"] == 3 and row["seeds"] == [0, 1, 2]
    assert row["solved"] == pytest.approx(2 / 3)
    assert row["every_layer_sinks"] == pytest.approx(1 / 3)
    assert row["no_head_sinks"] == pytest.approx(1 / 3)
    assert row["sinking_heads_per_layer"] == [{"0": 1, "1": 1, "2": 1}, {"0": 2, "1": 1}]
    assert (row["steps_mean"], row["steps_min"], row["steps_max"]) == (200, 100, 300)
    assert row["sinking_heads_min"] == 0 and row["sinking_heads_max"] == 2
    assert row["steps_std"] == pytest.approx(100)


def test_seeds_train_as_ensembles_in_the_lab_and_resume(tmp_path, monkeypatch):
    configs = lab.paper_configs(range(3), TriggerConfig(max_steps=30, eval_sequences=20), shapes=[(1, 1)], attns=("softmax",))
    with images_on():  # the first run's PNGs are checked, not the resumed run's
        summary = run_lab(configs, tmp_path, workers=1, ensembles=True).summary
    assert [r["step_mode"] for r in summary["runs"]] == ["ensemble-fused"] * 3
    (row,) = summary["across_seeds"]
    assert row["n_seeds"] == 3 and "every_layer_sinks" in row
    assert "seeds.png" in json.loads((tmp_path / "run.json").read_text())["files"] and (tmp_path / "seeds.png").exists()
    assert "Across seeds" in (tmp_path / "report.html").read_text()

    def must_not_train(job, device="cpu"):
        raise AssertionError("a finished model was trained again")

    monkeypatch.setattr(lab, "run_members", must_not_train)
    (tmp_path / "summary.json").unlink()  # killed after training, before its summary
    assert run_lab(configs, tmp_path, workers=1, ensembles=True).summary["runs"] == summary["runs"]


def run_cli(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize(
    "seeds, message",
    [
        ("0-", "expected seeds like 0-7,10"),
        ("0,x", "expected seeds like 0-7,10"),
        ("-3", "expected seeds like 0-7,10"),
        ("7-3", "the seed range 7-3 is empty"),
        ("0-3,2", "seed 2 is given more than once"),
        ("0-200000", "more than 100,000 seeds"),
    ],
)
def test_cli_bad_seeds_are_one_clear_line(seeds, message, capsys, tmp_path):
    assert run_cli(["trigger", "--seeds", seeds, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_refuses_seeds_beyond_memory_before_writing_anything(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["trigger", "--seeds", "0-63", "--n", "512", "--length", "2048", "--batch", "4096", "--out", str(out)]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "GiB (estimate)" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cli_device_cuda_without_a_gpu_is_refused(capsys, tmp_path):
    assert run_cli(["trigger", "--device", "cuda", "--out", str(tmp_path / "run")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_cli_prints_statistics_over_seeds(capsys, tmp_path):
    argv = [
        "trigger",
        "--attn",
        "softmax",
        "--seeds",
        "0-1",
        "--max-steps",
        "20",
        "--eval-sequences",
        "20",
        "--workers",
        "1",
        "--ensemble",
        "--out",
        str(tmp_path),
    ]
    assert run_cli(argv) == 0
    out = capsys.readouterr().out
    assert "every layer sinks" in out and "softmax 1x1" in out
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["across_seeds"][0]["seeds"] == [0, 1]
    assert {r["step_mode"] for r in saved["runs"]} == {"ensemble-fused"}
