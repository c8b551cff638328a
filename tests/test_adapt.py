"""sinklab adapt: the sink prefix is exact on every architecture, the quantizer does what its
formula says (and what optimum-quanto does), every mitigation starts as the original model, and
fine-tuning resumes exactly.

Exactness and quantization tests run on *sharp* tiny models (initializer range 0.2): the default
tiny models attend almost uniformly, so a wrong position would move their logits by ~1e-4."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ARCHITECTURES, SAMPLE_TEXT, tiny_config
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from sinklab import cli
from sinklab.adapt import (
    ADAPT,
    FINETUNE,
    MITIGATIONS,
    FinetuneConfig,
    PrefixConfig,
    SinkPrefix,
    load_adapted,
    search,
)
from sinklab.adapt import report as adapt_report
from sinklab.adapt.adapted import AdaptedModel
from sinklab.adapt.evaluate import Condition, content_hidden, content_nll, corpus_windows, perplexity
from sinklab.adapt.finetune import teacher_logits
from sinklab.adapt.mitigations import make_mitigation
from sinklab.adapt.prefix import exact_tolerance
from sinklab.adapt.quantize import (
    DEFAULT_SCHEMES,
    QUANT_SCHEMES,
    fake_quant,
    quantize_activation,
    quantize_weight,
    quantized,
    quantized_linears,
)
from sinklab.adapt.run import calibrate, exact_check, measure_ppl
from sinklab.adapt.search import largest_activation, search_prefix
from sinklab.core import pipeline
from sinklab.core.configs import build
from sinklab.core.errors import NumericalCheckFailed, SinklabError
from sinklab.core.runs import FAILED_CHECK
from sinklab.models.hf import load_model


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """Eight short documents: enough for a held-out split and a few windows of the tiny tokenizer."""
    folder = tmp_path_factory.mktemp("corpus")
    for i in range(8):
        (folder / f"doc{i}.txt").write_text(SAMPLE_TEXT[i * 40 :] + SAMPLE_TEXT[: i * 40])
    return str(folder)


def content(loaded, n=2, length=24):
    return torch.randint(2, loaded.model.config.vocab_size, (n, length), generator=torch.Generator().manual_seed(1))


def sharp_model(arch: str):
    """A tiny random model of ``arch`` whose attention is far from uniform (initializer range 0.2)."""
    config = tiny_config(arch, 300)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_prefix_is_exact_on_every_architecture(arch):
    """Mutation: SinkPrefix.logits passing position_ids = arange(T) (the prefix's offset forgotten)
    fails the first assertion on every architecture; the second assertion shows it here."""
    model = sharp_model(arch)
    ids = torch.randint(2, 300, (2, 24), generator=torch.Generator().manual_seed(1))
    prefix = SinkPrefix.compute(model, [0])
    with torch.no_grad():
        in_sequence = model(input_ids=torch.cat([torch.zeros(2, 1, dtype=torch.long), ids], 1)).logits[:, 1:]
        cached = prefix.logits(model, ids)
        offset_forgotten = model(
            input_ids=ids, cache=prefix.cache(model, 2), use_cache=True, position_ids=torch.arange(24)[None].expand(2, -1)
        ).logits
    tolerance = exact_tolerance(in_sequence, torch.float32)
    assert (in_sequence - cached).abs().max() < tolerance
    assert (offset_forgotten - in_sequence).abs().max() > 100 * tolerance
    # and the prefix is what makes it exact: without it the logits differ
    assert (model(input_ids=ids).logits - in_sequence).abs().max() > 100 * tolerance


def test_prefix_round_trips_through_safetensors_and_refuses_other_files(tmp_path, tiny_model_dir):
    llama = load_model(str(tiny_model_dir("llama")))
    prefix = SinkPrefix.compute(llama.model, [0, 5])
    loaded = SinkPrefix.load(prefix.save(tmp_path / "p.safetensors", "tiny"))
    assert loaded.token_ids == (0, 5)
    assert all(torch.equal(a, b) for a, b in zip(prefix.keys + prefix.values, loaded.keys + loaded.values))
    (tmp_path / "junk.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(SinklabError, match="not a safetensors file"):
        SinkPrefix.load(tmp_path / "junk.safetensors")
    with pytest.raises(SinklabError, match="no such sink prefix"):
        SinkPrefix.load(tmp_path / "missing.safetensors")
    gpt2 = load_model(str(tiny_model_dir("gpt2")))  # 2 layers of 4 KV heads, not 3 of 2
    with pytest.raises(SinklabError, match="computed for another model"):
        loaded.cache(gpt2.model)


def test_a_saved_prefix_is_refused_by_a_same_shape_model_and_follows_the_model_dtype(tmp_path, tiny_model_dir):
    """Mutations: _check_fits skipping the fingerprint comparison fails the first two refusals;
    cache() not converting to the model's dtype fails the dtype assertion."""
    sharp = sharp_model("llama")
    path = SinkPrefix.compute(sharp, [0]).save(tmp_path / "p.safetensors", "sharp")
    sibling = load_model(str(tiny_model_dir("llama"))).model  # the same config, other weights
    with pytest.raises(SinklabError, match="computed on another model of the same shapes"):
        SinkPrefix.load(path, sibling)
    with pytest.raises(SinklabError, match="computed on another model of the same shapes"):
        SinkPrefix.load(path).cache(sibling)
    half = copy.deepcopy(sharp).to(torch.bfloat16)  # the same checkpoint in bfloat16: accepted, in its dtype
    prefix = SinkPrefix.load(path, half)
    assert all(layer.keys.dtype == torch.bfloat16 for layer in prefix.cache(half).layers)
    ids = torch.randint(2, 300, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        in_sequence = half(input_ids=torch.cat([torch.zeros(1, 1, dtype=torch.long), ids], 1)).logits[:, 1:]
        assert (prefix.logits(half, ids) - in_sequence).float().abs().max() < exact_tolerance(in_sequence, torch.bfloat16)
    legacy = {f"{kind}.{i}": t for kind, ts in (("keys", prefix.keys), ("values", prefix.values)) for i, t in enumerate(ts)}
    from safetensors.torch import save_file

    save_file(
        legacy, str(tmp_path / "old.safetensors"), metadata={"format": "sinklab-sink-prefix/1", "token_ids": "[0]", "model": ""}
    )
    with pytest.raises(SinklabError, match="no fingerprint"):
        SinkPrefix.load(tmp_path / "old.safetensors")


def test_fake_quant_follows_its_formula_on_hand_made_tensors():
    x = torch.tensor([-2.0, -1.0, 0.0, 0.4, 1.0, 2.0])
    # 2 bits: q_max 1, s = amax: the grid is {-2, 0, 2}; round half to even sends 1.0 / 2 = 0.5 to 0
    assert fake_quant(x, 2, x.abs().amax()).tolist() == [-2.0, -0.0, 0.0, 0.0, 0.0, 2.0]
    grid = torch.arange(-127, 128, dtype=torch.float32) * 0.5  # exactly representable at 8 bits: unchanged
    assert torch.equal(fake_quant(grid, 8, grid.abs().amax()), grid)
    # a static scale below the largest value clips it to the top of the grid
    assert fake_quant(torch.tensor([10.0, 1.0]), 8, torch.tensor(2.0)).tolist() == pytest.approx([2.0, 2.0 * 64 / 127])
    x = torch.tensor([[100.0, 1.0], [1.0, 0.5]])
    # per token, each row has its own scale; per tensor, the outlier's scale s = 100 / 127 rounds every small value to s
    assert quantize_activation(x, "token").flatten().tolist() == pytest.approx(
        [100.0, 100 / 127, 1.0, 64 / 127]
    )  # 63.5 rounds to 64
    assert quantize_activation(x, "tensor").flatten().tolist() == pytest.approx([100.0, 100 / 127, 100 / 127, 100 / 127])


def test_weight_quantization_scales_per_channel_and_per_group_with_a_short_last_group():
    w = torch.tensor([[1.2, 2.0, 3.0, 100.0, 0.5], [4.0, 8.0, 0.0, 0.0, 1.0]])
    per_channel = quantize_weight(w, 8, None)
    assert per_channel[1].tolist() == pytest.approx([4.0, 8.0, 0.0, 0.0, 1.0], abs=8 / 127 / 2)
    grouped = quantize_weight(w, 4, 2)  # groups [1.2, 2], [3, 100], [0.5] per row: the outlier only spoils its own group
    assert grouped[0, :2].tolist() == pytest.approx([8 / 7, 2.0])  # s = 2 / 7: 1.2 / s = 4.2 rounds to 4
    assert grouped[0, 4] == pytest.approx(0.5)
    assert grouped.shape == w.shape


def test_w8_matches_optimum_quanto_int8_weights(tiny_model_dir):
    """The cross-check with a well-kept library: optimum-quanto's int8 per-channel weights are the
    same numbers, and the quantized models give the same logits."""
    quanto = pytest.importorskip("optimum.quanto")
    ours = load_model(str(tiny_model_dir("llama"))).model
    theirs = copy.deepcopy(ours)
    quanto.quantize(theirs, weights=quanto.qint8, exclude="lm_head")
    quanto.freeze(theirs)
    for name, (_, module) in quantized_linears(ours).items():
        theirs_weight = quantized_linears(theirs)[name][1].weight.dequantize()
        assert torch.equal(quantize_weight(module.weight.data, 8, None), theirs_weight), name
    ids = content(load_model(str(tiny_model_dir("llama"))))
    with torch.no_grad(), quantized(ours, QUANT_SCHEMES["w8"]):
        assert (ours(input_ids=ids).logits - theirs(input_ids=ids).logits).abs().max() < 1e-5


def test_weight_only_4bit_rounds_weights_in_groups_and_leaves_activations_alone(tiny_model_dir):
    """``w4`` (the papers' 4-bit weight-only round to nearest): each linear layer computes with its
    int4 grouped weights on its exact input."""
    model = load_model(str(tiny_model_dir("llama"))).model
    x = torch.randn(3, model.config.hidden_size)
    _, proj = quantized_linears(model)["0.self_attn.q_proj"]
    with torch.no_grad():
        exact = proj(x)
        with quantized(model, QUANT_SCHEMES["w4"]):
            assert torch.equal(proj.weight, quantize_weight(proj.weight, 4, 128))  # 15 levels per group
            assert len(torch.unique(proj.weight[0, :128] / proj.weight[0, :128].abs().max())) <= 15
            rounded = proj(x)
        torch.testing.assert_close(rounded, x @ quantize_weight(proj.weight, 4, 128).T, atol=1e-6, rtol=1e-6)
    assert (rounded - exact).abs().max() > 0


def test_quantized_context_restores_weights_and_refuses_static_without_calibration(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir("gpt2")))  # Conv1D layers store (in, out)
    before = {name: m.weight.detach().clone() for name, (_, m) in quantized_linears(loaded.model).items()}
    assert len(before) == 8  # c_attn, c_proj, c_fc, mlp.c_proj in each of 2 layers
    ids = content(loaded)
    with torch.no_grad(), quantized(loaded.model, QUANT_SCHEMES["w4a8"]) as log:
        quantized_logits = loaded.model(input_ids=ids).logits
    assert all(torch.equal(before[name], m.weight) for name, (_, m) in quantized_linears(loaded.model).items())
    assert len(log.by_layer()) == 2 and min(log.by_layer()) > 0
    assert (quantized_logits - loaded.model(input_ids=ids).logits).abs().max() > 0
    with pytest.raises(SinklabError, match="calibration"):
        with quantized(loaded.model, QUANT_SCHEMES["w8a8_static"]):
            pass


def test_quantized_only_rounds_the_named_linears(tiny_model_dir):
    """``only``: the named linear computes under the scheme, every other keeps its weights and input
    (what ``benchmarks/quant_by_linear.py`` rests on). Mutation: ignoring ``only`` fails the
    weights assertion."""
    model = load_model(str(tiny_model_dir("llama"))).model
    linears = quantized_linears(model)
    before = {name: m.weight.detach().clone() for name, (_, m) in linears.items()}
    with torch.no_grad(), quantized(model, QUANT_SCHEMES["w8a8"], only=["0.mlp.down_proj"]) as log:
        model(input_ids=torch.arange(1, 9)[None])
        changed = {name for name, (_, m) in linears.items() if not torch.equal(before[name], m.weight)}
    assert changed == {"0.mlp.down_proj"} and set(log.by_module) == {"0.mlp.down_proj"}
    assert all(torch.equal(before[name], m.weight) for name, (_, m) in linears.items())
    with pytest.raises(SinklabError, match="no quantized linear layer 'nope'"):
        with quantized(model, QUANT_SCHEMES["w8"], only=["nope"]):
            pass


@pytest.fixture(scope="module")
def outlier():
    """A sharp tiny llama with a planted massive activation on its first token, and text it wrote.

    RMSNorm undoes any scale of an embedding row, so the outlier is planted where real models grow
    theirs (Sun et al. 2024), in an early FFN: token 0's embedding is the unit vector of channel 0,
    which no other token's embedding and no layer-0 attention output writes, and layer 0's FFN unit 0
    reads only that channel (gain 40): its down-projection input is about 1,000 for token 0 and
    exactly 0 for every other token. The evaluation and calibration windows are sampled from the
    model itself (after token 0, never token 0 or 1), so any damage to its predictions raises their
    perplexity (cross-entropy = entropy + KL)."""
    model = sharp_model("llama")
    mlp = model.model.layers[0].mlp
    with torch.no_grad():
        embedding = model.model.embed_tokens.weight
        embedding[:, 0] = 0
        embedding[0] = 0
        embedding[0, 0] = 1
        model.model.layers[0].self_attn.o_proj.weight[0] = 0
        for weight in (mlp.gate_proj.weight, mlp.up_proj.weight):
            weight[0] = 0
            weight[0, 0] = 40
        ids, g = torch.zeros(6, 1, dtype=torch.long), torch.Generator().manual_seed(1)
        for _ in range(48):
            p = model(input_ids=ids).logits[:, -1].softmax(-1)
            p[:, :2] = 0
            ids = torch.cat([ids, torch.multinomial(p, 1, generator=g)], 1)
    conditions = [Condition("bos", lead=(0,)), Condition("prefix", prefix=SinkPrefix.compute(model, [0]))]
    return model, conditions, ids[:4, 1:], ids[4:, 1:]


def test_the_planted_outlier_reaches_the_linear_inputs_only_with_bos_in_the_stream(outlier):
    """Mutation: calibrate() reading every condition with BOS in the stream (lead=(0,)) fails the
    calibration assertion."""
    model, conditions, evaluation, calibration = outlier
    largest = {}
    for condition in conditions:
        with quantized(model, None) as log:
            content_hidden(model, evaluation, condition)
        largest[condition.name] = max(log.by_layer())
    assert largest["bos"] > 10 * largest["prefix"]
    calibrated = {c.name: max(calibrate(model, calibration, c).values()) for c in conditions}
    assert calibrated["bos"] > 10 * calibrated["prefix"]


def test_per_tensor_w8a8_pays_for_the_outlier_only_with_bos_in_the_stream(outlier):
    """What the adapt tables rest on. Mutations: the input hook returning None (activations never
    quantized) fails the logits assertion; w8a8 mapped to per-token scales in
    QUANT_SCHEMES fails the w8a8 perplexity assertion; measure() calibrating static scales under
    BOS in the stream for every condition fails the w8a8_static one; measure() dropping the cached
    prefix under every quantized setting (the content alone: perplexity 188.5 to 189.6 against
    151.0 in full precision) fails the comparison with full precision, which a comparison of two
    quantized settings, both without it, let pass."""
    model, conditions, evaluation, calibration = outlier
    with torch.no_grad():
        logits = {}
        for name in ("w8", "w8a8"):
            with quantized(model, QUANT_SCHEMES[name]):
                logits[name] = conditions[1].prefix.logits(model, evaluation)
    assert (logits["w8a8"] - logits["w8"]).abs().max() > 1e-3  # activations are quantized, even without the outlier
    ppl = measure_ppl(model, conditions, evaluation, calibration, ("fp", "w8", "w8a8", "w8a8_static"))["ppl"]
    for scheme in ("w8a8", "w8a8_static"):
        assert ppl[scheme]["bos"] > 1.1 * ppl[scheme]["prefix"], scheme
    for scheme in ("w8", "w8a8", "w8a8_static"):  # measured within 0.6 % of full precision
        assert ppl[scheme]["prefix"] < 1.02 * ppl["fp"]["prefix"], scheme  # with the prefix, 8 bits cost little


def test_sink_prefix_run_writes_the_summary_contract(tmp_path, tiny_model_dir, corpus, with_images):
    loaded = load_model(str(tiny_model_dir("llama")))
    cfg = build(
        PrefixConfig, dict(corpus=corpus, tokens=16, windows=2, calibration=1, prefix_tokens=1, search_seconds=30, candidates=4)
    )
    s = pipeline.run(ADAPT, cfg, loaded, out=tmp_path / "run").summary
    assert s["exact_check"] < s["exact_check_tolerance"] < 1e-4
    assert set(s["ppl"]) == {"fp", *DEFAULT_SCHEMES}
    assert set(s["ppl"]["w8a8"]) == {"bos", "prefix", "no_bos", "cushion"}
    assert s["ppl"]["fp"]["bos"] == pytest.approx(s["ppl"]["fp"]["prefix"], rel=1e-5)
    assert len(s["max_abs_activation"]["w8a8"]["prefix"]) == loaded.n_layers
    assert len(s["search"]["tokens"]) == 2 and s["search"]["tokens"][0] == 0
    assert SinkPrefix.load(tmp_path / "run" / "sink_prefix.safetensors").token_ids == (0,)
    assert (tmp_path / "run" / "report.html").exists() and (tmp_path / "run" / "max_activation_by_layer.png").exists()


def test_a_prefix_that_forgets_its_offset_fails_the_run_with_status_3(tmp_path, tokenizer, corpus, monkeypatch):
    """The run writes its results, then fails on its exact check (CLI exit status 3, run.json marked
    failed). Mutation: the ADAPT capability registered without its check fails the status assertion."""
    folder = tmp_path / "sharp"
    sharp_model("llama").save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    original = SinkPrefix.logits

    def offset_forgotten(self, model, ids):
        positions = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
        return model(input_ids=ids, cache=self.cache(model, ids.shape[0]), use_cache=True, position_ids=positions).logits

    monkeypatch.setattr(SinkPrefix, "logits", offset_forgotten)
    out = tmp_path / "run"
    args = [
        "adapt",
        str(folder),
        "--corpus",
        corpus,
        "--tokens",
        "16",
        "--windows",
        "1",
        "--calibration",
        "1",
        "--schemes",
        "w8a8",
        "--out",
        str(out),
        "--quiet",
    ]
    assert cli.main(args) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exact_check"] > 100 * summary["exact_check_tolerance"]
    assert "tolerance" in json.loads((out / "run.json").read_text())[FAILED_CHECK]
    monkeypatch.setattr(SinkPrefix, "logits", original)
    assert cli.main(args) == 0  # the failed run is not taken as finished: the same command runs it again


def test_a_scan_cut_short_appends_its_best_token_only_if_it_beats_the_shorter_prefix(tiny_model_dir, monkeypatch):
    """A clock that ticks once per look lets the budget run out after the first candidate of the
    second position. Mutation: appending the partial scan's best unchecked (the old code) fails
    the ``refused`` assertion."""
    model = load_model(str(tiny_model_dir("llama"))).model
    ids = torch.randint(2, 300, (1, 24), generator=torch.Generator().manual_seed(1))
    candidates = list(range(5, 15))
    first = search_prefix(model, ids, (0,), 1, candidates, seconds=60)
    after = {t: largest_activation(model, ids, first.tokens + (t,)) for t in candidates}
    worse = [t for t in candidates if after[t] > first.objective[0]]
    better = [t for t in candidates if after[t] < first.objective[0]]
    assert worse and better  # the test needs both kinds of second token

    def cut_search(order):
        ticks = iter(range(1000))
        monkeypatch.setattr(search, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: next(ticks))}))
        return search_prefix(model, ids, (0,), 2, order, seconds=len(candidates) + 1.5)

    refused = cut_search([worse[0]] + [t for t in candidates if t != worse[0]])
    assert not refused.complete and refused.evaluated == len(candidates) + 1 and refused.tokens == first.tokens
    kept = cut_search([better[0]] + [t for t in candidates if t != better[0]])
    assert not kept.complete and kept.tokens == first.tokens + (better[0],)


