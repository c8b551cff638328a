"""The native decoder: fast paths equal the reference, causality, caching, hooks, bad input."""

import pytest
import torch

from sinklab.core.attention import ATTN_NORMS, EXTRA_NAMES, AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import POINTS
from sinklab.models.circuits import attention_only_forward
from sinklab.models.native import KVCache, ModelConfig, Transformer


def lm_config(attn="softmax", **kw):
    """A small language model; the per-head extras (``gate=True``, ...) go to its AttentionSpec."""
    extras = {name: kw.pop(name) for name in EXTRA_NAMES if name in kw}
    base = dict(
        d_model=32,
        n_layers=2,
        n_heads=4,
        vocab_size=50,
        mlp=True,
        norm=True,
        rope=True,
        residual=True,
        scale_scores=True,
        max_seq_len=64,
    )
    base.update(kw)
    return ModelConfig(attention=AttentionSpec(attn, **extras), **base)


@pytest.mark.parametrize("attn", list(ATTN_NORMS))
def test_merged_circuits_equal_reference_path_and_gradients(attn):
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(d_model=8, n_layers=3, n_heads=2, head_dim=8, attention=AttentionSpec(attn), residual=True, init_std=0.15)
    )
    x = torch.randn(4, 9, 8)
    fast = attention_only_forward(model, x)
    ref, _ = model(x, need_weights=True)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    g_fast = torch.autograd.grad(fast.square().sum(), list(model.parameters()), allow_unused=True)
    ref, _ = model(x, need_weights=True)
    g_ref = torch.autograd.grad(ref.square().sum(), list(model.parameters()), allow_unused=True)
    for a, b in zip(g_fast, g_ref):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("attn", list(ATTN_NORMS))
@pytest.mark.parametrize(
    "extras", [{}, *({name: True} for name in EXTRA_NAMES), {"sink_tokens": 2, "tie_embeddings": False}], ids=str
)
def test_changing_a_future_token_changes_no_earlier_logit(attn, extras):
    torch.manual_seed(1)
    model = Transformer(lm_config(attn=attn, **extras))
    ids = torch.randint(0, 50, (2, 12))
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 50
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], atol=0, rtol=0)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 0


@pytest.mark.parametrize("attn", ["softmax", "relu", "sink_logit", "softpick"])
@pytest.mark.parametrize("extras", [{}, *({name: True} for name in EXTRA_NAMES)], ids=str)
def test_incremental_decoding_with_cache_equals_full_forward(attn, extras):
    torch.manual_seed(2)
    model = Transformer(lm_config(attn=attn, sink_tokens=1, **extras))
    ids = torch.randint(0, 50, (2, 10))
    full = model(ids)
    cache = KVCache()
    steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 11  # one sink token + ten tokens


POSITION_ENCODINGS = {"rope": {"rope": True}, "learned": {"rope": False, "learned_positions": True}, "none": {"rope": False}}


@pytest.mark.parametrize("encoding", list(POSITION_ENCODINGS))
def test_only_nope_ignores_the_order_of_earlier_tokens(encoding):
    """In one layer, swapping tokens 1 and 2 leaves the logits from position 3 on unchanged only
    without positions: rotary and learned positions both make the order of earlier tokens visible.
    (From the second layer on the causal mask itself tells positions apart, Haviv et al. 2022.)"""
    torch.manual_seed(3)
    model = Transformer(lm_config(n_layers=1, init_std=0.2, **POSITION_ENCODINGS[encoding]))
    ids = torch.randint(0, 50, (2, 10))
    ids[:, 2] = (ids[:, 1] + 1) % 50  # two different tokens to swap
    swapped = ids.clone()
    swapped[:, [1, 2]] = ids[:, [2, 1]]
    moved = (model(ids)[:, 3:] - model(swapped)[:, 3:]).abs().max()
    if encoding == "none":
        assert moved < 1e-5
    else:
        assert moved > 1e-3


