"""Sink caches: equal to dense within capacity, exact key rotation over long streams in every
dtype, the intended positions after eviction (manual loops, absolute positions, generate, GPT-NeoX),
the one-pass kernel against a real cache, native caches, and clear errors.

Position tests run on *sharp* tiny models (initializer range 0.2): the default tiny models attend
almost uniformly, so a wrong position would move their logits by ~1e-4 and pass unnoticed. Two
mutation tests show that the position bugs these tests guard against do fail them."""

import json

import pytest
import torch
from conftest import tiny_config
from transformers import AutoModelForCausalLM, DynamicCache

from sinklab import cli
from sinklab.core.errors import SinklabError
from sinklab.models.hf import load_model
from sinklab.models.native import KVCache, ModelConfig, Transformer
from sinklab.stream import StreamConfig, benchmark, caches, generate
from sinklab.stream.benchmark import policy_nll, real_cache_walk
from sinklab.stream.caches import NativeSinkCache, cache_bytes, make_sink_cache
from sinklab.stream.rope import RopeShift, rotate, rotation

ROPE_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi", "gpt_neox")


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return load_model(str(tiny_model_dir("llama")))


@pytest.fixture(scope="module")
def sharp():
    """A factory: a tiny random model of ``arch`` whose attention is far from uniform."""
    made = {}

    def make(arch: str):
        if arch not in made:
            config = tiny_config(arch, 300)
            config.initializer_range = 0.2
            torch.manual_seed(0)
            made[arch] = AutoModelForCausalLM.from_config(config).eval()
        return made[arch]

    return make


class NoMove(RopeShift):
    """A mutant shifter that leaves keys and queries where they are."""

    def move(self, x, source, target):
        return x


