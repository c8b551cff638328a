"""Sink caches: equal to dense within capacity, exact key rotation over long streams in every
dtype, the intended positions after eviction (manual loops, absolute positions, generate, GPT-NeoX),
left-padded batches and a second chat turn through the same cache, decode steps that read no device
tensor and rotation tables on each layer's device, the one-pass kernel against a real cache, native
caches, clear errors, and nothing left on the model once a cache is dropped or its block ends.

Position tests run on *sharp* tiny models (initializer range 0.2): the default tiny models attend
almost uniformly, so a wrong position would move their logits by ~1e-4 and pass unnoticed. Two
mutation tests show that the position bugs these tests guard against do fail them."""

import inspect
import json
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config
from transformers import AutoModelForCausalLM, DynamicCache

from sinklab import cli
from sinklab.core.errors import SinklabError
from sinklab.models.hf import load_model
from sinklab.models.native import KVCache, ModelConfig, Transformer
from sinklab.stream import StreamConfig, benchmark, book, generate, rope, sink_layer, walks
from sinklab.stream.benchmark import policy_nll
from sinklab.stream.caches import NativeSinkCache, cache_bytes, make_sink_cache, sink_cache
from sinklab.stream.hostsync import greedy_decode
from sinklab.stream.rope import RopeShift, rotate, rotation
from sinklab.stream.walks import real_cache_walk

ROPE_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi", "gpt_neox", "gpt_oss")


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return load_model(str(tiny_model_dir("llama")))


def sharp_model(arch: str):
    """A tiny random model of ``arch`` whose attention is far from uniform (the same weights at every call)."""
    config = tiny_config(arch, 300)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def sharp():
    """A factory: the module's one :func:`sharp_model` of each ``arch``."""
    made = {}

    def make(arch: str):
        if arch not in made:
            made[arch] = sharp_model(arch)
        return made[arch]

    return make


class NoMove(RopeShift):
    """A mutant shifter that leaves keys and queries where they are."""

    def move(self, x, source, target):
        return x


