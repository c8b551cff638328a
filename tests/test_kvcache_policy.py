"""One cache policy (sinklab.kvcache): presses and quantizers share a base, a registry, the sink
vocabulary and the ``applied`` block, where a press and then a quantizer compose; and
``sinklab.applied`` puts every kind of edit around a model at once."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import transformers
from conftest import tiny_config

import sinklab
from sinklab import kvcache as P
from sinklab.compress.run import CompressConfig, PressJob, job_policies
from sinklab.core.errors import SinklabError
from sinklab.intervene import MaskSelf
from sinklab.kvcache.layers import PressedLayer, QuantizedKVLayer
from sinklab.models.hf import LoadedModel
from sinklab.tune import ZeroTuning

CONTEXT = 40
KIVI8 = dict(group_size=8, residual=4)  # the tiny models' heads have 8 channels


def tiny():
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(tiny_config("llama", 300)).eval()


def ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(2, 300, (1, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def under(model, *policies):
    """The continuation's logits after the context's cache went through ``policies`` inside the
    block, the cache and the block's cache state."""
    with sinklab.applied(model, *policies) as state:
        cache = model(ids(CONTEXT, 1), use_cache=True).cache
        logits = model(ids(6, 2), cache=cache).logits
    return logits, cache, state.cache


@torch.no_grad()
def by_hand(model, *policies):
    """The same, each policy applied to the prefill's cache by hand, from one tally."""
    wants, rows = P.recording(policies)
    with P.tallied(model, CONTEXT, "received" in wants, rows) as tally:
        cache = model(ids(CONTEXT, 1), use_cache=True).cache
    for policy in policies:
        policy.apply(cache, tally)
    return model(ids(6, 2), cache=cache).logits


def test_a_quantizer_in_the_block_quantizes_the_next_prefills_cache():
    """``applied(model, KIVI(bits=2, protect=1))`` works as it does for a press (it refused a
    quantizer): the cache is KIVI's, the continuation the one a hand-quantized cache gives, and
    nothing stays on the model. Mutation: dropping the rewrite from CacheState.after leaves the
    cache dense (the logits differ from the quantized cache's)."""
    model = tiny()
    kivi = P.KIVI(bits=2, protect=1, **KIVI8)
    logits, cache, state = under(model, kivi)
    assert all(type(layer) is QuantizedKVLayer for layer in cache.layers)
    assert torch.equal(logits, by_hand(model, kivi))
    assert not torch.equal(logits, by_hand(model, P.Knorm(0.0)))  # the dense cache's
    assert state.last.sinks == [0] and state.last.bytes_after < state.last.bytes_before
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_a_press_then_a_quantizer_quantize_what_the_press_kept():
    """Evict, then quantize what is kept: the layers hold the press's positions (the same as the
    press alone), count every token seen, take fewer bytes than the press alone, and continue as
    the same two policies applied by hand; generate runs on. Mutation: the quantized layer
    counting the keys it holds as the tokens seen (seen=None) answers 26 tokens seen, not 46 (the
    continuation would take positions 20 to 25 again)."""
    model = tiny()
    snap, kivi = P.SnapKV(ratio=0.5, keep_sinks=4, window_size=4), P.KIVI(bits=4, protect=4, **KIVI8)
    logits, cache, state = under(model, snap, kivi)
    _, _, pressed = under(model, snap)
    layer = cache.layers[0]
    assert type(layer) is QuantizedKVLayer and layer.get_seq_length() == CONTEXT + 6 and layer.stored() == CONTEXT // 2 + 6
    assert all(torch.equal(state.last.positions[i], pressed.last.positions[i]) for i in pressed.last.positions)
    assert [step.bytes_after for step in state.steps] == [pressed.last.bytes_after, state.last.bytes_after]
    assert state.last.bytes_after < pressed.last.bytes_after and state.last.bytes_before == pressed.last.bytes_before
    assert state.last.kept_fraction == 0.5 and state.last.sinks == [0, 1, 2, 3]
    assert torch.equal(logits, by_hand(model, snap, kivi))
    with sinklab.applied(model, snap, kivi), torch.no_grad():
        out = model.generate(ids(CONTEXT, 1), max_new_tokens=5, do_sample=False)
    assert out.shape[-1] == CONTEXT + 5