def stream_ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def step_logits(model, ids, cache, prefill=5):
    outs = [model(input_ids=ids[:, :prefill], cache=cache, use_cache=True).logits]
    for t in range(prefill, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(outs, dim=1)


@torch.no_grad()
@pytest.mark.parametrize("arch", ROPE_ARCHITECTURES)
def test_sink_cache_equals_dense_while_it_holds_everything(sharp, arch):
    model, ids = sharp(arch), stream_ids(40)
    dense = step_logits(model, ids, DynamicCache())
    sink = step_logits(model, ids, make_sink_cache(model, 4, 36))
    torch.testing.assert_close(sink, dense, atol=1e-5, rtol=0)


def test_moving_keys_is_exact(llama):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = llama.model
    k = torch.randn(1, 2, 6, 8)
    rotary = model.model.rotary_emb

    def at(positions):
        cos, sin = rotary(k, torch.tensor([positions]))
        return apply_rotary_pos_emb(k, k, cos, sin)[1]

    start, moved = [10, 11, 12, 13, 14, 15], [3, 4, 5, 6, 7, 8]
    shifted = RopeShift(model).move(at(start), torch.tensor(start), torch.tensor(moved))
    torch.testing.assert_close(shifted, at(moved), atol=1e-6, rtol=0)


def smollm_like_rope():
    """A one-layer Llama with SmolLM2's rotary setting (head_dim 64, theta 1e5)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=64, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                         vocab_size=8, max_position_embeddings=2048, rope_parameters={"rope_type": "default", "rope_theta": 1e5})
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kept_keys_stay_exact_over_10000_steps(dtype):
    """After 10,000 single-token steps (~9,000 evictions) every kept key equals the key rotated
    directly at its index in the cache, within the rounding of one rotation in ``dtype``;
    re-rotating by -1 at every eviction (the old design) drifts far past that bound."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = smollm_like_rope()
    rotary = model.model.rotary_emb
    raw = 3 * torch.randn(10_000, 64, generator=torch.Generator().manual_seed(0))

    def at(rows, positions):  # as the model rotates keys; calling rotary also feeds the cache's tap
        x = rows.to(dtype).view(1, 1, -1, 64)
        cos, sin = rotary(x, torch.tensor([positions]))
        return apply_rotary_pos_emb(x, x, cos, sin)[1]

    layer = make_sink_cache(model, 4, 1020).layers[0]
    for step in range(len(raw)):
        key = at(raw[step : step + 1], [layer.get_seq_length()])
        layer.update(key, key)
    direct = at(raw[layer.positions], list(range(len(layer.positions))))
    one_rounding = 2 * torch.finfo(dtype).eps * direct.abs().max().item()
    assert (layer.keys_in_cache().float() - direct.float()).abs().max() <= one_rounding

    compounded = at(raw[:1], [1023])  # one key moved from the end of a full cache to index 4 by -1 steps
    minus_one = rotation(-RopeShift(model).inv_freq.double())
    for _ in range(1019):
        compounded = rotate(compounded, *minus_one)
    drift = (compounded.float() - at(raw[:1], [4]).float()).abs().max()
    assert drift > (10 * one_rounding if dtype != torch.float32 else 1e-4)


@torch.no_grad()
def test_every_step_equals_a_dense_cache_of_the_keys_at_their_index(sharp):
    """Through the sink-only steps and two rebases, each step's logits equal a dense cache that
    holds the kept keys rotated at their index in the cache, queried at the next index."""
    model, ids = sharp("llama"), stream_ids(50)
    cache = make_sink_cache(model, 2, 8)
    model(input_ids=ids[:, :5], cache=cache)
    for t in range(5, ids.shape[1]):
        dense = DynamicCache()
        for i, layer in enumerate(cache.layers):
            dense.update(layer.keys_in_cache(), layer.values, i)
        n_kept = cache.layers[0].kept_tokens()
        expected = model(input_ids=ids[:, t : t + 1], cache=dense, position_ids=torch.tensor([[n_kept]])).logits
        torch.testing.assert_close(model(input_ids=ids[:, t : t + 1], cache=cache).logits, expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_a_manual_loop_rotates_only_the_sinks_between_rebases(sharp, monkeypatch):
    """Once the cache is full a step rotates the n_sink sink keys and nothing else, except one
    rebase every ``window`` steps that moves the recent keys once; positions stay bounded."""
    model, ids, (n_sink, window) = sharp("llama"), stream_ids(120), (2, 8)
    rotated_rows = []
    monkeypatch.setattr(caches, "rotate", lambda x, cos, sin: rotated_rows.append(x.shape[-2]) or rotate(x, cos, sin))
    cache = make_sink_cache(model, n_sink, window)
    per_step, positions = [], []
    for t in range(ids.shape[1]):
        positions.append(cache.get_seq_length())
        rotated_rows.clear()
        model(input_ids=ids[:, t : t + 1], cache=cache)
        per_step.append(sorted(set(rotated_rows)))  # one entry per layer, all layers alike
    full = n_sink + window - 1  # kept between steps; the step that first evicts still sees every key in place
    steady = per_step[full + 1 :]
    assert per_step[: full + 1] == [[]] * (full + 1)
    rebases = [i for i, rows in enumerate(steady) if rows == [full + 1]]
    assert all(rows in ([n_sink], [full + 1]) for rows in steady)
    assert len(rebases) >= 10 and set(b - a for a, b in zip(rebases, rebases[1:])) == {window}
    assert max(positions) < n_sink + 2 * window


@torch.no_grad()
def test_steps_write_into_one_strip_that_a_long_chunk_only_borrows(sharp, monkeypatch):
    """A decode step hands attention views of the layer's preallocated strip (no copy of the
    cache; the keys are copies only at a rebase); the strip is replaced once its slack is used
    up, and a chunk longer than it gets a larger strip that the next step gives back."""
    model, ids, (n_sink, window) = sharp("llama"), stream_ids(200), (2, 8)
    cache = make_sink_cache(model, n_sink, window)
    layer_class, strip = type(cache.layers[0]), cache.layers[0]._strip
    views = []

    def update(self, keys, values, *args, **kwargs):
        shown = layer_class_update(self, keys, values, *args, **kwargs)
        views.append([x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for x, t in zip(shown, self._strip.tensors)])
        return shown

    layer_class_update = layer_class.update
    monkeypatch.setattr(layer_class, "update", update)
    strips = []
    for t in range(100):
        model(input_ids=ids[:, t : t + 1], cache=cache)
        strips.append(strip.tensors[0].data_ptr())
    assert all(value for _, value in views) and sum(not key for key, _ in views) <= len(views) // window
    slack = strip.capacity - (n_sink + window)
    assert strip.tensors[0].shape[-2] == strip.capacity and slack > 0
    assert len(set(strips)) <= 100 // slack + 2
    model(input_ids=ids[:, 100:160], cache=cache)  # longer than the strip
    assert strip.tensors[0].shape[-2] > strip.capacity
    model(input_ids=ids[:, 160:161], cache=cache)
    assert strip.tensors[0].shape[-2] == strip.capacity and cache.layers[0].kept_tokens() == n_sink + window - 1
    cfg = model.config  # the memory counted is what the layers hold: the sinks and the whole strip
    row_bytes = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    assert cache_bytes(cache) == cfg.num_hidden_layers * (n_sink + strip.capacity) * row_bytes


def test_layers_updated_out_of_order_are_refused(llama):
    """Layer 0 plans each step for every layer (the positions are shared), so a forward that
    skips it would silently use the previous step's plan."""
    cache = make_sink_cache(llama.model, 2, 6)
    key = torch.randn(1, llama.model.config.num_key_value_heads, 1, 8)
    with pytest.raises(SinklabError, match="in order, from layer 0"):
        cache.update(key, key, 1)


@torch.no_grad()
def test_after_eviction_the_cache_holds_the_sinks_and_the_recent_window(llama):
    model = llama.model
    cache = make_sink_cache(model, 3, 8)
    ids = torch.randint(2, model.config.vocab_size, (1, 30))
    step_logits(model, ids, cache)
    for layer in cache.layers:
        assert layer.positions.tolist() == [0, 1, 2, *range(30 - 7, 30)]
        assert layer.keys.shape[-2] == layer.values.shape[-2] == 3 + 7
    assert cache.layers[0].kept_tokens() == 10
    # the sink keys were computed with the full early context, exactly as in a dense cache
    dense = DynamicCache()
    step_logits(model, ids, dense)
    torch.testing.assert_close(cache.layers[0].keys[..., :3, :], dense.layers[0].keys[..., :3, :], atol=1e-6, rtol=0)


@torch.no_grad()
def test_generate_runs_past_the_context_length_with_constant_memory(llama):
    from transformers import LogitsProcessor, LogitsProcessorList

    max_positions = llama.model.config.max_position_embeddings  # 128 in the tiny config
    cache = make_sink_cache(llama.model, 2, 30)
    held = []

    class RecordCacheBytes(LogitsProcessor):
        def __call__(self, input_ids, scores):
            held.append(cache_bytes(cache))
            return scores

    ids = llama.tokenizer("To be or not to be", return_tensors="pt").input_ids
    out = llama.model.generate(ids, cache=cache, max_new_tokens=max_positions + 72, min_new_tokens=max_positions + 72,
                               do_sample=False, pad_token_id=1, logits_processor=LogitsProcessorList([RecordCacheBytes()]))
    assert out.shape[1] - ids.shape[1] == max_positions + 72
    full = held.index(max(held))
    assert full <= 30 and set(held[full:]) == {held[-1]}  # flat from the moment the cache fills
    result = generate(llama.model, llama.tokenizer, "To be or not to be", 50, sinks=2, window=30)
    assert result["new_tokens"] == 50 and result["cache_tokens"] == 2 + 29


def in_cache_vs_absolute_gap(model) -> float:
    """Largest |logit difference| between a manual loop (positions = index in the cache) and the
    same loop given the stream positions, as ``model.generate`` passes them, well past eviction."""
    ids = stream_ids(60)
    in_cache = step_logits(model, ids, make_sink_cache(model, 2, 10))
    cache = make_sink_cache(model, 2, 10)
    outs = [model(input_ids=ids[:, :5], cache=cache, position_ids=torch.arange(5)[None]).logits]
    for t in range(5, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t : t + 1], cache=cache, position_ids=torch.tensor([[t]])).logits)
    return (torch.cat(outs, dim=1) - in_cache).abs().max().item()


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])  # GPT-NeoX does not pass positions to the cache
def test_absolute_positions_see_the_cache_positions(sharp, arch):
    assert in_cache_vs_absolute_gap(sharp(arch)) < 1e-4


