"""Reproducible training (issue 53): the threads a run used are recorded, ``--threads`` sets them, and
the same seed and thread count give the same checkpoint bit for bit, uninterrupted or resumed; a run
of another thread count is another run."""

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_pretrain import corpus, killed_at_step_7, tiny  # noqa: F401 (the fixture)

from sinklab import cli
from sinklab.core.atomic import read_jsonl
from sinklab.core.checkpoint import latest_checkpoint
from sinklab.core.errors import SinklabError
from sinklab.core.launchers import LOCAL, LauncherSettings
from sinklab.core.provenance import OnThreads, cpu_model, machine_record
from sinklab.pretrain import results, train_lm
from sinklab.pretrain import train as train_module
from sinklab.pretrain.sweep import SweepConfig

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two threads need two cores")


@pytest.fixture(autouse=True)
def threads_kept():
    """Each test leaves torch's threads as it found them."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def wide(corpus, **kw):  # noqa: F811
    """The tiny run with a wider batch (32), so that two threads have work to split. Whether one and
    two threads then sum in another order depends on the CPU: on the Intel Xeon of results 4c they
    do (at batch 4 they agreed to the bit), on an AMD EPYC they agree to the bit here too."""
    return tiny(corpus, batch=32, **kw)


@pytest.fixture
def training_threads(monkeypatch):
    """The torch thread count at every loss the training computes, appended in order."""
    seen: list[int] = []
    original = train_module.lm_loss

    def counted(model, batch):
        seen.append(torch.get_num_threads())
        return original(model, batch)

    monkeypatch.setattr(train_module, "lm_loss", counted)
    return seen


def weights(run_dir) -> dict:
    """The tensors of the run's last checkpoint: the model's weights and the optimizer's moments."""
    last = latest_checkpoint(run_dir)
    return {f"{part}/{k}": v for part, k, v in _tensors(last)}


def _tensors(last: Path):
    for part in ("model", "optimizer"):
        for k, v in load_file(str(last / f"{part}.safetensors")).items():
            yield part, k, v


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and bool(a) and all(torch.equal(a[k], b[k]) for k in a)


def test_same_seed_and_threads_give_the_same_checkpoint_and_train_on_those_threads(corpus, tmp_path, training_threads):  # noqa: F811
    """Mutation caught: the pipeline setting the threads only around run.json's writing (training
    on the caller's 1 thread): the 2-thread run's losses are computed on 1 thread. (Whether that
    changes the weights depends on the CPU, so the threads are read where the training runs.)"""
    torch.set_num_threads(1)
    first, second, single = tmp_path / "first", tmp_path / "second", tmp_path / "single"

    def threads_seen(threads: int, out: Path) -> set[int]:
        training_threads.clear()
        train_lm(wide(corpus, threads=threads), out)
        return set(training_threads)

    assert threads_seen(2, first) == threads_seen(2, second) == {2} and threads_seen(1, single) == {1}
    assert same(weights(first), weights(second))
    timeless = [
        [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_jsonl(run / "metrics.jsonl")]
        for run in (first, second)
    ]
    assert timeless[0] == timeless[1]  # every evaluation's loss and sink figures too
    assert torch.get_num_threads() == 1  # the run's threads do not leak into the caller
    machine = json.loads((first / "run.json").read_text())["machine"]
    assert machine["torch_threads"] == 2 and machine["torch_interop_threads"] == torch.get_num_interop_threads()
    assert machine["cpu"] == cpu_model() and machine["cpu_count"] == os.cpu_count()
    assert machine["deterministic_algorithms"] is False
    summary = json.loads((first / "summary.json").read_text())
    assert results.run_row(str(first), summary)["threads"] == 2
    assert results.run_row(str(single), json.loads((single / "summary.json").read_text()))["threads"] == 1


