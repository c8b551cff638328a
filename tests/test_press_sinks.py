"""The sinks a press protects, through the presses' own paths: ``keep_sinks=N`` names the first N
positions of the context, and ``keep_sinks="detected"`` works on a press that reads no attention
itself (the prefill records what the detection reads), in ``applied`` and in sinklab compress's
one-prefill-per-input evaluation."""

from __future__ import annotations

import torch
import transformers
from test_compress import planted_context, planted_model

import sinklab
from sinklab import kvcache as P
from sinklab.compress.evaluate import compressed, prefill
from sinklab.kvcache.rewriting import sink_positions


def test_keep_sinks_protects_the_first_n_positions_of_the_context():
    """Keys 0-2 have the largest norms, so Knorm alone drops them; with keep_sinks=3 the press
    protects positions 0, 1 and 2 (not 1-3) and the layer holds their keys and values exactly. A
    setting longer than the context protects the whole context. Mutation tried: sink_positions
    naming 1..N fails here."""
    keys = torch.randn(1, 2, 20, 8, generator=torch.Generator().manual_seed(0))
    keys[:, :, :3] *= 100
    values = torch.randn(1, 2, 20, 8, generator=torch.Generator().manual_seed(1))

    def cache():
        made = transformers.DynamicCache()
        made.update(keys, values, 0)
        return made

    assert not {0, 1, 2} & set(P.Knorm(0.5).apply(cache()).positions[0].flatten().tolist())
    protected = cache()
    report = P.Knorm(0.5, keep_sinks=3).apply(protected)
    assert report.sinks == [0, 1, 2] and report.positions[0][..., :3].tolist() == [[[0, 1, 2]] * 2]
    kept_keys, kept_values = protected.layers[0].keys, protected.layers[0].values
    assert torch.equal(kept_keys[:, :, :3], keys[:, :, :3]) and torch.equal(kept_values[:, :, :3], values[:, :, :3])
    assert sink_positions(4, 20, None, [0]) == [0, 1, 2, 3] and sink_positions(30, 20, None, [0]) == list(range(20))


@torch.no_grad()
def test_detected_sinks_on_a_press_that_reads_no_attention_itself():
    """Knorm scores keys by their norms alone; with keep_sinks="detected" the prefill still records
    every query's attention, and the planted sink (position 0, which every query looks at) is found
    and kept, in ``applied`` and in the compress evaluation's shared prefill. Mutation tried: the
    press recording only what its scores need (nothing) fails here (detection refused: no attention)."""
    model, context = planted_model(), planted_context(fillers_each_side=60)
    press = P.Knorm(0.5, keep_sinks=P.DETECTED)
    with sinklab.applied(model, press) as pressing:
        model(context, use_cache=True)
    assert pressing.cache.last.sinks == [0] and all((kept[..., 0] == 0).all() for kept in pressing.cache.last.positions.values())
    cache, tally = prefill(model, context, [press, P.Knorm(0.5)])
    _, compression = compressed(cache, press, tally)
    assert compression.sinks == [0] and compression.positions.keys() == pressing.cache.last.positions.keys()
    assert all(torch.equal(kept, pressing.cache.last.positions[layer]) for layer, kept in compression.positions.items())