def stream_ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def step_logits(model, ids, cache, prefill=5):
    outs = [model(input_ids=ids[:, :prefill], cache=cache, use_cache=True).logits]
    for t in range(prefill, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(outs, dim=1)


@torch.no_grad()
@pytest.mark.parametrize("arch", ROPE_ARCHITECTURES)
def test_sink_cache_equals_dense_while_it_holds_everything(sharp, arch):
    model, ids = sharp(arch), stream_ids(40)
    dense = step_logits(model, ids, DynamicCache())
    sink = step_logits(model, ids, make_sink_cache(model, 4, 36))
    torch.testing.assert_close(sink, dense, atol=1e-5, rtol=0)


def test_moving_keys_is_exact(llama):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = llama.model
    k = torch.randn(1, 2, 6, 8)
    rotary = model.model.rotary_emb

    def at(positions):
        cos, sin = rotary(k, torch.tensor([positions]))
        return apply_rotary_pos_emb(k, k, cos, sin)[1]

    start, moved = [10, 11, 12, 13, 14, 15], [3, 4, 5, 6, 7, 8]
    shifted = RopeShift(model).move(at(start), torch.tensor(start), torch.tensor(moved))
    torch.testing.assert_close(shifted, at(moved), atol=1e-6, rtol=0)


def smollm_like_rope():
    """A one-layer Llama with SmolLM2's rotary setting (head_dim 64, theta 1e5)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        vocab_size=8,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 1e5},
    )
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kept_keys_stay_exact_over_10000_steps(dtype):
    """After 10,000 single-token steps (~9,000 evictions) every kept key equals the key rotated
    directly at its index in the cache, within the rounding of one rotation in ``dtype``;
    re-rotating by -1 at every eviction (the old design) drifts far past that bound."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = smollm_like_rope()
    rotary = model.model.rotary_emb
    raw = 3 * torch.randn(10_000, 64, generator=torch.Generator().manual_seed(0))

    def at(rows, positions):  # as the model rotates keys; calling rotary also feeds the cache's tap
        x = rows.to(dtype).view(1, 1, -1, 64)
        cos, sin = rotary(x, torch.tensor([positions]))
        return apply_rotary_pos_emb(x, x, cos, sin)[1]

    layer = make_sink_cache(model, 4, 1020).layers[0]
    for step in range(len(raw)):
        key = at(raw[step : step + 1], [layer.get_seq_length()])
        layer.update(key, key)
    direct = at(raw[layer.positions], list(range(len(layer.positions))))
    one_rounding = 2 * torch.finfo(dtype).eps * direct.abs().max().item()
    assert (layer.keys_in_cache().float() - direct.float()).abs().max() <= one_rounding

    compounded = at(raw[:1], [1023])  # one key moved from the end of a full cache to index 4 by -1 steps
    minus_one = rotation(-RopeShift(model).inv_freq.double())
    for _ in range(1019):
        compounded = rotate(compounded, *minus_one)
    drift = (compounded.float() - at(raw[:1], [4]).float()).abs().max()
    assert drift > (10 * one_rounding if dtype != torch.float32 else 1e-4)


@torch.no_grad()
def test_every_step_equals_a_dense_cache_of_the_keys_at_their_index(sharp):
    """Through the sink-only steps and two rebases, each step's logits equal a dense cache that
    holds the kept keys rotated at their index in the cache, queried at the next index."""
    model, ids = sharp("llama"), stream_ids(50)
    cache = make_sink_cache(model, 2, 8)
    model(input_ids=ids[:, :5], cache=cache)
    for t in range(5, ids.shape[1]):
        dense = DynamicCache()
        for i, layer in enumerate(cache.layers):
            dense.update(layer.keys_in_cache(), layer.values, i)
        n_kept = cache.layers[0].kept_tokens()
        expected = model(input_ids=ids[:, t : t + 1], cache=dense, position_ids=torch.tensor([[n_kept]])).logits
        torch.testing.assert_close(model(input_ids=ids[:, t : t + 1], cache=cache).logits, expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_a_manual_loop_rotates_only_the_sinks_between_rebases(sharp, monkeypatch):
    """Once the cache is full a step rotates the n_sink sink keys and nothing else, except one
    rebase every ``window`` steps that moves the recent keys once; positions stay bounded."""
    model, ids, (n_sink, window) = sharp("llama"), stream_ids(120), (2, 8)
    rotated_rows = []
    monkeypatch.setattr(sink_layer, "rotate", lambda x, cos, sin: rotated_rows.append(x.shape[-2]) or rotate(x, cos, sin))
    cache = make_sink_cache(model, n_sink, window)
    per_step, positions = [], []
    for t in range(ids.shape[1]):
        positions.append(cache.get_seq_length())
        rotated_rows.clear()
        model(input_ids=ids[:, t : t + 1], cache=cache)
        per_step.append(sorted(set(rotated_rows)))  # one entry per layer, all layers alike
    full = n_sink + window - 1  # kept between steps; the step that first evicts still sees every key in place
    steady = per_step[full + 1 :]
    assert per_step[: full + 1] == [[]] * (full + 1)
    rebases = [i for i, rows in enumerate(steady) if rows == [full + 1]]
    assert all(rows in ([n_sink], [full + 1]) for rows in steady)
    assert len(rebases) >= 10 and set(b - a for a, b in zip(rebases, rebases[1:])) == {window}
    assert max(positions) < n_sink + 2 * window


@torch.no_grad()
def test_steps_write_into_one_strip_that_a_long_chunk_only_borrows(sharp, monkeypatch):
    """A decode step hands attention views of the layer's preallocated strip (no copy of the
    cache; the keys are copies only at a rebase); the strip is replaced once its slack is used
    up, and a chunk longer than it gets a larger strip that the next step gives back."""
    model, ids, (n_sink, window) = sharp("llama"), stream_ids(200), (2, 8)
    cache = make_sink_cache(model, n_sink, window)
    layer_class, strip = type(cache.layers[0]), cache.layers[0]._strip
    views = []

    def update(self, keys, values, *args, **kwargs):
        shown = layer_class_update(self, keys, values, *args, **kwargs)
        views.append(
            [x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for x, t in zip(shown, self._strip.tensors)]
        )
        return shown

    layer_class_update = layer_class.update
    monkeypatch.setattr(layer_class, "update", update)
    strips = []
    for t in range(100):
        model(input_ids=ids[:, t : t + 1], cache=cache)
        strips.append(strip.tensors[0].data_ptr())
    assert all(value for _, value in views) and sum(not key for key, _ in views) <= len(views) // window
    slack = strip.capacity - (n_sink + window)
    assert strip.tensors[0].shape[-2] == strip.capacity and slack > 0
    assert len(set(strips)) <= 100 // slack + 2
    model(input_ids=ids[:, 100:160], cache=cache)  # longer than the strip
    assert strip.tensors[0].shape[-2] > strip.capacity
    model(input_ids=ids[:, 160:161], cache=cache)
    assert strip.tensors[0].shape[-2] == strip.capacity and cache.layers[0].kept_tokens() == n_sink + window - 1
    cfg = model.config  # the memory counted is what the layers hold: the sinks and the whole strip
    row_bytes = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    assert cache_bytes(cache) == cfg.num_hidden_layers * (n_sink + strip.capacity) * row_bytes


class StreamingLLM:
    """StreamingLLM by its definition, with no sink cache: every kept token's keys and values as
    the model computed them (a dense cache's, rotated where they were computed), moved to their
    index among the kept tokens by transformers' own rotary embedding before each forward, which
    places the new tokens right after them; then the first ``n_sink`` and the last ``window - 1``
    tokens are kept. A reference that reads nothing of :mod:`sinklab.stream`."""

    def __init__(self, model, n_sink: int, window: int) -> None:
        self.model, self.n_sink, self.window = model, n_sink, window
        self.kept = None  # per layer (keys, values), each key rotated where it was computed
        self.rotated_at = torch.zeros(0, dtype=torch.long)

    def _moved(self, keys: torch.Tensor, layer: int) -> torch.Tensor:
        """Keys moved by the model's own rotary embedding and rotation function (a pure rotation:
        the cos/sin without YaRN's attention scaling, which the model applies once)."""
        rotary, modeling = self.model.model.rotary_emb, sys.modules[type(self.model).__module__]
        by = torch.arange(len(self.rotated_at)) - self.rotated_at  # to each key's index among the kept
        kind = (getattr(self.model.config, "layer_types", None) or [None] * (layer + 1))[layer]
        per_type = "layer_type" in inspect.signature(rotary.forward).parameters  # Gemma 3: a setting per layer type
        cos, sin = rotary(keys, by[None], *([kind] if per_type else []))
        scaling = getattr(rotary, f"{kind}_attention_scaling" if per_type else "attention_scaling", 1.0)
        return modeling.apply_rotary_pos_emb(keys, keys, cos / scaling, sin / scaling)[1]

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        n_kept, n_new = len(self.rotated_at), ids.shape[1]
        dense = DynamicCache()
        for i, (keys, values) in enumerate(self.kept or ()):
            dense.update(self._moved(keys, i), values, i)
        positions = torch.arange(n_kept, n_kept + n_new)
        logits = self.model(input_ids=ids, cache=dense, position_ids=positions[None]).logits
        new = [(layer.keys[..., n_kept:, :], layer.values[..., n_kept:, :]) for layer in dense.layers]
        kept = (
            new
            if self.kept is None
            else [tuple(torch.cat(pair, dim=-2) for pair in zip(old, added)) for old, added in zip(self.kept, new)]
        )
        rotated_at = torch.cat([self.rotated_at, positions])
        index = torch.arange(len(rotated_at))
        keep = torch.cat([index[: self.n_sink], index[self.n_sink :][-(self.window - 1) :]])
        self.kept = [(keys[..., keep, :], values[..., keep, :]) for keys, values in kept]
        self.rotated_at = rotated_at[keep]
        return logits


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gemma2", "gemma3", "gpt_oss"])  # sliding layers; Gemma 3: a RoPE base per layer type
def test_a_stream_and_a_chunk_longer_than_the_strip_equal_streamingllm_by_its_definition(sharp, arch):
    """Every forward of a sink cache (single tokens through rebases, then a 60-token chunk, which
    borrows a strip longer than the usual one, and the steps after it, which give it back) gives
    the logits of :class:`StreamingLLM`, a reference that reads nothing of the cache. Mutations
    caught: the borrowed strip not given the recent rows (the 60-token chunk differed), the strip
    given back without them (the step after the chunk differed), and a rebase that does not store
    the recent keys it moved (the step after 18 tokens differed; the two tests whose reference is built from
    ``keys_in_cache`` passed it, as that reads the same stale keys)."""
    model, ids, (n_sink, window) = sharp(arch), stream_ids(163), (2, 8)
    cache, reference = make_sink_cache(model, n_sink, window), StreamingLLM(model, n_sink, window)
    strip = cache.layers[0]._strip
    chunks = [ids[:, :5], *ids[:, 5:100].split(1, dim=1), ids[:, 100:160], *ids[:, 160:163].split(1, dim=1)]
    for chunk in chunks:
        got, expected = model(input_ids=chunk, cache=cache).logits, reference(chunk)
        where = f"at the forward of {chunk.shape[1]} token(s) after {cache.layers[0].tokens_seen() - chunk.shape[1]}"
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=lambda m, where=where: f"{m}\n{where}")
        if chunk.shape[1] == 60:
            assert strip.tensors[0].shape[-2] > strip.capacity  # the chunk did take the borrow path
    assert strip.tensors[0].shape[-2] == strip.capacity and cache.layers[0].positions.tolist() == [
        0,
        1,
        *range(163 - window + 1, 163),
    ]


def test_layers_updated_out_of_order_are_refused(llama):
    """Layer 0 plans each step for every layer (the positions are shared), so a forward that
    skips it would silently use the previous step's plan."""
    cache = make_sink_cache(llama.model, 2, 6)
    key = torch.randn(1, llama.model.config.num_key_value_heads, 1, 8)
    with pytest.raises(SinklabError, match="in order, from layer 0"):
        cache.update(key, key, 1)


@torch.no_grad()
def test_after_eviction_the_cache_holds_the_sinks_and_the_recent_window(llama):
    model = llama.model
    cache = make_sink_cache(model, 3, 8)
    ids = torch.randint(2, model.config.vocab_size, (1, 30))
    step_logits(model, ids, cache)
    for layer in cache.layers:
        assert layer.positions.tolist() == [0, 1, 2, *range(30 - 7, 30)]
        assert layer.keys.shape[-2] == layer.values.shape[-2] == 3 + 7
    assert cache.layers[0].kept_tokens() == 10
    # the sink keys were computed with the full early context, exactly as in a dense cache
    dense = DynamicCache()
    step_logits(model, ids, dense)
    torch.testing.assert_close(cache.layers[0].keys[..., :3, :], dense.layers[0].keys[..., :3, :], atol=1e-6, rtol=0)


@torch.no_grad()
def test_generate_runs_past_the_context_length_with_constant_memory(llama):
    from transformers import LogitsProcessor, LogitsProcessorList

    max_positions = llama.model.config.max_position_embeddings  # 128 in the tiny config
    cache = make_sink_cache(llama.model, 2, 30)
    held = []

    class RecordCacheBytes(LogitsProcessor):
        def __call__(self, input_ids, scores):
            held.append(cache_bytes(cache))
            return scores

    ids = llama.tokenizer("To be or not to be", return_tensors="pt").input_ids
    out = llama.model.generate(
        ids,
        cache=cache,
        max_new_tokens=max_positions + 72,
        min_new_tokens=max_positions + 72,
        do_sample=False,
        pad_token_id=1,
        logits_processor=LogitsProcessorList([RecordCacheBytes()]),
    )
    assert out.shape[1] - ids.shape[1] == max_positions + 72
    full = held.index(max(held))
    assert full <= 30 and set(held[full:]) == {held[-1]}  # flat from the moment the cache fills
    result = generate(llama.model, llama.tokenizer, "To be or not to be", 50, sinks=2, window=30)
    assert result["new_tokens"] == 50 and result["cache_tokens"] == 2 + 29


def in_cache_vs_absolute_gap(model) -> float:
    """Largest |logit difference| between a manual loop (positions = index in the cache) and the
    same loop given the stream positions, as ``model.generate`` passes them, well past eviction."""
    ids = stream_ids(60)
    in_cache = step_logits(model, ids, make_sink_cache(model, 2, 10))
    cache = make_sink_cache(model, 2, 10)
    outs = [model(input_ids=ids[:, :5], cache=cache, position_ids=torch.arange(5)[None]).logits]
    for t in range(5, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t : t + 1], cache=cache, position_ids=torch.tensor([[t]])).logits)
    return (torch.cat(outs, dim=1) - in_cache).abs().max().item()


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])  # GPT-NeoX does not pass positions to the cache
def test_absolute_positions_see_the_cache_positions(sharp, arch):
    assert in_cache_vs_absolute_gap(sharp(arch)) < 1e-4