@torch.no_grad()
def test_mutation_dropping_the_position_offset_fails_the_test_above(sharp, monkeypatch):
    monkeypatch.setattr(caches, "_presented_positions", lambda caller, n_old, n_keys: torch.arange(n_keys))
    assert in_cache_vs_absolute_gap(sharp("llama")) > 1e-2


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_generate_matches_a_manual_loop(sharp, arch):
    """generate passes absolute positions; the cache presents its keys so that both agree."""
    model, ids = sharp(arch), stream_ids(6)
    out = model.generate(ids, cache=make_sink_cache(model, 2, 10), max_new_tokens=30, min_new_tokens=30, do_sample=False, pad_token_id=1)
    cache, seq = make_sink_cache(model, 2, 10), ids
    logits = model(input_ids=ids, cache=cache).logits
    for _ in range(30):
        logits[..., 1] = float("-inf")  # min_new_tokens bans EOS (id 1)
        nxt = logits[:, -1:].argmax(-1)
        seq = torch.cat([seq, nxt], dim=1)
        logits = model(input_ids=nxt, cache=cache).logits
    assert out.tolist() == seq.tolist()


@torch.no_grad()
def test_a_chunk_fed_after_the_cache_fills_attends_like_a_prefill(sharp):
    """A chunk of n tokens sees the kept cache plus its own earlier tokens (n_sink + window - 1 + n
    keys), exactly as a dense cache holding the kept keys would, and the cache is trimmed after."""
    model, ids = sharp("llama"), stream_ids(40)
    cache = make_sink_cache(model, 2, 10)
    step_logits(model, ids[:, :30], cache)
    dense = DynamicCache()
    for i, layer in enumerate(cache.layers):
        dense.update(layer.keys_in_cache(), layer.values, i)
    chunk = ids[:, 30:35]
    torch.testing.assert_close(model(input_ids=chunk, cache=cache).logits, model(input_ids=chunk, cache=dense).logits, atol=1e-5, rtol=0)
    assert dense.get_seq_length() == 2 + 9 + 5 and cache.layers[0].kept_tokens() == 2 + 9


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
    ids = torch.randint(2, 300, (2, 6))
    with pytest.raises(SinklabError, match="one sequence at a time; got a batch of 2"):
        llama.model(input_ids=ids, cache=make_sink_cache(llama.model, 2, 10))
    with pytest.raises(SinklabError, match="consecutive positions"):
        llama.model(input_ids=ids[:1], cache=make_sink_cache(llama.model, 2, 10), position_ids=torch.tensor([[0, 1, 2, 7, 8, 9]]))
    per_layer_type = AutoModelForCausalLM.from_config(tiny_config("llama", 300))
    per_layer_type.config.rope_parameters = {kind: {"rope_type": "default", "rope_theta": 1e4} for kind in ("full_attention", "sliding_attention")}
    with pytest.raises(SinklabError, match="per layer type"):
        make_sink_cache(per_layer_type, 2, 10)


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


