"""The scanner: loading, inputs, equality with output_attentions, memory discipline, bad input."""

import json

import pytest
import torch

from sinklab import cli
from sinklab.core.errors import SinklabError
from sinklab.models.hf import decoder_layers, down_proj_weight, layout_of, load_model
from sinklab.models.native import ModelConfig, Transformer
from sinklab.models.subjects import HFSubject, NativeSubject
from sinklab.scan import InputSpec, MetricSettings, RecordOptions, build_inputs, metrics, record_subject, summarise


def reference(model, ids):
    """The same quantities straight from output_attentions=True in eager mode."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    A = torch.stack(out.attentions).double()  # (L, B, H, T, T)
    return {
        "first_column": A[..., 0].mean(1),
        "received": A.sum(-2).mean(1),
        "own": A.diagonal(dim1=-2, dim2=-1).mean(1),
        "logits": out.logits,
        "hidden": out.hidden_states[1:],
    }


def check_against_reference(subject, ids, chunk=None):
    if chunk is not None:
        subject.query_chunk = chunk
    record, _ = record_subject(subject, ids, RecordOptions(), progress=False)
    ref = reference(subject.model, ids)
    torch.testing.assert_close(record.first_column, ref["first_column"], atol=1e-5, rtol=0)
    torch.testing.assert_close(record.received, ref["received"], atol=1e-5, rtol=0)
    torch.testing.assert_close(record.own, ref["own"], atol=1e-5, rtol=0)
    alpha_ref = metrics.sink_scores(ref["received"], ref["own"])
    torch.testing.assert_close(record.alpha, alpha_ref, atol=1e-5, rtol=0)
    s = summarise(record, MetricSettings(), subject, ids)
    assert s["sink_rate"]["value"] == metrics.sink_rate(alpha_ref[..., 0], 0.3)
    first_ref = metrics.first_token_mass(ref["first_column"], 1)
    torch.testing.assert_close(torch.tensor(s["first_token_mass"], dtype=torch.float64), first_ref, atol=1e-5, rtol=0)
    return record, ref


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_recorded_metrics_equal_output_attentions_on_tiny_models(arch, tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir(arch))))
    ids = torch.randint(2, subject.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    record, ref = check_against_reference(subject, ids, chunk=7)  # query chunks must not change anything
    # residual stream statistics against the hidden states transformers returns
    # (the last layer's output in hidden_states is after the final norm, so compare the others)
    for layer in range(subject.n_layers - 1):
        h = ref["hidden"][layer]
        torch.testing.assert_close(record.dominance[layer], metrics.dominance_ratio(h).mean(0), atol=1e-4, rtol=1e-5)


def test_layout_table_and_generic_fallback_agree(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from sinklab.models.hf import layouts as hf

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir("llama"))
    assert layout_of(model) == hf.LAYOUTS["LlamaForCausalLM"]
    assert hf._infer_layout(model) == hf.LAYOUTS["LlamaForCausalLM"]
    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_model_dir("gpt2"))
    assert hf._infer_layout(gpt2) == hf.LAYOUTS["GPT2LMHeadModel"]
    assert down_proj_weight(gpt2, 0).shape == (32, 128)  # (d_model, intermediate), Conv1D transposed
    assert len(decoder_layers(gpt2)) == 2


def test_instrumenting_changes_no_logit_and_leaves_nothing_behind(tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    ids = torch.randint(2, subject.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = subject.model(input_ids=ids).logits
    with subject.session():
        during = subject.logits(ids)
    torch.testing.assert_close(during, before, atol=1e-5, rtol=1e-5)
    assert subject.model.config._attn_implementation != "sinklab"
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in subject.model.modules())


def test_hooks_are_removed_when_the_run_raises(tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))

    def explode(t, p):
        raise RuntimeError("boom")

    ids = torch.randint(2, 50, (1, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="boom"):
        record_subject(subject, ids, RecordOptions(), extra_hooks=[("blocks.1.attn.hook_z", explode)], progress=False)
    assert not subject.hooks and not any(m._forward_hooks for m in subject.model.modules())


def test_native_model_scans_with_the_same_code():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(
            d_model=32,
            n_layers=2,
            n_heads=4,
            vocab_size=60,
            mlp=True,
            norm=True,
            rope=True,
            residual=True,
            scale_scores=True,
            max_seq_len=64,
        )
    )
    subject = NativeSubject(model)
    ids = torch.randint(0, 60, (3, 12))
    record, _ = record_subject(subject, ids, RecordOptions(variance=True), progress=False)
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    A = torch.stack(weights).double()  # (L, B, H, T, T)
    torch.testing.assert_close(record.received, A.sum(-2).mean(1), atol=1e-6, rtol=0)
    assert record.variance.shape == (2, 12) and record.act_first.shape == (2, model.cfg.mlp_hidden)


def test_variance_by_position_matches_a_direct_computation(tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    ids = torch.randint(2, subject.vocab_size, (6, 10), generator=torch.Generator().manual_seed(0))
    zs = {}

    def keep(z, p):
        zs[p.layer] = z.detach().clone()

    record, _ = record_subject(
        subject, ids, RecordOptions(variance=True), extra_hooks=[("blocks.*.attn.hook_z", keep)], progress=False
    )
    z = zs[1].transpose(1, 2).reshape(6, 10, -1).double()  # (B, T, H*D)
    torch.testing.assert_close(record.variance[1], z.var(0).mean(-1), atol=1e-8, rtol=1e-6)


def test_a_bfloat16_models_residual_norms_are_not_rounded_to_bfloat16(tiny_model_dir):
    """The residual norms (and the residual peak built on them) of a bfloat16 model equal the
    float64 norms of its bfloat16 stream; a norm taken in bfloat16 keeps 8 bits, about 0.4 % off.
    Mutation tried: ``_on_resid`` taking the norm in the model's dtype (no ``.float()``)."""
    subject = HFSubject(load_model(str(tiny_model_dir("llama")), dtype="bfloat16"))
    ids = torch.randint(2, subject.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    streams = {}

    def keep(h, point):
        streams.setdefault(point.layer, []).append(h.detach().clone())

    record, _ = record_subject(subject, ids, RecordOptions(), extra_hooks=[("blocks.*.hook_resid_post", keep)], progress=False)
    assert all(h.dtype == torch.bfloat16 for chunks in streams.values() for h in chunks)
    norms = torch.stack([torch.cat(streams[layer]).double().norm(dim=-1).mean(0) for layer in range(subject.n_layers)])
    torch.testing.assert_close(record.resid_norm, norms, atol=0, rtol=1e-6)
    triad = summarise(record, MetricSettings(), subject, ids, keys=("extreme_token_triad",))["extreme_token_triad"]
    peak = torch.tensor(triad["residual_peak"], dtype=torch.float64)
    torch.testing.assert_close(peak, metrics.norm_ratio_first(norms), atol=0, rtol=1e-6)


def test_inputs_text_prompt_random_and_bos(tokenizer, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Now is the winter of our discontent")
    ids = tokenizer("Now is the winter of our discontent", add_special_tokens=False)["input_ids"]
    got = build_inputs(InputSpec(text=str(text), tokens=64), tokenizer)
    assert got.bos_prepended and got.ids[0].tolist() == [tokenizer.bos_token_id, *ids]  # exactly the file's tokens
    short = build_inputs(InputSpec(text=str(text), tokens=4, bos="no"), tokenizer)
    assert short.ids[0].tolist() == ids[:4] and not short.bos_prepended
    rnd = build_inputs(InputSpec(random_tokens=True, tokens=16, batch=5), tokenizer)
    assert rnd.ids.shape == (5, 16) and not set(rnd.ids[:, 1:].flatten().tolist()) & set(tokenizer.all_special_ids)
    corpus = build_inputs(InputSpec(corpus=str(text.parent), tokens=6, batch=2), tokenizer)
    assert corpus.ids.shape == (2, 6)


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(text="/no/such/file.txt"), "no such text file"),
        (dict(prompt=""), "the prompt holds no text"),
        (dict(prompt=" \n\t "), "the prompt holds no text"),
        (dict(tokens=1000), "longer than the model allows"),
        (dict(corpus="/no/such/corpus"), "no such corpus"),
    ],
)
def test_bad_inputs_are_clear_errors(spec, message, tokenizer):
    with pytest.raises(SinklabError, match=message):
        build_inputs(InputSpec(**spec), tokenizer, max_positions=128)


