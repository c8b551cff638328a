"""The Bigram-Backcopy task: exact generator statistics, the optimum-loss formula, determinism,
a short run in which the sink already starts to form, and bad input."""

import math

import pytest
import torch

from sinklab.core.attention import AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.models.native import ModelConfig, Transformer
from sinklab.pretrain import PretrainConfig, train_lm
from sinklab.pretrain.bigram_backcopy import BigramBackcopy, normalise
from sinklab.pretrain.train import step_batch
from sinklab.scan import scan_native


@pytest.fixture(scope="module")
def bb():
    return BigramBackcopy()


def test_vocabulary_and_triggers(bb):
    assert normalise("Ça va?\tOui…  «non»\n\n\n\nX") == "Ca va? Oui... non\n\nX"  # accents folded, marks dropped
    assert 60 <= bb.vocab_size <= 70 and bb.bos == bb.vocab_size - 1
    assert bb.meta["triggers"] == [" ", "e", "t"]  # the 3 most frequent characters


def test_sequences_follow_the_rule_exactly(bb):
    ids = bb.batch("train", 64, 256, torch.Generator().manual_seed(0))
    assert (ids[:, 0] == bb.bos).all() and (ids[:, 1:] != bb.bos).all()
    assert not bb.is_trigger[ids[:, 1]].any()  # the first character is never a trigger
    after_trigger = bb.is_trigger[ids[:, 1:-1]]
    assert (ids[:, 2:][after_trigger] == ids[:, :-2][after_trigger]).all()  # back-copy, every time
    assert bb.copy_positions(ids)[:, 2:].eq(after_trigger).all()


def test_bigram_frequencies_within_tolerance(bb):
    ids = bb.batch("train", 512, 256, torch.Generator().manual_seed(1))
    prev, nxt = ids[:, 1:-1].flatten(), ids[:, 2:].flatten()
    free = ~bb.is_trigger[prev]
    counts = torch.zeros(bb.bos, bb.bos)
    counts.index_put_((prev[free], nxt[free]), torch.ones(int(free.sum())), accumulate=True)
    for ch in "aoh":  # frequent non-trigger characters: thousands of transitions each
        row = counts[bb.chars.index(ch)]
        empirical = row / row.sum()
        assert (empirical - bb.transition[bb.chars.index(ch)]).abs().max() < 0.02


def test_batches_are_a_pure_function_of_seed_and_step(bb):
    cfg = PretrainConfig(corpus="bb", seq_len=32, batch=4)
    assert torch.equal(step_batch(bb, cfg, 7), step_batch(bb, cfg, 7))
    assert not torch.equal(step_batch(bb, cfg, 7), step_batch(bb, cfg, 8))


def test_optimum_loss_on_a_hand_made_chain():
    chain = BigramBackcopy(triggers=1, chars="ab", counts=torch.tensor([[1.0, 3.0], [2.0, 2.0]]))  # 'a' is the trigger
    ids = torch.tensor([[chain.bos, 1, 0, 1, 1]])  # BOS b a (b copied) b
    expected = torch.tensor([[0.0, math.log(2), 0.0, math.log(2)]], dtype=torch.float64)  # b is certain first; copy costs 0
    torch.testing.assert_close(chain.optimal_nll(ids), expected)


def test_a_short_run_starts_to_sink_on_bos_where_there_is_nothing_to_copy(tmp_path):
    summary = train_lm(PretrainConfig(corpus="bb", n_layers=1, d_model=64, n_heads=2, seq_len=64, batch=16, steps=150, lr=3e-3,
                                      eval_every=150, eval_batches=2, checkpoint_every=150, out=str(tmp_path / "run")), progress=False)
    assert summary["copy_accuracy"] > 0.9
    assert 0 < summary["val_loss_gap"] < 0.5
    head = summary["sink_head"]
    assert summary["bos_mass_nontrigger"][head["layer"]][head["head"]] > 2 * summary["bos_mass_trigger"][head["layer"]][head["head"]]
    assert summary["sink_head_bos_mass_nontrigger"] > summary["sink_head_bos_mass_trigger"]


def test_null_mass_counts_attention_on_learned_sink_tokens():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=16, n_layers=2, n_heads=2, vocab_size=30, mlp=True, norm=True, rope=True, residual=True,
                                    scale_scores=True, sink_tokens=1, attention=AttentionSpec(), max_seq_len=20))
    ids = torch.randint(0, 30, (3, 12))
    scan = scan_native(model, ids)
    _, weights = model(ids, need_weights=True)
    expected = [w[..., 1:, 0].mean(dim=(0, 2)).tolist() for w in weights]  # queries after the sink token, on it
    torch.testing.assert_close(torch.tensor(scan["null_mass"]), torch.tensor(expected), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokenizer": "bytes"}, "own character vocabulary"),
        ({"bos": True}, "always start with BOS"),
        ({"bb_triggers": 0}, "--bb-triggers must lie in"),
        ({"bb_triggers": 62}, "--bb-triggers must lie in"),
        ({"seq_len": 3}, "--tokens must be at least 4"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, message, tmp_path):
    with pytest.raises(SinklabError, match=message):
        train_lm(PretrainConfig(corpus="bb", steps=2, out=str(tmp_path / "run"), **kwargs), progress=False)