def one_pass_vs_real_cache(model, policy, sinks, window) -> float:
    ids = stream_ids(70)[0]
    one_pass = policy_nll(model, ids, policy, sinks, window)
    walk = real_cache_walk(model, ids, policy, sinks, window)
    first, reference = walk["first"], walk["nll"]
    assert one_pass.shape == (69,) and first + len(reference) == 70
    return (one_pass[first - 1 :] - reference).abs().max().item()


@pytest.mark.parametrize("policy, sinks, window", [("sink", 2, 8), ("sink", 1, 5), ("window", 2, 8), ("dense", 2, 8)])
def test_one_pass_scores_equal_a_token_by_token_cache(sharp, policy, sinks, window):
    assert one_pass_vs_real_cache(sharp("llama"), policy, sinks, window) < 1e-4


def test_mutation_skipping_the_sink_query_re_rotation_fails_the_test_above(sharp, monkeypatch):
    monkeypatch.setattr(benchmark, "RopeShift", NoMove)  # the kernel's shifter only; the cache keeps its own
    assert one_pass_vs_real_cache(sharp("llama"), "sink", 2, 8) > 1e-1


def test_sinks_change_the_scores_once_tokens_are_evicted(llama):
    ids = torch.randint(2, llama.model.config.vocab_size, (40,))
    dense, sink = (policy_nll(llama.model, ids, p, 2, 8) for p in ("dense", "sink"))
    torch.testing.assert_close(sink[:9], dense[:9], atol=1e-4, rtol=0)  # identical before any eviction
    assert (sink[12:] - dense[12:]).abs().max() > 1e-3


