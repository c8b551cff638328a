"""A press applied while decoding (sinklab.kvcache.DecodingPress): every ``every`` tokens the cache
is brought back to its budget, sinks kept, positions kept; StreamingLLM's rolling window is the
sink cache's."""

from __future__ import annotations

import pytest
import torch
import transformers
from conftest import tiny_config

import sinklab
from sinklab import kvcache as P
from sinklab.core.errors import SinklabError
from sinklab.stream import make_sink_cache

PROMPT, FED = 24, 40


def tiny(attention: str = "sdpa"):
    torch.manual_seed(0)
    config = tiny_config("llama", 300)
    config._attn_implementation = attention
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def ids(length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 300, (1, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def decoded(model, press, chunk: int, prompt: int = PROMPT):
    """The logits of the FED tokens after the prompt, fed ``chunk`` at a time under ``press``, and
    the held positions of the first layer after each forward."""
    tokens, logits, held = ids(prompt + FED), [], []
    with sinklab.applied(model, press) as state:
        cache = model(tokens[:, :prompt], use_cache=True).cache
        for start in range(prompt, prompt + FED, chunk):
            logits.append(model(tokens[:, start : start + chunk], cache=cache).logits)
            layer = cache.layers[0]
            held.append(layer.held_positions()[0, 0].tolist() if hasattr(layer, "held_positions") else None)
    return torch.cat(logits, 1), held, state


def test_streaming_llm_while_decoding_keeps_what_the_sink_cache_keeps():
    """Token by token from an empty cache, StreamingLLM with 2 sinks brought back to 9 keys every
    step holds, after every step, exactly the tokens sinklab's sink cache with 2 sinks and a window
    of 8 holds (each query sees the 9 kept keys and itself). Mutation: compressing once more than
    ``every`` tokens have come (``<=`` for ``<``) holds one token too many every other step."""
    model, tokens = tiny(), ids(30)
    sink, kept = make_sink_cache(model, 2, 8), []
    with torch.no_grad():
        for t in range(30):
            model(tokens[:, t : t + 1], cache=sink)
            kept.append(list(sink.layers[0].positions))
    cache = transformers.DynamicCache()
    with torch.no_grad(), sinklab.applied(model, P.DecodingPress(P.StreamingLLM(keep_sinks=2), budget=9, every=1)):
        for t in range(30):
            model(tokens[:, t : t + 1], cache=cache)
            layer = cache.layers[0]
            held = layer.held_positions()[0, 0].tolist() if hasattr(layer, "held_positions") else list(range(t + 1))
            assert held == kept[t], t
    assert held == [0, 1, *range(23, 30)] and cache.get_seq_length() == 30


@pytest.mark.parametrize(
    "press", [P.SnapKV(keep_sinks=2, window_size=4), P.H2O(keep_sinks=1), P.Knorm(keep_sinks=2)], ids=["snapkv", "h2o", "knorm"]
)
def test_every_so_many_tokens_the_cache_is_back_at_its_budget_however_the_tokens_come(press):
    """Every 8 tokens each layer is brought back to 16 keys with its sinks kept (the prompt's 24
    stay whole until then); token by token and 8 at a time keep the same positions and give the
    same logits (the press reads the attention of the queries since the last compression, which
    is the same either way). Mutation: the tally of an interval not summed over its forwards (only
    the last step's attention) keeps other keys token by token than in chunks."""
    model = tiny()
    decoding = P.DecodingPress(press, budget=16, every=8)
    one, held_one, state = decoded(model, decoding, chunk=1)
    eight, held_eight, _ = decoded(model, decoding, chunk=8)
    assert held_one[7::8] == held_eight
    assert torch.allclose(one, eight, atol=1e-4)
    for positions in held_eight:
        assert len(positions) == 16 and positions[: press.keep_sinks] == list(range(press.keep_sinks))
    assert state.cache.last.length == PROMPT + FED and set(state.cache.last.kept.values()) == {16}


def test_the_prompt_stays_whole_and_nothing_is_pressed_under_the_budget():
    """A prompt longer than the budget stays whole until ``every`` tokens have come; a cache under
    the budget is never rewritten; a fractional budget is a fraction of the prompt."""
    model = tiny()
    _, held, state = decoded(model, P.DecodingPress(P.Knorm(keep_sinks=1), budget=100, every=8), chunk=4)
    assert held == [None] * (FED // 4) and state.cache.last is None
    _, held, _ = decoded(model, P.DecodingPress(P.Knorm(keep_sinks=1), budget=0.5, every=8), chunk=4)
    assert held[0] is None and [len(h) for h in held[1::2]] == [12] * (FED // 8)


def test_detected_sinks_come_from_the_prompt_and_are_kept_at_every_compression():
    model = tiny()
    _, held, state = decoded(model, P.DecodingPress(P.SnapKV(keep_sinks="detected", window_size=4), budget=16, every=8), chunk=8)
    sinks = state.cache.decoding.sinks
    assert state.cache.last.sinks == sinks and all(set(sinks) <= set(h) for h in held)


def test_bad_decoding_settings_are_one_line_and_the_block_leaves_the_model_as_it_was():
    model = tiny()
    for settings, needle in [
        (dict(press=P.SnapKV(0.5)), "give the press no ratio"),
        (dict(press=P.Knorm(keep_sinks=4), budget=4), "cannot hold the 4 sinks"),
        (dict(press=P.Knorm(), budget=1.5), "budget is a"),
        (dict(press=P.Knorm(), every=0), "every must be"),
        (dict(press="snapkv"), "DecodingPress needs a press"),
    ]:
        with pytest.raises(SinklabError, match=needle):
            P.DecodingPress(**settings)
    decoding = P.DecodingPress(P.SnapKV(keep_sinks=1, window_size=4), budget=16, every=8)
    with pytest.raises(SinklabError, match="a DecodingPress works alone"):
        with sinklab.applied(model, decoding, P.KIVI(group_size=8)):
            pass
    with torch.no_grad(), sinklab.applied(model, decoding):  # left in the middle of an interval
        cache = model(ids(PROMPT), use_cache=True).cache
        model(ids(3, 2), cache=cache)
    assert model.config._attn_implementation == "sdpa" and not model._forward_hooks and not model._forward_pre_hooks


def test_generate_runs_under_a_decoding_press():
    model = tiny()
    with torch.no_grad(), sinklab.applied(model, P.DecodingPress(P.TOVA(keep_sinks=1), budget=16, every=4)) as state:
        out = model.generate(ids(PROMPT), max_new_tokens=12, do_sample=False)
    assert out.shape[-1] == PROMPT + 12 and set(state.cache.last.kept.values()) == {16}


# --------------------------------------------------------------------------- sinklab compress --during decode

DECODE_FLAGS = ["--during", "decode", "--budget", "96", "--every", "16", "--decode-tokens", "64", "--context", "320",
                "--keep-sinks", "0,1", "--keys", "1", "--outside-corpus", "none", "--quiet"]  # fmt: skip


def test_compress_while_decoding_from_the_command_line(tiny_model_dir, tmp_path, capsys):
    """``sinklab compress --during decode``: each press with each keep-sinks setting judged by the
    perplexity of the text's next tokens fed through the cache it holds to its budget, and by the
    passkey after 1,024 filler tokens; the full cache's cell is the plain model's perplexity of the
    same tokens (fed 16 at a time through a growing cache: equal to one forward, to rounding)."""
    import json

    import sinklab
    from sinklab import cli

    folder = tiny_model_dir("llama", positions=2048)
    out = tmp_path / "run"
    assert cli.main(["compress", str(folder), "--press", "snapkv", *DECODE_FLAGS, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["during"] == "decode" and summary["decoding"] == {
        "budget": 96,
        "every": 16,
        "tokens": 64,
        "passkey_filler": 1024,
    }
    assert [(c["policy"], c["ratio"], c["keep_sinks"]) for c in summary["cells"]] == [("snapkv", None, 0), ("snapkv", None, 1)]
    for cell in summary["cells"]:
        assert cell["kept_fraction"] < 0.3 and cell["bytes_ratio"] < 0.3  # 96 keys of 320 + 64 tokens and more
    assert [e["keep_sinks"] for e in summary["sink_effect"]] == [1]
    assert "while decoding" in capsys.readouterr().out
    lm = sinklab.load_model(str(folder))
    window = sinklab.compress.tasks.text_window(lm.tokenizer, "shakespeare", 320, "auto", 64)
    with torch.no_grad():
        logits = lm.model(window.ids[:, :-1]).logits[0, 320:]
    nll = torch.nn.functional.cross_entropy(logits, window.ids[0, 321:]).item()
    assert summary["dense"]["320"]["ppl"]["shakespeare"] == pytest.approx(float(torch.tensor(nll).exp()), rel=1e-4)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--quant", "kivi"], "--during decode presses the cache while decoding: give presses, not --quant"),
        (["--ratio", "0.5"], "--during decode brings the cache to --budget: give no --ratio"),
        (["--budget", "1.5"], "budget is a"),
        (["--every", "0"], "every must be a number of tokens >= 1"),
        (["--accuracy", "x"], "--accuracy judges a cache compressed after its prefill"),
    ],
)
def test_bad_decoding_flags_are_one_line_before_the_run(flags, needle, tiny_model_dir, tmp_path, capsys):
    from conftest import one_line_error

    from sinklab import cli

    out = tmp_path / "run"
    argv = ["compress", str(tiny_model_dir("llama", positions=2048)), "--press", "knorm", *DECODE_FLAGS, *flags]
    assert cli.main([*argv, "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--press", "snapkv", "--budget", "10"], "--press snapkv --keep-sinks 4: --budget 10 cannot hold its 4 sinks, its 64"),
        (["--press", "knorm,snapkv", "--budget", "10"], "--press snapkv --keep-sinks 4: --budget 10 cannot hold"),
        (["--press", "snapkv", "--budget", "0.1"], "--budget 0.1 (25 keys of a 256-token prompt) cannot hold its 4 sinks"),
        (["--press", "streaming_llm", "--budget", "3"], "--press streaming_llm --keep-sinks 4: --budget 3 cannot hold its 4"),
    ],
)
def test_a_budget_that_cannot_hold_a_press_is_refused_before_the_run_naming_that_press(
    flags, needle, tiny_model_dir, tmp_path, capsys
):
    """The user's command: SnapKV's 64-key window in a budget of 10 (or 0.1 of a 256-token
    context: 25 keys) failed inside its job after the full cache's had run ("1 of 2 jobs failed ...
    run the command again", on every retry, run.json left "running"), and StreamingLLM's 4 sinks in 3
    keys were refused as "the 0-key window of knorm". Now every press is checked up front, the one at
    fault named, with the budget that would hold it, and --out is never made. Mutation: the old check
    (knorm's alone) passes the SnapKV cases and names knorm in the StreamingLLM one."""
    from conftest import one_line_error

    from sinklab import cli

    out = tmp_path / "run"
    argv = ["compress", str(tiny_model_dir("llama", positions=2048)), "--during", "decode", "--every", "32"]
    argv += ["--keep-sinks", "4", "--context", "256", "--decode-tokens", "64", "--task", "ppl", "--quiet", *flags]
    assert cli.main([*argv, "--out", str(out)]) == 2
    line = one_line_error(capsys, needle, "give --budget")
    assert "knorm" not in line and not out.exists()


def test_a_fractional_budget_is_checked_at_the_passkey_prompts_length_too(tiny_model_dir, tmp_path, capsys):
    """A fraction is a number of keys only for a prompt: 5/320 of a 320-token context is the 5
    keys StreamingLLM's 4 sinks need, but the passkey prompts are shorter (whole filler sentences:
    296 tokens with the test tokenizer), where it is 4. The preflight builds them (the tokenizer only) and refuses the
    run before --out is made, not a job after the full cache's. Mutation: the preflight's check
    removed lets the run claim --out (the config passes: its check is at the context's length)."""
    from conftest import one_line_error

    import sinklab
    from sinklab import cli
    from sinklab.compress.tasks import passkey_prompts

    folder = tiny_model_dir("llama", positions=2048)
    tokenizer = sinklab.load_model(str(folder)).tokenizer
    shortest = min(p.context.shape[-1] for p in passkey_prompts(tokenizer, 320, 1, 0, "auto"))
    assert shortest < 320 and int(shortest * 5 / 320) == 4
    out = tmp_path / "run"
    argv = ["compress", str(folder), "--press", "streaming_llm", "--during", "decode", "--budget", str(5 / 320)]
    argv += ["--every", "32", "--keep-sinks", "4", "--context", "320", "--decode-tokens", "64", "--keys", "1", "--quiet"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    one_line_error(capsys, f"(4 keys of a {shortest}-token prompt) cannot hold its 4 sinks", "give --budget 5 or more")
    assert not out.exists()


def test_an_integer_budget_from_a_notebook_is_a_number_of_tokens(tiny_model_dir):
    """``compress_model(during="decode", budget=64)`` was refused ("got 64.0": the keyword was
    made a float because the setting was typed float, and a float budget is a fraction). Now it is
    64 keys: on a 128-token context, the same cells as half the context (0.5), recorded as given."""
    import sinklab

    lm = sinklab.load_model(str(tiny_model_dir("llama", positions=2048)))
    settings = dict(during="decode", every=16, decode_tokens=32, contexts=(128,), tasks=("ppl",), outside=None)
    tokens = sinklab.compress_model(lm, presses=("knorm",), keep_sinks=(1,), budget=64, **settings)
    half = sinklab.compress_model(lm, presses=("knorm",), keep_sinks=(1,), budget=0.5, **settings)
    assert tokens.summary["decoding"]["budget"] == 64 and isinstance(tokens.summary["decoding"]["budget"], int)
    assert tokens.summary["cells"][0]["kept_fraction"] == pytest.approx(64 / 160)  # 64 of the 128 + 32 tokens seen
    for key in ("ppl", "kept_fraction", "bytes_ratio"):
        assert tokens.summary["cells"][0][key] == half.summary["cells"][0][key]


# --------------------------------------------------------------------------- per-head budgets (AdaKV)


@torch.no_grad()
def test_adakv_gives_heads_their_own_budgets_and_frees_the_bytes():
    """AdaKV over SnapKV at ratio 0.5: each layer's heads keep different numbers of keys (at least
    alpha of the uniform budget each, the sinks and the window in every head), their total the
    uniform press's, and so are the cache's bytes (kvpress hides evicted keys and frees none); the
    continuation attends exactly as the dense model with each head's dropped keys hidden, and
    generate runs on. Mutation: the padding left unmasked (every head attending to its zero slots)
    moves the logits off the reference."""
    from sinklab.core.hooks import HookSet
    from sinklab.models.hf import instrument

    model, context, cont = tiny(), ids(40), ids(6, 2)
    uniform, ada = P.SnapKV(ratio=0.5, keep_sinks=2, window_size=4), P.AdaKV(P.SnapKV(ratio=0.5, keep_sinks=2, window_size=4))
    with sinklab.applied(model, uniform) as plain:
        model(context, use_cache=True)
    with sinklab.applied(model, ada) as state:
        cache = model(context, use_cache=True).cache
        logits = model(cont, cache=cache).logits
    counts = {layer: (p >= 0).sum(-1)[0].tolist() for layer, p in state.cache.last.positions.items()}
    heads = model.config.num_key_value_heads
    assert any(len(set(c)) > 1 for c in counts.values()) and all(sum(c) == heads * 20 for c in counts.values())
    assert all(min(c) >= 4 for c in counts.values())  # alpha 0.2 of 20, or the sinks and the window
    for positions in state.cache.last.positions.values():
        for head in positions[0]:
            assert {0, 1, 36, 37, 38, 39} <= set(head.tolist())
    assert state.cache.last.bytes_after == plain.cache.last.bytes_after < 0.55 * state.cache.last.bytes_before
    assert set(state.cache.last.kept.values()) == {20}  # the heads' mean; padding is not kept

    def hide_dropped(mask, point):
        kept = state.cache.last.positions.get(point.layer)
        visible = torch.zeros(1, kept.shape[1], 40, dtype=torch.bool)
        for h, head in enumerate(kept[0]):
            visible[0, h, head[head >= 0]] = True
        groups = model.config.num_attention_heads // kept.shape[1]
        mask = mask.expand(1, kept.shape[1] * groups, *mask.shape[-2:]).clone()
        mask[:, :, 40 - point.q_start :, :40] &= visible.repeat_interleave(groups, 1)[:, :, None, :]
        return mask

    hooks = HookSet()
    with hooks.attached([("blocks.*.attn.hook_mask", hide_dropped)]), instrument(model, hooks, query_chunk=None):
        expected = model(torch.cat([context, cont], 1)).logits[:, 40:]
    assert torch.allclose(logits, expected, atol=1e-5)
    with sinklab.applied(model, ada):
        assert model.generate(context, max_new_tokens=5, do_sample=False).shape[-1] == 45
    with pytest.raises(SinklabError, match="AdaKV wraps a press"):
        P.AdaKV(P.KIVI())


def test_compress_while_decoding_from_a_notebook(tiny_model_dir):
    """``sinklab.compress_model(..., during="decode")`` is the command's run (perplexity only here)."""
    import sinklab

    lm = sinklab.load_model(str(tiny_model_dir("llama", positions=2048)))
    settings = dict(during="decode", budget=0.25, every=16, decode_tokens=32, contexts=(320,), tasks=("ppl",), outside=None)
    result = sinklab.compress_model(lm, presses=("streaming_llm",), keep_sinks=(0, 4), **settings)
    frame = result.frame()
    assert frame.policy.tolist() == ["streaming_llm"] * 2 and frame.keep_sinks.tolist() == [0, 4]
    assert frame.ratio.isna().all() and (frame.kept_fraction < 0.3).all()  # 80 keys (a quarter of 320) of 352 seen
    assert result.summary["decoding"]["budget"] == 0.25 and len(result.frame("sink_effect")) == 1


# --------------------------------------------------------------------------- the review's cases


@torch.no_grad()
def test_a_decoding_press_governs_its_own_cache_and_starts_afresh_at_each_prefill():
    """Tokens fed through another cache inside the block (a branch) neither count toward ``every``
    nor reach its tally, and a second prefill in the same block starts a new interval: two
    generations keep what a fresh block keeps. Mutations: counting every forward compresses the
    cache early; not closing the interval at the prefill keeps other keys in the second generation."""
    model, prompt = tiny(), ids(PROMPT)
    decoding = P.DecodingPress(P.H2O(keep_sinks=1), budget=16, every=8)
    with sinklab.applied(model, decoding) as state:
        cache = model(prompt, use_cache=True).cache
        model(ids(5, 3), cache=P.branch(cache))
        model(ids(3, 4), cache=cache)
        assert state.cache.last is None and cache.layers[0].keys.shape[-2] == PROMPT + 3
    kept = []
    with sinklab.applied(model, decoding) as state:
        for _ in range(2):
            model.generate(prompt, max_new_tokens=20, do_sample=False)
            kept.append(state.cache.last.positions)
    with sinklab.applied(model, decoding) as fresh:
        model.generate(prompt, max_new_tokens=20, do_sample=False)
    for positions in kept:
        assert all(torch.equal(positions[i], fresh.cache.last.positions[i]) for i in positions)


@torch.no_grad()
def test_chunks_that_pass_the_every_th_token_carry_their_excess():
    """Chunks of 5 with ``every`` 8: 40 tokens give 5 compressions, as token by token. Mutation:
    resetting the count to 0 after a compression gives 4."""
    model, tokens = tiny(), ids(PROMPT + 40)
    with sinklab.applied(model, P.DecodingPress(P.Knorm(keep_sinks=1), budget=16, every=8)) as state:
        cache = model(tokens[:, :PROMPT], use_cache=True).cache
        pressed = 0
        for start in range(PROMPT, PROMPT + 40, 5):
            model(tokens[:, start : start + 5], cache=cache)
            pressed += state.cache.last is not None and state.cache.last.length == start + 5
    assert pressed == 5


def test_detected_sinks_past_the_first_tokens_are_held_or_refused_in_one_line(monkeypatch):
    """Detected sinks that lead the prompt are kept at every compression; one further on sits at
    different places among the heads' kept keys after a press, which is refused in one line (the
    store holds one set of slots). Mutations: the detected sinks replaced by none fails the first;
    dropping the same-place check lets KIVI protect the wrong keys."""
    from sinklab.kvcache import rewriting

    model = tiny()
    monkeypatch.setattr(rewriting, "detected_sinks", lambda received: [0, 1])
    _, held, state = decoded(model, P.DecodingPress(P.Knorm(keep_sinks="detected"), budget=16, every=8), chunk=8)
    assert state.cache.decoding.sinks == [0, 1] and state.cache.last.sinks == [0, 1] and all(h[:2] == [0, 1] for h in held)
    monkeypatch.setattr(rewriting, "detected_sinks", lambda received: [0, 7])
    with pytest.raises(SinklabError, match="holds position 7 apart, which sits at different places among the heads"):
        with (
            torch.no_grad(),
            sinklab.applied(model, P.Random(0.5, keep_sinks="detected", seed=1), P.KIVI(protect="detected", group_size=8)),
        ):
            model(ids(40), use_cache=True)


def test_the_reviews_bad_settings_are_one_line():
    """A budget that cannot hold the press's window; a decoding press with a question, or beside an
    intervention; two presses before a quantizer; KIVI groups that do not divide the heads (refused
    at the prefill, not mid-decode); a tally of another cache."""
    import sinklab
    from sinklab.intervene import MaskSelf

    model = tiny()
    with pytest.raises(SinklabError, match="a budget of 32 keys cannot hold the 4 sinks, the 64-key window of snapkv"):
        P.DecodingPress(P.SnapKV(keep_sinks=4), budget=32, every=8)
    with pytest.raises(SinklabError, match="cannot hold the 5 sinks, the 4-key window of h2o"):
        P.DecodingPress(P.H2O(keep_sinks=5), budget=9, every=8)
    decoding = P.DecodingPress(P.Knorm(keep_sinks=1), budget=16, every=8)
    for enter, needle in [
        (lambda: sinklab.applied(model, decoding, question=[5, 6]), "a DecodingPress leaves the prefill whole"),
        (lambda: sinklab.applied(model, MaskSelf(3), decoding), "^interventions and tunings name token positions"),
        (lambda: sinklab.applied(model, P.Knorm(0.5), P.Knorm(0.5), P.KIVI(group_size=8)), "^sinklab.applied takes a press"),
    ]:
        with pytest.raises(SinklabError, match=needle):
            with enter():
                pass
    with pytest.raises(SinklabError, match="groups of --group-size 32 channels do not divide this model's head dimension 8"):
        with torch.no_grad(), sinklab.applied(model, P.KIVI(bits=2, protect=1)):
            model(ids(20), use_cache=True)
    with torch.no_grad(), P.tallied(model, 20, True, 0) as tally:
        cache = model(ids(20), use_cache=True).cache
    with torch.no_grad():
        model(ids(4, 2), cache=cache)
    with pytest.raises(SinklabError, match="the attention tally \\(received\\) covers 20 keys and layer 0 holds 24"):
        P.H2O(0.5).apply(cache, tally)


def test_adakv_keeps_each_heads_safeguard_share():
    """Head 0's scores (100 to 139) outrank head 1's (50 to 89), which outrank head 2's (0 to 39),
    with a budget of 20 keys a head (60 pooled). Pooled alone (alpha 0), head 0 takes its 40 and
    head 1 20, head 2 none; alpha 0.5 first keeps each head its own best 10 and the other 30 go to
    head 0: 40, 10, 10; alpha 0.25 keeps 5 each, then head 0's other 35 and head 1's next 10: 40,
    15, 5, head 2 keeping its best (35 to 39). No random scores: the old test drew unseeded
    ``torch.rand`` scores for heads 1 and 2, where alpha ignored still gave 10 and 10 whenever the
    pool happened to split them evenly. Mutation caught: AdaKV's alpha safeguard ignored."""
    scores = torch.stack([torch.arange(40.0) + 100, torch.arange(40.0) + 50, torch.arange(40.0)]).unsqueeze(0)

    def kept(alpha: float) -> list:
        return P.AdaKV(P.Knorm(0.5), alpha=alpha).head_budgets(scores, 20, forced=[])

    assert [len(k) for k in kept(0.0)] == [40, 20, 0]
    assert [len(k) for k in kept(0.5)] == [40, 10, 10]
    quarter = kept(0.25)
    assert [len(k) for k in quarter] == [40, 15, 5]
    assert quarter[1].tolist() == list(range(25, 40)) and quarter[2].tolist() == list(range(35, 40))


def test_a_fractional_budget_too_small_for_the_prompt_is_refused_at_the_prefill():
    """A fraction is a number of keys only once the prompt is seen: 0.2 of the 24-token prompt is
    4 keys, which cannot hold StreamingLLM's 4 sinks and a key it scores, refused in one line at
    the prefill (the press's own settings passed: 0.2 is a valid fraction); 0.25 (6 keys) keeps
    the 4 sinks and the 2 most recent tokens at every compression. Mutation caught: a fractional
    decode budget never checked for fit (resolved at the prefill without the check, the cache then
    pressed to the sinks alone; dropping only ``for_prompt``'s own call is no bug, since
    ``dataclasses.replace`` runs ``__post_init__`` again, which checks a budget in tokens)."""
    model = tiny()
    too_small = P.DecodingPress(P.StreamingLLM(keep_sinks=4), budget=0.2, every=8)
    with pytest.raises(SinklabError, match="^a budget of 4 keys cannot hold the 4 sinks") as error:
        decoded(model, too_small, chunk=8)
    assert "\n" not in str(error.value)
    _, held, state = decoded(model, P.DecodingPress(P.StreamingLLM(keep_sinks=4), budget=0.25, every=8), chunk=8)
    assert held[-1] == [0, 1, 2, 3, PROMPT + FED - 2, PROMPT + FED - 1] and set(state.cache.last.kept.values()) == {6}


def test_kvpress_argument_names_are_taken_and_adakv_under_a_decoding_press_says_why():
    """A kvpress user's spellings: ``DecodingPress(base_press=, compression_interval=, target_size=)``
    and ``AdaKV(press, alpha_safeguard=)`` (issue 51); ``DecodingPress(AdaKV(...))`` is refused with
    the reason, not "needs a press"."""
    from sinklab.kvcache import AdaKV, DecodingPress, SnapKV

    theirs = DecodingPress(base_press=SnapKV(keep_sinks=4), compression_interval=32, target_size=256)
    assert theirs == DecodingPress(SnapKV(keep_sinks=4), budget=256, every=32)
    assert AdaKV(SnapKV(ratio=0.5), alpha_safeguard=0.3).alpha == 0.3
    with pytest.raises(SinklabError, match="AdaKV gives each head its own number of keys"):
        DecodingPress(AdaKV(SnapKV(keep_sinks=4)), budget=256)
    with pytest.raises(SinklabError, match="give every= .* or compression_interval=, not both"):
        DecodingPress(SnapKV(), every=8, compression_interval=16)
