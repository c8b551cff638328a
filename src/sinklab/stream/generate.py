"""``sinklab generate``: text past the context length at constant memory, with a sink cache."""

from __future__ import annotations

import torch

from ..core.errors import check
from ..models.hf import input_device
from .caches import cache_bytes, check_sizes, sink_cache


def check_generation(max_new_tokens: int, sinks: int, window: int, temperature: float) -> None:
    """Refuse bad generation settings before any model is loaded."""
    check(max_new_tokens >= 1, f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    check(temperature >= 0, f"--temperature must be >= 0, got {temperature}")
    check_sizes(sinks, window)


@torch.no_grad()
def generate(
    model, tokenizer, prompt: str, max_new_tokens: int, sinks: int, window: int, temperature: float = 0.0, seed: int = 0
) -> dict:
    """Generate with ``model.generate`` and a sink cache: constant memory past the context length."""
    check_generation(max_new_tokens, sinks, window, temperature)
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(input_device(model))
    check(ids.shape[1] > 0, "the prompt contains no tokens")
    torch.manual_seed(seed)
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    with sink_cache(model, sinks, window) as cache:
        out = model.generate(
            ids,
            cache=cache,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.eos_token_id,
            **sampling,
        )
    new = out[0, ids.shape[1] :]
    return {
        "prompt_tokens": ids.shape[1],
        "new_tokens": int(new.numel()),
        "text": tokenizer.decode(new, skip_special_tokens=True),
        "cache_tokens": cache.layers[0].kept_tokens(),
        "cache_bytes": cache_bytes(cache),
    }
