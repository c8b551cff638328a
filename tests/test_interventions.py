"""Interventions: zero strength is a no-op, each edit changes exactly what it claims, hooks are
removed on error, bad positions and layers are clear errors, the trigger-model result, and
``applied`` around a user's own forward, ``generate`` and backward pass."""

import dataclasses
import json

import pytest
import torch
from conftest import tiny_config
from transformers import AutoModelForCausalLM

from sinklab import applied, cli
from sinklab.core import pipeline
from sinklab.core.attention import causal_mask
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookSite
from sinklab.intervene import (
    INTERVENE,
    DropFirst,
    InterveneConfig,
    MaskSelf,
    PlainScale,
    ScoreBias,
    ValueZero,
    VarianceAmplify,
    apply_interventions,
    hooks_of,
    interventions_for,
    share_at,
    suppress_sink,
)
from sinklab.models.hf import QUERY_CHUNK, LoadedModel, load_model
from sinklab.models.hf.instrument import _BINDINGS
from sinklab.models.native import ModelConfig, Transformer
from sinklab.models.subjects import HFSubject, NativeSubject
from sinklab.scan import InputSpec, RecordOptions

T = 6


def at(point="attn.hook_z", q_start=0):
    return HookSite(f"blocks.0.{point}", 0, point, q_start)


def native_subject():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(
            d_model=16,
            n_layers=2,
            n_heads=2,
            vocab_size=40,
            mlp=True,
            norm=True,
            rope=True,
            residual=True,
            scale_scores=True,
            max_seq_len=32,
        )
    )
    return NativeSubject(model)


def logits_with(subject, ids, interventions):
    with subject.session(), subject.hooks.attached(hooks_of(interventions, subject.n_heads)):
        return subject.logits(ids)


@pytest.mark.parametrize(
    "noop",
    [VarianceAmplify(k=3, lam=1.0), PlainScale(k=3, lam=1.0), ScoreBias(at=(0, 2), delta=0.0), DropFirst(n=0)],
    ids=lambda iv: type(iv).__name__,
)
def test_zero_strength_leaves_logits_unchanged(noop, tiny_model_dir):
    for subject in (native_subject(), HFSubject(load_model(str(tiny_model_dir("llama"))))):
        ids = torch.randint(0, 40, (2, 10))
        torch.testing.assert_close(logits_with(subject, ids, [noop]), logits_with(subject, ids, []), atol=1e-6, rtol=1e-6)


def test_mask_self_keeps_only_the_diagonal_of_row_k():
    mask = causal_mask(T, T)
    edited = MaskSelf(k=3).edit(mask, at("attn.hook_mask"))
    assert edited[0, 0, 3].tolist() == [False, False, False, True, False, False]
    assert torch.equal(edited[0, 0, [0, 1, 2, 4, 5]], mask[0, 0, [0, 1, 2, 4, 5]])
    # a chunk of rows that starts after k is untouched; one that contains it is shifted correctly
    assert torch.equal(MaskSelf(k=3).edit(mask[..., 4:, :], at("attn.hook_mask", 4)), mask[..., 4:, :])
    assert MaskSelf(k=3).edit(mask[..., 2:, :], at("attn.hook_mask", 2))[0, 0, 1].tolist() == [
        False,
        False,
        False,
        True,
        False,
        False,
    ]


def test_variance_amplify_and_plain_scale_on_hand_checkable_values():
    z = torch.arange(T, dtype=torch.float32).view(1, 1, T, 1).repeat(1, 2, 1, 2)  # o_t = t, mu = 2.5
    amplified = VarianceAmplify(k=4, lam=3.0).edit(z, at())
    assert amplified[0, 0, 4].tolist() == [2.5 + 3 * (4 - 2.5)] * 2
    assert torch.equal(amplified[..., [0, 1, 2, 3, 5], :], z[..., [0, 1, 2, 3, 5], :])
    scaled = PlainScale(k=4, lam=3.0).edit(z, at())
    assert scaled[0, 1, 4].tolist() == [12.0, 12.0]


