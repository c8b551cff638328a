"""Each task of ``sinklab bench`` on tiny Llamas whose property is planted, so its result is known:

* ``uniform``: no sink at all (query and key weights zero: every query spreads its attention evenly
  over the keys it sees);
* ``sink``: a planted sink. BOS's key is (0.5, 0.5) on two rotary dimensions that positions
  barely rotate, every query scores it 80 x 1 / sqrt(32) = 14 and every other token at most 0, so
  the weight on BOS is 1 - O(e^-14 T); BOS's value is zero (a drained sink). Other tokens' keys
  follow three patterns, about (1.2, -1.7), (-1.7, 1.2) and (0, 0), so BOS's key is interior to
  both channels' ranges: KIVI's 2-bit levels (about -1.8, -0.8, 0.2, 1.2) round it and the (0, 0)
  keys to the same 0.2, which breaks the sink unless it is protected. With the sink, attention
  writes nothing and the model predicts the next token by its corpus unigram frequency (a constant
  dimension read by the LM head); without it, attention averages the other tokens' values into the
  dimensions the head reads at random, which moves every prediction off the unigram (cross-entropy
  grows: the unigram is the best context-free guess);
* ``later``: the uniform model with one token (wherever it is) that every query after it looks at;
* ``outlier``: the ``sink`` model with a planted massive activation: layer 0's FFN unit 0 reads only
  BOS's own dimension (gain 10) and writes dimension 3 (about 6,400 at position 0, exactly 0
  elsewhere: a super neuron), and the unigram reaches the head through FFN unit 1 (about 2.6), so
  a per-tensor int8 scale set by BOS's 6,400 (50 a step) rounds it to 0 when BOS is in the stream.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
from conftest import make_tokenizer

from sinklab.bench import TASKS
from sinklab.core.corpus import load_corpus
from sinklab.models.hf import LoadOptions

HIDDEN, HEAD = 64, 32
BOS_DIM, UNIGRAM_DIM, KEY_DIMS, READ_DIMS = 63, 62, (61, 60), list(range(40, 56))
SINK_DIMS = (14, 15)  # in each head: RoPE's slowest pairs
MASSIVE_DIM, UNIGRAM_UNIT_DIM, LATER_DIM = 3, 57, 59


def unigram_logp(tokenizer) -> torch.Tensor:
    """Log unigram frequencies (add-one) of the tiny tokenizer's tokens in the default corpus."""
    text = "".join(d.text for d in sorted(load_corpus("shakespeare"), key=lambda d: d.name)[:3])[:300_000]
    counts = collections.Counter(tokenizer(text, add_special_tokens=False)["input_ids"])
    total = sum(counts.values()) + len(tokenizer)
    return torch.tensor([math.log((counts[i] + 1) / total) for i in range(len(tokenizer))])


def blank_llama(logp: torch.Tensor):
    """A 2-layer Llama with every weight zero but the norms' (one), content embeddings and the three
    key patterns; BOS (id 0) is the unit vector of its own dimension. The patterns go round the
    tokens by corpus frequency, so any stretch of text holds all three."""
    vocab = len(logp)
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=HEAD, max_position_embeddings=4096, rope_theta=1e12, attention_bias=True,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name else p.zero_()
        emb = model.model.embed_tokens.weight
        emb[:, :40] = 0.5 * torch.randn(vocab, 40, generator=g)
        emb[:, UNIGRAM_DIM] = 1.0
        pattern = torch.empty(vocab, dtype=torch.long)
        pattern[logp.argsort(descending=True)] = torch.arange(vocab) % 3
        emb[:, KEY_DIMS[0]] = torch.tensor([2.0, -3.0, 0.0])[pattern]
        emb[:, KEY_DIMS[1]] = torch.tensor([-3.0, 2.0, 0.0])[pattern]
        emb[0] = 0
        emb[0, BOS_DIM] = 1.0
        model.lm_head.weight[:, READ_DIMS] = 0.3 * torch.randn(vocab, len(READ_DIMS), generator=g)
    return model


