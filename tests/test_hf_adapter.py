"""The Hugging Face adapter computes exactly what each architecture's eager attention computes,
or refuses with a clear error: tiny random models of every architecture in the layout table and
of gpt-oss (learned sink logits), Gemma 2 (score soft-capping) and sliding windows."""

import pytest
import torch
from conftest import ARCHITECTURES, tiny_config
from transformers import AutoModelForCausalLM

from sinklab.core.errors import SinklabError
from sinklab.core.hooks import POINTS, HookSet, hook_name
from sinklab.models.hf import LAYOUTS, check_supported, describe_architecture, instrument
from sinklab.models.hf.instrument import sinklab_attention
from sinklab.models.subjects import HFSubject
from sinklab.scan import MetricSettings, RecordOptions, record_subject, summarise

T = 12  # longer than the sliding windows of the tiny configs (8)


def eager_model(arch: str):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, 300), attn_implementation="eager").eval()
    if arch == "gpt_oss":  # random sink logits large enough that the null slot takes real mass
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()))
    return model


def test_every_layout_architecture_has_a_parity_test():
    tested = {type(eager_model(arch)).__name__ for arch in ARCHITECTURES}
    assert set(LAYOUTS) <= tested


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_instrumented_attention_equals_eager_output_attentions(arch):
    model = eager_model(arch)
    ids = torch.randint(2, 300, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = model(input_ids=ids, output_attentions=True, use_cache=False)
    patterns = {}

    def keep(w, point):
        patterns[point.layer] = w.clone()

    hooks = HookSet()
    with torch.no_grad(), instrument(model, hooks), hooks.attached([(hook_name("*", "attn.hook_pattern"), keep)]):
        ours = model(input_ids=ids, use_cache=False)
    assert model.config._attn_implementation == "eager"  # restored on exit
    torch.testing.assert_close(ours.logits, eager.logits, atol=2e-5, rtol=1e-4)
    assert len(patterns) == len(eager.attentions)
    for layer, reference in enumerate(eager.attentions):
        torch.testing.assert_close(patterns[layer], reference.float(), atol=2e-6, rtol=1e-4)


def test_gpt_oss_sink_logits_are_reported_as_the_null_slot():
    model = eager_model("gpt_oss")
    subject = HFSubject_from(model)
    ids = torch.randint(2, 300, (2, T), generator=torch.Generator().manual_seed(2))
    record, _ = record_subject(subject, ids, RecordOptions(), progress=False)
    summary = summarise(record, MetricSettings(), subject, ids)
    with torch.no_grad():
        eager = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    expected = torch.stack([1.0 - a.float().sum(-1).mean(dim=(0, 2)) for a in eager])  # (L, H)
    torch.testing.assert_close(torch.tensor(summary["null_mass"], dtype=torch.float64), expected.double(), atol=1e-5, rtol=1e-4)
    assert (expected > 0.01).all()


def test_a_softmax_model_reports_no_null_slot(tokenizer):
    model = eager_model("llama")
    subject = HFSubject_from(model, tokenizer)
    ids = torch.randint(2, 300, (2, T))
    record, _ = record_subject(subject, ids, RecordOptions(), progress=False)
    assert "null_mass" not in summarise(record, MetricSettings(), subject, ids)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_is_a_causal_decoder_sinklab_accepts(arch):
    """Its attention modules say ``is_causal=True`` and its output layer is a child of the model.
    Mutation tried: requiring the config's ``is_decoder`` instead of the modules' flags (every
    architecture failed: none of their configs sets it, GPT-NeoX's says False)."""
    check_supported(eager_model(arch))


def test_an_argument_that_changes_attention_is_refused():
    model = eager_model("llama")
    attention = model.model.layers[0].self_attn
    q = k = v = torch.randn(1, 4, 3, 8)
    with instrument(model, HookSet()):
        with pytest.raises(SinklabError, match="position_bias.*does not implement"):
            sinklab_attention(attention, q, k, v, None, scaling=1.0, position_bias=torch.zeros(1, 4, 3, 3))
        out, _ = sinklab_attention(attention, q, k, v, None, scaling=1.0, position_ids=torch.arange(3)[None], use_cache=False)
    assert out.shape == (1, 3, 4, 8)


def test_training_mode_dropout_is_refused():
    model = eager_model("gpt2").train()
    with pytest.raises(SinklabError, match="eval mode"), instrument(model, HookSet()):
        model(input_ids=torch.randint(2, 300, (1, 6)), use_cache=False)


def HFSubject_from(model, tokenizer=None) -> HFSubject:
    """An HFSubject over an in-memory model (what load_model returns, without a folder)."""
    from sinklab.models.hf import LoadedModel

    return HFSubject(LoadedModel(model, tokenizer, type(model).__name__, "local"))


def test_an_architecture_outside_the_layout_table_is_recorded_as_guessed(tokenizer):
    from transformers import LlamaForCausalLM

    class ForkedLlamaForCausalLM(LlamaForCausalLM):  # a class the layout table does not know
        pass

    torch.manual_seed(0)
    model = ForkedLlamaForCausalLM(tiny_config("llama", len(tokenizer)))
    with pytest.warns(UserWarning, match="not in sinklab's layout table"):
        described = describe_architecture(model)
    assert described == "ForkedLlamaForCausalLM (layout guessed: layers model.layers, FFN down projection mlp.down_proj)"
    assert describe_architecture(AutoModelForCausalLM.from_config(tiny_config("llama", len(tokenizer)))) == "LlamaForCausalLM"


@torch.no_grad()
def test_token_nll_matches_a_float64_reference_over_a_large_vocabulary(tokenizer):
    """Over a large vocabulary, float32 log-softmax along a strided axis lost accuracy (5.5e-5 nats
    here, 1.2e-4 on the default model); token_nll must match a float64 reference."""
    from sinklab.models.hf import token_nll

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("llama", 49152)).eval()
    model.lm_head.weight.mul_(50.0)  # NLLs of 11-43 nats over a 49,152-token vocabulary
    ids = torch.randint(2, 49152, (1, 300))
    logits = model(input_ids=ids).logits[0, :-1].double()
    reference = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    assert (token_nll(model, ids)[0].double() - reference).abs().max() < 2e-5


