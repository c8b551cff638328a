"""Precision of the sink cache's RoPE arithmetic on the default model's rotary setting.

1. Long streams: a key kept from the end of a full cache (index 1,023) to the first recent slot
   (index 4) after 1,019 evictions. The old design re-rotated every kept key by -1 at each
   eviction; the cache now keeps each key as the model rotated it and moves it in one rotation.
   Both against the key rotated directly at index 4, in float32, float16 and bfloat16.
2. Long absolute positions (``model.generate`` passes them): transformers computes the angle
   position x frequency as a float32 product, so far into a stream the model's own angles drift
   from the exact ones (the query's too). Reported: that drift at 10^4 ... 10^6, and how far the
   keys a sink cache hands to attention are from the keys the model itself rotates at the same
   positions, when moved with exact float64 angles (the old design) or with the model's own
   float32 angles (now), so that query and keys share one arithmetic.

Run: `.venv/bin/python benchmarks/rope_precision.py`
"""

from __future__ import annotations

import torch
from common import record
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from sinklab.models.hf import default_gguf_path, dequantised_dir
from sinklab.stream.caches import make_sink_cache
from sinklab.stream.rope import rope_angles, rotate, rotation

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def key_drift(rotary, inv_freq: torch.Tensor, dtype: torch.dtype, evictions: int = 1019, scale: float = 3.0) -> dict:
    """Largest error of a key moved by ``-evictions`` positions: step by step against once."""
    raw = scale * torch.randn(1, 1, 1, inv_freq.numel() * 2, generator=torch.Generator().manual_seed(0))

    def at(position: int) -> torch.Tensor:
        x = raw.to(dtype)
        cos, sin = rotary(x, torch.tensor([[position]]))
        return apply_rotary_pos_emb(x, x, cos, sin)[1]

    start, end = 4 + evictions, 4
    minus_one = rotation(-inv_freq.double())
    stepwise = at(start)
    for _ in range(evictions):
        stepwise = rotate(stepwise, *minus_one)
    once = rotate(at(start), *rotation(rope_angles(torch.tensor([end]), inv_freq) - rope_angles(torch.tensor([start]), inv_freq)))
    direct = at(end).float()

    def error(x):
        return {"max_abs": (x.float() - direct).abs().max().item(), "norm_ratio": (x.float().norm() / direct.norm()).item()}

    return {
        "dtype": str(dtype).removeprefix("torch."),
        "evictions": evictions,
        "step_by_step": error(stepwise),
        "one_move": error(once),
    }


def absolute_positions(rotary, config, start: int, steps: int = 1100, n_sink: int = 4, window: int = 1020) -> dict:
    """Stream ``steps`` keys (float32, scale 3) through a real sink cache at absolute positions
    ``start``, ``start`` + 1, ... (as ``model.generate`` feeds them) and compare the keys it hands
    to attention at the last step with the keys the model rotates directly at those positions (a
    dense cache). The old design, reproduced: each key at its in-cache index, then moved by the
    offset with exact float64 angles."""
    inv_freq = rotary.inv_freq.float()
    holder = torch.nn.Module()
    holder.rotary, holder.config = rotary, config
    layer = make_sink_cache(holder, n_sink, window).layers[0]
    raw = 3 * torch.randn(steps, inv_freq.numel() * 2, generator=torch.Generator().manual_seed(0))

    def at(rows, positions):
        x = rows.view(1, 1, -1, rows.shape[-1])
        cos, sin = rotary(x, torch.as_tensor(positions).view(1, -1))
        return apply_rotary_pos_emb(x, x, cos, sin)[1]

    for step in range(steps):
        kept = torch.cat([layer.positions, torch.tensor([step])])
        n_old = layer.kept_tokens()
        presented, _ = layer.update(at(raw[step : step + 1], [start + step]), raw[:1].view(1, 1, 1, -1))
    offset = start + steps - 1 - n_old
    targets = offset + torch.arange(len(kept))
    dense = at(raw[kept], targets)
    in_cache = at(raw[kept], torch.arange(len(kept)))
    old = rotate(in_cache, *rotation(offset * inv_freq.double()))
    return {
        "start": start,
        "model_angle_drift_rad": (rope_angles(torch.tensor([start + steps]), inv_freq)[0] - (start + steps) * inv_freq.double())
        .abs()
        .max()
        .item(),
        "max_abs_key_error_now": (presented - dense).abs().max().item(),
        "max_abs_key_error_old": (old - dense).abs().max().item(),
    }


def main() -> None:
    config = AutoConfig.from_pretrained(dequantised_dir(default_gguf_path()))
    rotary = LlamaRotaryEmbedding(config)
    inv_freq = rotary.inv_freq.float()
    record(
        "rope_precision",
        {
            "rope": {"head_dim": inv_freq.numel() * 2, "theta": config.rope_parameters.get("rope_theta")},
            "key_drift": [key_drift(rotary, inv_freq, dtype) for dtype in DTYPES.values()],
            "absolute_positions": [absolute_positions(rotary, config, p) for p in (0, 10_000, 100_000, 1_000_000)],
        },
    )


if __name__ == "__main__":
    main()