def test_score_bias_only_hits_later_queries_of_the_named_keys():
    scores = torch.zeros(1, 1, T, T)
    out = ScoreBias(at=(0, 2), delta=-5.0).edit(scores, at("attn.hook_scores"))
    expected = torch.zeros(T, T)
    expected[1:, 0] = -5.0
    expected[3:, 2] = -5.0
    assert torch.equal(out[0, 0], expected)  # scores of a query on itself are untouched


def test_value_zero_and_drop_first():
    v = torch.ones(1, 2, T, 3)
    zeroed = ValueZero(at=(0, 4)).edit(v, at("attn.hook_v"))
    assert zeroed[..., [0, 4], :].abs().sum() == 0 and zeroed[..., [1, 2, 3, 5], :].min() == 1
    dropped = DropFirst(n=2).edit(causal_mask(T, T), at("attn.hook_mask"))[0, 0]
    assert not dropped[2:, :2].any()  # later queries no longer see the first two tokens
    assert torch.equal(dropped[:2], causal_mask(T, T)[0, 0, :2])  # the first two still see each other
    assert torch.equal(dropped[2:, 2:], causal_mask(T, T)[0, 0, 2:, 2:])


def test_head_selection_edits_only_those_heads():
    subject = native_subject()
    ids = torch.randint(0, 40, (1, 8))
    seen = {}

    def keep(w, p):
        seen[p.layer] = w.detach().clone()

    with (
        subject.session(),
        subject.hooks.attached([*MaskSelf(k=5, heads=(1,), layers=(0,)).hooks(2), ("blocks.*.attn.hook_pattern", keep)]),
    ):
        subject.logits(ids)
    w = seen[0][0]  # (H, T, T)
    assert w[1, 5, 5] == pytest.approx(1.0) and w[1, 5, :5].sum() == 0
    assert w[0, 5, :5].sum() > 0  # head 0 untouched
    assert seen[1][0, :, 5, :5].sum() > 0  # layer 1 untouched


def test_suppressing_the_sink_moves_all_first_token_attention(tiny_model_dir):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    ids = torch.randint(2, subject.vocab_size, (2, 12))
    options = RecordOptions(key_columns=(0, 5))
    base, _ = apply_interventions(subject, ids, [], options)
    after, _ = apply_interventions(subject, ids, [suppress_sink(0)], options)
    assert max(share_at(base, 0)) > 0 and max(share_at(after, 0)) == 0
    masked, _ = apply_interventions(subject, ids, [MaskSelf(k=5)], options)
    assert masked.columns[5][:, :, 5].min() == pytest.approx(1.0)  # row 5 attends only to itself


def test_hooks_are_gone_after_a_run_that_fails_inside_an_intervention():
    """The failure happens in the second layer's hook, mid-forward, after the first one edited."""
    subject = native_subject()
    calls = []

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FailsInTheSecondLayer(VarianceAmplify):
        def rewrite(self, o_k, z):
            calls.append(o_k)
            if len(calls) == 2:
                raise RuntimeError("failed inside the intervention")
            return super().rewrite(o_k, z)

    ids = torch.randint(0, 40, (1, 8))
    clean = logits_with(subject, ids, [])
    with pytest.raises(RuntimeError, match="inside the intervention"):
        logits_with(subject, ids, [FailsInTheSecondLayer(k=2, lam=2.0)])
    assert len(calls) == 2 and not subject.hooks
    torch.testing.assert_close(logits_with(subject, ids, []), clean, atol=0, rtol=0)  # nothing left behind


@pytest.mark.parametrize(
    "iv, message",
    [
        (MaskSelf(k=50), "beyond the input"),
        (ScoreBias(at=(3, 99), delta=1.0), "beyond the input"),
        (VarianceAmplify(k=2, lam=2.0, layers=(7,)), "layer 7 does not exist"),
        (PlainScale(k=2, lam=2.0, heads=(5,)), "head 5 does not exist"),
    ],
)
def test_bad_positions_layers_and_heads_are_clear_errors(iv, message):
    subject = native_subject()
    with pytest.raises(SinklabError, match=message):
        apply_interventions(subject, torch.randint(0, 40, (1, 10)), [iv], RecordOptions())


