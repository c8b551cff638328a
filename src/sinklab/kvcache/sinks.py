"""Which tokens of a prompt are attention sinks, read from the prompt's own attention.

``keep_sinks="detected"`` protects the tokens that received far more attention than the others, so a
sink beyond position 0 (a secondary sink, a delimiter) is protected too. The rule, sinklab's: each
key's mean weight over the queries that can see it, ``r_j = sum_i A[i, j] / (T - j)``, is averaged
over layers, heads and sequences; a key is a sink when ``r_j`` exceeds :data:`SINK_MULTIPLE` times
the mean of ``r`` over the keys. Dividing by ``T - j`` removes the advantage early keys have from
being seen by more queries (with uniform attention position 0 would get about ``ln T`` times the
attention of a late key in total, but the same share per query as any other); the last
:data:`MIN_QUERIES` keys are never sinks: a key seen by a handful of queries gets most of its mean
from their attention to what is recent (with 16, position 1,007 of the 1,024-token passkey prompts
counted as a sink). The multiple follows the survey's (Su et al. 2026) rule of a multiple of the
mean.
"""

from __future__ import annotations

import torch

#: A key is a sink when its mean received weight exceeds this multiple of the keys' mean.
SINK_MULTIPLE = 10.0
#: Keys seen by fewer queries than this are never counted as sinks.
MIN_QUERIES = 64


def mean_received(received: torch.Tensor) -> torch.Tensor:
    """(..., T) attention summed over query rows -> (..., T) mean weight per query that sees the key."""
    length = received.shape[-1]
    seen_by = torch.arange(length, 0, -1, dtype=received.dtype, device=received.device)
    return received / seen_by


def detected_sinks(received_by_layer: dict[int, torch.Tensor]) -> list[int]:
    """The sink positions of a prompt from each layer's (B, Hq, T) received attention."""
    per_layer = [mean_received(r.float()).mean(dim=(0, 1)).cpu() for r in received_by_layer.values()]
    share = torch.stack(per_layer).mean(0)
    candidates = share[: max(1, len(share) - MIN_QUERIES)]
    found = (candidates > SINK_MULTIPLE * share.mean()).nonzero().flatten()
    return [int(p) for p in found]