@torch.no_grad()
def test_mutation_dropping_the_position_offset_fails_the_test_above(sharp, monkeypatch):
    monkeypatch.setattr(book, "_presented_positions", lambda caller, n_old, n_keys: torch.arange(n_keys))
    assert in_cache_vs_absolute_gap(sharp("llama")) > 1e-2


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_generate_matches_a_manual_loop(sharp, arch):
    """generate passes absolute positions; the cache presents its keys so that both agree."""
    model, ids = sharp(arch), stream_ids(6)
    out = model.generate(
        ids, cache=make_sink_cache(model, 2, 10), max_new_tokens=30, min_new_tokens=30, do_sample=False, pad_token_id=1
    )
    cache, seq = make_sink_cache(model, 2, 10), ids
    logits = model(input_ids=ids, cache=cache).logits
    for _ in range(30):
        logits[..., 1] = float("-inf")  # min_new_tokens bans EOS (id 1)
        nxt = logits[:, -1:].argmax(-1)
        seq = torch.cat([seq, nxt], dim=1)
        logits = model(input_ids=nxt, cache=cache).logits
    assert out.tolist() == seq.tolist()


def prompts_of(lengths, seed: int = 1) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 300, (n,), generator=generator) for n in lengths]


def left_padded(prompts) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-padded (with token 1) to the longest, and their attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.stack([F.pad(p, (width - len(p), 0), value=1) for p in prompts])
    return ids, torch.stack([F.pad(torch.ones_like(p), (width - len(p), 0)) for p in prompts])