def test_run_directory_contract(tiny_model_dir, tmp_path, with_images):
    subject = HFSubject(load_model(str(tiny_model_dir("llama"))))
    asked = interventions_for(
        {"mask_self": (5,), "amplify": 5, "scale": 5, "suppress_sink": True, "drop_first": 2}, lams=(1.0, 4.0)
    )
    cfg = InterveneConfig(interventions=tuple(asked), inputs=InputSpec(random_tokens=True, tokens=16, batch=2))
    pipeline.run(INTERVENE, cfg, subject, out=tmp_path)
    s = json.loads((tmp_path / "summary.json").read_text())
    for entry in [s["baseline"], *s["results"]]:
        assert {"share_at_k", "share_at_0", "loss", "ppl"} <= set(entry)
        assert len(entry["share_at_k"]) == 3 and len(entry["share_at_0"]) == 3
    amp = [r for r in s["results"] if r["intervention"]["type"] == "VarianceAmplify"]
    assert [r["lam"] for r in amp] == [1.0, 4.0] and amp[0]["intervention"]["k"] == 5
    assert amp[0]["share_at_k"] == pytest.approx(s["baseline"]["share_at_k"], abs=1e-6)  # lam = 1 is a no-op
    files = json.loads((tmp_path / "run.json").read_text())["files"]
    assert all((tmp_path / f).exists() for f in files) and "lam_curve.png" in files


def test_cli_bad_position_is_one_line(tiny_model_dir, tmp_path, capsys):
    code = cli.main(
        [
            "intervene",
            str(tiny_model_dir("llama")),
            "--random-tokens",
            "--max-tokens",
            "8",
            "--mask-self",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "position 20 is beyond the input" in capsys.readouterr().err


def test_suppressing_the_bos_sink_breaks_softmax_but_not_relu_on_the_trigger_task(trigger_pair, tmp_path):
    from sinklab.intervene import TRIGGER_EDITS, TriggerEditConfig

    summary = pipeline.run(TRIGGER_EDITS, TriggerEditConfig(lab_dir=str(trigger_pair[0])), out=tmp_path).summary
    by_model = {r["model"].split("_")[0]: r for r in summary["results"]}
    soft, relu = by_model["softmax"], by_model["relu"]
    assert soft["mse_nontrigger_after"] > 100 * max(soft["mse_nontrigger_before"], 1e-6)
    assert relu["mse_nontrigger_after"] == relu["mse_nontrigger_before"] == 0.0


def test_interventions_take_their_own_fields_positionally_and_where_by_keyword():
    """Mutation tried: the subclasses back on kw_only=True (MaskSelf(10) raises TypeError)."""
    assert MaskSelf(10) == MaskSelf(k=10)
    assert VarianceAmplify(5, 4.0, layers=(1,)) == VarianceAmplify(k=5, lam=4.0, layers=(1,))
    assert PlainScale(5, 2.0) == PlainScale(k=5, lam=2.0)
    assert ValueZero((0,)) == ValueZero(at=(0,))
    assert DropFirst(4) == DropFirst(n=4)
    assert ScoreBias((0,), float("-inf"), heads=(2,)) == suppress_sink(0, heads=(2,))
    assert MaskSelf(10).describe() == {"type": "MaskSelf", "layers": None, "heads": None, "k": 10}
    with pytest.raises(TypeError):
        MaskSelf(10, (1,))  # layers stay keyword-only


def sharp_model(arch: str = "llama"):
    """A tiny random model whose attention is far from uniform (initializer range 0.2), so a
    misplaced edit moves the logits by much more than rounding."""
    config = tiny_config(arch, 300)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def random_ids(batch: int, n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 300, (batch, n), generator=torch.Generator().manual_seed(seed))


def decoded_and_rerun(edits, steps: int):
    """Greedy decoding of ``steps`` tokens after a 6-token prompt on the sharp model under ``edits``:
    each step's logits with the KV cache, the same logits from re-running the whole sequence
    without a cache, and the unedited decoding's logits."""
    model, prompt = sharp_model(), random_ids(2, 6)
    settings = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, output_logits=True, return_dict_in_generate=True)

    def generate(ivs):
        with applied(model, ivs), torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), **settings)
        return out.sequences, torch.stack(out.logits, dim=1)

    sequence, logits = generate(edits)
    with applied(model, edits), torch.no_grad():
        rerun = [model(input_ids=sequence[:, :t], use_cache=False).logits[:, -1] for t in range(6, 6 + steps)]
    return logits, torch.stack(rerun, dim=1), generate([])[1]