def test_a_run_resumed_at_the_same_threads_equals_the_uninterrupted_one(corpus, tmp_path, monkeypatch):  # noqa: F811
    """Mutation caught: the resumed half on the caller's thread (1) instead of the run's 2."""
    torch.set_num_threads(1)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train_lm(wide(corpus, threads=2), straight)
    killed_at_step_7(wide(corpus, threads=2), killed, monkeypatch)
    with pytest.raises(SinklabError, match=r"holds a run of another configuration \(threads: 2 there, 1 now\)"):
        train_lm(wide(corpus, threads=1), killed, resume=True)  # another thread count is another run
    train_lm(wide(corpus, threads=2), killed, resume=True)
    assert same(weights(straight), weights(killed))
    with pytest.raises(SinklabError, match=r"threads: 2 there, None now"):
        train_lm(wide(corpus), straight)  # a finished run is not read back as a default-threads run


def test_the_machine_record_reads_what_torch_and_the_system_say(monkeypatch):
    record = machine_record()
    assert record["torch_threads"] == torch.get_num_threads()
    assert record["torch_interop_threads"] == torch.get_num_interop_threads()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        assert not names or record["cpu"] == names[0]
    try:
        torch.use_deterministic_algorithms(True)
        assert machine_record()["deterministic_algorithms"] is True
    finally:
        torch.use_deterministic_algorithms(False)
    assert "gpu" not in record or torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert machine_record()["gpu"] == "NVIDIA H200" and set(machine_record()["cudnn"]) == {"deterministic", "benchmark"}
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert machine_record()["world_size"] == 2 and record["world_size"] == 1


def test_jobs_run_on_the_threads_asked_and_give_them_back():
    torch.set_num_threads(1)
    assert OnThreads(lambda job: (job, torch.get_num_threads()), 2)("x") == ("x", 2)
    assert OnThreads(lambda job: torch.get_num_threads(), None)(None) == 1
    assert torch.get_num_threads() == 1


def test_the_trigger_labs_jobs_get_the_threads_and_ask_the_engine_for_as_many_cpus(monkeypatch, tmp_path):
    """Mutation caught: the lab handing its jobs OnThreads(fn, None)."""
    from sinklab.trigger import TriggerConfig, lab
    from sinklab.trigger.ensemble import Placement

    seen = {}

    def launch(fn, jobs, settings, *args, **kwargs):
        seen.update(fn=fn, settings=settings)
        return []

    monkeypatch.setattr(lab, "launch", launch)
    with pytest.raises(KeyError):  # nothing trained: no record to return
        lab.run_grid([TriggerConfig()], tmp_path, Placement(threads=2), LOCAL)
    assert isinstance(seen["fn"], OnThreads) and seen["fn"].threads == 2 and seen["settings"].cpus_per_job == 2


def test_a_job_never_asks_for_fewer_cpus_than_its_threads():
    assert LOCAL.with_threads(None) is LOCAL and LOCAL.with_threads(2).cpus_per_job == 2
    assert LauncherSettings(cpus_per_job=4).with_threads(2).cpus_per_job == 4
    with pytest.raises(SinklabError, match="--threads 2 is more than the 1 CPUs each job asks for"):
        LauncherSettings(cpus_per_job=1).with_threads(2)


def test_a_sweep_gives_every_run_its_threads():
    assert {run.threads for run in SweepConfig(corpus="bb", threads=2).runs()} == {2}
    assert {run.threads for run in SweepConfig(corpus="bb").runs()} == {None}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pretrain", "--corpus", "bb", "--threads", "0"], "--threads must be from 1 to this machine's"),
        (["pretrain", "--corpus", "bb", "--threads", "100000"], "--threads must be from 1 to this machine's"),
        (["sweep", "--corpus", "bb", "--threads", "0"], "--threads must be from 1 to this machine's"),
        (["sweep", "--corpus", "bb", "--set", "threads=2"], "the threads are the sweep's own flag: give --threads 2"),
        (["trigger", "--quick", "--threads", "0"], "--threads must be from 1 to this machine's"),
        (["adapt", "--threads", "2"], "--threads applies to fine-tuning (--to NAME)"),
        (["adapt", "--optimizer", "orthoadam", "--steps", "3"], "--steps, --optimizer apply to fine-tuning (--to NAME)"),
        (["adapt", "--to", "gate", "--threads", "0"], "--threads must be from 1 to this machine's"),
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
