"""Properties of every registered normalisation, the extras, and the eager/fast equivalence."""

import math

import pytest
import torch

from sinklab.core.attention import ATTN_NORMS, AttentionSpec, HeadOutput, attend, attend_fast, causal_mask, make_norm
from sinklab.core.attention.reference import column_visibility
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookSet

B, H, T, D = 2, 3, 7, 5


def scores_and_mask(seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, H, T, T, generator=g) * 2
    scores.requires_grad_(requires_grad)
    return scores, causal_mask(T, T)


@pytest.mark.parametrize("name", list(ATTN_NORMS))
def test_shape_dtype_and_no_weight_on_future_keys(name):
    scores, mask = scores_and_mask()
    w = make_norm(name, H)(scores, mask)
    assert w.shape == (B, H, T, T) and w.dtype == torch.float32
    assert torch.all(w[..., ~mask[0, 0]] == 0), f"{name} puts weight on future keys"
    assert torch.all(w >= 0) and torch.isfinite(w).all()


@pytest.mark.parametrize("name", list(ATTN_NORMS))
def test_gradients_are_finite_and_reach_visible_scores(name):
    scores, mask = scores_and_mask(requires_grad=True)
    norm = make_norm(name, H)
    (norm(scores, mask) * torch.randn(B, H, T, T)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert scores.grad[..., mask[0, 0]].abs().sum() > 0
    assert torch.all(scores.grad[..., ~mask[0, 0]] == 0)
    for p in norm.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


def test_softmax_rows_sum_to_one_and_is_float32_for_half_inputs():
    scores, mask = scores_and_mask()
    w = make_norm("softmax", H)(scores.half(), mask)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["softmax1", "sink_logit"])
def test_implicit_slot_rows_sum_to_at_most_one(name):
    scores, mask = scores_and_mask()
    w = make_norm(name, H)(scores, mask)
    sums = w.sum(-1)
    assert torch.all(sums <= 1 + 1e-6)
    assert torch.all(sums < 1), "with finite scores some mass must stay in the implicit slot"


def test_softmax1_formula():
    scores, mask = scores_and_mask()
    w = make_norm("softmax1", H)(scores, mask)
    e = scores.exp() * mask
    torch.testing.assert_close(w, e / (1 + e.sum(-1, keepdim=True)))


def test_sink_logit_at_minus_infinity_is_softmax_and_learned_logit_absorbs_mass():
    scores, mask = scores_and_mask()
    norm = make_norm("sink_logit", H, init=float("-inf"))
    torch.testing.assert_close(norm(scores, mask), make_norm("softmax", H)(scores, mask), atol=1e-7, rtol=1e-6)
    with torch.no_grad():
        norm.sink.copy_(torch.tensor([0.0, 5.0, 50.0]))
    sums = norm(scores, mask).sum(-1)  # (B, H, T)
    assert sums[:, 2].max() < 1e-6 < sums[:, 1].min()
    assert torch.all(sums[:, 1] < sums[:, 0]), "a larger sink logit must absorb more mass on every row"


def test_relu_divides_by_non_bos_keys():
    scores = torch.ones(1, 1, T, T)
    w = make_norm("relu", 1)(scores, causal_mask(T, T))
    expected = 1.0 / torch.arange(T).clamp_min(1).float()
    torch.testing.assert_close(w[0, 0, :, 0], expected)
    # negative scores give exact zeros: the "do nothing" row
    assert torch.all(make_norm("relu", 1)(-scores, causal_mask(T, T)) == 0)


def test_sigmoid_default_bias_is_minus_log_visible_keys():
    scores = torch.zeros(1, 1, T, T)
    w = make_norm("sigmoid", 1)(scores, causal_mask(T, T))
    visible = torch.arange(1, T + 1).float()
    torch.testing.assert_close(w[0, 0, :, 0], torch.sigmoid(-torch.log(visible)))
    w_fixed = make_norm("sigmoid", 1, bias=0.0)(scores, causal_mask(T, T))
    assert torch.allclose(w_fixed[0, 0][causal_mask(T, T)[0, 0]], torch.tensor(0.5))