def greedy(model, ids, n: int, **kwargs) -> torch.Tensor:
    """The n tokens ``model.generate`` adds greedily (EOS banned, as min_new_tokens does)."""
    return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=1, **kwargs)[:, ids.shape[1] :]


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])  # GPT-NeoX does not pass positions to the cache
def test_a_left_padded_batch_gives_each_row_its_tokens_alone(sharp, arch):
    """Prompts of 3, 9 and 6 tokens, left-padded, stream 40 tokens through generate and a cache of
    2 sinks + 8: each row gets the tokens of its prompt generated alone (every step evicts, the
    short rows first shed pads from their sink slots), and with a cache that holds everything,
    those of a dense cache. Mutations caught: padded rows keeping their first slots (no sink
    shift), and row 0's rotation tables used for every row, each made a row's tokens differ."""
    model, prompts = sharp(arch), prompts_of((3, 9, 6))
    ids, mask = left_padded(prompts)
    batch = greedy(model, ids, 40, attention_mask=mask, cache=make_sink_cache(model, 2, 8))
    for row, prompt in enumerate(prompts):
        assert batch[row].tolist() == greedy(model, prompt[None], 40, cache=make_sink_cache(model, 2, 8))[0].tolist()
    holds_all = greedy(model, ids, 40, attention_mask=mask, cache=make_sink_cache(model, 2, 60))
    assert holds_all.tolist() == greedy(model, ids, 40, attention_mask=mask, cache=DynamicCache()).tolist()


@torch.no_grad()
def test_a_manual_batch_loop_gives_each_row_its_tokens_alone(sharp):
    """generate's loop by hand: a left-padded batch with its growing attention mask and positions
    counting each row's tokens; and an unpadded batch with no positions, where the cache chooses
    them and rebases every 8 steps. Each row gets the tokens of its prompt decoded alone.
    Mutation caught: get_mask_sizes numbering the kept keys one column early made row 0 differ."""
    model, prompts = sharp("llama"), prompts_of((3, 9, 6))
    ids, mask = left_padded(prompts)
    positions, cache, tokens = (mask.cumsum(-1) - 1).clamp(min=0), make_sink_cache(model, 2, 8), []
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache).logits[:, -1]
    for _ in range(40):
        tokens.append(logits.argmax(-1, keepdim=True))
        mask, positions = F.pad(mask, (0, 1), value=1), positions[:, -1:] + 1
        logits = model(input_ids=tokens[-1], attention_mask=mask, position_ids=positions, cache=cache).logits[:, -1]
    batch = torch.cat(tokens, dim=1)
    for row, prompt in enumerate(prompts):
        assert batch[row].tolist() == greedy_decode(model, make_sink_cache(model, 2, 8), prompt[None], 40)[0].tolist()
    same_length = torch.stack(prompts_of((7, 7, 7), seed=2))
    batch = greedy_decode(model, make_sink_cache(model, 2, 8), same_length, 40)
    for row in range(3):
        assert (
            batch[row].tolist() == greedy_decode(model, make_sink_cache(model, 2, 8), same_length[row : row + 1], 40)[0].tolist()
        )


