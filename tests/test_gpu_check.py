"""``make gpu-check`` is ready before a GPU is lent: every section of benchmarks/gpu_check.py runs at
toy sizes on the CPU through the same code (``--smoke``), and its device map splits the layers in
half. Mutation tried: a section raising (``half_split`` naming ``model.layer.{i}``) is recorded as
``ok: False`` and fails the smoke test, instead of stopping the other sections. The rehearsal's
device map sends half the layers to disk, so accelerate offloads them as the GPU run's CPU half is
(meta parameters): the second GPU run's failure there (a super neuron's weight read on meta)
fails it (mutation: ``down_proj_weight`` reading the parameter as it is)."""

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import benchmark_module

from sinklab.core.errors import SinklabError
from sinklab.models.hf import check_device_map
from sinklab.pretrain.quantization import PAYOFF_SCHEMES


@pytest.fixture(scope="module")
def gpu_check():
    with benchmark_module("gpu_check") as module:
        yield module


@pytest.fixture()
def larger():
    with benchmark_module("pretrain_larger") as module:
        yield module


def test_the_device_map_puts_half_the_layers_on_each_device(gpu_check, monkeypatch):
    """It passes sinklab's device-map check as a GPU machine would run it (CUDA faked present).
    Mutation tried: ``_map_device`` without its digit-string branch refuses "0" (accelerate takes
    it as GPU 0), which the section's first version passed."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    mapping = check_device_map(json.dumps(gpu_check.half_split(30, "cuda:0", "cpu")))
    layers = [mapping[f"model.layers.{i}"] for i in range(30)]
    assert layers == [0] * 15 + ["cpu"] * 15
    assert mapping["model.embed_tokens"] == 0 and mapping["lm_head"] == "cpu"
    assert check_device_map('{"model.layers.0": "0", "lm_head": 0}') == {"model.layers.0": 0, "lm_head": 0}
    with pytest.raises(SinklabError, match="only 1 GPU"):
        check_device_map('{"model.layers.0": "cuda:1"}')


@pytest.mark.slow
@pytest.mark.integration
def test_every_section_runs_at_toy_sizes_on_the_cpu(gpu_check):
    results = gpu_check.run_sections("cpu", smoke=True, names=tuple(gpu_check.EVERY_SECTION))
    assert set(results) == set(gpu_check.EVERY_SECTION)
    failed = {name: r["error"] for name, r in results.items() if not r["ok"]}
    assert not failed, failed
    assert results["device_map"]["first_token_mass_max_abs_diff"] == 0.0 and results["device_map"]["super_neurons_agree"]
    assert results["device_map"]["devices"] == ["cpu", "disk"]  # the offloaded path the GPU run's CPU half takes
    assert results["sink_cache"]["kept_key_max_abs_error"] < 1e-4 * results["sink_cache"]["key_max_abs"]
    assert results["dtype_agreement"]["by_dtype"]["float32"]["first_token_mass_max_abs_diff"] == 0.0
    assert results["trigger_paper"]["compile_fallbacks"] == []  # the reasons, were a step to train uncompiled
    larger = results["pretrain_larger"]
    assert list(larger["runs"]) == ["softmax", "softpick", "softmax1+orthoadam"] and larger["left_out_by_the_time_box"] == []
    assert all(tuple(run["quantization_penalty"]) == PAYOFF_SCHEMES for run in larger["runs"].values())
    assert larger["runs"]["softmax"]["attention_zero_share_mean"] == 0
    assert all(0 <= run["first_token_mass_head_max"] <= 1 for run in larger["runs"].values())
    assert larger["runs"]["softpick"]["attention_zero_share_mean"] > 0


def test_the_larger_pretraining_plans_its_variants_in_its_own_order(larger):
    """softmax first, the headline pairs before the rest: the order the time box cuts from the end.
    Mutation tried: the sweep's own order (softmax-1 + OrthoAdam sixth, not third)."""
    runs = larger.larger_runs(smoke=False)
    assert [cfg.variant for cfg in runs] == list(larger.LARGER_VARIANTS)
    assert {(cfg.steps, cfg.batch, cfg.seq_len, cfg.d_model, cfg.bos) for cfg in runs} == {(1000, 16, 512, 256, True)}


def test_the_larger_pretraining_starts_no_run_its_slowest_says_would_end_past_the_box(larger, monkeypatch):
    """Runs of 4 s on a fake clock in a box of 10 s: two start, the third (predicted to end at 12 s)
    is named, not started; a run that raises is recorded with its error and the next still trains.
    Mutations tried: the box without the slowest run's time (three start); without the try (the
    first error ends the section)."""
    clock = [0.0]

    def failing_run(cfg, out):
        clock[0] += 4
        raise RuntimeError("the loss is nan at step 3\nmore")

    monkeypatch.setattr(larger, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(larger, "LARGER_SECONDS", 10)
    monkeypatch.setattr("sinklab.pretrain.train_lm", failing_run)
    monkeypatch.setattr("sinklab.pretrain.sources.load_source", lambda *args: None)
    measured = larger.measure("cpu", smoke=True)
    error = {"error": "RuntimeError: the loss is nan at step 3", "seconds": 4.0}
    assert measured["runs"] == {"softmax": error, "softpick": error}
    assert measured["left_out_by_the_time_box"] == ["softmax1+orthoadam"]
