"""sinklab adapt: the sink prefix is exact on every architecture, the quantizer does what its
formula says (and what optimum-quanto does), every mitigation starts as the original model, and
fine-tuning resumes exactly."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ARCHITECTURES, SAMPLE_TEXT

from sinklab import cli
from sinklab.adapt import MITIGATIONS, FinetuneConfig, PrefixConfig, SinkPrefix, load_adapted, run_finetune, run_sink_prefix
from sinklab.adapt.adapted import AdaptedModel
from sinklab.adapt.finetune import teacher_logits
from sinklab.adapt.mitigations import make_mitigation
from sinklab.adapt.quantize import QUANT_SCHEMES, fake_quant, quantize_activation, quantize_weight, quantized, quantized_linears
from sinklab.adapt.search import search_prefix
from sinklab.core.errors import SinklabError
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


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_prefix_is_exact_on_every_architecture(arch, tiny_model_dir):
    loaded = load_model(str(tiny_model_dir(arch)))
    ids = content(loaded)
    prefix = SinkPrefix.compute(loaded.model, [0])
    with torch.no_grad():
        in_sequence = loaded.model(input_ids=torch.cat([torch.zeros(2, 1, dtype=torch.long), ids], 1)).logits[:, 1:]
        cached = prefix.logits(loaded.model, ids)
    assert (in_sequence - cached).abs().max() < 1e-4
    # and the prefix is what makes it exact: without it the logits differ
    assert (loaded.model(input_ids=ids).logits - in_sequence).abs().max() > 1e-3


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
    assert quantize_activation(x, "token").flatten().tolist() == pytest.approx([100.0, 100 / 127, 1.0, 64 / 127])  # 63.5 rounds to 64
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


def test_sink_prefix_run_writes_the_summary_contract(tmp_path, tiny_model_dir, corpus):
    loaded = load_model(str(tiny_model_dir("llama")))
    cfg = PrefixConfig(corpus=corpus, tokens=16, windows=2, calibration=1, prefix_tokens=1, search_seconds=30, candidates=4, out=str(tmp_path / "run"))
    s = run_sink_prefix(cfg, loaded, progress=False)
    assert s["exact_check"] < 1e-4
    assert set(s["ppl"]) == {"fp", *QUANT_SCHEMES}
    assert set(s["ppl"]["w8a8"]) == {"bos", "prefix", "no_bos", "cushion"}
    assert s["ppl"]["fp"]["bos"] == pytest.approx(s["ppl"]["fp"]["prefix"], rel=1e-5)
    assert len(s["max_abs_activation"]["w8a8"]["prefix"]) == loaded.n_layers
    assert len(s["search"]["tokens"]) == 2 and s["search"]["tokens"][0] == 0
    assert SinkPrefix.load(tmp_path / "run" / "sink_prefix.safetensors").token_ids == (0,)
    assert (tmp_path / "run" / "report.html").exists() and (tmp_path / "run" / "max_activation_by_layer.png").exists()


def test_prefix_search_keeps_the_best_candidate_and_stops_on_its_budget(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir("llama")))
    ids = content(loaded, 1)
    found = search_prefix(loaded.model, ids, (0,), 1, [5, 6, 7], seconds=60, progress=False)
    from sinklab.adapt.search import largest_activation

    scores = {t: largest_activation(loaded.model, ids, (0, t)) for t in (5, 6, 7)}
    assert found.tokens == (0, min(scores, key=scores.get)) and found.complete and found.evaluated == 3
    cut = search_prefix(loaded.model, ids, (0,), 2, [5, 6, 7], seconds=1e-9, progress=False)
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


def test_finetuning_resumes_to_the_same_parameters(tmp_path, tiny_model_dir, corpus):
    def run(out: Path, resume: bool = False):
        cfg = FinetuneConfig(mitigation="gate", steps=4, seq_len=12, batch=2, tokens=16, windows=1, calibration=1, schemes=("w8a8",),
                             checkpoint_every=2, corpus=corpus, out=str(out))
        return run_finetune(cfg, load_model(str(tiny_model_dir("llama"))), resume=resume, progress=False)

    whole = run(tmp_path / "whole")
    assert whole["exact_check"] < 1e-3 and set(whole["ppl"]["w8a8"]) == {"bos", "adapted"}
    assert whole["before"]["first_token_mass"] > 0 and whole["after"]["slot_mass"] < 1e-6  # a gate has no slot
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "whole", cut)
    shutil.rmtree(cut / "ckpt-0000004")
    (cut / "latest").write_text("ckpt-0000002")
    run(cut, resume=True)
    from safetensors.torch import load_file

    a, b = load_file(str(tmp_path / "whole" / "adapter.safetensors")), load_file(str(cut / "adapter.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [json.loads(line)["step"] for line in (cut / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    with pytest.raises(SinklabError, match="already holds a fine-tuning run"):
        run(tmp_path / "whole")
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


def test_bad_input_gets_one_line_errors(tiny_model_dir, corpus, capsys):
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
    from sinklab.adapt.run import exact_check
    from sinklab.core.corpus import shakespeare_documents

    text = shakespeare_documents()[0].text[10_000:13_000]
    ids = torch.tensor([default_model.tokenizer(text, add_special_tokens=False)["input_ids"][:256]])
    prefix = SinkPrefix.compute(default_model.model, [default_model.tokenizer.bos_token_id])
    assert exact_check(default_model.model, prefix, ids) < 1e-4


def test_a_model_without_bos(tmp_path, tiny_model_dir, corpus):
    """No BOS: --bos yes and --to refuse; the sink-prefix job searches a one-token prefix instead."""
    loaded = load_model(str(tiny_model_dir("llama")))
    loaded.tokenizer.bos_token = None
    loaded.model.config.bos_token_id = None
    with pytest.raises(SinklabError, match="defines no BOS token"):
        run_sink_prefix(PrefixConfig(corpus=corpus, bos="yes", out=str(tmp_path / "yes")), loaded, progress=False)
    s = run_sink_prefix(PrefixConfig(corpus=corpus, tokens=16, windows=1, calibration=1, schemes=("w8a8",), candidates=3, out=str(tmp_path / "no")), loaded, progress=False)
    assert set(s["ppl"]["w8a8"]) == {"no_bos", "cushion"} and len(s["search"]["tokens"]) == 1
    assert s["exact_check"] < 1e-4 and tuple(s["exact_check_tokens"]) == tuple(s["search"]["tokens"])  # the searched prefix is exact too
    with pytest.raises(SinklabError, match="needs a model with a fixed BOS"):
        run_finetune(FinetuneConfig(corpus=corpus, out=str(tmp_path / "tune")), loaded, progress=False)


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
