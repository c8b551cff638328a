"""The quantization payoff of a trained model (issue 52): the validation-loss penalty of W8A8 with
static per-tensor activation scales (weights per matrix or per channel), W4A8 and 4-bit weight-only
rounding, on the blocks' linear layers."""

import copy

import pytest
import torch

from sinklab.adapt.quantize import fake_quant, quantize_activation, quantize_weight
from sinklab.core.attention import AttentionSpec
from sinklab.models.native import ModelConfig, Transformer
from sinklab.pretrain.quantization import PAYOFF_SCHEMES, quantization_penalties


def model_and_data():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(d_model=32, n_layers=2, n_heads=2, vocab_size=50, attention=AttentionSpec(gate=True), mlp=True, init_std=0.2)
    )
    ids = torch.randint(0, 50, (4, 17))
    return model, ids


def loss_of(model, ids):
    logits = model(ids[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


def test_each_penalty_is_the_loss_with_the_blocks_linears_rounded_minus_the_exact_loss():
    """Recomputed by hand: every plain nn.Linear inside the blocks (attention and FFN; not the
    embedding, the output, or the head gate's small projection) rounded to its scheme, inputs as the scheme says, static
    scales from the calibration windows. Mutation tried: calibrating on the evaluation windows (the
    static penalty then differs)."""
    model, ids = model_and_data()
    calibration = torch.randint(0, 50, (3, 16))
    with torch.no_grad():
        result = quantization_penalties(model, lambda: loss_of(model, ids), calibration)
    exact = loss_of(model, ids)
    assert result["val_loss"] == pytest.approx(exact, abs=1e-6)
    assert set(result["loss_penalty"]) == set(PAYOFF_SCHEMES)
    linears = [m for block in model.blocks for m in block.modules() if type(m) is torch.nn.Linear]
    assert len(linears) == 2 * 5  # qkv, out, gate_proj, up_proj, down_proj per block
    static = {}
    hooks = [
        m.register_forward_pre_hook(lambda m, a: static.__setitem__(m, max(static.get(m, 0.0), a[0].abs().max().item())))
        for m in linears
    ]
    with torch.no_grad():
        model(calibration)
    for h in hooks:
        h.remove()
    for name, bits, activations in (
        ("w4", 4, None),
        ("w4a8", 4, "tensor"),
        ("w8a8_static", 8, "static"),
        ("w8a8_tensor_static", 8, "static"),
    ):
        rounded = copy.deepcopy(model)
        for original, m in zip(linears, [m for block in rounded.blocks for m in block.modules() if type(m) is torch.nn.Linear]):
            with torch.no_grad():
                if name == "w8a8_tensor_static":  # one scale for the whole matrix
                    m.weight.copy_(fake_quant(m.weight, 8, m.weight.abs().max()))
                else:
                    m.weight.copy_(quantize_weight(m.weight, bits, 128 if bits == 4 else None))
            if activations:
                amax = static[original]
                m.register_forward_pre_hook(
                    lambda m, a, amax=amax, mode=activations: (quantize_activation(a[0], mode, static_amax=amax),)
                )
        with torch.no_grad():
            expected = loss_of(rounded, ids) - exact
        assert result["loss_penalty"][name] == pytest.approx(expected, abs=1e-5), name
    assert all(abs(v) > 0 for v in result["loss_penalty"].values())