@torch.no_grad()
def test_each_row_of_a_left_padded_batch_reports_its_own_positions(sharp):
    """``positions`` of a left-padded batch fed as generate feeds it, row by row: after the
    prefill (9 columns, all kept by 2 sinks + 8) each row's pads count back from -1 before its
    first token at 0; once every step evicts, each row holds its own 2 sinks and its last 7
    tokens. Mutation caught: every row given row 0's pad offset (``columns - self.pads[:1, None]``
    in ``SinkBook.begin_step``; the issue's audit found no test that caught it) made row 1 (no
    pads) report positions from -6."""
    model, prompts = sharp("llama"), prompts_of((3, 9, 6))
    (ids, mask), cache = left_padded(prompts), make_sink_cache(model, 2, 8)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache)
    assert cache.layers[0].positions.tolist() == [list(range(len(p) - 9, len(p))) for p in prompts]
    for token in torch.randint(2, 300, (3, 12), generator=torch.Generator().manual_seed(3)).split(1, dim=1):
        mask, positions = F.pad(mask, (0, 1), value=1), positions[:, -1:] + 1
        model(input_ids=token, attention_mask=mask, position_ids=positions, cache=cache)
    assert cache.layers[0].positions.tolist() == [[0, 1, *range(len(p) + 12 - 7, len(p) + 12)] for p in prompts]


HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def left_on(model) -> dict:
    """What anything could leave on ``model``: every module's forward hooks and attribute names."""
    return {
        name: ({d: dict(getattr(module, d)) for d in HOOK_DICTS}, sorted(vars(module))) for name, module in model.named_modules()
    }


@torch.no_grad()
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_a_dropped_sink_cache_leaves_nothing_on_the_model():
    """Two sink caches on one model at once, one in a manual loop and one through
    ``model.generate(past_key_values=...)``: dropping the first (reference counting alone, no gc
    pass: the hooks hold nothing that leads back to the cache) takes its hooks off and leaves the
    second's, which streams on as a fresh cache on a fresh model does; dropping the second leaves
    the model as it was, no hook and no attribute. Mutations caught: the position tap also kept
    as a model attribute, as before (it stayed); no finalizer (the hooks stayed); the position tap
    holding the cache's book (the cache never died, nor its hooks); a reference cycle inside the
    cache (nothing freed before a gc pass); a drop clearing the modules' hooks, the other cache's
    included (the second cache refused its next step)."""
    model, ids = sharp_model("llama"), stream_ids(30)
    model(input_ids=ids[:, :4])
    before = left_on(model)
    assert not any(any(hooks.values()) for hooks, _ in before.values())
    manual, generated = make_sink_cache(model, 2, 8), make_sink_cache(model, 2, 8)
    step_logits(model, ids[:, :16], manual)
    first = greedy(model, ids[:, :6], 12, past_key_values=generated)
    assert left_on(model) != before
    del manual
    assert left_on(model) != before  # the second cache's hooks are still there
    second = greedy(model, torch.cat([ids[:, :6], first], dim=1), 12, past_key_values=generated)
    fresh = sharp_model("llama")
    reference = make_sink_cache(fresh, 2, 8)
    reference_first = greedy(fresh, ids[:, :6], 12, past_key_values=reference)
    expected = greedy(fresh, torch.cat([ids[:, :6], reference_first], dim=1), 12, past_key_values=reference)
    assert second.tolist() == expected.tolist()
    del generated
    assert left_on(model) == before


@torch.no_grad()
def test_sink_cache_leaves_nothing_on_the_model_when_its_block_ends():
    """``with sink_cache(...) as cache`` takes the hooks off when the block ends, though ``cache``
    is still referenced, and also when the block ends by an exception raised inside a forward
    (here the cache's own refusal of a smaller batch); a closed cache refuses further steps
    instead of reading positions no hook records any more. Afterwards the model computes what a
    fresh model computes, with a new sink cache too. Mutations caught: ``close`` marking the taps
    closed without removing the hooks (they stayed); the closed check dropped (the step read the
    stale recorded positions and failed with a misleading message); one position tap per model,
    shared through a model attribute by the caches after it (the attribute stayed)."""
    model, fresh, ids = sharp_model("llama"), sharp_model("llama"), stream_ids(30)
    model(input_ids=ids[:, :4])
    before = left_on(model)
    with sink_cache(model, 2, 8) as cache:
        first = greedy(model, ids[:, :6], 12, cache=cache)
        assert left_on(model) != before
    assert left_on(model) == before
    with pytest.raises(SinklabError, match="closed"):
        model(input_ids=first[:, -1:], cache=cache)
    with pytest.raises(SinklabError, match="holds a batch of 2"), sink_cache(model, 2, 8) as failing:
        model(input_ids=ids[:, :12].view(2, 6), cache=failing)
        model(input_ids=ids[:, :1], cache=failing)
    assert left_on(model) == before
    assert torch.equal(model(input_ids=ids).logits, fresh(input_ids=ids).logits)
    with sink_cache(model, 2, 8) as cache, sink_cache(fresh, 2, 8) as fresh_cache:
        after, on_fresh = greedy(model, ids[:, :6], 12, cache=cache), greedy(fresh, ids[:, :6], 12, cache=fresh_cache)
        assert after.tolist() == on_fresh.tolist() == first.tolist()


def test_generate_takes_its_hooks_off_when_interrupted(llama, monkeypatch):
    """``sinklab.stream.generate`` interrupted mid-generation (Ctrl-C in a notebook): the traceback
    still holds its frame and cache, yet the model keeps no hook. Mutation caught: a plain
    ``make_sink_cache`` in ``generate`` (the three hooks stayed while the traceback lived)."""
    model = llama.model

    def interrupted(ids, cache, **kwargs):
        model(input_ids=ids, cache=cache)
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "generate", interrupted)
    before = left_on(model)
    with pytest.raises(KeyboardInterrupt) as stopped:
        generate(model, llama.tokenizer, "To be or not to be", 50, sinks=2, window=30)
    assert stopped.traceback and left_on(model) == before


