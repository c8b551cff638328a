"""KV-cache presses (sinklab.kvcache): what each keeps, that the cache really shrinks, and that a
compressed cache attends exactly as the dense model with the dropped keys hidden."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers
from conftest import tiny_config

import sinklab
from sinklab import kvcache as P
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookSet
from sinklab.kvcache.policy import LayerContext
from sinklab.kvcache.rewriting import sink_positions
from sinklab.kvcache.sinks import detected_sinks
from sinklab.models.hf import instrument

CONTEXT, CONTINUATION = 40, 6
#: Every press at a ratio that drops keys, each with its sinks kept a different way; short windows
#: for the 40-token context.
PRESSED = [
    P.StreamingLLM(0.5, keep_sinks=4),
    P.Knorm(0.5, keep_sinks=2),
    P.KeyDiff(0.75),
    P.Random(0.5, keep_sinks=1, seed=3),
    P.H2O(0.5, keep_sinks="detected"),
    P.SnapKV(0.5, keep_sinks=1, window_size=4),
    P.TOVA(0.75, keep_sinks=4),
    P.PyramidKV(0.5, window_size=4),
]
#: The decoder architectures the scanner supports (Mistral's tiny config is all sliding window).
ARCHITECTURES = ["llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi", "gpt_neox", "gpt_oss"]


def tiny(arch: str):
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(tiny_config(arch, 300)).eval()


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 300, (1, CONTEXT), generator=g), torch.randint(2, 300, (1, CONTINUATION), generator=g)


@torch.no_grad()
def pressed_continuation(model, press, ids, cont):
    """The continuation's logits after the context's cache was compressed, and the compression."""
    with sinklab.applied(model, press) as pressing:
        cache = model(ids, use_cache=True).cache
        logits = model(cont, cache=cache).logits
    return logits, pressing.cache.last


@torch.no_grad()
def masked_reference(model, ids, cont, compression):
    """The dense model over context + continuation where each continuation query of a compressed
    layer sees only the context keys its KV head kept: what the compressed cache must give."""
    config = model.config.get_text_config()
    groups = config.num_attention_heads // (getattr(config, "num_key_value_heads", None) or config.num_attention_heads)

    def hide_dropped(mask, point):
        kept = compression.positions.get(point.layer)
        if kept is None:
            return None
        batch, kv_heads, _ = kept.shape
        visible = torch.zeros(batch, kv_heads, CONTEXT, dtype=torch.bool).scatter_(2, kept, True)
        mask = mask.expand(batch, kv_heads * groups, *mask.shape[-2:]).clone()
        mask[:, :, CONTEXT - point.q_start :, :CONTEXT] &= visible.repeat_interleave(groups, 1)[:, :, None, :]
        return mask

    hooks = HookSet()
    with hooks.attached([("blocks.*.attn.hook_mask", hide_dropped)]), instrument(model, hooks, query_chunk=None):
        return model(torch.cat([ids, cont], 1)).logits[:, CONTEXT:]


@pytest.mark.parametrize("name", list(P.PRESSES))
def test_ratio_zero_gives_the_dense_caches_logits_exactly(name):
    """Every press at ratio 0 keeps every key and changes nothing: the continuation's logits are
    bit-identical to a dense cache's (the prefill runs as without a press)."""
    model = tiny("llama")
    ids, cont = inputs()
    with torch.no_grad():
        dense = model(cont, cache=model(ids, use_cache=True).cache).logits
    settings = {"window_size": 4} if name in ("snapkv", "pyramidkv") else {}
    got, compression = pressed_continuation(model, P.policy_named(name, ratio=0.0, keep_sinks="detected", **settings), ids, cont)
    assert torch.equal(got, dense) and set(compression.kept.values()) == {CONTEXT}