def rms_scale(model, token: int = 5) -> float:
    """The factor RMSNorm multiplies token ``token``'s embedding by."""
    return float(1 / model.model.embed_tokens.weight[token].detach().pow(2).mean().sqrt())


def plant_sink(model, logp: torch.Tensor, layers=(0, 1), key_source: dict = None) -> None:
    """The planted sink in ``layers`` (see the module docstring); ``key_source`` maps a layer to the
    residual dimension BOS's key reads there (default its own dimension)."""
    g = torch.Generator().manual_seed(1)
    scale = rms_scale(model)
    with torch.no_grad():
        model.lm_head.weight[:, UNIGRAM_DIM] = logp / scale
        for index in layers:
            attn = model.model.layers[index].self_attn
            source = (key_source or {}).get(index, BOS_DIM)
            for head in range(2):
                for key_dim, sink_dim in zip(KEY_DIMS, SINK_DIMS):
                    attn.k_proj.weight[head * HEAD + sink_dim, key_dim] = 1 / scale
                    attn.k_proj.weight[head * HEAD + sink_dim, source] = 1 / 16.0  # BOS normalised: 8 on its dimension
                    attn.q_proj.bias[head * HEAD + sink_dim] = 80.0
                attn.v_proj.weight[head * HEAD : (head + 1) * HEAD, :40] = torch.randn(HEAD, 40, generator=g)
            attn.o_proj.weight[READ_DIMS] = 0.03 * torch.randn(len(READ_DIMS), HIDDEN, generator=g)


def uniform_model(logp):
    return blank_llama(logp)


def later_sink_token(logp: torch.Tensor) -> int:
    """The planted later sink: the corpus's 20th most frequent token (in many inputs, rarely twice)."""
    return int(logp.argsort(descending=True)[20])


def later_sink_model(logp):
    """The uniform model, but every query scores one token, wherever it is, 80 x 8 / sqrt(32)."""
    model = blank_llama(logp)
    token = later_sink_token(logp)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, LATER_DIM] = 0
        model.model.embed_tokens.weight[token, LATER_DIM] = 1.0
        for layer in model.model.layers:
            for head in range(2):
                layer.self_attn.k_proj.weight[head * HEAD + SINK_DIMS[0], LATER_DIM] = 1.0
                layer.self_attn.q_proj.bias[head * HEAD + SINK_DIMS[0]] = 80.0
    return model


def sink_model(logp):
    model = blank_llama(logp)
    plant_sink(model, logp)
    return model


def outlier_model(logp):
    model = blank_llama(logp)
    plant_sink(model, logp, key_source={1: MASSIVE_DIM})  # layer 1 sees BOS through its massive dimension
    mlp = model.model.layers[0].mlp
    with torch.no_grad():
        mlp.gate_proj.weight[0, BOS_DIM] = mlp.up_proj.weight[0, BOS_DIM] = 10.0
        mlp.down_proj.weight[MASSIVE_DIM, 0] = 1.0
        mlp.gate_proj.weight[1, UNIGRAM_DIM] = mlp.up_proj.weight[1, UNIGRAM_DIM] = 1.0
        mlp.down_proj.weight[UNIGRAM_UNIT_DIM, 1] = 1.0
        unit = (lambda x: torch.nn.functional.silu(x) * x)(torch.tensor(rms_scale(model)))
        model.lm_head.weight[:, UNIGRAM_DIM] = 0
        model.lm_head.weight[:, UNIGRAM_UNIT_DIM] = logp * rms_scale(model) / float(unit) / 8.0
    return model


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The three models saved as folders, by name."""
    from sinklab.cli import quiet

    tokenizer = make_tokenizer()
    logp = unigram_logp(tokenizer)
    folders = {}
    for name, model in (
        ("uniform", uniform_model(logp)),
        ("sink", sink_model(logp)),
        ("outlier", outlier_model(logp)),
        ("later", later_sink_model(logp)),
    ):
        folders[name] = tmp_path_factory.mktemp(name)
        with quiet(True):
            model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return {name: str(path) for name, path in folders.items()}


def measured(planted, model: str, task: str) -> dict:
    """The task's metric values on a planted model (``--limit quick``)."""
    entry = TASKS[task].run(planted[model], LoadOptions(device="cpu"), "quick")
    return {name: m["value"] for name, m in entry["metrics"].items()}


