"""Sink caches: equal to dense within capacity, exact re-rotation, the intended positions after
eviction, generate past the context length, native caches, and clear errors."""

import json

import pytest
import torch

from sinklab import cli
from sinklab.core.errors import SinklabError
from sinklab.models.hf import load_model
from sinklab.models.native import KVCache, ModelConfig, Transformer
from sinklab.stream import StreamConfig, generate
from sinklab.stream.benchmark import policy_nll, token_by_token_nll
from sinklab.stream.caches import NativeSinkCache, RopeShift, make_sink_cache, rotate_keys


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return load_model(str(tiny_model_dir("llama")))


def step_logits(model, ids, cache, prefill=5):
    outs = [model(input_ids=ids[:, :prefill], cache=cache, use_cache=True).logits]
    for t in range(prefill, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(outs, dim=1)


@torch.no_grad()
def test_sink_cache_equals_dense_while_it_holds_everything(llama):
    from transformers import DynamicCache

    ids = torch.randint(2, llama.model.config.vocab_size, (1, 40))
    dense = step_logits(llama.model, ids, DynamicCache())
    sink = step_logits(llama.model, ids, make_sink_cache(llama.model, 4, 36))
    torch.testing.assert_close(sink, dense, atol=1e-5, rtol=0)


def test_re_rotation_is_exact(llama):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = llama.model
    k = torch.randn(1, 2, 6, 8)
    rotary = model.model.rotary_emb

    def at(positions):
        cos, sin = rotary(k, torch.tensor([positions]))
        return apply_rotary_pos_emb(k, k, cos, sin)[1]

    start, moved = [10, 11, 12, 13, 14, 15], [3, 4, 5, 6, 7, 8]
    shifted = RopeShift(model)(at(start), torch.tensor(moved) - torch.tensor(start))
    torch.testing.assert_close(shifted, at(moved), atol=1e-5, rtol=0)
    # composing shifts is exact too (a token re-rotated once per evicted step)
    inv = RopeShift(model).inv_freq
    twice = rotate_keys(rotate_keys(at(start), torch.full((6,), -3), inv), torch.full((6,), -4), inv)
    torch.testing.assert_close(twice, at([p - 7 for p in start]), atol=1e-5, rtol=0)


@torch.no_grad()
def test_after_eviction_the_cache_holds_the_sinks_and_the_recent_window(llama):
    model = llama.model
    cache = make_sink_cache(model, 3, 8)
    ids = torch.randint(2, model.config.vocab_size, (1, 30))
    step_logits(model, ids, cache)
    for layer in cache.layers:
        assert layer.positions.tolist() == [0, 1, 2, *range(30 - 7, 30)]
        assert layer.keys.shape[-2] == layer.values.shape[-2] == 3 + 7
    assert cache.get_seq_length() == 10
    # the sink keys were computed with the full early context, exactly as in a dense cache
    from transformers import DynamicCache

    dense = DynamicCache()
    step_logits(model, ids, dense)
    torch.testing.assert_close(cache.layers[0].keys[..., :3, :], dense.layers[0].keys[..., :3, :], atol=1e-6, rtol=0)


@torch.no_grad()
def test_generate_runs_past_the_context_length_with_constant_memory(llama):
    max_positions = llama.model.config.max_position_embeddings  # 128 in the tiny config
    result = generate(llama.model, llama.tokenizer, "To be or not to be", max_positions + 72, sinks=2, window=30)
    assert result["new_tokens"] == max_positions + 72
    assert result["cache_tokens"] == 2 + 29


@torch.no_grad()
def test_generate_matches_a_manual_loop(llama):
    """generate passes absolute positions; the cache shifts keys so both agree."""
    model, tok = llama.model, llama.tokenizer
    ids = tok("Now is the winter", return_tensors="pt").input_ids
    out = model.generate(ids, cache=make_sink_cache(model, 2, 10), max_new_tokens=30, do_sample=False, pad_token_id=0)
    cache = make_sink_cache(model, 2, 10)
    seq = ids
    logits = model(input_ids=ids, cache=cache, use_cache=True).logits
    for _ in range(30):
        nxt = logits[:, -1:].argmax(-1)
        seq = torch.cat([seq, nxt], dim=1)
        logits = model(input_ids=nxt, cache=cache, use_cache=True).logits
    assert out.tolist() == seq.tolist()


def test_bad_sizes_and_models_are_clear_errors(llama, tiny_model_dir):
    with pytest.raises(SinklabError, match="larger than the number of sink tokens"):
        make_sink_cache(llama.model, 8, 4)
    with pytest.raises(SinklabError, match=">= 0"):
        make_sink_cache(llama.model, -1, 4)
    with pytest.raises(SinklabError, match="at least 1"):
        make_sink_cache(llama.model, 0, 0)
    gpt2 = load_model(str(tiny_model_dir("gpt2")))
    with pytest.raises(SinklabError, match="rotary"):
        make_sink_cache(gpt2.model, 4, 16)
    with pytest.raises(SinklabError, match="unknown policy"):
        StreamConfig(policies=("dense", "lru"))


@torch.no_grad()
def test_native_models_stream_the_same_way():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=32, n_layers=2, n_heads=4, vocab_size=50, mlp=True, norm=True, rope=True, residual=True, scale_scores=True, max_seq_len=64))
    ids = torch.randint(0, 50, (1, 24))

    def run(cache):
        outs = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 24)]
        return torch.cat(outs, dim=1)

    torch.testing.assert_close(run(NativeSinkCache(2, 30)), run(KVCache()), atol=1e-6, rtol=0)
    small = NativeSinkCache(2, 6)
    run(small)
    assert len(small) == 2 + 5