def conversation(model, cache, prompt, reply, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two chat turns through one cache: generate n tokens, append ``reply`` to the whole output,
    generate n more from the whole conversation (``past_key_values=``, the argument's older name,
    in the second call). The conversation before the second turn, and the second turn's tokens."""
    first = torch.cat([prompt, greedy(model, prompt, n, cache=cache)], dim=1)
    so_far = torch.cat([first, reply], dim=1)
    return so_far, greedy(model, so_far, n, past_key_values=cache)


@torch.no_grad()
def fed_like_generate(model, cache, so_far, prompt_length: int, n: int) -> torch.Tensor:
    """What generate feeds across those two turns, by hand into ``cache``: the prompt, the first
    turn's tokens one at a time but its last, then that last token and the reply as one chunk;
    then n greedy tokens."""
    steps = [
        so_far[:, :prompt_length],
        *so_far[:, prompt_length : prompt_length + n - 1].split(1, dim=1),
        so_far[:, prompt_length + n - 1 :],
    ]
    fed, tokens, logits = 0, [], None  # steps start with the prompt: logits exist before the first greedy step
    for chunk in steps + [None] * n:
        if chunk is None:
            logits[:, 1] = float("-inf")  # min_new_tokens bans EOS (id 1)
            chunk = logits.argmax(-1, keepdim=True)
            tokens.append(chunk)
        logits = model(input_ids=chunk, cache=cache, position_ids=torch.arange(fed, fed + chunk.shape[1])[None]).logits[:, -1]
        fed += chunk.shape[1]
    return torch.cat(tokens, dim=1)


@torch.no_grad()
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_generate_continues_a_conversation_with_the_same_cache(sharp):
    """The second turn, from the whole conversation, feeds the cache only the tokens it has not
    seen (get_seq_length counts the tokens fed), long after evictions: its tokens equal a fresh
    sink cache fed the same tokens the same way; while the cache holds everything, a dense cache's.
    Mutation caught: get_seq_length answering the cache's own frame (as in a manual loop) made
    generate feed the conversation again, and the second turn differ."""
    model, (prompt, reply) = sharp("llama"), (p[None] for p in prompts_of((7, 5)))
    so_far, second = conversation(model, make_sink_cache(model, 2, 8), prompt, reply, 30)
    assert second.tolist() == fed_like_generate(model, make_sink_cache(model, 2, 8), so_far, 7, 30).tolist()
    so_far, second = conversation(model, make_sink_cache(model, 2, 80), prompt, reply, 30)
    dense_so_far, dense_second = conversation(model, DynamicCache(), prompt, reply, 30)
    assert (so_far.tolist(), second.tolist()) == (dense_so_far.tolist(), dense_second.tolist())


class DeviceOnly(torch.Tensor):
    """A tensor whose values never reach the host: any read raises (what a decode step must not do
    with an accelerator's tensors: .cpu(), .item(), .tolist(), int(), bool(), torch.equal, ...)."""

    READS = {
        torch.Tensor.cpu,
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.numpy,
        torch.Tensor.to,
        torch.Tensor.__int__,
        torch.Tensor.__index__,
        torch.Tensor.__bool__,
        torch.Tensor.__float__,
        torch.Tensor.nonzero,
        torch.nonzero,
        torch.equal,
    }

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in cls.READS:
            raise AssertionError(f"a decode step read a device tensor on the host ({func.__name__})")
        return super().__torch_function__(func, types, args, kwargs or {})


@torch.no_grad()
def test_decode_steps_read_no_device_tensor(sharp, monkeypatch):
    """With every tensor counted as off the host, the positions and attention masks the taps record
    at single-token steps are DeviceOnly: a manual loop (the cache's positions, rebases every 8
    steps), a loop passing positions, and generate on a left-padded batch decode as before without
    reading them (a prefill may). Mutation caught: reading the positions (.cpu()) at every step
    raised at the first decode step."""
    model, prompts = sharp("llama"), prompts_of((3, 9, 6))
    ids, mask = left_padded(prompts)
    runs = {
        "manual loop": lambda: greedy_decode(model, make_sink_cache(model, 2, 8), ids[1:2], 40),
        "positions passed": lambda: greedy_decode(model, make_sink_cache(model, 2, 8), ids[1:2], 40, pass_positions=True),
        "generate, padded": lambda: greedy(model, ids, 40, attention_mask=mask, cache=make_sink_cache(model, 2, 8)),
    }
    expected = {name: run().tolist() for name, run in runs.items()}
    record_positions, record_caller = rope._PositionTap.__call__, rope._CallerTap.__call__

    def positions_on_device(tap, module, args, kwargs):
        record_positions(tap, module, args, kwargs)
        if tap.positions.shape[-1] == 1:
            tap.positions = tap.positions.as_subclass(DeviceOnly)

    def mask_on_device(tap, module, args, kwargs):
        record_caller(tap, module, args, kwargs)
        if tap.attention_mask is not None and kwargs["input_ids"].shape[-1] == 1:
            tap.attention_mask = tap.attention_mask.as_subclass(DeviceOnly)

    monkeypatch.setattr(rope._PositionTap, "__call__", positions_on_device)
    monkeypatch.setattr(rope._CallerTap, "__call__", mask_on_device)
    monkeypatch.setattr(book, "_on_host", lambda tensor: False)
    assert {name: run().tolist() for name, run in runs.items()} == expected


def test_each_device_gets_the_rotation_tables_on_that_device(sharp):
    """A model split across devices: layer 0's keys on the CPU, layer 1's on the meta device.
    Every step's rotations reach each layer on its own device, built once per device. Mutation
    caught: handing every layer the CPU tables (layer 0's) failed at the first rotation
    ("Tensor on device cpu is not on the expected device meta")."""
    model = sharp("llama")
    rotary, cache = model.model.rotary_emb, make_sink_cache(model, 2, 6)
    heads, dim = model.config.num_key_value_heads, model.config.hidden_size // model.config.num_attention_heads
    rotations = 0
    for _ in range(20):
        key = torch.randn(1, heads, 1, dim)
        rotary(key, torch.tensor([[cache.get_seq_length()]]))  # the model's rotary call records the step's positions
        on_cpu, _ = cache.update(key, key, 0)
        on_meta, _ = cache.update(key.to("meta"), key.to("meta"), 1)
        assert (on_cpu.device.type, on_meta.device.type) == ("cpu", "meta")
        step = cache.layers[0].book.step
        for tables in (step.sink_rotation, step.rotation):
            if tables is not None:
                rotations += 1
                built = {device.type: cos.device.type for (_, device), (cos, _) in tables.tables.items()}
                assert built == {"cpu": "cpu", "meta": "meta"} and len(tables.tables) == 2  # one set of frequencies
    assert rotations >= 12


@torch.no_grad()
def test_a_chunk_fed_after_the_cache_fills_attends_like_a_prefill(sharp):
    """A chunk of n tokens sees the kept cache plus its own earlier tokens (n_sink + window - 1 + n
    keys), exactly as a dense cache holding the kept keys would, and the cache is trimmed after."""
    model, ids = sharp("llama"), stream_ids(40)
    cache = make_sink_cache(model, 2, 10)
    step_logits(model, ids[:, :30], cache)
    dense = DynamicCache()
    for i, layer in enumerate(cache.layers):
        dense.update(layer.keys_in_cache(), layer.values, i)
    chunk = ids[:, 30:35]
    torch.testing.assert_close(
        model(input_ids=chunk, cache=cache).logits, model(input_ids=chunk, cache=dense).logits, atol=1e-5, rtol=0
    )
    assert dense.get_seq_length() == 2 + 9 + 5 and cache.layers[0].kept_tokens() == 2 + 9


def test_bad_sizes_and_models_are_clear_errors(llama, tiny_model_dir):
    with pytest.raises(SinklabError, match="larger than the number of sink tokens"):
        make_sink_cache(llama.model, 8, 4)
    with pytest.raises(SinklabError, match=">= 0"):
        make_sink_cache(llama.model, -1, 4)
    with pytest.raises(SinklabError, match="at least 1"):
        make_sink_cache(llama.model, 0, 0)
    gpt2 = load_model(str(tiny_model_dir("gpt2")))
    with pytest.raises(SinklabError, match="rotary"):
        make_sink_cache(gpt2.model, 4, 16)
    with pytest.raises(SinklabError, match="unknown policy"):
        StreamConfig(policies=("dense", "lru"))
    ids = torch.randint(2, 300, (2, 6))
    cache = make_sink_cache(llama.model, 2, 10)
    llama.model(input_ids=ids, cache=cache)
    with pytest.raises(SinklabError, match="holds a batch of 2; this forward feeds 1"):
        llama.model(input_ids=ids[:1, :1], cache=cache)
    right_padded = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
    with pytest.raises(SinklabError, match="left padding only"):
        llama.model(
            input_ids=ids,
            attention_mask=right_padded,
            position_ids=torch.arange(6)[None],
            cache=make_sink_cache(llama.model, 2, 10),
        )
    with pytest.raises(SinklabError, match="needs position_ids that count each row's real tokens"):
        llama.model(input_ids=ids, attention_mask=right_padded.flip(1), cache=make_sink_cache(llama.model, 2, 10))
    with pytest.raises(SinklabError, match="the attention mask has 4 columns; the sink cache needs one per token fed so far .6."):
        llama.model(input_ids=ids, attention_mask=right_padded[:, -4:], cache=make_sink_cache(llama.model, 2, 10))
    with pytest.raises(SinklabError, match="consecutive positions"):
        llama.model(input_ids=ids[:1], cache=make_sink_cache(llama.model, 2, 10), position_ids=torch.tensor([[0, 1, 2, 7, 8, 9]]))
    per_layer_type = AutoModelForCausalLM.from_config(tiny_config("llama", 300))
    per_layer_type.config.rope_parameters = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        "full_attention": {"rope_type": "dynamic", "rope_theta": 1e6, "factor": 2.0},
    }
    with pytest.raises(SinklabError, match="RoPE type 'dynamic' changes its frequencies with the sequence length"):
        make_sink_cache(per_layer_type, 2, 10)