def fire_all(model, ids, hooks_and_fns, query_chunk=None):
    hooks = HookSet()
    with torch.no_grad(), instrument(model, hooks, query_chunk), hooks.attached(hooks_and_fns):
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt"])
def test_every_hook_point_fires_with_its_documented_shape(arch):
    """Mutation tried: the decoder-layer pre-hook not registered (hook_resid_pre never fires)."""
    model = eager_model(arch)
    ids = torch.randint(2, 300, (2, T), generator=torch.Generator().manual_seed(3))
    seen = {}

    def record(t, point):
        seen[point.name] = tuple(t.shape)

    fire_all(model, ids, [(hook_name("*", p), record) for p in POINTS])
    d, H = model.config.hidden_size, model.config.num_attention_heads
    assert seen["blocks.0.hook_resid_pre"] == seen["blocks.1.hook_resid_post"] == (2, T, d)
    assert seen["blocks.1.attn.hook_q"] == seen["blocks.1.attn.hook_k"] == (2, H, T, d // H)
    assert seen["blocks.0.attn.hook_scores"] == (2, H, T, T)
    assert len(seen) == len(POINTS) * model.config.num_hidden_layers


def test_attn_scores_is_an_alias_of_scores():
    """Mutation tried: aliases not resolved (the alias pattern is refused as naming no point)."""
    model = eager_model("llama")
    ids = torch.randint(2, 300, (1, T))
    got = {}

    def keeper(spelling):
        def keep(scores, point):
            got[spelling] = (scores.clone(), point.point)

        return keep

    fire_all(model, ids, [(f"blocks.1.{p}", keeper(p)) for p in ("attn.hook_scores", "attn.hook_attn_scores")])
    assert torch.equal(got["attn.hook_scores"][0], got["attn.hook_attn_scores"][0])
    assert got["attn.hook_attn_scores"][1] == "attn.hook_scores"
    with pytest.raises(ValueError, match="names no hook point"), HookSet().attached([("blocks.0.attn.hook_attn_*", print)]):
        pass


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_replacing_the_residual_stream_entering_a_layer_is_running_other_tokens(arch):
    """Layer 1's input taken from a run on other tokens makes every later layer see those tokens,
    so the logits are theirs (layers called positionally here; by keyword below). Mutation tried:
    the pre-hook firing but its result dropped."""
    model = eager_model(arch)
    ids, other = torch.randint(2, 300, (2, 2, T), generator=torch.Generator().manual_seed(4))
    kept = {}

    def keep(h, point):
        kept["h"] = h.clone()

    fire_all(model, other, [("blocks.1.hook_resid_pre", keep)])
    swapped = fire_all(model, ids, [("blocks.1.hook_resid_pre", lambda h, point: kept["h"])])
    torch.testing.assert_close(swapped, fire_all(model, other, []), atol=1e-5, rtol=1e-5)
    assert (swapped - fire_all(model, ids, [])).abs().max() > 1e-3

    from sinklab.models.hf.instrument import _resid_pre_hook  # a layer called with hidden_states=...

    hooks, h = HookSet(), torch.zeros(1, 2, 4)
    with hooks.attached([("blocks.0.hook_resid_pre", lambda x, point: x + 1)]):
        assert torch.equal(_resid_pre_hook(hooks, 0)(None, (), {"hidden_states": h, "x": 3})[1]["hidden_states"], h + 1)


def test_zero_queries_attend_uniformly():
    """Mutation tried: attend() firing hook_q without using its result (the pattern stays peaked)."""
    model = eager_model("llama")
    ids = torch.randint(2, 300, (2, T))
    pattern = {}

    def keep(w, point):
        pattern["w"] = w

    zeroed = fire_all(
        model, ids, [("blocks.0.attn.hook_q", lambda q, point: torch.zeros_like(q)), ("blocks.0.attn.hook_pattern", keep)]
    )
    visible = torch.tril(torch.ones(T, T))
    torch.testing.assert_close(pattern["w"], (visible / visible.sum(-1, keepdim=True)).expand(2, 4, T, T))
    assert (zeroed - fire_all(model, ids, [])).abs().max() > 1e-4


def test_an_instrumentation_inside_another_gives_the_outer_one_back_its_hooks():
    """Mutation tried: the inner exit dropping every binding (the outer forward then raises)."""
    model = eager_model("llama")
    ids = torch.randint(2, 300, (1, T))
    outer, inner, fired = HookSet(), HookSet(), []

    def mark(z, point):
        fired.append("outer")

    with torch.no_grad(), instrument(model, outer), outer.attached([("blocks.0.attn.hook_z", mark)]):
        with instrument(model, inner):
            model(input_ids=ids, use_cache=False)
        model(input_ids=ids, use_cache=False)
    assert fired == ["outer"] and model.config._attn_implementation == "eager"