def test_prefix_search_keeps_the_best_candidate_and_stops_on_its_budget(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir("llama")))
    ids = content(loaded, 1)
    found = search_prefix(loaded.model, ids, (0,), 1, [5, 6, 7], seconds=60)
    from sinklab.adapt.search import largest_activation

    scores = {t: largest_activation(loaded.model, ids, (0, t)) for t in (5, 6, 7)}
    assert found.tokens == (0, min(scores, key=scores.get)) and found.complete and found.evaluated == 3
    cut = search_prefix(loaded.model, ids, (0,), 2, [5, 6, 7], seconds=1e-9)
    assert not cut.complete and cut.tokens == (0,)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("name", list(MITIGATIONS))
def test_every_mitigation_starts_as_the_original_model(arch, name, tiny_model_dir):
    loaded = load_model(str(tiny_model_dir(arch)))
    model = loaded.model
    bos = SinkPrefix.compute(model, [0])
    adapted = AdaptedModel(model, make_mitigation(name, model, bos), bos)
    ids = content(loaded)
    if arch == "gpt_oss" and name in ("sink_logit", "softmax1"):
        with pytest.raises(SinklabError, match="already has learned sink logits"), torch.no_grad(), adapted.applied():
            adapted.logits(ids)
        return
    with torch.no_grad(), adapted.applied():
        start = adapted.logits(ids)
    assert (start - teacher_logits(model, 0, ids)).abs().max() < 1e-4
    adapted.mitigation.ramp = 1.0  # the pure mitigation, no BOS: a different model
    with torch.no_grad(), adapted.applied():
        assert (adapted.logits(ids) - start).abs().max() > 1e-4 or name == "kv_bias"