def harmonic(n: int) -> float:
    return sum(1 / i for i in range(1, n + 1))


def test_sink_rate_is_one_with_the_planted_sink_and_zero_without(planted):
    assert measured(planted, "sink", "sink_rate")["sink_rate"] == 1.0
    assert measured(planted, "uniform", "sink_rate")["sink_rate"] == 0.0


def test_first_token_mass_is_one_with_the_planted_sink_and_the_uniform_share_without(planted):
    """Uniform causal attention gives query i (i >= 1) 1/(i+1) on position 0: the mean over the 63
    queries after it is (H_64 - 1) / 63, in every layer."""
    sink = measured(planted, "sink", "first_token_mass")
    assert sink["mean"] == pytest.approx(1.0, abs=1e-4) and sink["start_layer"] == 0
    uniform = measured(planted, "uniform", "first_token_mass")
    assert uniform["mean"] == pytest.approx((harmonic(64) - 1) / 63, rel=1e-5)
    assert uniform["start_layer"] is None


def test_cumulative_mass_flags_the_planted_sinks_and_nothing_in_a_model_without_one(planted):
    """Input by input: the planted first-token sink receives all 64 rows' mass (64 times the mean)
    in every input; uniform attention gives position 0 exactly H_64 = 4.74 times the mean, under the
    slack of 10; the planted later sink (one token that every later query looks at) is flagged, by
    its token, in the inputs that hold it, wherever it sits."""
    sink = measured(planted, "sink", "cumulative_mass")
    assert sink["first_ratio"] == pytest.approx(64.0, rel=1e-3)
    assert (sink["first_share"], sink["later_share"]) == (1.0, 0.0)
    uniform = measured(planted, "uniform", "cumulative_mass")
    assert uniform["first_ratio"] == pytest.approx(harmonic(64), rel=1e-5)
    assert (uniform["first_share"], uniform["later_share"]) == (0.0, 0.0)
    entry = TASKS["cumulative_mass"].run(planted["later"], LoadOptions(device="cpu"), "quick")
    assert 0.0 < entry["metrics"]["later_share"]["value"] <= 1.0 and entry["metrics"]["first_share"]["value"] == 0.0
    assert entry["details"]["later_tokens"][0]["id"] == later_sink_token(unigram_logp(make_tokenizer()))


def test_the_planted_massive_activation_and_super_neuron_are_found_where_they_were_planted(planted):
    """silu(80) x 80 = 6,400 at (layer 0, position 0, dimension 3); FFN unit 0 of layer 0 is the
    super neuron. The model without one has neither."""
    found = measured(planted, "outlier", "massive_activation")
    assert found["value"] == pytest.approx(6400.0, rel=1e-3)
    assert (found["layer"], found["dim"], found["position"]) == (0, MASSIVE_DIM, 0)
    neurons = measured(planted, "outlier", "super_neurons")
    assert (neurons["count"], neurons["layer"], neurons["neuron"]) == (1, 0, 0)
    assert measured(planted, "sink", "massive_activation")["value"] is None
    assert measured(planted, "sink", "super_neurons")["count"] == 0


def test_the_planted_sinks_value_is_drained(planted):
    assert measured(planted, "sink", "sink_value_norm")["ratio"] == pytest.approx(0.0, abs=1e-6)


def test_suppressing_the_planted_sink_costs_perplexity(planted):
    """Without its sink the model's predictions leave the unigram: perplexity grows by more than 30 %."""
    assert measured(planted, "sink", "suppressed_sink")["ppl_ratio"] > 1.3


def test_streaming_needs_the_planted_sink_and_one_is_enough(planted):
    found = measured(planted, "sink", "streaming")
    assert found["ppl_ratio_sinks_0"] > 1.3
    assert found["ppl_ratio_sinks_1"] == pytest.approx(1.0, abs=1e-3)
    assert found["ppl_ratio_sinks_4"] == pytest.approx(1.0, abs=1e-3)