def torch_hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_applied_edits_a_forward_as_the_runner_does_and_as_a_manual_edit_would():
    """Mutations tried: applied() attaching no hooks (logits unedited), and ValueZero zeroing
    position p + 1 (differs from the manual v_proj edit)."""
    model, ids = sharp_model(), random_ids(2, 12)
    subject = HFSubject(LoadedModel(model, None, "sharp", "local"))
    _, runner_loss = apply_interventions(subject, ids, [MaskSelf(5)], RecordOptions())
    with applied(model, [MaskSelf(5)]), torch.no_grad():
        logits = model(input_ids=ids).logits
    ours = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:])
    assert ours.item() == pytest.approx(runner_loss, abs=1e-5)

    def zero_position_3(module, args, out):  # values have no RoPE: zeroing v_proj's row 3 is ValueZero((3,))
        out = out.clone()
        out[:, 3] = 0.0
        return out

    handles = [layer.self_attn.v_proj.register_forward_hook(zero_position_3) for layer in model.model.layers]
    with torch.no_grad():
        manual = model(input_ids=ids).logits
    for handle in handles:
        handle.remove()
    with applied(model, [ValueZero((3,))]), torch.no_grad():
        edited = model(input_ids=ids).logits
    torch.testing.assert_close(edited, manual, atol=2e-5, rtol=1e-4)
    assert (edited - model(input_ids=ids).logits).abs().max() > 0.1


def test_applied_restores_the_model_after_the_block_and_after_an_error():
    """Mutations tried: instrument() not restoring the attention implementation, and not
    removing its torch hooks (each fails the check after the error)."""
    model, ids = sharp_model(), random_ids(1, 10)
    implementation, clean = model.config._attn_implementation, model(input_ids=ids).logits
    with applied(model, [DropFirst(3)]):
        assert model.config._attn_implementation == "sinklab"
        assert (model(input_ids=ids).logits - clean).abs().max() > 0.1
    with pytest.raises(RuntimeError, match="inside the block"), applied(model, [DropFirst(3)]):
        model(input_ids=ids)
        raise RuntimeError("inside the block")
    assert model.config._attn_implementation == implementation and torch_hooks(model) == 0
    assert not any(id(m) in _BINDINGS for m in model.modules())
    torch.testing.assert_close(model(input_ids=ids).logits, clean, atol=0, rtol=0)


@pytest.mark.parametrize(
    "edits",
    [[MaskSelf(9)], [ScoreBias((1,), -2.0)], [ValueZero((2,))], [DropFirst(2)], [PlainScale(8, 3.0, layers=(1,))]],
    ids=lambda e: type(e[0]).__name__,
)
def test_generate_under_applied_equals_rerunning_the_whole_sequence_each_step(edits):
    """Greedy decoding with a dense KV cache (Tq = 1 < Tk) edits absolute position k as a full
    forward does: the logits of every step equal those of the whole sequence re-run without a
    cache. Mutation tried: MaskSelf and PlainScale using row k instead of k - q_start (they then
    never act while decoding, and the logits part)."""
    logits, rerun, plain = decoded_and_rerun(edits, steps=8)
    torch.testing.assert_close(logits, rerun, atol=1e-4, rtol=1e-4)
    assert (logits - plain).abs().max() > 0.5  # the edit acted


def test_variance_amplify_refuses_a_decoding_step_it_cannot_average():
    """Its mu is a mean over positions 0..T-1; a cached step holds only the new row. Mutation
    tried: no check (the one-row mean makes the edit a silent no-op)."""
    model, prompt = sharp_model(), random_ids(1, 6)
    with (
        pytest.raises(SinklabError, match="VarianceAmplify at position 8 needs"),
        applied(model, [VarianceAmplify(8, 4.0)]),
        torch.no_grad(),
    ):
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4, do_sample=False)
    with applied(model, [VarianceAmplify(3, 4.0)]), torch.no_grad():  # in the prompt: edited at prefill
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4, do_sample=False)