@pytest.mark.parametrize("optimizer", ["adamw", "orthoadam"])
def test_finetuning_resumes_to_the_same_parameters(tmp_path, tiny_model_dir, corpus, optimizer):
    """OrthoAdam's rotations travel in the checkpoint as AdamW's moments do."""

    def run(out: Path, resume: bool = False):
        cfg = build(
            FinetuneConfig,
            dict(
                mitigation="gate",
                steps=4,
                seq_len=12,
                batch=2,
                tokens=16,
                windows=1,
                calibration=1,
                schemes=("w8a8",),
                checkpoint_every=2,
                corpus=corpus,
                optimizer=optimizer,
            ),
        )
        return pipeline.run(FINETUNE, cfg, load_model(str(tiny_model_dir("llama"))), out=out, resume=resume).summary

    whole = run(tmp_path / "whole")
    assert whole["exact_check"] < whole["exact_check_tolerance"] and set(whole["ppl"]["w8a8"]) == {"bos", "prefix", "adapted"}
    assert whole["before"]["first_token_mass"] > 0 and whole["after"]["slot_mass"] < 1e-6  # a gate has no slot
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "whole", cut)
    shutil.rmtree(cut / "ckpt-0000004")
    (cut / "latest").write_text("ckpt-0000002")
    saved = load_file(str(cut / "ckpt-0000002" / "optimizer.safetensors"))
    assert any(key.endswith(".rotation") for key in saved) == (optimizer == "orthoadam")
    run(cut, resume=True)

    a, b = load_file(str(tmp_path / "whole" / "adapter.safetensors")), load_file(str(cut / "adapter.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [json.loads(line)["step"] for line in (cut / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert run(tmp_path / "whole") == whole  # a finished run of the same configuration is read back, not trained again
    fresh = load_model(str(tiny_model_dir("llama"))).model
    trained = load_adapted(fresh, cut)
    ids = content(load_model(str(tiny_model_dir("llama"))))
    with torch.no_grad(), trained.applied():
        assert trained.logits(ids).shape == (2, 24, fresh.config.vocab_size) and trained.prefix() is None  # BOS gone for good
        shipped = trained.logits(ids)
    rebuilt = load_adapted(load_model(str(tiny_model_dir("llama"))).model, tmp_path / "whole")
    with torch.no_grad(), rebuilt.applied():
        assert torch.allclose(rebuilt.logits(ids), shipped, atol=1e-5)
    (cut / "report.html").unlink()
    assert cli.main(["report", str(cut)]) == 0 and "before" in (cut / "report.html").read_text()  # rebuilt as an adapt page


def test_finetuning_also_measures_text_outside_its_corpus(tmp_path, tiny_model_dir, corpus):
    """The step-0 baseline (BOS as a cached prefix) and every condition again on Python's
    documentation. Mutations: measuring the outside part on the fine-tuning windows makes the two
    tables equal; a prefix that is not BOS's cache moves the prefix row off the BOS row."""
    cfg = build(
        FinetuneConfig,
        dict(
            mitigation="kv_bias",
            steps=1,
            seq_len=12,
            batch=2,
            tokens=16,
            windows=2,
            calibration=1,
            schemes=("w8a8",),
            corpus=corpus,
        ),
    )
    loaded = load_model(str(tiny_model_dir("llama")))
    s = pipeline.run(FINETUNE, cfg, loaded, out=tmp_path / "tune").summary
    assert s["outside_corpus"] == "pydoc" and set(s["ppl_outside"]) == {"fp", "w8a8"}
    for part in ("ppl", "ppl_outside"):
        assert s[part]["fp"]["prefix"] == pytest.approx(s[part]["fp"]["bos"], rel=1e-4)  # the prefix is BOS's exact cache
    assert s["ppl_outside"]["fp"]["bos"] != pytest.approx(s["ppl"]["fp"]["bos"], rel=1e-3)
    windows = corpus_windows("pydoc", loaded.tokenizer, 16, 2, held_out=True)
    assert s["ppl_outside"]["fp"]["bos"] == pytest.approx(
        perplexity(content_nll(loaded.model, windows, Condition("bos", lead=(0,)))), rel=1e-5
    )
    assert (
        "another domain (pydoc)" in adapt_report.ppl_table(s)
        and "another domain" in (tmp_path / "tune" / "report.html").read_text()
    )


def test_finetuning_fails_on_its_exact_check_after_writing_results(tmp_path, tiny_model_dir, corpus, monkeypatch):
    """A tolerance no difference meets stands in for a broken start. Mutation: the FINETUNE
    capability registered without its check fails the raises."""
    import sinklab.adapt.finetune as finetune

    monkeypatch.setattr(finetune, "exact_tolerance", lambda reference, dtype: -1.0)
    cfg = build(
        FinetuneConfig,
        dict(
            mitigation="gate", steps=1, seq_len=12, batch=2, tokens=16, windows=1, calibration=1, schemes=("w8a8",), corpus=corpus
        ),
    )
    with pytest.raises(NumericalCheckFailed, match="tolerance -1") as failed:
        pipeline.run(FINETUNE, cfg, load_model(str(tiny_model_dir("llama"))), out=tmp_path / "tune")
    assert failed.value.run_dir == tmp_path / "tune" and (tmp_path / "tune" / "summary.json").exists()
    assert FAILED_CHECK in json.loads((tmp_path / "tune" / "run.json").read_text())


def test_bad_input_gets_one_line_errors(tiny_model_dir, corpus, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out, runs/adapt(-finetune), is relative
    model = str(tiny_model_dir("llama"))
    with pytest.raises(SystemExit):
        cli.main(["adapt", model, "--to", "bogus"])
    assert "choose from 'gate', 'sink_logit', 'softmax1', 'head_norm', 'kv_bias'" in capsys.readouterr().err
    cases = [
        (["--to", "gate", "--steps", "0"], "--steps must be at least 1"),
        (["--to", "softmax1", "--steps", "1"], "softmax1 adds no parameters to train; pass --full"),
        (["--quant", "w8a8", "--tokens", "1"], "--tokens must be at least 2"),
        (["--out", "/proc/sinklab-cannot-write"], "not writable"),
    ]
    for extra, message in cases:
        assert cli.main(["adapt", model, "--corpus", corpus, *extra]) == 2, extra
        errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(errors) == 1 and message in errors[0], errors


@pytest.mark.slow
def test_prefix_is_exact_on_the_default_model(default_model):
    """Float32 reduction order alone: measured 18-21 eps of the largest logit (8e-5 here), bound
    EXACT_EPS = 128; the test asks for half the bound, a margin of 3x over what is measured."""
    from sinklab.core.corpus import shakespeare_documents

    text = shakespeare_documents()[0].text[10_000:13_000]
    ids = torch.tensor([default_model.tokenizer(text, add_special_tokens=False)["input_ids"][:256]])
    prefix = SinkPrefix.compute(default_model.model, [default_model.tokenizer.bos_token_id])
    difference, tolerance = exact_check(default_model.model, prefix, ids)
    assert difference < tolerance / 2


def test_a_model_without_bos(tmp_path, tiny_model_dir, corpus):
    """No BOS: --bos yes and --to refuse; the sink-prefix job searches a one-token prefix instead."""
    loaded = load_model(str(tiny_model_dir("llama")))
    loaded.tokenizer.bos_token = None
    loaded.model.config.bos_token_id = None
    with pytest.raises(SinklabError, match="defines no BOS token"):
        pipeline.run(ADAPT, build(PrefixConfig, dict(corpus=corpus, bos="yes")), loaded, out=tmp_path / "yes")
    s = pipeline.run(
        ADAPT,
        build(PrefixConfig, dict(corpus=corpus, tokens=16, windows=1, calibration=1, schemes=("w8a8",), candidates=3)),
        loaded,
    ).summary
    assert set(s["ppl"]["w8a8"]) == {"no_bos", "cushion"} and len(s["search"]["tokens"]) == 1
    assert s["exact_check"] < s["exact_check_tolerance"] and tuple(s["exact_check_tokens"]) == tuple(
        s["search"]["tokens"]
    )  # the searched prefix is exact too
    with pytest.raises(SinklabError, match="needs a model with a fixed BOS"):
        pipeline.run(FINETUNE, build(FinetuneConfig, dict(corpus=corpus)), loaded, out=tmp_path / "tune")


def test_the_fade_ends_at_the_model_without_bos(tiny_model_dir):
    """BOS's weight goes to zero as the ramp goes to 1: a gate at its start is then the plain
    model reading the content alone."""
    loaded = load_model(str(tiny_model_dir("llama")))
    bos = SinkPrefix.compute(loaded.model, [0])
    adapted = AdaptedModel(loaded.model, make_mitigation("gate", loaded.model, bos), bos)
    ids = content(loaded)
    outputs = {}
    for ramp in (1 - 1e-7, 1.0):
        adapted.mitigation.ramp = ramp
        with torch.no_grad(), adapted.applied():
            outputs[ramp] = adapted.logits(ids)
    with torch.no_grad():
        alone = loaded.model(input_ids=ids).logits
    assert (outputs[1.0] - alone).abs().max() < 1e-4
    assert (outputs[1 - 1e-7] - alone).abs().max() < 1e-4


def test_the_slot_enters_with_the_ramp(tiny_model_dir):
    """softmax+1 at ramp r: exp(s_j) / (r + sum_k exp(s_k)); two zero logits at r = 0.5 get 0.4 each."""
    loaded = load_model(str(tiny_model_dir("llama")))
    mitigation = make_mitigation("softmax1", loaded.model, SinkPrefix.compute(loaded.model, [0]))
    slot = mitigation.norms()[0]
    logits = torch.zeros(1, 4, 1, 2)
    for ramp, expected in ((0.0, 0.5), (0.5, 0.4), (1.0, 1 / 3)):
        mitigation.ramp = ramp
        assert torch.allclose(slot.from_logits(logits), torch.full_like(logits, expected))