@pytest.mark.parametrize("press", PRESSED, ids=lambda p: p.name)
def test_a_compressed_cache_attends_as_the_dense_model_with_the_dropped_keys_hidden(press):
    """On a GQA model (4 query heads on 2 KV heads, 3 layers): the continuation through the
    compressed cache equals the dense model in which each compressed layer's continuation
    queries cannot see the keys their KV head dropped. So the kept keys keep their positions and
    the new tokens sit at their true positions (a shifted position changes RoPE and fails this),
    and per-layer budgets (PyramidKV) are masked per layer."""
    model = tiny("llama")
    ids, cont = inputs()
    got, compression = pressed_continuation(model, press, ids, cont)
    expected_kept = int(CONTEXT * (1 - press.ratio))
    assert sum(compression.kept.values()) == pytest.approx(expected_kept * 3, abs=3)
    torch.testing.assert_close(got, masked_reference(model, ids, cont, compression), atol=2e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_press_works_on_every_architecture_and_the_bytes_go(arch):
    """Each press on each architecture: the compressed layers' bytes are exactly the kept fraction
    of their dense bytes (sinks included), sliding-window layers are left whole, and the
    continuation's logits are finite. Eager-only models refuse per-layer budgets in one line."""
    model = tiny(arch)
    ids, cont = inputs(1)
    for press in PRESSED:
        if press.per_layer_budgets and model.config._attn_implementation != "sdpa":
            with pytest.raises(SinklabError, match="sdpa"):
                pressed_continuation(model, press, ids, cont)
            continue
        logits, c = pressed_continuation(model, press, ids, cont)
        assert torch.isfinite(logits).all()
        assert c.layers == [i for i, kind in enumerate(layer_kinds(model)) if kind == "full_attention"]
        if not press.per_layer_budgets:
            assert c.kept_fraction == int(CONTEXT * (1 - press.ratio)) / CONTEXT
        per_key = (c.bytes_before - c.bytes_after) / sum(CONTEXT - k for k in c.kept.values())
        kv_heads = next(iter(c.positions.values())).shape[1]
        assert per_key == 2 * kv_heads * head_dim(model) * 4  # a key and a value per KV head, float32


def layer_kinds(model) -> list[str]:
    config = model.config.get_text_config()
    return getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers


def head_dim(model) -> int:
    config = model.config.get_text_config()
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def test_a_model_whose_every_layer_slides_is_refused_in_one_line():
    model = tiny("mistral")
    ids, cont = inputs()
    with pytest.raises(SinklabError, match="sliding window"):
        pressed_continuation(model, P.Knorm(0.5), ids, cont)


def context_of(keys=None, received=None, window=None, rows=0, length=20, layer=0, n_layers=1):
    keys = keys if keys is not None else torch.randn(1, 2, length, 8, generator=torch.Generator().manual_seed(0))
    return LayerContext(keys, keys.clone(), layer, n_layers, received, window, rows)


def positions(press, context, sinks=()):
    return press.keep(context, list(sinks))[0, 0].tolist()


def test_each_press_keeps_what_its_score_says():
    """Planted keys and attention: each press keeps the positions its rule names."""
    keys = torch.randn(1, 2, 20, 8, generator=torch.Generator().manual_seed(1)) + 3.0
    keys[:, :, [5, 9]] *= 0.01  # two tiny keys
    assert positions(P.Knorm(0.875), context_of(keys)) == [5, 9]  # two kept: the two smallest
    odd = keys.clone()
    odd[:, :, 7] = -odd[:, :, 7]  # the one key pointing away from the mean direction
    assert positions(P.KeyDiff(0.95), context_of(odd)) == [7]
    assert positions(P.StreamingLLM(0.5), context_of(), sinks=[0, 1]) == [0, 1, *range(12, 20)]
    received = 1 + torch.arange(20.0).expand(1, 4, 20) * 0.01
    received[..., 3] = 9.0
    assert positions(P.H2O(0.75), context_of(received=received)) == [3, 16, 17, 18, 19]  # half heavy hitters, half recent
    window = torch.arange(20.0).expand(1, 4, 20) * 0.01  # the last queries look a little more at recent keys
    window[..., 10] = 5.0  # and much more at 10
    snap = positions(P.SnapKV(0.75, window_size=2, kernel_size=1), context_of(window=window, rows=2))
    assert snap == [10, 16, 17, 18, 19]  # 10, the next best two, and the window's own keys
    last = torch.zeros(1, 4, 20)
    last[:, 1, 4] = 1.0  # one head of the last query looks at 4: TOVA averages the heads, every head keeps it
    tova = P.TOVA(0.875).keep(context_of(window=last, rows=1), [])
    assert tova[0].tolist() == [[4, 19], [4, 19]]


def test_attention_scores_use_each_kv_heads_own_query_heads_and_snapkv_pools_neighbours():
    """GQA: a KV head's score averages its own query heads (heads 0-1 for KV head 0, 2-3 for KV
    head 1, as transformers repeats them). SnapKV pools its window's attention over
    ``kernel_size`` neighbours, so a key next to an attended one is kept with it."""
    keys = torch.randn(1, 2, 20, 8)
    by_head = torch.arange(4.0)[None, :, None].expand(1, 4, 20)
    assert LayerContext(keys, keys, 0, 1).per_kv_head(by_head)[0, :, 0].tolist() == [0.5, 2.5]
    window = torch.zeros(1, 4, 20)
    window[..., 10] = 1.0
    snap = positions(P.SnapKV(0.65, window_size=2, kernel_size=5), context_of(window=window, rows=2))
    assert snap == [8, 9, 10, 11, 12, 18, 19]


def test_h2o_keeps_its_heavy_hitters_and_the_most_recent_half_of_its_budget():
    """Received attention falling with position (early keys are seen by more queries) and two
    heavy hitters: a budget of 5 keeps the last two tokens (half the budget, rounded down), then the
    two hitters and the best early key, not the three early keys the sums rank next."""
    received = torch.linspace(2.0, 1.0, 20).expand(1, 4, 20).clone()
    received[..., [6, 11]] = 9.0
    assert positions(P.H2O(0.75), context_of(received=received)) == [0, 6, 11, 18, 19]


def test_keydiff_measures_each_key_against_the_mean_direction_not_the_mean_key():
    """19 unit keys near one direction and one key 1,000 times longer along another: the mean of
    the raw keys points at the long key, the mean of the unit keys along the 19. KeyDiff keeps the
    key least like the mean direction: the long one."""
    keys = torch.zeros(1, 2, 20, 8)
    keys[..., 0] = 1.0
    keys[..., 1:] = 0.05 * torch.randn(1, 2, 20, 7, generator=torch.Generator().manual_seed(3))
    keys[:, :, 12] = 0.0
    keys[:, :, 12, 1] = 1000.0
    assert positions(P.KeyDiff(0.95), context_of(keys)) == [12]


def test_new_tokens_take_their_true_positions_without_position_ids():
    """After a compressed prefill, tokens fed one at a time with no position_ids (transformers
    places them at the cache's seen length) give the logits of the same loop with the true
    positions passed: the cache counts every token fed, not only the kept ones."""
    model = tiny("llama")
    ids, cont = inputs(4)
    with torch.no_grad(), sinklab.applied(model, P.StreamingLLM(0.5, keep_sinks=1)):
        runs = []
        for give_positions in (False, True):
            cache, logits = model(ids, use_cache=True).cache, []
            for step in range(CONTINUATION):
                where = {"position_ids": torch.tensor([[CONTEXT + step]])} if give_positions else {}
                logits.append(model(cont[:, step : step + 1], cache=cache, **where).logits)
            runs.append(torch.cat(logits, 1))
    assert torch.equal(runs[0], runs[1])


def test_sinks_come_out_of_the_budget_and_are_kept():
    keys = torch.randn(1, 2, 20, 8, generator=torch.Generator().manual_seed(2))
    keys[:, :, :3] *= 100  # the largest norms: Knorm would drop them
    plain, protected = (
        positions(P.Knorm(0.5), context_of(keys)),
        positions(P.Knorm(0.5, keep_sinks=3), context_of(keys), range(3)),
    )
    assert len(plain) == len(protected) == 10 and not {0, 1, 2} & set(plain) and protected[:3] == [0, 1, 2]


def test_detected_sinks_are_the_keys_far_above_the_mean():
    """Position 0 and a planted secondary sink at 7 are found; uniform attention has none (the
    division by the queries that see a key removes the early keys' advantage); a late key the
    few queries after it attend to is no sink (too few queries to tell)."""
    length = 256
    uniform = torch.tril(torch.ones(length, length)) / torch.arange(1, length + 1)[:, None]
    assert detected_sinks({0: uniform.sum(0)[None, None]}) == []
    sinky = uniform * 0.2
    sinky[:, 0] += 0.6
    sinky[7:, 7] += 0.2
    late = length - 40
    sinky[late:, late] += 0.2
    assert detected_sinks({0: sinky.sum(0)[None, None].expand(1, 3, length)}) == [0, 7]


def test_detection_divides_by_the_queries_that_see_each_key():
    """Uniform causal attention over 30,000 tokens: the first key's summed weight is 10.9 times the
    mean sum (ln T + 0.58), yet per query that sees it, it is as ordinary as any key: no sink."""
    length = 30_000
    row_weight = 1 / torch.arange(1, length + 1, dtype=torch.float64)  # query i spreads 1 over i + 1 keys
    received = row_weight.flip(0).cumsum(0).flip(0)  # key j: the sum over the queries i >= j
    assert received[0] > 10 * received.mean()
    assert detected_sinks({0: received.float()[None, None]}) == []


def test_detected_sinks_read_only_the_full_attention_layers():
    """A sliding-window layer's received attention is left out of the detection."""
    length = 256
    uniform = torch.tril(torch.ones(length, length)) / torch.arange(1, length + 1)[:, None]
    sliding = uniform.clone()
    sliding[:, 30] += 0.5
    tally = SimpleNamespace(received={0: uniform.sum(0)[None, None], 1: sliding.sum(0)[None, None]})
    assert sink_positions(P.DETECTED, length, tally, layers=[0]) == []
    assert sink_positions(P.DETECTED, length, tally, layers=[0, 1]) == [30]


def test_compress_detects_sinks_from_the_full_attention_layers_only():
    """On Gemma 3 (layer 0 slides, layer 1 attends fully) a key the sliding layer's queries pile
    onto is not protected; the same key in the full-attention layer is."""
    model = tiny("gemma3")
    ids = torch.randint(2, 300, (1, 200), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        dense = model(ids, use_cache=True).cache
    uniform = (1 / torch.arange(1, 201.0)).flip(0).cumsum(0).flip(0)[None, None].expand(1, 4, 200)
    spiked = uniform.clone()
    spiked[..., 30] += 100.0
    for sliding, full, expected in ((spiked, uniform, []), (uniform, spiked, [30])):
        tally = SimpleNamespace(received={0: sliding, 1: full}, window={})
        assert P.Knorm(0.5, keep_sinks=P.DETECTED).apply(P.branch(dense), tally).sinks == expected


def test_pyramid_budgets_shrink_with_depth_and_fall_back_where_kvpress_does():
    press = P.PyramidKV(0.5)
    budgets = [press.budget(2048, layer, 30) for layer in range(30)]
    assert budgets[0] > budgets[-1] and budgets == sorted(budgets, reverse=True)
    assert sum(budgets) == pytest.approx(30 * 1024, rel=0.01)
    assert {P.PyramidKV(0.75).budget(2048, layer, 30) for layer in range(30)} == {512}  # the SnapKV fallback


def test_the_random_control_is_seeded():
    one, again, other = (positions(P.Random(0.5, seed=s), context_of()) for s in (0, 0, 1))
    assert one == again != other


@pytest.mark.parametrize(
    "bad", [dict(ratio=1.0), dict(ratio=-0.1), dict(keep_sinks=-1), dict(keep_sinks="some"), dict(keep_sinks=True)]
)
def test_bad_press_settings_are_one_line_errors(bad):
    with pytest.raises(SinklabError):
        P.Knorm(**bad)


def test_a_padded_batch_is_refused_and_nothing_stays_on_the_model():
    """A left-padded batch would mask the wrong kept keys: refused in one line. The block leaves
    no hook and the model's attention implementation as it was, also when it ends by an error."""
    model = tiny("llama")
    ids = torch.randint(2, 300, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    before = model.config._attn_implementation
    with pytest.raises(SinklabError, match="padded"), sinklab.applied(model, P.PyramidKV(0.5, window_size=2)):
        model(ids, attention_mask=mask, use_cache=True)
    assert model.config._attn_implementation == before
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_generate_under_a_press_continues_the_compressed_context():
    """model.generate inside the block: the prompt is compressed after its prefill and decoding
    continues at the true positions: the tokens equal a greedy loop over the compressed cache
    that passes the positions explicitly."""
    model = tiny("llama")
    ids, _ = inputs(2)
    press = P.SnapKV(0.5, keep_sinks=1, window_size=4)
    with sinklab.applied(model, press):
        generated = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=1)[0, CONTEXT:].tolist()
    with torch.no_grad(), sinklab.applied(model, press):
        out = model(ids, use_cache=True)
        token, loop = out.logits[:, -1].argmax(-1, keepdim=True), []
        for step in range(5):
            loop.append(token.item())
            out = model(token, cache=out.cache, position_ids=torch.tensor([[CONTEXT + step]]))
            token = out.logits[:, -1].argmax(-1, keepdim=True)
    assert generated == loop


def test_a_prefill_given_as_embeddings_is_refused_not_left_dense():
    """Without input_ids the press cannot tell a prefill's length the way it reads it: refused in
    one line instead of leaving the cache silently uncompressed."""
    model = tiny("llama")
    ids, _ = inputs()
    with pytest.raises(SinklabError, match="inputs_embeds"), sinklab.applied(model, P.Knorm(0.5)), torch.no_grad():
        model(inputs_embeds=model.get_input_embeddings()(ids), use_cache=True)


def test_a_press_is_refused_with_a_clear_error_when_not_a_press():
    with pytest.raises(SinklabError, match="press"), sinklab.applied(tiny("llama"), "snapkv"):
        pass


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3"])
def test_the_weights_beside_sdpa_equal_the_instrumented_ones(arch, monkeypatch):
    """On an SDPA model the weights a press reads are computed beside the model's own SDPA (every
    query's in blocks of rows, here 16 of the 40, or the last queries' only) instead of under the
    instrumented attention: the same sums, sliding windows (Mistral's 8 tokens) and GQA included.
    Mutations tried: the causal rule (SDPA handed no mask) off by one key fails Llama and Qwen3;
    the mask's rows taken from the first block whatever the block fails Mistral; a block's window
    rows counted from the block's start fails all three."""
    from sinklab.core.hooks import HookSet
    from sinklab.kvcache import tally as attention

    monkeypatch.setattr(attention, "ROWS_AT_ONCE", 16)
    model = tiny(arch)
    assert model.config._attn_implementation == "sdpa"
    ids, _ = inputs()
    reference, hooks = attention.AttentionTally(CONTEXT, True, 4), HookSet()
    with torch.no_grad():
        with hooks.attached(reference.hooks()), instrument(model, hooks):
            model(ids, use_cache=True)
        with attention.tallied(model, CONTEXT, True, 4) as every_row:
            model(ids, use_cache=True)
        with attention.tallied(model, CONTEXT, False, 4) as last_rows:
            model(ids, use_cache=True)
    assert not last_rows.received and model.config._attn_implementation == "sdpa"
    for layer, sums in reference.window.items():
        torch.testing.assert_close(every_row.received[layer], reference.received[layer], atol=1e-5, rtol=0)
        torch.testing.assert_close(every_row.window[layer], sums, atol=1e-5, rtol=0)
        torch.testing.assert_close(last_rows.window[layer], sums, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_window_rows_are_the_last_ones_when_a_block_of_rows_is_shorter_than_the_window(attention):
    """A 300-token prefill tallied in blocks of query rows (beside SDPA 128 at a time; instrumented,
    for an eager model, 256) with every row's attention (H2O, detected sinks) and a 64-row window
    (SnapKV's): the last block (rows 256 to 299) is shorter than the window, which starts at row
    236 inside the block before it. The window sums are those of rows 236 to 299 of the model's
    own attention weights (eager, ``output_attentions``), and equal the window tallied alone.
    Mutation caught: the tally's window slice not clamped at 0 (the last block's rows counted from
    its end: rows 256 to 279 dropped, so detected sinks on contexts over 128 tokens, which tally
    every row, scored SnapKV on the wrong rows)."""
    from sinklab.kvcache import tally as attention_tally

    torch.manual_seed(0)
    config = tiny_config("llama", 300, positions=512)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(2, 300, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        weights = model(ids, output_attentions=True).attentions  # (1, H, 300, 300) per layer
    model.set_attn_implementation(attention)
    assert attention_tally.ROWS_AT_ONCE == 128 and 300 - 64 < 256 < 300
    with torch.no_grad():
        with P.tallied(model, 300, True, 64) as every_row:
            model(ids, use_cache=True)
        with P.tallied(model, 300, False, 64) as window_only:
            model(ids, use_cache=True)
    for layer, w in enumerate(weights):
        torch.testing.assert_close(every_row.window[layer], w[:, :, 236:].sum(2), atol=1e-5, rtol=0)
        torch.testing.assert_close(every_row.received[layer], w.sum(2), atol=1e-4, rtol=0)
        torch.testing.assert_close(window_only.window[layer], w[:, :, 236:].sum(2), atol=1e-5, rtol=0)