def test_a_quantizer_after_a_press_protects_only_sinks_the_press_kept_in_every_head():
    """KIVI's protected slots are where the press kept the protected positions; protecting one it
    dropped is one line, as is anything but a press, a quantizer or a press then a quantizer (two
    presses would score the second from attention over positions the first dropped), or quanto
    after a press (transformers' layer holds a whole context)."""
    model = tiny()
    with pytest.raises(SinklabError, match=r"^kivi holds position 1 apart, which the press before it did not keep"):
        under(model, P.StreamingLLM(ratio=0.75, keep_sinks=1), P.KIVI(bits=2, protect=4, **KIVI8))
    with pytest.raises(SinklabError, match=r"^quanto's layer \(transformers'\) holds a whole context"):
        under(model, P.Knorm(ratio=0.5), P.QuantoKV(bits=4, group_size=8))
    for order in ((P.KIVI(**KIVI8), P.Knorm(0.5)), (P.KIVI(**KIVI8), P.KIVI(**KIVI8)), (P.Knorm(0.5), P.SnapKV(0.5))):
        with pytest.raises(SinklabError, match=r"^sinklab.applied takes a press, a quantizer, or a press then a quantizer"):
            under(model, *order)
    with pytest.raises(SinklabError, match=r"^sinklab.applied takes .* a press such as SnapKV\(ratio=0.5\).* got str 'snapkv'"):
        under(model, "snapkv")
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_presses_and_quantizers_share_one_sink_vocabulary():
    """``keep_sinks`` and ``protect`` are one setting under two names: each family takes the other's."""
    assert P.KIVI(keep_sinks=2) == P.KIVI(protect=2) and P.KIVI(protect=2).sinks == 2
    assert P.SnapKV(protect="detected") == P.SnapKV(keep_sinks="detected")
    with pytest.raises(SinklabError, match="give protect= .* or keep_sinks=, not both"):
        P.KIVI(protect=1, keep_sinks=1)
    with pytest.raises(SinklabError, match="^static's protect must be 0, a number of first tokens N; got 'detected'"):
        P.StaticKV(protect="detected")
    with pytest.raises(SinklabError, match="^quanto protects no sink: protect must be 0, got 1"):
        P.QuantoKV(protect=1)


@dataclass(frozen=True)
class HalfPrecision(P.Quantizer):
    """A quantizer written as a new file would be: 16-bit floats, the sink kept in full precision."""

    bits: int = 16
    bit_widths = (16,)
    protects = "first"

    def make_store(self, layer, protected):
        return HalfStore()