def test_gradients_flow_through_an_edit_inside_applied_but_not_in_the_run_functions():
    """Mutation tried: session(grad=True) still under no_grad (backward raises)."""
    model, ids = sharp_model(), random_ids(2, 10)
    model.zero_grad()
    with applied(model, [MaskSelf(4), ScoreBias((0,), float("-inf"))]):
        model(input_ids=ids, labels=ids).loss.backward()
    grad = model.get_input_embeddings().weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    subject = HFSubject(LoadedModel(model, None, "sharp", "local"))
    with subject.session():
        assert not torch.is_grad_enabled()  # the runners keep no_grad


def test_applied_checks_layers_on_entry_positions_on_exit_and_the_model_kind():
    """Mutations tried: no position check on exit (an edit beyond every input passes silently),
    and validating on entry with n_tokens=0 (every position refused before any forward)."""
    model, ids = sharp_model(), random_ids(1, 12)
    with pytest.raises(SinklabError, match="layer 9 does not exist"), applied(model, [MaskSelf(3, layers=(9,))]):
        pytest.fail("the block must not run")
    with pytest.raises(SinklabError, match="position 20 is beyond the input"), applied(model, [MaskSelf(20)]):
        model(input_ids=ids)
    with applied(model, [MaskSelf(15)]), torch.no_grad():  # reached while generating: fine
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, min_new_tokens=5, do_sample=False)
    with pytest.raises(SinklabError, match="not Linear"), applied(torch.nn.Linear(2, 2), []):
        pass
    with (
        pytest.raises(SinklabError, match="pass query_chunk=None"),
        applied(HFSubject(LoadedModel(model, None, "s", "local"), None), []),
    ):
        pass


def test_whole_patterns_with_query_chunk_none():
    """Mutation tried: applied() not passing query_chunk on (the 4-row chunks arrive whole)."""
    model, ids = sharp_model(), random_ids(2, 12)
    calls = {}

    def keep(w, where):
        calls.setdefault(where.layer, []).append((tuple(w.shape), where.q_start))

    for chunk in (None, 4):
        calls.clear()
        with (
            applied(model, query_chunk=chunk) as block,
            block.hooks.attached([("blocks.*.attn.hook_pattern", keep)]),
            torch.no_grad(),
        ):
            model(input_ids=ids)
        if chunk is None:
            assert calls[0] == [((2, 4, 12, 12), 0)] and len(calls) == 3
        else:  # last block first, each scored up to the last key its rows see
            assert calls[0] == [((2, 4, 4, 12), 8), ((2, 4, 4, 8), 4), ((2, 4, 4, 4), 0)]
    assert QUERY_CHUNK > 12  # the default delivers these tiny inputs whole too


def test_applied_on_a_native_language_model_and_its_subject():
    """Mutation tried: NativeSubject.session ignoring grad (no gradient reaches the embedding)."""
    subject = native_subject()
    ids = torch.randint(0, 40, (2, 9))
    expected = logits_with(subject, ids, [MaskSelf(4)])
    for target in (subject.model, subject):
        with applied(target, [MaskSelf(4)]):
            logits = subject.model(ids)
            logits.square().mean().backward()
        torch.testing.assert_close(logits.detach(), expected, atol=0, rtol=0)
    assert subject.model.embed.weight.grad.abs().sum() > 0
    assert (expected - logits_with(subject, ids, [])).abs().max() > 1e-3
    with pytest.raises(SinklabError, match="vector-input"), applied(Transformer(ModelConfig()), []):
        pass


def test_applied_refuses_a_cache_that_dropped_tokens():
    """A sink cache numbers keys by slot once it has evicted: ``MaskSelf(7)`` would hit the newest
    token at every step. Mutation tried: without the forward pre-hook, generate runs to the end
    and the edit acts on cache slots."""
    from sinklab.stream import make_sink_cache

    model, prompt = sharp_model(), random_ids(1, 7)
    with pytest.raises(SinklabError, match="dropped .* token"), applied(model, [MaskSelf(7)]):
        model.generate(
            prompt, cache=make_sink_cache(model, 2, 6), max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=1
        )
    with applied(model, [MaskSelf(7)]):  # a cache that keeps every token is fine
        model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=1)
