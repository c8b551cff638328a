"""The value-state norm at position 0 before any gate (issue 52): the scan's value drain reads the
values the heads aggregate, after the per-channel value gate; ``value_state_drain`` reads them as the
qkv projection makes them."""

import pytest
import torch

from sinklab.core.attention import AttentionSpec
from sinklab.models.native import ModelConfig, Transformer
from sinklab.pretrain.value_states import value_state_drain
from sinklab.scan import scan_native


def model(value_gate: bool) -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        ModelConfig(
            d_model=32, n_layers=2, n_heads=2, vocab_size=50, attention=AttentionSpec(value_gate=value_gate), init_std=0.3
        )
    )


WINDOWS = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(1))


def test_without_a_value_gate_it_is_the_scans_value_drain():
    """Mutation tried: slicing the keys (index 1) instead of the values fails here."""
    m = model(value_gate=False)
    scanned = scan_native(m, WINDOWS)["extreme_token_triad"]["value_drain"]
    assert value_state_drain(m, WINDOWS) == pytest.approx(scanned, rel=1e-5)


def test_with_a_value_gate_it_reads_the_values_before_the_gate():
    """Layer 0's value states recomputed by hand from the embeddings; the scan's number, which
    reads the gated values, differs. Mutation tried: hooking the values after the gate fails."""
    m = model(value_gate=True)
    with torch.no_grad():
        h = m.blocks[0].attn_norm(m.embed(WINDOWS))
        v = m.blocks[0].attn.qkv(h).view(3, 12, 3, 2, 16)[:, :, 2]  # (B, T, H, D)
    norms = v.norm(dim=-1).mean(-1).sum(0)
    expected = float(norms[0] / norms[1:].mean())
    drain = value_state_drain(m, WINDOWS)
    assert drain[0] == pytest.approx(expected, rel=1e-5)
    scanned = scan_native(m, WINDOWS)["extreme_token_triad"]["value_drain"]
    assert abs(scanned[0] - drain[0]) > 1e-3
    assert not m.blocks[0].attn.qkv._forward_hooks  # the hooks are removed