def test_a_compressed_cache_keeping_the_planted_sink_scores_as_the_full_one(planted):
    found = measured(planted, "sink", "compressed_context")
    for press in ("streaming_llm", "snapkv", "knorm"):
        assert found[f"{press}@0.5/keep1/ppl_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert found["streaming_llm@0.5/keep0/ppl_ratio"] > 1.3
    assert found["log_ppl_gain"] > 0.1


def test_two_bit_keys_break_the_planted_sink_unless_it_is_protected(planted):
    """Protected, the sink holds (what is left, about 1.2, is the other tokens' 2-bit keys; both
    cells keep the same recent tokens in full precision since kv_2bit version 2, where version 1's
    protected cell also kept 31 more and came out at 1.196 against 1.214 now)."""
    found = measured(planted, "sink", "kv_2bit")
    assert found["protect0/ppl_ratio"] > 1.3 and found["protect1/ppl_ratio"] < 1.25
    assert found["ppl_ratio_gain"] == pytest.approx(found["protect0/ppl_ratio"] / found["protect1/ppl_ratio"])
    assert found["ppl_ratio_gain"] > 1.25


def test_w8a8_pays_for_the_planted_outlier_only_with_bos_in_the_stream(planted):
    """Per-tensor int8 activations: BOS's 6,400 sets the scale of layer 0's down-projection input
    (50 a step), which rounds the unigram unit's 8 to 0 in the stream; the sink as a prefix keeps
    the outlier out. The model without an outlier loses nothing either way."""
    outlier = measured(planted, "outlier", "w8a8_prefix")
    assert outlier["prefix_gain"] > 2.0
    assert outlier["ppl_sink_prefix"] == pytest.approx(outlier["ppl_fp"], rel=0.05)
    assert measured(planted, "sink", "w8a8_prefix")["prefix_gain"] == pytest.approx(1.0, abs=0.02)


# --------------------------------------------------------------------------- reading a result


def read(task: str, summary: dict) -> dict:
    """The task's metric values read from a hand-made summary of its capability."""
    from sinklab.core.results import RunResult

    return {name: m["value"] for name, m in TASKS[task].read(RunResult(summary))["metrics"].items()}


TEXTS = {"corpus": "shakespeare", "outside": "pydoc"}  # the texts a compress summary says it read


def cell(ppl_in, ppl_out, accuracy, logprobs, **key):
    return {**key, "ppl_ratio": {"shakespeare": ppl_in, "pydoc": ppl_out},
            "passkey": {"accuracy": accuracy, "logprobs": logprobs, "logprob_mean": sum(logprobs) / len(logprobs)}}  # fmt: skip


def test_each_metric_reads_its_own_entry_of_the_summary():
    """Every number of a hand-made summary distinct, so a metric reading another entry (the
    outside text for the corpus, one condition for another, min for max) changes a value here.
    Mutations of the review (passkey_gain's sign, ppl_ratio_outside on the corpus, pairs keyed by
    press only, streaming's dense as its 4-sink ppl, w8a8's BOS-in-stream read from no_bos,
    first-token mass max as min, and more) each fail one of these."""
    scan = {
        "layers": 2, "heads": 3, "sink_rate": {"value": 0.25}, "sink_share_by_layer": [0.5, 0.0],
        "first_token_mass_by_layer": [0.2, 0.6], "first_token_mass_start_layer": 1,
        "massive_activations": [{"value": -300.0, "layer": 1, "dim": 7, "position": 0},
                                {"value": 200.0, "layer": 0, "dim": 2, "position": 3}],
        "max_over_median": [5.0, 9000.0], "settings": {"massive_absolute": 100.0, "massive_relative": 1000.0},
        "super_neurons": [{"layer": 0, "neuron": 4, "act_first": 150.0, "ratio": 200.0},
                          {"layer": 1, "neuron": 9, "act_first": 900.0, "ratio": 120.0}],
        "norms": {"value": {"first": [1.0, 3.0], "rest_mean": [4.0, 2.0]}},
        "cumulative_sinks": {"slack": 10.0, "first_by_layer": [20.0, 40.0], "first_share_by_layer": [0.5, 1.0],
                             "later_share_by_layer": [0.25, 0.0], "later_tokens": []},
    }  # fmt: skip
    assert read("sink_rate", scan) == {"sink_rate": 0.25}
    assert read("first_token_mass", scan) == {"mean": pytest.approx(0.4), "max": 0.6, "start_layer": 1}
    assert read("cumulative_mass", scan) == {"first_ratio": 30.0, "first_share": 0.75, "later_share": 0.125}
    assert read("massive_activation", scan) == {"value": 300.0, "layer": 1, "dim": 7, "position": 0, "max_over_median": 9000.0}
    assert read("super_neurons", scan) == {"count": 2, "largest_activation": 900.0, "layer": 1, "neuron": 9}
    assert read("sink_value_norm", scan) == {"ratio": pytest.approx(0.875), "min_ratio": 0.25}

    suppressed = {"baseline": {"ppl": 10.0}, "results": [{"ppl": 15.0, "share_at_0": [0.0, 0.0]}]}
    assert read("suppressed_sink", suppressed) == {"ppl_intact": 10.0, "ppl_suppressed": 15.0, "ppl_ratio": 1.5}

    chunks = lambda *ppl: [{"ppl": p} for p in ppl]  # noqa: E731
    stream = {"sinks": 4, "window": 252, "tokens": 2048, "policies": {"dense": {"ppl": 10.0}}, "ablation": {
        "0": {"ppl": 30.0, "ppl_by_chunk": chunks(9.0, 28.0, 32.0)}, "1": {"ppl": 12.0, "ppl_by_chunk": chunks(9.0, 11.0, 13.0)},
        "4": {"ppl": 11.0, "ppl_by_chunk": chunks(9.0, 10.5, 11.5)}}}  # fmt: skip
    found = TASKS["streaming"].read(__import__("sinklab").RunResult(stream))["metrics"]
    assert {k: m["value"] for k, m in found.items()} == {
        "ppl_dense": 10.0, "ppl_sinks_0": 30.0, "ppl_ratio_sinks_0": 3.0, "ppl_sinks_1": 12.0, "ppl_ratio_sinks_1": 1.2,
        "ppl_sinks_4": 11.0, "ppl_ratio_sinks_4": 1.1,
    }  # fmt: skip
    assert (found["ppl_sinks_0"]["n"], found["ppl_sinks_0"]["spread"]) == (2, pytest.approx(2**0.5 * 2))  # chunks after the first

    cells = [
        cell(3.0, 4.0, 0.0, [-6.0, -8.0], policy="streaming_llm", kind="press", ratio=0.5, keep_sinks=0),
        cell(1.5, 2.5, 0.5, [-1.0, -3.0], policy="streaming_llm", kind="press", ratio=0.5, keep_sinks=1),
        cell(6.0, 7.0, 0.5, [-2.0, -2.0], policy="streaming_llm", kind="press", ratio=0.875, keep_sinks=0),
        cell(2.0, 3.5, 1.0, [-4.0, -4.0], policy="streaming_llm", kind="press", ratio=0.875, keep_sinks=1),
    ]
    found = read("compressed_context", {"cells": cells, "dense": {}, **TEXTS})
    assert found["streaming_llm@0.5/keep1/ppl_ratio"] == 1.5 and found["streaming_llm@0.5/keep1/ppl_ratio_outside"] == 2.5
    assert found["streaming_llm@0.875/keep0/passkey_accuracy"] == 0.5 and found["streaming_llm@0.5/keep0/key_logprob"] == -7.0
    assert found["log_ppl_gain"] == pytest.approx((math.log(2.0) + math.log(3.0)) / 2)
    assert found["passkey_gain"] == pytest.approx(((0.5 - 0.0) + (1.0 - 0.5)) / 2)

    quantized = [cell(2.0, 3.0, 0.5, [-5.0, -7.0], policy="kivi", kind="quantizer", keep_sinks=0, bytes_ratio=0.2),
                 cell(1.25, 1.5, 1.0, [-1.0, -2.0], policy="kivi", kind="quantizer", keep_sinks=1, bytes_ratio=0.21)]  # fmt: skip
    found = read("kv_2bit", {"cells": quantized, **TEXTS})
    assert found == {
        "protect0/ppl_ratio": 2.0, "protect0/ppl_ratio_outside": 3.0, "protect0/passkey_accuracy": 0.5,
        "protect0/key_logprob": -6.0, "protect1/ppl_ratio": 1.25, "protect1/ppl_ratio_outside": 1.5,
        "protect1/passkey_accuracy": 1.0, "protect1/key_logprob": -1.5, "ppl_ratio_gain": 1.6,
    }  # fmt: skip

    ppl = {"fp": {"bos": 10.0, "prefix": 10.5, "no_bos": 11.0}, "w8a8": {"bos": 30.0, "prefix": 12.0, "no_bos": 40.0}}
    assert read("w8a8_prefix", {"ppl": ppl}) == {
        "ppl_fp": 10.0,
        "ppl_bos_in_stream": 30.0,
        "ppl_sink_prefix": 12.0,
        "prefix_gain": 2.5,
    }


def test_the_compress_readers_read_the_texts_the_summary_names():
    """The corpus is a setting of the task, so the readers take the texts' names from the summary
    (they read "shakespeare" and "pydoc" by name). Mutation: the corpus name written in the reader
    raises KeyError here; an outside text of None gives no ppl_ratio_outside metric."""
    cells = [cell(2.0, 3.0, 0.5, [-5.0], policy="kivi", kind="quantizer", keep_sinks=k, bytes_ratio=0.2) for k in (0, 1)]
    for c, value in zip(cells, (2.0, 1.6)):
        c["ppl_ratio"] = {"my_text": value}
    found = read("kv_2bit", {"cells": cells, "corpus": "my_text", "outside": None})
    assert found["protect0/ppl_ratio"] == 2.0 and found["ppl_ratio_gain"] == 1.25
    assert not [name for name in found if name.endswith("ppl_ratio_outside")]


def test_the_accuracy_readers_read_each_figure_from_its_own_run():
    """sinks-v2's accuracy tasks on hand-made summaries, every number distinct: the payoff's
    accuracies are the test split's untouched and tuned runs' (0.4 and 0.475 over two tasks), its
    gain the paired change's mean; the dependence's ratio is suppressed over intact (0.35 / 0.7 =
    0.5, below 1 where suppressing the sink costs accuracy). Mutations caught:
    ``zerotuning_payoff`` reading the untouched accuracy as the tuned one, and
    ``accuracy_dependence``'s ratio inverted (its judge test has both runs at 1.0, where 1 / 1 = 1)."""

    def tuned(task, untouched, acc, change, loglik):
        return {"task": task, "chosen": "gamma 2 on 1 heads", "test": {"untouched": {"acc": untouched}, "tuned": {"acc": acc}},
                "paired": {"acc_change": {"mean": change}, "gold_loglik_change": {"mean": loglik}}}  # fmt: skip

    payoff = read("zerotuning_payoff", {"tasks": [tuned("a", 0.5, 0.75, 0.25, 0.2), tuned("b", 0.3, 0.2, -0.1, -0.4)]})
    assert payoff == {
        "acc_gain": pytest.approx(0.075),
        "acc_untouched": pytest.approx(0.4),
        "acc_tuned": pytest.approx(0.475),
        "gold_loglik_change": pytest.approx(-0.1),
    }

    def judged(task, intact, edited, loglik):
        return {"task": task, "intact": {"acc": intact}, "edited": {"acc": edited}, "gold_loglik_change": {"mean": loglik},
                "acc_change": {"mean": edited - intact}, "mcnemar": {"p": 0.5}}  # fmt: skip

    dependence = read("accuracy_dependence", {"accuracy": [judged("a", 0.8, 0.4, -1.5), judged("b", 0.6, 0.3, -0.5)]})
    assert dependence == {
        "acc_intact": pytest.approx(0.7),
        "acc_suppressed": pytest.approx(0.35),
        "acc_ratio": pytest.approx(0.5),
        "gold_loglik_change": pytest.approx(-1.0),
    }
    assert read("accuracy_dependence", {"accuracy": [judged("a", 0.0, 0.0, 0.0)]})["acc_ratio"] is None