@pytest.mark.parametrize("content", ["", "   \n\t\n  "])
def test_an_empty_or_blank_text_file_is_a_clear_error(tokenizer, tmp_path, capsys, tiny_model_dir, content):
    """A whitespace-only file used to scan 3 tokens of whitespace with exit 0. Mutation tried:
    dropping the ``strip()`` check in ``_read`` (the blank file scans, exit 0)."""
    blank = tmp_path / "blank.txt"
    blank.write_text(content)
    with pytest.raises(SinklabError, match="holds no text"):
        build_inputs(InputSpec(text=str(blank)), tokenizer)
    assert cli.main(["scan", str(tiny_model_dir("llama")), "--text", str(blank), "--out", str(tmp_path / "run")]) == 2
    assert "holds no text" in capsys.readouterr().err


def test_bad_model_paths_are_clear_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SinklabError, match="no such model"):
        load_model("./does/not/exist")
    with pytest.raises(SinklabError, match="not a model"):
        load_model(str(tmp_path / "notes.txt"))
    with pytest.raises(SinklabError, match="no config.json"):
        load_model(str(tmp_path))
    with pytest.raises(SinklabError, match="unreachable"):
        load_model("nobody-here/no-such-model-xyz")  # HF_HUB_OFFLINE=1 in the tests


def test_a_model_that_is_not_a_causal_lm_is_a_clear_error(tmp_path):
    from transformers import ViTConfig, ViTModel

    ViTModel(
        ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=8, patch_size=4)
    ).save_pretrained(tmp_path)
    with pytest.raises(SinklabError, match="not a causal language model"):
        load_model(str(tmp_path))


