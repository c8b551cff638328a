"""sinklab compress and the quantized caches: packed bytes, protected sinks kept exactly, a tiny
model with a planted sink and a planted needle, and the command and the notebook giving one table."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import transformers
from conftest import tiny_config
from test_pipeline import without_timing
from test_press import ARCHITECTURES as PRESS_ARCHITECTURES
from test_press import inputs, layer_kinds, tiny

import sinklab
from sinklab import cli
from sinklab import kvcache as P
from sinklab.compress import CompressConfig, evaluate
from sinklab.compress.evaluate import continuation_nll, score_inputs
from sinklab.compress.tasks import CONTINUATION, DEPTHS, TextWindow, calibration_windows, first_integer, passkey_prompts
from sinklab.core.errors import SinklabError
from sinklab.kvcache import KIVI, StaticKV, calibrate, tallied
from sinklab.kvcache.packing import pack, quantize_groups, unpack
from sinklab.kvcache.quantizers.kivi import KiviStore
from sinklab.stream import stream_tokens
from sinklab.stream.caches import cache_bytes

BOS, NEEDLE, QUESTION, ANSWER, OTHER = 0, 1, 2, 3, 4
FILLERS = range(5, 16)


@pytest.mark.parametrize("bits", [2, 4])
@pytest.mark.parametrize(
    "shape, dim",  # packed bytes read as 8-, 2- and 1-byte integers, or none; along the last axis or another
    [((3, 5, 64), -1), ((15, 8), -1), ((1, 8), -1), ((3, 8), 1), ((0, 8), -1), ((8, 3, 5), 0)],
)
def test_packed_integers_round_trip_and_take_bits_over_eight_bytes(bits, shape, dim):
    q = torch.randint(0, 2**bits, shape, dtype=torch.uint8)
    packed = pack(q, bits, dim)
    assert packed.dtype == torch.uint8 and packed.shape[dim] == shape[dim] * bits // 8
    assert torch.equal(unpack(packed, bits, dim), q)


def test_packed_bytes_at_an_odd_place_in_their_storage_unpack():
    """A view starting one byte into its storage cannot be read as wider integers (planes falls
    back to narrower ones). Mutation caught: choosing the width from the byte count alone."""
    q = torch.randint(0, 4, (17, 8), dtype=torch.uint8)
    packed = pack(q, 2)  # 17 x 2 bytes
    tail = packed.view(-1)[2:].view(16, 2)  # 32 bytes, 2 bytes into the storage
    assert torch.equal(unpack(tail, 2), q[1:])


def test_group_quantization_is_within_half_a_step():
    """Each value comes back within half its group's step, plus what storing the step and the
    offset in float16 (relative precision 2^-11) can add: 16 steps' worth and the offset's share."""
    x = torch.randn(4, 7, 32, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.1, 10, 32)
    q = quantize_groups(x, 4)
    step, low = q.scale.float(), q.low.float()
    slack = 2**-11 * (16 * step + low.abs())
    assert ((q.dequantized(torch.float32) - x).abs() <= step / 2 + slack).all()


def tiny_cache(arch="llama", length=40):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(arch, 300)).eval()
    ids = torch.randint(2, 300, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model, ids, model(ids, use_cache=True).cache


def test_kivi_keeps_protected_and_recent_tokens_exactly_and_packs_the_rest():
    """The first 3 tokens (protected) and the recent ones come back bit-exact; the others within
    the 2-bit steps; the bytes are the packed data plus float16 scales (keys per channel over
    8-token groups, values per token over 8-channel groups). The groups sit at positions 0-7,
    8-15, ... as without protection: positions 0-31 are quantized ((40 - residual 5) // 8 groups),
    the protected 0-2 leaving holes in the first group (their slots, keys and values, hold a
    stand-in, counted), and 32-39 stay in full precision."""
    model, ids, cache = tiny_cache()
    dense_k, dense_v = cache.layers[0].keys.clone(), cache.layers[0].values.clone()
    policy = KIVI(bits=2, protect=3, group_size=8, residual=5)
    twin = P.branch(cache)
    report = policy.apply(twin)
    layer = twin.layers[0]
    keys, values = layer.update(dense_k[:, :, :0], dense_v[:, :, :0])  # no new token: what the layer holds
    assert keys.shape == dense_k.shape and report.sinks == [0, 1, 2]
    assert torch.equal(keys[:, :, :3], dense_k[:, :, :3]) and torch.equal(values[:, :, -8:], dense_v[:, :, -8:])
    slots = 32  # 4 whole groups, 3 slots of them holes
    assert (keys[:, :, 3:-8] - dense_k[:, :, 3:-8]).abs().max() < dense_k.abs().max() / 2
    kv_heads, head_dim = dense_k.shape[1], dense_k.shape[-1]
    packed = 2 * slots * kv_heads * head_dim * 2 // 8  # keys and values, 2 bits each
    scales = 2 * 2 * kv_heads * (slots // 8 * head_dim + slots * head_dim // 8)  # float16 scale and offset per group
    full = (3 + 8) * kv_heads * head_dim * 4 * 2  # protected and recent tokens in float32
    assert sum(t.numel() * t.element_size() for t in layer.held_tensors()) == packed + scales + full
    assert report.bytes_after == cache_bytes(twin) < report.bytes_before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("policy", [KIVI(bits=2, protect=3, group_size=8, residual=5), KIVI(bits=4, group_size=8, residual=5)])
def test_a_decode_step_reads_every_stored_token_as_its_packed_group_decodes(policy, dtype):
    """What a decode step's attention reads: the protected tokens, then every stored token as its
    packed bytes decode (unpacked, times the group's scale, plus its offset, in float32, then cast
    to the cache's dtype: computed here from the bytes, apart from the layer's in-place path), in
    sequence order, holes dropped, then the tail and the new token, all bit for bit, in float32 and
    bfloat16. Mutations caught: the offset added before the scale; a plane written in the
    wrong place; the holes kept; bfloat16 rounded after the product."""
    _, _, cache = tiny_cache()
    twin = P.branch(cache)
    for layer in twin.layers:
        layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
    policy.apply(twin)
    layer = twin.layers[0]
    new_k, new_v = torch.randn(2, *layer.tail[0].shape[1:2], 1, layer.tail[0].shape[-1]).to(dtype).unbind(0)
    keys, values = layer.update(new_k[None], new_v[None])
    store, protected = layer.store, layer.sink[0].shape[2]

    def decoded(q) -> torch.Tensor:
        return (unpack(q.data, q.bits, q.pack_dim).float() * q.scale.float() + q.low.float()).to(dtype)

    real = [s for s in range(store.slots) if s not in store.holes]
    stored_k = decoded(store.keys).flatten(2, 3)[:, :, real]
    stored_v = decoded(store.values).flatten(-2).flatten(2, 3)[:, :, real]
    end = protected + stored_k.shape[2]
    assert protected == policy.protect and stored_k.shape[2] == stored_v.shape[2] == store.length > 0
    assert torch.equal(keys[:, :, :protected], layer.sink[0]) and torch.equal(values[:, :, :protected], layer.sink[1])
    assert torch.equal(keys[:, :, protected:end], stored_k) and torch.equal(values[:, :, protected:end], stored_v)
    assert torch.equal(keys[:, :, end:], layer.tail[0]) and torch.equal(values[:, :, end:], layer.tail[1])
    assert torch.equal(keys[:, :, -1:], new_k[None]) and keys.shape[2] == layer.get_seq_length()


@pytest.mark.parametrize("kind", ["kivi", "static"])
def test_a_cache_whose_first_tokens_are_all_protected_decodes_on(kind):
    """Protected tokens that fill a whole KIVI group, or the whole static prefill, leave nothing to
    store for a while: the layer is read then (a zero-token update) and decodes on, its protected
    tokens exact and every position counted. Before, a group of protected tokens only crashed
    KIVI's decode (a reshape of nothing) and an empty static store crashed the read."""
    _, _, cache = tiny_cache()
    dense_k = cache.layers[0].keys.clone()
    heads, length = dense_k.shape[1], dense_k.shape[2]
    if kind == "kivi":  # the first group of 8 all protected, absorbed once 8 tokens are decoded
        policy = KIVI(bits=2, protect=8, group_size=8, residual=length)
    else:
        policy = StaticKV(
            bits=4, protect=length, scales={i: (torch.ones(heads), torch.ones(heads)) for i in range(len(cache.layers))}
        )
    twin = P.branch(cache)
    policy.apply(twin)
    layer = twin.layers[0]
    keys, _ = layer.update(dense_k[:, :, :0], dense_k[:, :, :0])
    assert torch.equal(keys, dense_k)  # nothing stored yet: all of it held exactly
    for step in range(20):
        new = torch.randn(1, heads, 1, dense_k.shape[-1], generator=torch.Generator().manual_seed(step))
        keys, _ = layer.update(new, new)
    assert keys.shape[2] == layer.get_seq_length() == length + 20 and torch.equal(
        keys[:, :, : policy.protect], dense_k[:, :, : policy.protect]
    )


def test_kivi_quantizes_keys_per_channel_and_values_per_token():
    """KIVI's axes: a key channel with a large constant offset (an outlier channel, as sinks and
    massive activations make) costs the other channels nothing, since each channel has its own
    scales over a group of tokens; a value token 100 times larger costs the other tokens nothing,
    since each token has its own scales over a group of channels. The last tokens that do not
    fill a group, and at least ``residual`` of them, stay in full precision."""
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(1, 1, 37, 16, generator=g), torch.randn(1, 1, 37, 16, generator=g)
    keys[..., 3] += 100.0
    values[:, :, 5] *= 100.0
    store = KiviStore(bits=2, group=8, residual=6)
    tail = store.absorb(keys, values)
    assert torch.equal(tail[0], keys[:, :, 24:]) and torch.equal(tail[1], values[:, :, 24:])  # 37 - 6 = 31: 3 groups
    k, v = torch.empty(1, 1, store.length, 16), torch.empty(1, 1, store.length, 16)
    store.dequantize_into(k, v)
    ordinary_channels = [c for c in range(16) if c != 3]
    assert (k - keys[:, :, :24])[..., ordinary_channels].abs().max() < 1.0
    ordinary_tokens = [t for t in range(24) if t != 5]
    assert (v - values[:, :, :24])[:, :, ordinary_tokens].abs().max() < 1.0


def test_static_scales_leave_the_protected_sink_out():
    """Calibrated with the first token protected, each head's ranges ignore that token's outlier
    key and value (50 and 100 here, 1 and 2 elsewhere); with nothing protected they take them in."""

    class PlantedSink:
        device = torch.device("cpu")

        def __call__(self, ids, **_):
            keys = torch.ones(1, 2, ids.shape[-1], 8)
            keys[:, :, 0] = 50.0
            cache = transformers.DynamicCache()
            cache.update(keys, 2 * keys, 0)
            return SimpleNamespace(cache=cache)

    windows = torch.zeros(2, 12, dtype=torch.long)
    assert [t.tolist() for t in calibrate(PlantedSink(), windows, protect=1)[0]] == [[1.0, 1.0], [2.0, 2.0]]
    assert [t.tolist() for t in calibrate(PlantedSink(), windows, protect=0)[0]] == [[50.0, 50.0], [100.0, 100.0]]


def test_kivi_protects_the_detected_sinks_exactly():
    """protect="detected" keeps the positions the prefill's attention marks (0 and a secondary
    sink at 7, planted) in full precision."""
    _, _, cache = tiny_cache(length=120)
    received = (1 / torch.arange(1, 121.0)).flip(0).cumsum(0).flip(0)[None, None].expand(1, 4, 120).clone()
    received[..., [0, 7]] += 60.0
    tally = SimpleNamespace(received={i: received for i in range(len(cache.layers))}, window={})
    twin = P.branch(cache)
    report = KIVI(2, "detected", group_size=8, residual=4).apply(twin, tally)
    keys, _ = twin.layers[1].update(*(t[:, :, :0] for t in (cache.layers[1].keys,) * 2))
    assert report.sinks == [0, 7] and torch.equal(keys[:, :, :2], cache.layers[1].keys[:, :, [0, 7]])


def test_quanto_bytes_are_its_packed_integers_scales_and_shifts():
    """transformers' quanto layer quantizes the whole 40-token context at its first update: per
    layer and part, 4-bit integers (half a byte each) plus a float32 scale and shift per group of
    8 channels, counted from quanto's own tensors."""
    _, _, cache = tiny_cache()
    keys = cache.layers[0].keys
    report = P.QuantoKV(4, group_size=8, residual=4).apply(P.branch(cache))
    values, groups = keys.numel(), keys.numel() // 8
    per_layer = 2 * (values // 2 + 2 * groups * 4)
    assert report.bytes_after == len(cache.layers) * per_layer and report.bytes_before == cache_bytes(cache)


def test_static_int8_holds_the_protected_prefix_exactly_and_quantizes_new_tokens_with_fixed_scales():
    model, ids, cache = tiny_cache()
    scales = calibrate(model, ids[:, :20], protect=1)
    policy = StaticKV(bits=8, protect=1, scales=scales)
    twin = P.branch(cache)
    policy.apply(twin)
    before = twin.layers[0].store.scales
    with torch.no_grad():
        out = model(ids[:, :3], cache=twin)
    layer = out.cache.layers[0]
    assert layer.store.scales is before and layer.seen == 43
    keys, _ = layer.update(cache.layers[0].keys[:, :, :0], cache.layers[0].values[:, :, :0])
    assert torch.equal(keys[:, :, 0], cache.layers[0].keys[:, :, 0])  # the sink, as computed
    with pytest.raises(SinklabError, match="calibrate"):
        StaticKV(8).apply(P.branch(cache))


@torch.no_grad()
@pytest.mark.parametrize("arch", PRESS_ARCHITECTURES)
def test_every_quantized_cache_works_on_every_architecture(arch):
    """KIVI (2 bits with the first token protected, 4 with the detected sinks: none on a random
    model), static INT4/INT8 (the first token as a
    full-precision prefix) and quanto on each architecture: only the full-attention layers are
    quantized (sliding-window layers left whole), the protected tokens come back exactly, the
    cache's bytes shrink, and the continuation's logits move away from the dense cache's less at
    more bits."""
    model = tiny(arch)
    ids, cont = inputs(1)
    with tallied(model, ids.shape[-1], True, 0) as tally:
        dense = model(ids, use_cache=True).cache
    full = [i for i, kind in enumerate(layer_kinds(model)) if kind == "full_attention"]
    expected = model(cont, cache=P.branch(dense)).logits
    scales = calibrate(model, ids, protect=1)
    policies = {
        "kivi2": KIVI(2, 1, group_size=8, residual=4),
        "kivi4": KIVI(4, "detected", group_size=8, residual=4),
        "static4": StaticKV(4, protect=1, scales=scales),
        "static8": StaticKV(8, protect=1, scales=scales),
        "quanto4": P.QuantoKV(4, group_size=8, residual=4),
    }
    error = {}
    for name, policy in policies.items():
        twin = P.branch(dense)
        report = policy.apply(twin, tally)
        assert report.layers == full and all(twin.layers[i] is not dense.layers[i] for i in full)
        assert all(type(twin.layers[i]) is type(dense.layers[i]) for i in range(len(dense.layers)) if i not in full)
        assert report.bytes_after < report.bytes_before
        if not name.startswith("quanto"):
            assert report.sinks == ([] if name == "kivi4" else [0])
            keys, _ = twin.layers[full[0]].update(*(t[:, :, :0] for t in (dense.layers[full[0]].keys,) * 2))
            assert torch.equal(keys[:, :, report.sinks], dense.layers[full[0]].keys[:, :, report.sinks])
        logits = model(cont, cache=twin).logits
        assert torch.isfinite(logits).all()
        error[name] = (logits - expected).abs().max().item()
    assert error["kivi4"] < error["kivi2"] and error["static8"] < error["static4"]


@pytest.mark.parametrize(
    "policy", [P.SnapKV(0.5, window_size=4), KIVI(2, 1, group_size=8, residual=4), "static"], ids=["snapkv", "kivi", "static"]
)
def test_a_branch_continues_without_changing_the_cache_it_came_from(policy):
    """Several continuations of one compressed context (the passkey's greedy answer, then its
    teacher-forced key) each see the compressed context alone."""
    model, ids, cache = tiny_cache()
    if policy == "static":
        policy = StaticKV(8, scales=calibrate(model, ids, 0))
    tally = None
    if policy.recording or policy.window_rows:
        with tallied(model, 40, "received" in policy.recording, policy.window_rows) as tally, torch.no_grad():
            cache = model(ids, use_cache=True).cache
    twin = P.branch(cache)
    policy.apply(twin, tally)
    cont = torch.randint(2, 300, (1, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        first = model(cont, cache=P.branch(twin)).logits
        model(cont[:, :2], cache=P.branch(twin))  # another continuation in between
        again = model(cont, cache=P.branch(twin)).logits
    assert torch.equal(first, again)


def planted_model():
    """A one-layer, one-head Llama with a planted sink and a planted needle (RoPE's slowest pairs
    carry the markers, so positions barely rotate them): every query looks at BOS (a score of 10
    against 0), whose value the output projection discards; the QUESTION token's query also
    matches the NEEDLE's key (28 against 10), whose value makes ANSWER the next token. Filler
    tokens carry content in other dimensions only, around a common direction."""
    config = transformers.LlamaConfig(
        vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1, max_position_embeddings=256, rope_theta=1e12, attention_bias=True,
        tie_word_embeddings=False, bos_token_id=BOS,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.model.norm, model.model.layers[0].input_layernorm, model.model.layers[0].post_attention_layernorm):
            norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[BOS, 3], emb[NEEDLE, 2], emb[QUESTION, 6], emb[ANSWER, 0], emb[OTHER, 0] = 1, 1, 1, 1, 1
        emb[5:, [0, 1, 4, 5]] = 0.3 * torch.randn(11, 4, generator=g)
        emb[5:, 1] += 1.0  # fillers share a direction, as real keys share a mean one
        attn = model.model.layers[0].self_attn
        attn.q_proj.bias[3] = 10.0
        attn.q_proj.weight[2, 6] = 10.0
        attn.k_proj.weight.copy_(torch.eye(8))
        attn.v_proj.weight.copy_(torch.eye(8))
        attn.o_proj.weight.copy_(torch.diag(torch.tensor([1.0, 1, 1, 0, 1, 1, 1, 1])))
        model.lm_head.weight[5:] = emb[5:]  # a filler's logit reads the filler's content
        model.lm_head.weight[ANSWER, 2], model.lm_head.weight[OTHER, 6] = 5.0, 3.0
    return model


def planted_context(fillers_each_side=20):
    g = torch.Generator().manual_seed(1)
    side = lambda: torch.randint(FILLERS.start, FILLERS.stop, (fillers_each_side,), generator=g)  # noqa: E731
    return torch.cat([torch.tensor([BOS]), side(), torch.tensor([NEEDLE]), side()])[None]


@torch.no_grad()
def answer_after(model, press):
    context = planted_context()
    with sinklab.applied(model, press):
        cache = model(context, use_cache=True).cache
        return model(torch.tensor([[QUESTION]]), cache=cache).logits[0, -1].argmax().item()


def test_the_planted_needle_is_kept_by_the_press_whose_score_finds_it():
    """KeyDiff keeps the keys least like the mean key: the needle's (and the sink's), so the answer
    survives at 7/8 removed; StreamingLLM keeps the first and the last tokens and loses the
    needle in the middle. The dense cache answers."""
    model = planted_model()
    assert answer_after(model, P.Knorm(0.0)) == ANSWER
    assert answer_after(model, P.KeyDiff(0.875)) == ANSWER
    assert answer_after(model, P.StreamingLLM(0.875, keep_sinks=1)) == OTHER


@torch.no_grad()
def test_the_planted_sink_breaks_the_output_when_dropped_and_restores_it_when_kept():
    """Filler tokens after a context compressed to its last half: with the sink kept their logits
    are the dense model's to within 1 % of what dropping the sink changes (the dropped fillers had
    e^-10 of the weight each; measured 0.006 against 1.7), without it far off (each query spreads
    over the fillers, whose content reaches the logits)."""
    model = planted_model()
    context, later = planted_context(), planted_context()[:, 1:9]
    dense = model(later, cache=model(context, use_cache=True).cache).logits

    def after(press):
        with sinklab.applied(model, press):
            return model(later, cache=model(context, use_cache=True).cache).logits

    kept, dropped = after(P.StreamingLLM(0.5, keep_sinks=1)), after(P.StreamingLLM(0.5, keep_sinks=0))
    broken, restored = (dropped - dense).abs().max(), (kept - dense).abs().max()
    assert broken > 1.0 and restored < 0.01 * broken


@dataclass(frozen=True)
class LaterLayersReversed(P.Knorm):
    """Knorm in layer 0, its opposite after: the same keys as Knorm in the first layer only."""

    def scores(self, context):
        return super().scores(context) * (1 if context.layer == 0 else -1)


def test_cells_that_keep_the_same_keys_are_scored_once_with_the_same_scores(monkeypatch):
    """Two cells of one press that keep the same keys share one continuation; a cell that keeps
    others is scored on its own cache: each cell's scores equal those of scoring it alone."""
    model, ids, _ = tiny_cache(length=CONTINUATION + 80)
    windows = [TextWindow("text", ids)]
    cells = {"a": P.Knorm(0.5), "again": P.Knorm(0.5, keep_sinks=0), "sinks": P.Knorm(0.5, keep_sinks=6)}
    cells["later layers differ"] = LaterLayersReversed(0.5)
    alone = {c: next(score_inputs(model, None, {c: p}, windows, []))[2] for c, p in cells.items()}
    calls = []
    monkeypatch.setattr(evaluate, "continuation_nll", lambda *a: calls.append(1) or continuation_nll(*a))
    shared = {cell: scores for _, cell, scores in score_inputs(model, None, cells, windows, [])}
    assert shared == alone and len(calls) == 3 and alone["a"]["nll"] != alone["sinks"]["nll"]
    assert alone["a"]["nll"] != alone["later layers differ"]["nll"]


def test_static_scales_are_calibrated_on_text_the_ppl_task_never_reads(tokenizer):
    """The calibration windows come from the documents after those the ppl windows read: none of
    them appears in the evaluated stream."""
    skip = 3000
    evaluated = stream_tokens(tokenizer, "shakespeare", skip, "no").tolist()
    windows = calibration_windows(tokenizer, "shakespeare", skip, 32, 4)
    text = " ".join(map(str, evaluated))
    assert windows.shape == (4, 32) and all(" ".join(map(str, w.tolist())) not in text for w in windows)


def test_passkey_prompts_place_the_key_at_each_depth(tokenizer):
    prompts = passkey_prompts(tokenizer, 600, keys_per_depth=2, seed=0, bos="auto")
    assert [p.depth for p in prompts] == [d for d in DEPTHS for _ in range(2)]
    for p in prompts:
        text = tokenizer.decode(p.context[0])
        before, after = text.split(f"The pass key is {p.key}.")
        fillers_before, fillers_after = before.count("The grass is green."), after.count("The grass is green.")
        total = fillers_before + fillers_after
        assert abs(fillers_before / total - p.depth) <= 0.5 / total  # the depth is in the filler, to a sentence
        assert 10000 <= p.key <= 99999 and p.context.shape[-1] <= 640
    assert len({p.key for p in prompts}) == 6
    assert first_integer(" 12345. Remember") == 12345 and first_integer(" none") is None


COMPRESS = ["--press", "snapkv,knorm", "--ratio", "0.5", "--keep-sinks", "0,1", "--quant", "kivi", "--bits", "2",
            "--group-size", "8", "--residual", "16", "--context", "400", "--keys", "1", "--outside-corpus", "none"]  # fmt: skip
SETTINGS = dict(presses=("snapkv", "knorm"), ratios=(0.5,), keep_sinks=(0, 1), quantizers=("kivi",), bits=(2,), group_size=8,
                residual=16, contexts=(400,), keys=1, outside=None)  # fmt: skip


@pytest.fixture(scope="module")
def compressed_run(tiny_model_dir, tmp_path_factory):
    folder = str(tiny_model_dir("llama", positions=1024))  # the 400-token contexts and the text after them
    out = tmp_path_factory.mktemp("compress") / "run"
    assert cli.main(["compress", folder, *COMPRESS, "--out", str(out), "--quiet"]) == 0
    return folder, out, json.loads((out / "summary.json").read_text())


def test_the_command_and_the_notebook_give_one_table(compressed_run):
    folder, _, summary = compressed_run
    result = sinklab.compress_model(sinklab.load_model(folder), **SETTINGS)
    assert without_timing(result.summary) == without_timing(summary)
    frame = result.frame()  # the presses' and the quantizers' cells in one table
    assert frame.kind.tolist() == ["press"] * 4 + ["quantizer"] * 2 and set(frame.columns) >= {
        *("model", "dtype", "device", "policy", "ratio", "bits", "keep_sinks"),
        *("ppl_ratio_shakespeare", "passkey_accuracy"),
    }
    assert len(result.frame("quantized")) == 2 and result.frame("sink_effect").kind.tolist() == ["press"] * 2 + ["quantizer"]


def test_the_sink_effect_pairs_each_prompt_with_itself(compressed_run):
    """Keeping sinks against not, per press: the mean log-probability change is the mean of the
    per-prompt changes, whose spread and count of improved prompts come from the same prompts."""
    _, _, summary = compressed_run
    cells = {(c["policy"], c["keep_sinks"]): c["passkey"] for c in summary["cells"]}
    for effect in summary["sink_effect"]:
        kept, none = cells[effect["policy"], effect["keep_sinks"]], cells[effect["policy"], 0]
        changes = [a - b for a, b in zip(kept["logprobs"], none["logprobs"])]
        assert len(changes) == effect["prompts"] == len(DEPTHS)
        assert effect["logprob_change"] == pytest.approx(sum(changes) / len(changes), abs=1e-9)
        assert effect["logprob_change_std"] == pytest.approx(statistics.pstdev(changes), abs=1e-9)
        assert effect["prompts_more_likely"] == sum(c > 0 for c in changes)


def test_a_compress_run_directory_and_its_resume(compressed_run, capsys):
    """Each press's row is kept as it finishes: removing one and running again measures that one
    only (the others are read back), and the summary is the same."""
    folder, out, summary = compressed_run
    assert {p.name for p in (out / "presses").iterdir()} == {"dense.json", "snapkv.json", "knorm.json", "kivi.json"}
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "finished" and {"summary.json", "report.html"} <= set(info["files"])
    assert "Does keeping the sink help?" in (out / "report.html").read_text()
    (out / "presses" / "knorm.json").unlink()
    (out / "summary.json").unlink()
    info["status"] = "running"
    (out / "run.json").write_text(json.dumps(info))
    assert cli.main(["compress", folder, *COMPRESS, "--out", str(out), "--quiet"]) == 0
    assert without_timing(json.loads((out / "summary.json").read_text())) == without_timing(summary)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--keep-sinks", "some"], "--keep-sinks takes numbers"),
        (["--ratio", "1"], "in (0, 1)"),
        (["--quant", "fp3"], "unknown quantizer"),
        (["--context", "64"], "at least 128"),
        (["--quant", "kivi", "--bits", "8"], "--quant kivi has nothing to run: it takes --bits 2,4"),
        (["--quant", "static", "--keep-sinks", "detected"], "--quant static has nothing to run"),
    ],
)
def test_bad_compress_settings_are_one_line_errors(flags, needle, capsys, tmp_path):
    """A flag's own parser fails as argparse's usage error (exit 2), a config's check as sinklab's."""
    try:
        code = cli.main(["compress", *flags, "--out", str(tmp_path / "x")])
    except SystemExit as stop:
        code = stop.code
    assert code == 2 and not (tmp_path / "x").exists()
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_adakv_over_a_press_is_a_compress_row_of_its_own(tiny_model_dir, monkeypatch):
    """``--press adakv_snapkv`` (AdaKV over SnapKV, kvpress's ``AdaKVPress``) is a row beside
    SnapKV's: the same ratio keeps the same number of keys in all (the budget is pooled over each
    layer's heads), the run's row is AdaKV's own (its per-head budgets are drawn, once per layer and
    input, and only for that row), and with ``--during decode`` it is refused with the reason.
    Mutations: the name read as the bare press (no AdaKV) in the config, or in the run's cells
    (``press_cells(name.removeprefix("adakv_"))``), fail on the cell and on the budgets drawn."""
    folder = str(tiny_model_dir("llama", positions=1024))
    drawn = []
    original = P.AdaKV.head_budgets

    def counted(self, *args, **kwargs):
        drawn.append(self.press.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(P.AdaKV, "head_budgets", counted)
    run = sinklab.compress_model(
        sinklab.load_model(folder),
        presses=("snapkv", "adakv_snapkv"),
        ratios=(0.5,),
        keep_sinks=(1,),
        contexts=(128,),
        tasks=("ppl",),
        outside=None,
    )
    frame = run.frame().set_index("policy")
    assert set(frame.index) == {"snapkv", "adakv_snapkv"}
    assert drawn and set(drawn) == {"snapkv"} and len(drawn) % 3 == 0  # the tiny llama's 3 layers, each input
    assert frame.loc["adakv_snapkv", "kept_fraction"] == pytest.approx(frame.loc["snapkv", "kept_fraction"], abs=0.02)
    (cell,) = CompressConfig(presses=("adakv_snapkv",), ratios=(0.5,), keep_sinks=(1,)).press_cells("adakv_snapkv").values()
    assert cell == P.AdaKV(P.SnapKV(ratio=0.5, keep_sinks=1))
    with pytest.raises(SinklabError, match="^--press adakv_snapkv: a decoding press brings every KV head to the same budget"):
        sinklab.compress_model(sinklab.load_model(folder), presses=("adakv_snapkv",), during="decode", contexts=(128,))