def test_learned_positions_decode_with_a_cache_as_in_one_pass():
    """The cached path adds the vectors of the absolute positions after the cache, sink tokens included."""
    torch.manual_seed(4)
    model = Transformer(lm_config(sink_tokens=1, **POSITION_ENCODINGS["learned"]))
    torch.nn.init.normal_(model.positions.weight, std=1.0)  # positions that matter
    ids = torch.randint(0, 50, (2, 10))
    full = model(ids)
    cache = KVCache()
    steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_sequence_longer_than_the_model_allows_is_a_clear_error():
    model = Transformer(lm_config(max_seq_len=8))
    with pytest.raises(SinklabError, match="exceeds the model's maximum of 8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_wrong_input_kind_is_a_clear_error():
    with pytest.raises(SinklabError, match="token ids"):
        Transformer(lm_config())(torch.randn(1, 4, 32))
    with pytest.raises(SinklabError, match="vectors"):
        Transformer(ModelConfig(d_model=8))(torch.zeros(1, 4, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs, message",
    [({"n_layers": 0}, "layers"), ({"n_heads": 0}, "heads"), ({"rope": True, "learned_positions": True}, "not both")],
)
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(SinklabError, match=message):
        ModelConfig(**kwargs)


def test_unknown_attention_is_a_clear_error():
    with pytest.raises(SinklabError, match="softmax, relu"):
        ModelConfig(attention=AttentionSpec("nope"))


def test_every_hook_point_fires_with_documented_shapes_and_hooks_are_removed_on_error():
    model = Transformer(lm_config())
    seen = {}

    def record(t, point):
        seen[point.name] = tuple(t.shape)

    ids = torch.randint(0, 50, (2, 5))
    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks.attached([(f"blocks.*.{p}", record) for p in POINTS]):
            model(ids)
            raise RuntimeError("boom")
    assert not model.hooks
    assert seen["blocks.1.attn.hook_pattern"] == (2, 4, 5, 5)
    assert seen["blocks.0.attn.hook_mask"] == (1, 1, 5, 5)
    assert seen["blocks.0.attn.hook_k"] == seen["blocks.0.attn.hook_z"] == (2, 4, 5, 8)
    assert seen["blocks.0.mlp.hook_post"] == (2, 5, model.cfg.mlp_hidden)
    assert seen["blocks.1.hook_resid_post"] == seen["blocks.0.hook_resid_pre"] == (2, 5, 32)
    assert seen["blocks.1.attn.hook_q"] == (2, 4, 5, 8)
    assert len(seen) == 2 * len(POINTS)


def test_a_hook_can_replace_a_tensor():
    model = Transformer(lm_config())
    ids = torch.randint(0, 50, (1, 6))
    with model.hooks.attached([("blocks.1.attn.hook_z", lambda z, p: torch.zeros_like(z))]):
        zeroed = model(ids)
    assert not torch.allclose(zeroed, model(ids))


def test_replacing_queries_or_the_residual_entering_a_block_changes_the_output():
    """Zero queries attend uniformly; layer 1's input from a run on other tokens gives their
    logits. Mutation tried: Block.forward firing hook_resid_pre without using the result."""
    model = Transformer(lm_config(init_std=0.2))
    ids, other = torch.randint(0, 50, (2, 2, 7))
    seen = {}

    def keep(t, point):
        seen[point.point] = t.clone()

    with model.hooks.attached([("blocks.1.hook_resid_pre", keep)]):
        theirs = model(other)
    with model.hooks.attached([("blocks.1.hook_resid_pre", lambda h, p: seen["hook_resid_pre"])]):
        torch.testing.assert_close(model(ids), theirs, atol=1e-5, rtol=1e-5)
    with model.hooks.attached([("blocks.0.attn.hook_q", lambda q, p: torch.zeros_like(q)), ("blocks.0.attn.hook_pattern", keep)]):
        zeroed = model(ids)
    visible = torch.tril(torch.ones(7, 7))
    torch.testing.assert_close(seen["attn.hook_pattern"], (visible / visible.sum(-1, keepdim=True)).expand(2, 4, 7, 7))
    assert (zeroed - model(ids)).abs().max() > 1e-3


def test_the_merged_circuit_path_fires_resid_pre_and_leaves_queries_to_the_reference_path():
    """Mutations tried: attention_only_forward not firing hook_resid_pre (it then differs from the
    reference path), and hook_q missing from MERGED_MISSING_POINTS (zeroed queries ignored)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=8, n_layers=2, n_heads=2, residual=True, init_std=0.3))
    x = torch.randn(2, 6, 8)
    with model.hooks.attached([("blocks.1.hook_resid_pre", lambda h, p: 2 * h)]):
        merged, (reference, _) = model(x), model(x, need_weights=True)
    torch.testing.assert_close(merged, reference, atol=1e-5, rtol=1e-5)
    assert (merged - model(x)).abs().max() > 1e-3
    with model.hooks.attached([("blocks.*.attn.hook_q", lambda q, p: torch.zeros_like(q))]):
        zeroed, (reference, _) = model(x), model(x, need_weights=True)
    torch.testing.assert_close(zeroed, reference, atol=1e-5, rtol=1e-5)
    assert (zeroed - model(x)).abs().max() > 1e-3


def test_bad_hook_pattern_is_rejected():
    with pytest.raises(ValueError, match="names no hook point"):
        with Transformer(lm_config()).hooks.attached([("blocks.0.attn.hook_nothing", print)]):
            pass


def test_a_hook_outside_attention_keeps_the_fused_kernel(monkeypatch):
    """TWEO's collector on the blocks' outputs must not send a softmax model to the eager attention
    (a slower kernel, and another float order than the run without it); a hook inside attention
    must. Mutation tried: sdpa_equivalent refusing any hook (the eager path then runs)."""
    from sinklab.core.attention import reference
    from sinklab.core.hooks import hook_name

    eager = []
    original = reference.attend
    monkeypatch.setattr(reference, "attend", lambda *a, **k: eager.append(1) or original(*a, **k))
    model = Transformer(lm_config())
    ids = torch.randint(0, 50, (2, 8))
    with model.hooks.attached([(hook_name("*", "hook_resid_post"), lambda x, point: None)]):
        model(ids)
    assert not eager
    with model.hooks.attached([(hook_name(0, "attn.hook_q"), lambda x, point: None)]):
        model(ids)
    assert len(eager) == 1  # layer 0 only: layer 1 has no hook inside its attention