@torch.no_grad()
def test_native_models_stream_the_same_way():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(
            d_model=32,
            n_layers=2,
            n_heads=4,
            vocab_size=50,
            mlp=True,
            norm=True,
            rope=True,
            residual=True,
            scale_scores=True,
            max_seq_len=64,
        )
    )
    ids = torch.randint(0, 50, (1, 24))

    def run(cache):
        outs = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 24)]
        return torch.cat(outs, dim=1)

    torch.testing.assert_close(run(NativeSinkCache(2, 30)), run(KVCache()), atol=1e-6, rtol=0)
    small = NativeSinkCache(2, 6)
    run(small)
    assert len(small) == 2 + 5


def test_a_model_with_learned_positions_refuses_a_cache_that_evicts():
    """Its keys carry their absolute positions, so the sink cache's count would be wrong after an
    eviction; the dense cache is fine."""
    model = Transformer(ModelConfig(d_model=16, n_layers=1, n_heads=2, vocab_size=50, learned_positions=True, max_seq_len=32))
    ids = torch.randint(0, 50, (1, 4))
    model(ids, cache=KVCache())
    with pytest.raises(SinklabError, match="learned absolute positions cannot stream through a cache that evicts"):
        model(ids, cache=NativeSinkCache(2, 6))


def one_pass_vs_real_cache(model, policy, sinks, window) -> float:
    ids = stream_ids(70)[0]
    one_pass = policy_nll(model, ids, policy, sinks, window)
    walk = real_cache_walk(model, ids, policy, sinks, window)
    first, reference = walk["first"], walk["nll"]
    assert one_pass.shape == (69,) and first + len(reference) == 70
    return (one_pass[first - 1 :] - reference).abs().max().item()