def test_clipped_softmax_reaches_exact_zero_and_one():
    scores = torch.tensor([[[[0.0, -20.0, -20.0], [0.0, 20.0, -20.0], [0.0, 0.0, 0.0]]]])
    w = make_norm("clipped_softmax", 1, zeta=1.1, gamma=-0.1)(scores, causal_mask(3, 3))
    assert w[0, 0, 0, 0] == 1.0  # single visible key: stretched above 1, clipped to exactly 1
    assert w[0, 0, 1, 0] == 0.0  # tiny softmax weight, pushed below 0, clipped to exactly 0
    soft = torch.softmax(torch.zeros(3), -1)
    torch.testing.assert_close(w[0, 0, 2], (1.2 * soft - 0.1).clamp(0, 1))
    with pytest.raises(SinklabError):
        make_norm("clipped_softmax", 1, zeta=0.0, gamma=0.5)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(SinklabError) as info:
        make_norm("sparsemax", 2)
    for name in ATTN_NORMS:
        assert name in str(info.value)


def test_bad_option_is_a_clear_error():
    with pytest.raises(SinklabError, match="bad options"):
        make_norm("softmax", 2, temperature=3)


@pytest.mark.parametrize("name", list(ATTN_NORMS))
def test_query_chunks_give_identical_results(name):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    norm = make_norm(name, H)
    full = attend(q, k, v, causal_mask(T, T), norm, 0.3)
    chunked = attend(q, k, v, causal_mask(T, T), norm, 0.3, query_chunk=3)
    torch.testing.assert_close(full[0], chunked[0], atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(full[1], chunked[1], atol=1e-7, rtol=1e-6)


def mask_kinds() -> dict:
    """Masks a model may hand to attend: causal, a sliding window, and a prefix the first 4 tokens
    see bidirectionally (its rows see keys past the diagonal)."""
    i, j = torch.arange(T).view(-1, 1), torch.arange(T).view(1, -1)
    causal = j <= i
    return {"causal": causal, "sliding": causal & (j > i - 3), "prefix": causal | ((i < 4) & (j < 4))}


def test_column_visibility_bounds_each_block_by_its_rows():
    masks = mask_kinds()
    assert column_visibility(masks["causal"][2:5]) == (5, 3)  # rows 2-4 see keys 0-4; keys 0-2 by every row
    assert column_visibility(masks["sliding"][4:7]) == (7, 0)  # key 0 is outside row 4's window
    assert column_visibility(masks["prefix"][0:2]) == (4, 4)  # the prefix rows see past the diagonal
    assert column_visibility(torch.zeros(2, T, dtype=torch.bool)) == (T, 0)


@pytest.mark.parametrize("kind", ["causal", "sliding", "prefix"])
@pytest.mark.parametrize("name", [n for n, cls in ATTN_NORMS.items() if cls.masks_logits])
def test_in_place_masking_and_key_bounds_equal_the_plain_formula(name, kind):
    """attend masks the scores in place and scores each block only up to its last visible key when
    no hook listens to the scores; both must equal norm(scores, mask) over all keys, and a hook
    that keeps the scores must see them unmasked."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    mask = mask_kinds()[kind].view(1, 1, T, T)
    norm = make_norm(name, H)
    expected = norm(torch.matmul(q, k.transpose(-1, -2)) * 0.3, mask)
    fast_out, fast_w = attend(q, k, v, mask, norm, 0.3, query_chunk=3)
    kept, hooks = [], HookSet()
    with hooks.attached([("blocks.*.attn.hook_scores", lambda s, point: kept.append(s))]):
        heard_out, heard_w = attend(q, k, v, mask, norm, 0.3, hooks=hooks, query_chunk=3)
    torch.testing.assert_close(fast_w, expected, atol=1e-6, rtol=1e-5)
    assert torch.equal(fast_w, heard_w) and torch.equal(fast_out, heard_out)
    assert all(torch.isfinite(s).all() for s in kept)


def test_attend_with_cache_offset_matches_last_rows_of_full_attention():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    norm = make_norm("softmax", H)
    full_out, full_w = attend(q, k, v, causal_mask(T, T), norm)
    out, w = attend(q[:, :, -2:], k, v, causal_mask(2, T), norm)
    torch.testing.assert_close(out, full_out[:, :, -2:])
    torch.testing.assert_close(w, full_w[:, :, -2:])


@pytest.mark.parametrize("n_queries", [T, 1])
def test_sdpa_fast_path_equals_eager_reference(n_queries):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, n_queries, D, generator=g)
    k, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, H, T, D, generator=g)
    mask = causal_mask(n_queries, T)
    norm = make_norm("softmax", H)
    ref, _ = attend(q, k, v, mask, norm, 1 / math.sqrt(D))
    fast, weights = attend_fast(q, k, v, mask, norm, 1 / math.sqrt(D), plain_causal=True)
    assert weights is None
    torch.testing.assert_close(fast, ref, atol=1e-6, rtol=1e-5)


def test_head_output_norm_and_gate():
    z = torch.randn(B, H, T, D) * 10
    x = torch.randn(B, T, 4)
    normed = HeadOutput(4, H, D, AttentionSpec(head_norm=True))(z, x)
    torch.testing.assert_close(normed.pow(2).mean(-1), torch.ones(B, H, T), atol=1e-4, rtol=1e-4)
    gated = HeadOutput(4, H, D, AttentionSpec(gate=True))
    with torch.no_grad():
        gated.gate.weight.zero_()
        gated.gate.bias.copy_(torch.tensor([-100.0, 0.0, 100.0]))
    out = gated(z, x)
    assert out[:, 0].abs().max() < 1e-30  # a closed gate silences the head
    torch.testing.assert_close(out[:, 1], z[:, 1] * 0.5)
    torch.testing.assert_close(out[:, 2], z[:, 2])


def test_value_gate_multiplies_each_value_by_a_sigmoid_of_itself_per_head():
    torch.manual_seed(0)
    extras = HeadOutput(4, H, D, AttentionSpec(value_gate=True))
    assert extras.order == () and extras.on_values == ("value_gate",)  # it acts before aggregation, not on z
    with torch.no_grad():
        extras.value_gate.weight.normal_()
        extras.value_gate.bias.normal_()
    v = torch.randn(B, H, T, D)
    expected = torch.stack(
        [v[:, h] * torch.sigmoid(v[:, h] @ extras.value_gate.weight[h] + extras.value_gate.bias[h]) for h in range(H)], dim=1
    )
    torch.testing.assert_close(extras.values(v), expected)
    z = torch.randn(B, H, T, D)
    assert extras(z, torch.randn(B, T, 4)) is z  # the output stage is untouched


def test_vga_scales_each_tokens_values_per_head_by_a_sigmoid_of_its_whole_value_vector():
    """Bu et al.'s Eq. 6 with their Appendix B's heads: g_j = sigmoid(V_j W_g), V_j every head's
    value of token j side by side, one gate per head (the per-channel ``value_gate`` would give each
    channel its own, from its head's value alone)."""
    torch.manual_seed(0)
    extras = HeadOutput(4, H, D, AttentionSpec(vga=True))
    assert extras.order == () and extras.on_values == ("vga",)  # on each key's value, before aggregation
    assert extras.vga.weight.shape == (H * D, H) and [n for n, _ in extras.vga.named_parameters()] == ["weight"]  # no bias
    with torch.no_grad():
        extras.vga.weight.normal_()
    v = torch.randn(B, H, T, D)
    expected = torch.empty_like(v)
    for b in range(B):
        for t in range(T):
            gates = torch.sigmoid(torch.cat([v[b, h, t] for h in range(H)]) @ extras.vga.weight)  # (H,)
            for h in range(H):
                expected[b, h, t] = v[b, h, t] * gates[h]
    torch.testing.assert_close(extras.values(v), expected)
    z = torch.randn(B, H, T, D)
    assert extras(z, torch.randn(B, T, 4)) is z  # the output stage is untouched


def test_a_closed_vga_gate_cuts_the_gradient_to_that_tokens_value():
    """Their Eqs. 7-8: the gradient reaches V_j along the content path and through the gate's own
    input (checked against finite differences); as g_s -> 0 both vanish, so the loss no longer
    drains the sink's value, while an open token's value still learns."""
    extras = HeadOutput(4, H, D, AttentionSpec(vga=True)).double()
    torch.nn.init.normal_(extras.vga.weight)
    assert torch.autograd.gradcheck(extras.values, (torch.randn(1, H, T, D, dtype=torch.float64, requires_grad=True),))
    with torch.no_grad():
        extras.vga.weight.fill_(1.0)
    v = torch.full((1, H, T, D), 0.1, dtype=torch.float64)
    v[:, :, 0] = -5.0  # token 0's gates: sigmoid(-5 * H * D), shut
    v.requires_grad_(True)
    extras.values(v).sum().backward()
    assert v.grad[:, :, 0].abs().max() < 1e-20
    assert v.grad[:, :, 1:].abs().min() > 0.1


def test_the_model_applies_vga_once_on_the_values():
    """A gate of one half (W_g = 0) halves every head's output against the same model without it."""
    from sinklab.core.hooks import hook_name
    from sinklab.models.native import ModelConfig, Transformer

    torch.manual_seed(0)
    gated = Transformer(ModelConfig(d_model=8, n_layers=1, n_heads=2, attention=AttentionSpec(vga=True), residual=True))
    plain = Transformer(ModelConfig(d_model=8, n_layers=1, n_heads=2, residual=True))
    plain.load_state_dict({k: p for k, p in gated.state_dict().items() if ".vga." not in k})
    assert gated.blocks[0].attn.head_out.vga.weight.std() > 0.01  # drawn as the model's other matrices
    with torch.no_grad():
        gated.blocks[0].attn.head_out.vga.weight.zero_()
    x, seen = torch.randn(1, 5, 8), []
    for model in (plain, gated):
        with model.hooks.attached([(hook_name(0, "attn.hook_z"), lambda z, point: seen.append(z))]), torch.no_grad():
            model(x)
    torch.testing.assert_close(seen[1], seen[0] * 0.5)


def test_the_model_gates_each_value_once():
    """A constant gate of one half halves every head's output: a second application (in the attention
    path and again before the cache, say) would quarter it."""
    from sinklab.core.hooks import hook_name
    from sinklab.models.native import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=8, n_layers=1, n_heads=2, attention=AttentionSpec(value_gate=True), residual=True))
    gate, x, seen = model.blocks[0].attn.head_out.value_gate, torch.randn(1, 5, 8), []
    with model.hooks.attached([(hook_name(0, "attn.hook_z"), lambda z, point: seen.append(z))]), torch.no_grad():
        gate.weight.zero_()
        for bias in (100.0, 0.0):  # sigmoid: 1, then 1/2
            gate.bias.fill_(bias)
            model(x)
    torch.testing.assert_close(seen[1], seen[0] * 0.5)


def test_a_closed_value_gate_silences_every_head_of_the_model():
    from sinklab.core.hooks import hook_name
    from sinklab.models.native import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=8, n_layers=1, n_heads=2, attention=AttentionSpec(value_gate=True), residual=True))
    seen = {}
    with model.hooks.attached([(hook_name(0, "attn.hook_z"), lambda z, point: seen.setdefault("z", z))]):
        model(torch.randn(1, 5, 8))
        assert seen.pop("z").abs().max() > 0
        with torch.no_grad():
            model.blocks[0].attn.head_out.value_gate.bias.fill_(-100.0)
        model(torch.randn(1, 5, 8))
    assert seen["z"].abs().max() < 1e-30  # every value gated shut: the heads add nothing
