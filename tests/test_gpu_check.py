"""``make gpu-check`` is ready before a GPU is lent: every section of benchmarks/gpu_check.py runs at
toy sizes on the CPU through the same code (``--smoke``), and its device map splits the layers in
half. Mutation tried: a section raising (``half_split`` naming ``model.layer.{i}``) is recorded as
``ok: False`` and fails the smoke test, instead of stopping the other sections."""

import json

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
    results = gpu_check.run_sections("cpu", smoke=True, names=(*gpu_check.SECTIONS, *gpu_check.OWN_CALL))
    assert set(results) == {*gpu_check.SECTIONS, *gpu_check.OWN_CALL}
    failed = {name: r["error"] for name, r in results.items() if not r["ok"]}
    assert not failed, failed
    assert results["device_map"]["first_token_mass_max_abs_diff"] == 0.0
    assert results["sink_cache"]["kept_key_max_abs_error"] < 1e-4 * results["sink_cache"]["key_max_abs"]
    assert results["dtype_agreement"]["by_dtype"]["float32"]["first_token_mass_max_abs_diff"] == 0.0
    larger = results["pretrain_larger"]
    assert list(larger["runs"]) == list(gpu_check.LARGER_VARIANTS[:3]) and larger["left_out_by_the_time_box"] == []
    assert all(tuple(run["quantization_penalty"]) == PAYOFF_SCHEMES for run in larger["runs"].values())
    assert larger["runs"]["softpick"]["attention_zero_share_mean"] > 0 == larger["runs"]["softmax"]["attention_zero_share_mean"]


@pytest.mark.slow
@pytest.mark.integration
def test_the_larger_pretraining_starts_no_run_past_its_time_box(gpu_check, monkeypatch):
    """Once one run has taken longer than what is left of the box, the rest are named, not started.
    Mutation tried: without the check, all three start."""
    monkeypatch.setattr(gpu_check, "LARGER_SECONDS", 0.5)
    larger = gpu_check.pretrain_larger("cpu", smoke=True)
    assert list(larger["runs"]) == ["softmax"]
    assert larger["left_out_by_the_time_box"] == list(gpu_check.LARGER_VARIANTS[1:3])
