"""KIVI with and without the sink protected: the same full-precision recent tokens.

Protecting a token must change nothing but that token: before, KIVI's groups were counted from
after the protected tokens, so at 1,024 tokens protect=1 kept 1 + 159 tokens in full precision
where protect=0 kept 128 (issue 39). The groups are now aligned to the sequence's positions and a
protected token leaves a hole in its group.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from sinklab import kvcache as P
from sinklab.kvcache import KIVI
from sinklab.kvcache.layers import QuantizedKVLayer
from sinklab.kvcache.packing import SCALE_DTYPE
from sinklab.stream.caches import cache_bytes


def dense_cache(length: int, heads: int = 2, dim: int = 32, layers: int = 2, sink: float = 0.0):
    """A dynamic cache of random keys and values, position 0's keys ``sink`` larger (a sink's outlier)."""
    g = torch.Generator().manual_seed(0)
    cache = transformers.DynamicCache()
    for layer in range(layers):
        keys, values = torch.randn(1, heads, length, dim, generator=g), torch.randn(1, heads, length, dim, generator=g)
        keys[:, :, 0] += sink
        cache.update(keys, values, layer)
    return cache


def held(layer) -> tuple[torch.Tensor, torch.Tensor]:
    """What a quantized layer gives attention (no new token)."""
    return layer.update(layer.tail[0][:, :, :0], layer.tail[1][:, :, :0])


def full_precision(layer) -> int:
    """How many tokens the layer holds in full precision: the protected ones and the recent tail."""
    return layer.sink[0].shape[2] + layer.tail[0].shape[2]


def exact_positions(cache, twin, protected: list, index: int = 0) -> set:
    """The positions whose keys and values come back bit-exact (full precision), read from the
    keys attention sees: ``protected`` first, then the quantized ones, then the tail, each in order."""
    layer, dense = twin.layers[index], cache.layers[index]
    keys, values = held(layer)
    order = protected + [p for p in range(dense.keys.shape[2]) if p not in protected]
    same = lambda i, p: torch.equal(keys[:, :, i], dense.keys[:, :, p]) and torch.equal(values[:, :, i], dense.values[:, :, p])  # noqa: E731
    return {p for i, p in enumerate(order) if same(i, p)}


def quantized(cache, protect, group: int = 32, residual: int = 128):
    twin = P.branch(cache)
    report = KIVI(2, protect, group_size=group, residual=residual).apply(twin)
    return twin, report


@pytest.mark.parametrize("length", [1024, 1000, 130])
def test_protecting_the_first_token_keeps_the_same_recent_tokens_in_full_precision(length):
    """At 1,024 tokens (kv_2bit's context), groups of 32 and a residual of 128: protect=0 holds
    the last 128 tokens in full precision, protect=1 the first token and the same 128 (it held
    1 + 159). At other lengths the recent window is 128 to 159 tokens, the same with and without
    protection, and exactly the positions that come back bit-exact."""
    cache = dense_cache(length)
    recent = full_precision(quantized(cache, 0)[0].layers[0])
    assert recent == {1024: 128, 1000: 136, 130: 130}[length]  # 130: too short to fill a group past the residual
    window = set(range(length - recent, length))
    for protect in (0, 1, 4):
        twin, report = quantized(cache, protect)
        assert report.sinks == list(range(protect))
        expected = window | set(range(protect))
        assert exact_positions(cache, twin, report.sinks) == expected
        assert full_precision(twin.layers[0]) == len(expected)  # 1024 tokens: 128, 1 + 128, 4 + 128


def test_a_protected_token_changes_only_its_own_group():
    """Every value (quantized per token) and every key outside the first group come back as the
    unprotected cache gives them; in the first group, the other 31 keys are quantized over their
    own range, which the sink's outlying key (+40) no longer stretches."""
    cache = dense_cache(1024, sink=40.0)
    bare, _ = quantized(cache, 0)
    first, _ = quantized(cache, 1)
    (bk, bv), (fk, fv) = held(bare.layers[0]), held(first.layers[0])
    assert torch.equal(fv[:, :, 1:], bv[:, :, 1:]) and torch.equal(fk[:, :, 32:], bk[:, :, 32:])
    dense = cache.layers[0].keys[:, :, 1:32]
    low, high = dense.amin(2, keepdim=True), dense.amax(2, keepdim=True)  # per channel over the 31 (packing's formula)
    scale = ((high - low) / 3).clamp(min=1e-8)
    steps = ((dense - low) / scale).round().clamp(0, 3)
    own = steps * scale.to(SCALE_DTYPE).float() + low.to(SCALE_DTYPE).float()
    assert torch.allclose(fk[:, :, 1:32], own)
    assert (fk[:, :, 1:32] - dense).abs().max() < (bk[:, :, 1:32] - dense).abs().max() / 4


def test_decoding_quantizes_a_group_at_the_same_steps_with_and_without_protection():
    """New tokens join the recent window and a group is quantized once ``residual`` tokens have
    passed it, at the same step whatever is protected: the recent window stays equal."""
    cache = dense_cache(1024)
    bare, _ = quantized(cache, 0)
    first, _ = quantized(cache, 1)
    g = torch.Generator().manual_seed(1)
    recent = []
    for _ in range(40):
        k, v = torch.randn(1, 2, 1, 32, generator=g), torch.randn(1, 2, 1, 32, generator=g)
        for twin in (bare, first):
            twin.layers[0].update(k, v)
        assert full_precision(first.layers[0]) == full_precision(bare.layers[0]) + 1
        recent.append(full_precision(bare.layers[0]))
    assert recent[:31] == list(range(129, 160)) and recent[31] == 128  # the 32nd new token completes a group
    assert held(first.layers[0])[0].shape[2] == held(bare.layers[0])[0].shape[2] == 1064


def test_protection_costs_the_protected_tokens_and_nothing_else():
    """Protecting the first token adds its float32 key and value and nothing else: its slot stays
    in the group (a hole holding a stand-in, keys and values alike), so the quantized bytes are
    the unprotected cache's."""
    cache = dense_cache(1024)
    heads, dim, layers = 2, 32, 2
    _, bare = quantized(cache, 0)
    _, first = quantized(cache, 1)
    fp_token = 2 * heads * dim * 4
    assert first.bytes_after - bare.bytes_after == layers * fp_token
    assert cache_bytes(cache) == bare.bytes_before


def test_detected_sinks_inside_a_group_and_inside_the_recent_window():
    """Protected positions anywhere (as detected sinks are): a hole in a middle group, a group
    wholly protected (not stored), a position already in the recent window (held as protected,
    the window the same positions)."""
    cache = dense_cache(200)
    protected = [0, *range(32, 64), 70, 190]
    twin = P.branch(cache)
    for index, dense in enumerate(cache.layers):
        keep = [p for p in range(200) if p not in protected]
        store = KIVI(2, 0, group_size=32, residual=40).make_store(index, protected)
        twin.layers[index] = QuantizedKVLayer(
            (dense.keys[:, :, protected], dense.values[:, :, protected]), store, dense.keys[:, :, keep], dense.values[:, :, keep]
        )
    layer = twin.layers[0]
    assert layer.store.done == 160 and layer.tail[0].shape[2] == 39  # positions 160-199 but 190
    assert layer.store.slots == 4 * 32 and layer.store.holes == [0, 32 + 6]  # groups 0, 2, 3, 4; holes at 0 and 70
    keys, values = held(layer)
    assert keys.shape[2] == values.shape[2] == 200
    order = protected + [p for p in range(200) if p not in protected]
    assert exact_positions(cache, twin, protected) == set(protected) | set(range(160, 200))
    dense = cache.layers[0]
    assert (keys - dense.keys[:, :, order]).abs().max() < 2.0  # every key at its own position


def fake_quantized(x: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """KIVI's arithmetic on ``x`` with no packing: min/max per group along ``dim``, the step and
    the offset stored in float16, ``level * step + offset`` in float32."""
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    step = ((high - low) / (2**bits - 1)).clamp(min=1e-8)
    levels = ((x - low) / step).round().clamp(0, 2**bits - 1)
    return levels * step.to(SCALE_DTYPE).float() + low.to(SCALE_DTYPE).float()


@pytest.mark.parametrize("bits", [2, 4])
@pytest.mark.parametrize("protected", [[], [0, 1, 2, 3], [0, 40, 70]])
def test_every_stored_token_reads_as_kivis_arithmetic_on_the_dense_cache(bits, protected):
    """An independent reference, computed from the dense keys and values with no packing: keys
    per channel over each group's real tokens, values per token over groups of channels, bit for
    bit, holes or not (a hole's stand-in moves no range). And the layout the decode step's speed
    rests on: keys and values both packed along the tokens (whole rows a plane). Mutations caught:
    values packed along their channels; the stand-in counted in its group's range."""
    group, dim = 8, 16
    cache = dense_cache(120, dim=dim)
    dense_k, dense_v = cache.layers[0].keys.clone(), cache.layers[0].values.clone()
    keep = [p for p in range(120) if p not in protected]
    store = KIVI(bits, 0, group_size=group, residual=10).make_store(0, protected)
    layer = QuantizedKVLayer(
        (dense_k[:, :, protected], dense_v[:, :, protected]), store, dense_k[:, :, keep], dense_v[:, :, keep]
    )
    keys, values = held(layer)
    assert store.keys.pack_dim == store.values.pack_dim == 3 and store.values.data.shape[3] == group * bits // 8
    expected_k, expected_v = [], []
    for start in range(0, store.done, group):
        real = [p for p in range(start, start + group) if p not in protected]
        if real:
            expected_k.append(fake_quantized(dense_k[:, :, real], bits, dim=2))
            v = dense_v[:, :, real]
            expected_v.append(fake_quantized(v.unflatten(-1, (dim // group, group)), bits, dim=-1).flatten(-2))
    first = len(protected)
    assert torch.equal(keys[:, :, first : first + store.length], torch.cat(expected_k, 2))
    assert torch.equal(values[:, :, first : first + store.length], torch.cat(expected_v, 2))


def test_kivis_documented_defaults_keep_its_last_128_tokens_whole():
    """KIVI's defaults, as its docstring and the paper give them: 2 bits, groups of 32 tokens and a
    residual of 128, so ``KIVI()`` on 1,024 tokens holds exactly the last 128 in full precision
    (bit-exact) and quantizes the 896 before them; at 1,000 tokens, residual to residual + 31: the
    last 136 (1,000 - 128 = 872 rounds down to 27 groups, 864 tokens). Mutation caught: KIVI's
    default residual changed."""
    default = KIVI()
    assert (default.bits, default.protect, default.group_size, default.residual) == (2, 0, 32, 128)
    for length, recent in ((1024, 128), (1000, 136)):
        cache = dense_cache(length)
        twin = P.branch(cache)
        KIVI().apply(twin)
        assert full_precision(twin.layers[0]) == recent
        assert exact_positions(cache, twin, []) == set(range(length - recent, length))