def test_stream_cli_contract(tiny_model_dir, tmp_path, monkeypatch):
    corpus = tmp_path / "text.txt"
    corpus.write_text("To be, or not to be, that is the question. " * 60)
    code = cli.main(["stream", str(tiny_model_dir("llama")), "--corpus", str(corpus), "--tokens", "80", "--sinks", "2",
                     "--window", "14", "--recompute-every", "10", "--chunk", "40", "--latency-steps", "3",
                     "--ablation", "0,1", "--out", str(tmp_path / "run")])
    assert code == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {"model", "tokens", "sinks", "window", "policies"} <= set(s)
    assert set(s["policies"]) == {"dense", "window", "sink", "recompute"}
    for p in s["policies"].values():
        assert {"ppl", "ppl_by_chunk", "tokens_per_s", "ms_per_token_by_chunk", "peak_cache_bytes"} <= set(p)
        assert all({"start", "end", "ppl"} <= set(c) for c in p["ppl_by_chunk"])
    assert set(s["ablation"]) == {"0", "1"}
    check = s["one_pass_check"]  # the whole stream after the prefill, chunk by chunk
    assert check["policy"] == "sink" and check["positions"] == [15, 80] and check["passed"]
    assert check["max_abs_nll_difference"] < check["tolerance"] == 1e-3
    assert [c["start"] for c in check["by_chunk"]] == [0, 40]
    assert len(s["policies"]["sink"]["ms_per_token_by_chunk"]) == 2  # timed along the same walk
    assert all((tmp_path / "run" / f).exists() for f in s["figures"])


def test_a_failed_one_pass_check_fails_the_run_and_keeps_its_results(sharp, tokenizer, tmp_path, monkeypatch, capsys):
    """Exit status 3 (a failed numerical check), not 2 (a user error), and the run is not taken
    as finished. Mutation tried: making NumericalCheckFailed a SinklabError (status 2)."""
    sharp("llama").save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "text.txt").write_text("Now is the winter of our discontent. " * 60)
    monkeypatch.setattr(benchmark, "RopeShift", NoMove)  # a kernel that forgets the sink-query re-rotation
    code = cli.main(["stream", str(tmp_path / "model"), "--corpus", str(tmp_path / "text.txt"), "--tokens", "60", "--sinks", "2",
                     "--window", "8", "--policies", "sink", "--out", str(tmp_path / "run")])
    assert code == 3
    assert "numerical check failed: the one-pass sink scores differ from a real sink cache" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["one_pass_check"]["passed"] is False
    assert "differ from a real sink cache" in json.loads((tmp_path / "run" / "run.json").read_text())["numerical_check_failed"]


def test_generate_cli(tiny_model_dir, capsys):
    assert cli.main(["generate", str(tiny_model_dir("llama")), "--prompt", "To be", "--max-new-tokens", "20", "--window", "8"]) == 0
    assert "the cache holds 11 tokens" in capsys.readouterr().out


@torch.no_grad()
def test_recompute_scores_each_token_from_a_fresh_window(sharp):
    model, ids = sharp("llama"), stream_ids(60)[0]
    positions, nll, _ = benchmark.recompute_nll(model, ids, context=20, every=7)
    assert positions.tolist() == list(range(20, 60, 7))
    dense = policy_nll(model, ids, "dense", 2, 8)
    assert nll[0].item() == pytest.approx(dense[19].item(), abs=1e-5)  # the first window is the stream's start
    fresh = policy_nll(model, ids[27 - 20 : 28], "dense", 2, 8)[-1]
    assert nll[1].item() == pytest.approx(fresh.item(), abs=1e-5)