def test_corrupt_gguf_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLAB_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(SinklabError, match="not a GGUF model"):
        load_model(str(bad))


def test_scan_run_directory_contract(tiny_model_dir, tmp_path, capsys, with_images):
    code = cli.main(
        ["scan", str(tiny_model_dir("llama")), "--random-tokens", "--max-tokens", "24", "--batch", "4", "--out", str(tmp_path)]
    )
    assert code == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    for key in (
        "model",
        "tokens",
        "bos_prepended",
        "first_token_mass",
        "sink_rate",
        "massive_activations",
        "dominance_ratio_first",
        "variance_by_position",
    ):
        assert key in s
    assert s["tokens"] == 24 and s["bos_prepended"] is True
    assert len(s["first_token_mass"]) == 3 and len(s["first_token_mass"][0]) == 4
    assert set(s["sink_rate"]) >= {"k", "eps", "value"} and 0 <= s["sink_rate"]["value"] <= 1
    assert len(s["variance_by_position"]) == 3 and len(s["variance_by_position"][0]) == 24
    files = json.loads((tmp_path / "run.json").read_text())["files"]
    assert "first_token_mass.png" in files and all((tmp_path / f).exists() for f in files)
    assert "Sink_1^0.3" in capsys.readouterr().out


def test_scan_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["scan", "/no/such/model", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no such model" in err and "Traceback" not in err


@pytest.mark.slow
def test_default_model_metrics_equal_output_attentions_and_it_sinks(default_model):
    subject = HFSubject(default_model)
    inputs = build_inputs(InputSpec(corpus="shakespeare", tokens=48, batch=2), subject.tokenizer, subject.max_positions)
    record, ref = check_against_reference(subject, inputs.ids, chunk=16)
    with subject.session():
        logits = subject.logits(inputs.ids)
    torch.testing.assert_close(logits, ref["logits"], atol=1e-4, rtol=1e-4)
    s = summarise(record, MetricSettings(), subject, inputs.ids)
    assert s["sink_rate"]["value"] > 0.5  # a real model has strong first-token sinks
    assert s["massive_activations"] and max(abs(m["value"]) for m in s["massive_activations"]) > 1000


def test_a_scan_of_some_layers_records_those_and_leaves_the_others_out(tiny_model_dir):
    """``--layers``: the recorded layers' figures equal a full scan's, the others are None (not 0:
    a reader must not take a skipped layer for one without a sink), the tables have rows only for
    the recorded layers, and Sink_k^eps counts only recorded (layer, head) pairs. Mutations tried:
    sink_rate dividing by every pair (NaN counted as not a sink) halves the rate; layer_rows
    ignoring recorded_layers gives a row of None."""
    from sinklab import load_model as load
    from sinklab import scan_model

    model = load(str(tiny_model_dir("llama")))
    inputs = dict(random_tokens=True, tokens=16, batch=2, eps=0.05)
    full = scan_model(model, **inputs).summary
    some = scan_model(model, layers=[0, 2], **inputs)
    s = some.summary
    assert s["recorded_layers"] == [0, 2] and s["layers"] == 3
    assert s["first_token_mass"][1] == [None] * 4 and s["first_token_mass"][0] == pytest.approx(full["first_token_mass"][0])
    assert s["first_token_mass"][2] == pytest.approx(full["first_token_mass"][2])
    assert list(some.frame("layers")["layer"]) == [0, 2]
    alpha = torch.tensor(full["sink_alpha"], dtype=torch.float64)[[0, 2]]
    assert s["sink_rate"]["value"] == pytest.approx(float((alpha > 0.05).double().mean()))


@pytest.mark.parametrize("attn", ["softmax", "relu", "softpick"])
def test_attention_zero_share_counts_exact_zeros_among_the_keys_a_query_may_see(attn):
    """``attention_zero_share`` per (layer, head) equals the share of exactly-zero weights over the
    causal entries of the model's own weights (masked keys, zero by construction, are not counted).
    Mutation tried: counting every entry of the (T, T) pattern (softmax then reports ~0.5)."""
    from sinklab.core.attention import AttentionSpec
    from sinklab.models.native import ModelConfig, Transformer
    from sinklab.scan import scan_native

    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=16, n_layers=2, n_heads=2, vocab_size=40, attention=AttentionSpec(attn), mlp=True))
    ids = torch.randint(0, 40, (3, 12))
    share = torch.tensor(scan_native(model, ids)["attention_zero_share"], dtype=torch.float64)
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)
    causal = torch.ones(12, 12).tril().bool()
    expected = torch.stack([((w == 0) & causal).sum(dim=(0, 2, 3)) / (3 * causal.sum()) for w in weights]).double()
    torch.testing.assert_close(share, expected)
    assert share.max() < 0.1 if attn == "softmax" else share.max() > 0.4  # softmax: zeros only by underflow