@pytest.mark.parametrize("policy, sinks, window", [("sink", 2, 8), ("sink", 1, 5), ("window", 2, 8), ("dense", 2, 8)])
def test_one_pass_scores_equal_a_token_by_token_cache(sharp, policy, sinks, window):
    assert one_pass_vs_real_cache(sharp("llama"), policy, sinks, window) < 1e-4


def test_mutation_skipping_the_sink_query_re_rotation_fails_the_test_above(sharp, monkeypatch):
    monkeypatch.setattr(benchmark, "RopeShift", NoMove)  # the kernel's shifter only; the cache keeps its own
    assert one_pass_vs_real_cache(sharp("llama"), "sink", 2, 8) > 1e-1


def test_sinks_change_the_scores_once_tokens_are_evicted(llama):
    ids = torch.randint(2, llama.model.config.vocab_size, (40,))
    dense, sink = (policy_nll(llama.model, ids, p, 2, 8) for p in ("dense", "sink"))
    torch.testing.assert_close(sink[:9], dense[:9], atol=1e-4, rtol=0)  # identical before any eviction
    assert (sink[12:] - dense[12:]).abs().max() > 1e-3


def test_stream_cli_contract(stream_run):
    s = json.loads((stream_run / "summary.json").read_text())
    assert {"model", "tokens", "sinks", "window", "policies"} <= set(s)
    assert set(s["policies"]) == {"dense", "window", "sink", "recompute"}
    for p in s["policies"].values():
        assert {"ppl", "ppl_by_chunk", "tokens_per_s", "ms_per_token_by_chunk", "peak_cache_bytes"} <= set(p)
        assert all({"start", "end", "ppl"} <= set(c) for c in p["ppl_by_chunk"])
    assert set(s["ablation"]) == {"0", "1"}
    check = s["one_pass_check"]  # the whole stream after the prefill, chunk by chunk
    assert check["policy"] == "sink" and check["positions"] == [15, 80] and check["passed"]
    assert check["max_abs_nll_difference"] < check["tolerance"] == 1e-3
    assert [c["start"] for c in check["by_chunk"]] == [0, 40]
    assert len(s["policies"]["sink"]["ms_per_token_by_chunk"]) == 2  # timed along the same walk
    files = json.loads((stream_run / "run.json").read_text())["files"]
    assert "nll_by_position.png" in files and all((stream_run / f).exists() for f in files)


def test_the_terminal_table_and_the_frame_name_the_ablation_alike(stream_run):
    """One label for an ablation's run in every table (the terminal's said "sink x4", the frame's
    "sink n=4"). Mutation tried: the terminal's old label: the sets of policies differ."""
    import sinklab
    from sinklab.stream.report import policy_rows

    result = sinklab.load_result(stream_run)
    assert {row["policy"] for row in policy_rows(result.summary)} == set(result.frame().policy) >= {"sink n=0", "sink n=1"}


def test_a_failed_one_pass_check_fails_the_run_and_keeps_its_results(sharp, tokenizer, tmp_path, monkeypatch, capsys):
    """Exit status 3 (a failed numerical check), not 2 (a user error), and the run is not taken
    as finished. Mutation tried: making NumericalCheckFailed a SinklabError (status 2)."""
    sharp("llama").save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "text.txt").write_text("Now is the winter of our discontent. " * 60)
    monkeypatch.setattr(benchmark, "RopeShift", NoMove)  # a kernel that forgets the sink-query re-rotation
    code = cli.main(
        [
            "stream",
            str(tmp_path / "model"),
            "--corpus",
            str(tmp_path / "text.txt"),
            "--tokens",
            "60",
            "--sinks",
            "2",
            "--window",
            "8",
            "--policies",
            "sink",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 3
    assert "numerical check failed: the one-pass sink scores differ from a real sink cache" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["one_pass_check"]["passed"] is False
    assert "differ from a real sink cache" in json.loads((tmp_path / "run" / "run.json").read_text())["numerical_check_failed"]


def test_generate_cli(tiny_model_dir, capsys):
    assert (
        cli.main(["generate", str(tiny_model_dir("llama")), "--prompt", "To be", "--max-new-tokens", "20", "--window", "8"]) == 0
    )
    assert "the cache holds 11 tokens" in capsys.readouterr().out


@torch.no_grad()
def test_recompute_scores_each_token_from_a_fresh_window(sharp):
    model, ids = sharp("llama"), stream_ids(60)[0]
    positions, nll, _ = walks.recompute_nll(model, ids, context=20, every=7)
    assert positions.tolist() == list(range(20, 60, 7))
    dense = policy_nll(model, ids, "dense", 2, 8)
    assert nll[0].item() == pytest.approx(dense[19].item(), abs=1e-5)  # the first window is the stream's start
    fresh = policy_nll(model, ids[27 - 20 : 28], "dense", 2, 8)[-1]
    assert nll[1].item() == pytest.approx(fresh.item(), abs=1e-5)