@pytest.mark.parametrize("policy, sinks, window", [("sink", 2, 8), ("sink", 1, 5), ("window", 2, 8), ("dense", 2, 8)])
def test_one_pass_scores_equal_a_token_by_token_cache(llama, policy, sinks, window):
    ids = torch.randint(2, llama.model.config.vocab_size, (70,), generator=torch.Generator().manual_seed(1))
    one_pass = policy_nll(llama.model, ids, policy, sinks, window)
    first, reference = token_by_token_nll(llama.model, ids, policy, sinks, window, steps=50)
    assert one_pass.shape == (69,) and len(reference) == 50
    torch.testing.assert_close(one_pass[first - 1 : first - 1 + 50], reference, atol=2e-4, rtol=0)


def test_sinks_change_the_scores_once_tokens_are_evicted(llama):
    ids = torch.randint(2, llama.model.config.vocab_size, (40,))
    dense, sink = (policy_nll(llama.model, ids, p, 2, 8) for p in ("dense", "sink"))
    torch.testing.assert_close(sink[:9], dense[:9], atol=1e-4, rtol=0)  # identical before any eviction
    assert (sink[12:] - dense[12:]).abs().max() > 1e-3


def test_stream_cli_contract(tiny_model_dir, tmp_path, monkeypatch):
    corpus = tmp_path / "text.txt"
    corpus.write_text("To be, or not to be, that is the question. " * 60)
    code = cli.main(["stream", str(tiny_model_dir("llama")), "--corpus", str(corpus), "--tokens", "80", "--sinks", "2",
                     "--window", "14", "--recompute-every", "10", "--chunk", "40", "--latency-steps", "3", "--check-tokens", "20",
                     "--ablation", "0,1", "--out", str(tmp_path / "run")])
    assert code == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {"model", "tokens", "sinks", "window", "policies"} <= set(s)
    assert set(s["policies"]) == {"dense", "window", "sink", "recompute"}
    for p in s["policies"].values():
        assert {"ppl", "ppl_by_chunk", "tokens_per_s", "ms_per_token_by_chunk", "peak_cache_bytes"} <= set(p)
        assert all({"start", "end", "ppl"} <= set(c) for c in p["ppl_by_chunk"])
    assert set(s["ablation"]) == {"0", "1"}
    assert s["one_pass_check"]["max_abs_nll_difference"] < 1e-3
    assert all((tmp_path / "run" / f).exists() for f in s["figures"])


def test_generate_cli(tiny_model_dir, capsys):
    assert cli.main(["generate", str(tiny_model_dir("llama")), "--prompt", "To be", "--max-new-tokens", "20", "--window", "8"]) == 0
    assert "the cache holds 11 tokens" in capsys.readouterr().out
