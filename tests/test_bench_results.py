"""What keeps ``sinklab bench`` results from mixing, on hand-made entries (no model is measured): a
kept job is reused only for the same model files, task version and configuration, and a task that
did not apply is checked again; a model's tasks measured at different dtypes or devices are
refused; and the results schema requires every field of a metric."""

from __future__ import annotations

import json

import pytest

from sinklab.bench import TASKS
from sinklab.bench.results import check_one_result_per_version, model_results, provenance
from sinklab.bench.run import BenchJob, _finished, _job_path, _keep
from sinklab.bench.task import metric
from sinklab.core.errors import SinklabError
from sinklab.core.schemas import validate
from sinklab.models.hf import LoadOptions


def entry(name: str = "sink_rate", **change) -> dict:
    """A task's entry as a job returns it: version, configuration, metrics with spreads, where it ran."""
    task = TASKS[name]
    made = {
        "version": task.version, "group": task.group, "capability": task.capability.kind, "config": {"seed": 0},
        "not_applicable": None, "wall_s": 1.5, "metrics": {"rate": metric(0.5, 0.25, 12, "heads", "higher")},
        "profiles": {"by_layer": [0.5, None]}, "details": {}, "where": provenance(),
        "model_facts": {"model": "tiny", "dtype": "float32", "device": "cpu", "revision": None},
    }  # fmt: skip
    return {**made, **change}


def test_a_kept_job_is_reused_only_at_this_tasks_version_and_checked_again_where_it_did_not_apply(tiny_model_dir, tmp_path):
    """A kept entry for the same model files, version and configuration is read back; the same
    entry from another version of the task (its numbers measure something else), another
    configuration, other model files, or one that said the task did not apply (a model fixed
    since, or a check changed) is measured again. Mutations tried: the version left out of the
    comparison, and a not-applicable entry reused, each fail here."""
    job = BenchJob(str(tiny_model_dir("llama")), "sink_rate", "quick", LoadOptions())
    kept = {**entry(config=job.config()), "fingerprint": job.fingerprint()}
    kept.pop("model_facts")
    _keep(tmp_path, job, kept)
    assert _finished(tmp_path, job) == kept
    for change in (
        {"version": TASKS["sink_rate"].version + 1},
        {"config": {**job.config(), "seed": 1}},
        {"fingerprint": "another model"},
        {"not_applicable": "it reads 1024 positions and the model has 128", "metrics": {}},
    ):
        _keep(tmp_path, job, {**kept, **change})
        assert _finished(tmp_path, job) is None, change
    assert _finished(tmp_path, BenchJob(job.model, "first_token_mass", "quick", LoadOptions())) is None  # never kept


@pytest.mark.parametrize("key, other", [("dtype", "bfloat16"), ("device", "cuda")])
def test_a_models_tasks_measured_at_different_dtypes_or_devices_are_refused(key, other):
    """One results file holds one model at one dtype and device: tasks that ran at two (a kept
    job from a run with other load settings) are refused in one line. Mutation tried: the check
    removed fails here."""
    same = model_results("tiny", "tiny", "sinks-v1", "quick", {"sink_rate": entry(), "first_token_mass": entry()}, provenance())
    assert (same["dtype"], same["device"]) == ("float32", "cpu")
    odd = entry(model_facts={**entry()["model_facts"], key: other})
    with pytest.raises(SinklabError, match=f"different {key}"):
        model_results("tiny", "tiny", "sinks-v1", "quick", {"sink_rate": entry(), "first_token_mass": odd}, provenance())


@pytest.mark.parametrize("field", ["value", "spread", "n", "over", "better"])
def test_the_results_schema_requires_every_field_of_a_metric(field):
    """A results file made of hand-made entries validates; the same with one metric's field
    missing (its spread, say, which a reader needs to tell a difference from noise) does not.
    Mutation tried: spread no longer required fails here."""
    results = model_results("tiny", "tiny", "sinks-v1", "quick", {"sink_rate": entry()}, provenance())
    validate(results)
    del results["tasks"]["sink_rate"]["metrics"]["rate"][field]
    with pytest.raises(SinklabError, match=field):
        validate(results)


def results_with(value: float = 0.5, spread: float = 0.25, dtype: str = "float32") -> dict:
    """A results file of one model whose sink_rate task gives ``value`` and ``spread``, at ``dtype``."""
    facts = {**entry()["model_facts"], "dtype": dtype}
    rate = entry(metrics={"rate": metric(value, spread, 12, "heads", "higher")}, model_facts=facts)
    return model_results("tiny", "tiny", "sinks-v1", "quick", {"sink_rate": rate}, provenance())


@pytest.mark.parametrize(
    "other, refused",
    [
        (dict(value=0.5 * 1.02), True),  # 2 %: a changed measurement, not rounding
        (dict(spread=0.25 * 1.02), True),  # only the spread moved
        (dict(value=0.5 * (1 + 1e-6)), False),  # float32 rounding on another machine
        (dict(value=0.6, dtype="bfloat16"), False),  # another dtype: another model, not the same one
    ],
)
def test_one_model_and_task_version_is_one_result(other, refused):
    """The tolerance was only bracketed between 1e-6 and 4 %. At 2 %, and with only the spread
    differing, one model's two results at one task version are refused, saying what to do; a
    model at another dtype is not the same model, so its different values merge."""
    found = [("a.json", results_with()), ("b.json", results_with(**other))]
    if not refused:
        check_one_result_per_version(found)
        return
    with pytest.raises(SinklabError, match="a.json and b.json.*remake the older file with this sinklab"):
        check_one_result_per_version(found)


def test_the_default_models_jobs_are_kept_under_its_label_and_old_runs_jobs_still_found(tmp_path):
    """The default model's jobs went to jobs/default/ when it was left out and jobs/smollm2/ when
    named (its progress bar said "default"): both are smollm2 now, and a job kept under default/
    by an older run is still reused."""
    left_out, named = (BenchJob(m, "sink_rate", "quick", LoadOptions()) for m in (None, "smollm2"))
    assert left_out.label == named.label == "smollm2"
    assert _job_path(tmp_path, left_out) == _job_path(tmp_path, named) == tmp_path / "jobs" / "smollm2" / "sink_rate.json"
    kept = {**entry(config=left_out.config()), "fingerprint": left_out.fingerprint()}
    kept.pop("model_facts")
    old = tmp_path / "jobs" / "default" / "sink_rate.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"model": None, "task": "sink_rate", "entry": kept}))
    assert _finished(tmp_path, left_out) == kept
