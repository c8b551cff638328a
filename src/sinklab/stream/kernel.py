"""One-pass scoring of a stream as if it went through a sink (or window) cache token by token."""

from __future__ import annotations

import torch

from .rope import RopeShift


def sink_window_attention(
    q, k, v, scale: float, n_sink: int, window: int, rope: RopeShift, query_chunk: int = 256
) -> torch.Tensor:
    """Every query's attention *as if it had streamed through a sink cache*, for all at once.

    q, k, v: (B, H, T, D), RoPE applied at absolute positions 0..T-1, KV heads repeated. Query t
    sees the ``n_sink`` first keys and the last ``window`` keys up to itself. Recent keys keep
    their true distances in a sink cache (they shift together), so they use the ordinary scores;
    once the cache is full (t >= n_sink + window - 1) the query sits at in-cache position
    n_sink + window - 1, so for the sink keys it is re-rotated there (with the cache's own angle
    arithmetic, :meth:`RopeShift.move`). This reproduces token-by-
    token streaming exactly (each token's representation in every layer was computed with its own
    window, as in the cache) at the cost of one forward pass: ``sinklab stream`` scores long
    streams with it and checks it against the token-by-token cache.

    Angles: the model rotated q and k with float32 angles at absolute positions, whose rounding
    grows with the position (about 1e-3 rad near position 14,000), while a real cache only uses
    in-cache positions below ``n_sink + window``. So each block of queries and its band of keys
    are first moved to a local frame (positions counted from the band's first key), which keeps
    every angle as small as the cache's. On the default model's 16K-token stream, absolute angles
    put one token (position 14,004) 8.5e-3 nats away from a real cache; the local frame moves it
    by 8.8e-3.
    """
    T, capacity = q.shape[2], n_sink + window
    outs = []
    for a in range(0, T, query_chunk):
        b = min(a + query_chunk, T)
        t = torch.arange(a, b, device=q.device).view(-1, 1)
        lo = max(0, a - window + 1)
        j = torch.arange(lo, b, device=q.device).view(1, -1)
        band = (j <= t) & (j > t - window)  # (t, keys)
        q_local = rope.move(q[:, :, a:b].float(), t.flatten(), t.flatten() - lo)
        k_local = rope.move(k[:, :, lo:b].float(), j.flatten(), j.flatten() - lo)
        scores = (q_local @ k_local.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~band, float("-inf"))
        values = v[:, :, lo:b]
        if n_sink:
            at_cache = t.flatten().clamp_max(capacity - 1)  # a full cache's query sits at capacity - 1
            q_at_cache = rope.move(q[:, :, a:b].float(), t.flatten(), at_cache)
            sink_scores = (q_at_cache @ k[:, :, :n_sink].float().transpose(-1, -2)) * scale
            outside_band = torch.arange(n_sink, device=q.device).view(1, -1) <= t - window
            scores = torch.cat([sink_scores.masked_fill(~outside_band, float("-inf")), scores], dim=-1)
            values = torch.cat([v[:, :, :n_sink], values], dim=2)
        outs.append(torch.softmax(scores, dim=-1).to(v.dtype) @ values)
    return torch.cat(outs, dim=2)
