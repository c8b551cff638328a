"""Reproducible training (issue 53): the threads a run used are recorded, ``--threads`` sets them, and
the same seed and thread count give the same checkpoint bit for bit, uninterrupted or resumed."""

import json

import pytest
import torch
from safetensors.torch import load_file
from test_pretrain import corpus, tiny  # noqa: F401 (the fixture)

from sinklab import cli
from sinklab.core.checkpoint import latest_checkpoint
from sinklab.core.provenance import OnThreads, machine_record
from sinklab.pretrain import results, train_lm
from sinklab.pretrain import train as pretrain
from sinklab.pretrain.sweep import SweepConfig


def weights(run_dir) -> dict:
    """The tensors of the run's last checkpoint: the model's weights and the optimizer's moments."""
    last = latest_checkpoint(run_dir)
    return {f"{part}/{k}": v for part in ("model", "optimizer") for k, v in load_file(str(last / f"{part}.safetensors")).items()}


def test_same_seed_and_threads_give_the_same_checkpoint_bit_for_bit(corpus, tmp_path):  # noqa: F811
    before = torch.get_num_threads()
    first, second = tmp_path / "first", tmp_path / "second"
    train_lm(tiny(corpus, threads=2), first)
    train_lm(tiny(corpus, threads=2), second)
    a, b = weights(first), weights(second)
    assert a.keys() == b.keys() and a
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.get_num_threads() == before  # the run's threads do not leak into the caller
    machine = json.loads((first / "run.json").read_text())["machine"]
    assert machine["torch_threads"] == 2
    assert {"torch_interop_threads", "cpu", "cpu_count", "deterministic_algorithms"} <= set(machine)
    assert machine["deterministic_algorithms"] is False and machine["cpu"]
    assert results.run_row(str(first), json.loads((first / "summary.json").read_text()))["threads"] == 2


def test_a_run_resumed_at_the_same_threads_equals_the_uninterrupted_one(corpus, tmp_path, monkeypatch):  # noqa: F811
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train_lm(tiny(corpus, threads=2), straight)
    original = pretrain.step_batch

    def dies_at_step_7(data, cfg, step):
        if step == 7:
            raise KeyboardInterrupt
        return original(data, cfg, step)

    monkeypatch.setattr(pretrain, "step_batch", dies_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        train_lm(tiny(corpus, threads=2), killed)
    monkeypatch.setattr(pretrain, "step_batch", original)
    train_lm(tiny(corpus, threads=2), killed, resume=True)
    a, b = weights(straight), weights(killed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_run_json_records_the_threads_the_run_used_not_the_callers(corpus, tmp_path):  # noqa: F811
    torch.set_num_threads(1)
    train_lm(tiny(corpus, steps=4, eval_every=4, threads=2), tmp_path / "two")
    train_lm(tiny(corpus, steps=4, eval_every=4), tmp_path / "default")
    recorded = {
        name: json.loads((tmp_path / name / "run.json").read_text())["machine"]["torch_threads"] for name in ("two", "default")
    }
    assert recorded == {"two": 2, "default": 1}


def test_jobs_run_on_the_threads_asked_and_give_them_back():
    before = torch.get_num_threads()
    assert OnThreads(lambda job: (job, torch.get_num_threads()), 3)("x") == ("x", 3)
    assert OnThreads(lambda job: torch.get_num_threads(), None)(None) == before
    assert torch.get_num_threads() == before
    assert machine_record()["torch_threads"] == before


def test_a_sweep_gives_every_run_its_threads_and_the_flag_is_its_own():
    assert {run.threads for run in SweepConfig(corpus="bb", threads=2).runs()} == {2}
    assert {run.threads for run in SweepConfig(corpus="bb").runs()} == {None}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pretrain", "--corpus", "bb", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["sweep", "--corpus", "bb", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["sweep", "--corpus", "bb", "--set", "threads=2"], "--set threads=2: expected KEY=VALUE"),
        (["trigger", "--quick", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["adapt", "--threads", "2"], "--threads applies to fine-tuning (--to)"),
    ],
)
def test_bad_thread_counts_are_refused_in_one_line(argv, message, tmp_path, capsys):
    try:
        code = cli.main([*argv, "--out", str(tmp_path / "run")])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