class HalfStore:
    def __init__(self):
        self.keys = self.values = None

    def absorb(self, keys, values, end=None):
        if keys.shape[2]:
            k, v = keys.half(), values.half()
            self.keys = k if self.keys is None else torch.cat([self.keys, k], 2)
            self.values = v if self.values is None else torch.cat([self.values, v], 2)
        return keys[:, :, :0], values[:, :, :0]

    @property
    def length(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def dequantize_into(self, keys, values):
        if self.keys is not None:
            keys.copy_(self.keys), values.copy_(self.values)

    def tensors(self):
        return [] if self.keys is None else [self.keys, self.values]

    def branched(self):
        twin = HalfStore()
        twin.keys, twin.values = self.keys, self.values
        return twin


@pytest.fixture
def half_registered():
    registered = P.register_policy("half")(HalfPrecision)
    yield registered
    del P.POLICIES["half"], P.QUANTIZERS["half"]


def test_a_new_quantizer_is_one_class_the_registry_command_and_block_all_take(half_registered, tiny_model_dir):
    """Registered, a quantizer is in ``--quant``'s choices and help, ``sinklab compress`` builds its
    cells from its bit widths and protect rule, and the block applies it (half the bytes)."""
    assert "half" in P.QUANTIZERS and "half" not in P.PRESSES
    cfg = CompressConfig(quantizers=("half",), bits=(2, 16), keep_sinks=(0, 1, "detected"))
    assert cfg.presses == () and cfg.quantizer_bits("half") == [16] and cfg.protections("half") == [0, 1]
    from sinklab.compress.config import quantizers_help

    assert "half: 16-bit, protect 0 or N (first tokens)" in quantizers_help()
    loaded = sinklab.load_model(str(tiny_model_dir("llama")))
    cells = job_policies(PressJob(cfg, "half"), loaded)
    assert cells == {"16/0": HalfPrecision(16, 0), "16/1": HalfPrecision(16, 1)}
    _, cache, state = under(tiny(), HalfPrecision(protect=1))
    assert cache.layers[0].store.keys.dtype == torch.float16
    assert state.last.bytes_after < 0.55 * state.last.bytes_before


def test_one_block_applies_interventions_tunings_and_a_quantizer_and_leaves_nothing():
    """``sinklab.applied`` composes a forward edit with a cache policy: the logits are the
    intervention's (its own block) over the quantizer's cache (another), nested by hand; a press
    beside a forward edit is refused before anything runs (its eviction would turn the edit's
    positions into slots), and a tuning that edits nothing leaves the model as it is. Mutation: a
    quantized layer that does not say how many tokens it holds (no ``kept_tokens``) is read by the
    intervention's guard as holding none and fails."""
    model = tiny()
    kivi, edit = P.KIVI(bits=4, protect=1, **KIVI8), MaskSelf(3)
    with torch.no_grad():
        with sinklab.applied(model, edit, kivi) as both:
            cache = model(ids(CONTEXT, 1), use_cache=True).cache
            logits = model(ids(6, 2), cache=cache).logits
        with sinklab.applied(model, edit), sinklab.applied(model, kivi):
            cache = model(ids(CONTEXT, 1), use_cache=True).cache
            nested = model(ids(6, 2), cache=cache).logits
        plain = under(model, kivi)[0]
    assert both.hooks is not None and both.cache.last.sinks == [0]
    assert torch.equal(logits, nested) and not torch.equal(logits, plain)
    assert not model._forward_hooks and not model._forward_pre_hooks and model.config._attn_implementation == "sdpa"
    with pytest.raises(SinklabError, match="^interventions and tunings name token positions, which snapkv's eviction"):
        with sinklab.applied(model, [edit], P.SnapKV(0.5)):
            pass
    with pytest.raises(SinklabError, match="^sinklab.applied takes interventions .* got str 'snapkv'"):
        with sinklab.applied(model, "snapkv"):
            pass
    untouched = ZeroTuning(gammas=((1.0,) * model.config.num_attention_heads,) * model.config.num_hidden_layers)
    with sinklab.applied(model, untouched, kivi) as only_cache, torch.no_grad():
        cache = model(ids(CONTEXT, 1), use_cache=True).cache
        assert torch.equal(model(ids(6, 2), cache=cache).logits, plain)
    assert only_cache.hooks is None


def test_an_intervention_refuses_a_forward_through_a_pressed_cache():
    """A pressed layer says what it evicted (it said nothing, so an edit at position k silently hit
    slot k). Mutation: dropping RewrittenLayer.tokens_seen lets the forward run."""
    model = tiny()
    _, cache, _ = under(model, P.Knorm(ratio=0.5))
    assert isinstance(cache.layers[0], PressedLayer)
    with pytest.raises(SinklabError, match=r"this forward's cache has dropped 20 token\(s\)"):
        with sinklab.applied(model, MaskSelf(3)), torch.no_grad():
            model(ids(2, 3), cache=cache)


def test_one_block_is_the_public_way_and_kvpress_spelling_is_the_same_block():
    """``sinklab.applied`` is the one block: the per-capability blocks are not public (no
    ``applied`` in ``sinklab.intervene``, ``sinklab.tune`` or ``sinklab.kvcache``), ``sinklab.press``
    is gone, and ``with press(model):`` (kvpress's spelling) is ``sinklab.applied(model, press)``:
    the same kept positions, a :class:`~sinklab.kvcache.CacheState` under ``.cache``, and it takes
    what ``sinklab.load_model`` returns, and ``question=`` alike. Mutations: ``__call__`` returning
    a block without the policy (nothing pressed) fails on the kept positions; ``__call__`` dropping
    ``question`` compresses the question too and fails on the compressed length."""
    import importlib

    for package in ("intervene", "tune", "kvcache"):
        assert not hasattr(importlib.import_module(f"sinklab.{package}"), "applied")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sinklab.press")
    model, press = tiny(), P.SnapKV(compression_ratio=0.5, keep_sinks=2, window_size=4)
    kept = []
    for block in (sinklab.applied(model, press), press(model), press(LoadedModel(model, None, "tiny", "object"))):
        with block as edits, torch.no_grad():
            model(ids(CONTEXT, 1), use_cache=True)
        assert isinstance(edits.cache, P.CacheState) and edits.hooks is None
        kept.append(edits.cache.last.positions)
    assert all(torch.equal(kept[0][layer], other[layer]) for other in kept[1:] for layer in kept[0])
    assert len(kept[0]) and all(p.shape[-1] == CONTEXT // 2 for p in kept[0].values())
    prompt, question = ids(CONTEXT, 1), ids(6, 2)  # question= too: the context alone is compressed
    asked = []
    for block in (sinklab.applied(model, press, question=question[0]), press(model, question=question[0])):
        with block as edits, torch.no_grad():
            model(torch.cat([prompt, question], -1), use_cache=True)
        asked.append(edits.cache.last)
    assert asked[0].length == asked[1].length == CONTEXT and asked[0].positions.keys() == asked[1].positions.keys()
    assert all(torch.equal(asked[0].positions[layer], asked[1].positions[layer]) for layer in asked[0].positions)
