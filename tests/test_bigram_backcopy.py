"""The Bigram-Backcopy task: exact generator statistics, the optimum-loss formula, determinism,
a short run in which the sink already starts to form, what benchmarks/bb_copy_head.py reads from
such a run (and the runs it refuses), and bad input."""

import math
import shutil

import pytest
import torch
from conftest import SAMPLE_TEXT, benchmark_module

from sinklab.core.attention import AttentionSpec
from sinklab.core.checkpoint import latest_checkpoint, load_checkpoint
from sinklab.core.errors import SinklabError
from sinklab.models.native import ModelConfig, Transformer
from sinklab.pretrain import PretrainConfig, load_trained, train_lm
from sinklab.pretrain.bigram_backcopy import BigramBackcopy, normalise
from sinklab.pretrain.config import SCAN_SEED, VALIDATION_SEED
from sinklab.pretrain.train import step_batch, training_seed, validation_batches, validation_windows
from sinklab.scan import scan_native


@pytest.fixture(scope="module")
def bb():
    return BigramBackcopy()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A 150-step run of one layer of two heads, in which the sink starts to form: (its
    configuration, its run directory, its summary). Read, never written, by the tests that take it."""
    cfg = PretrainConfig(
        corpus="bb",
        n_layers=1,
        d_model=64,
        n_heads=2,
        seq_len=64,
        batch=16,
        steps=150,
        lr=3e-3,
        eval_every=150,
        eval_batches=2,
        checkpoint_every=150,
    )
    out = tmp_path_factory.mktemp("short") / "run"
    return cfg, out, train_lm(cfg, out).summary


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


def test_no_training_step_draws_an_evaluation_batch(bb):
    """Training and evaluation draw from one process, so their generator seeds must never meet.
    Mutation: ``training_seed`` back to ``seed * 1_000_003 + step`` -> step 1234 of seed 0 trains on
    the validation batch and the batch comparison fails; seeds from ``1 << 40`` up (a generator keeps
    32 bits) fail it too."""
    cfg = PretrainConfig(corpus="bb", batch=2, seq_len=16, eval_batches=1, scan_batch=2, scan_tokens=16)
    evaluation = (validation_batches(bb, cfg)[0], validation_windows(bb, cfg))
    for seed, step in [(0, VALIDATION_SEED), (0, SCAN_SEED), (0, 1)]:
        batch = step_batch(bb, PretrainConfig(corpus="bb", batch=2, seq_len=16, seed=seed), step)
        assert not any(torch.equal(batch[:, : e.shape[1]], e) for e in evaluation), (seed, step)
    seeds = {
        training_seed(s, t) % (1 << 32) for s in (0, 1, 2047) for t in (*range(0, 5000, 7), (1 << 20) - 1)
    }  # a CPU generator reads 32 bits
    assert not seeds & {VALIDATION_SEED, SCAN_SEED} and len(seeds) == 3 * (len(range(0, 5000, 7)) + 1)


def test_optimum_loss_on_a_hand_made_chain():
    chain = BigramBackcopy(triggers=1, chars="ab", counts=torch.tensor([[1.0, 3.0], [2.0, 2.0]]))  # 'a' is the trigger
    ids = torch.tensor([[chain.bos, 1, 0, 1, 1]])  # BOS b a (b copied) b
    expected = torch.tensor([[0.0, math.log(2), 0.0, math.log(2)]], dtype=torch.float64)  # b is certain first; copy costs 0
    torch.testing.assert_close(chain.optimal_nll(ids), expected)


@torch.no_grad()
def attention_by_row_kind(model, bb, batches) -> dict[str, torch.Tensor]:
    """Recomputed from the model's attention, each row pooled over the batches (BOS's own row
    left out): per head (layers x heads) the mean weight on BOS at non-trigger and at trigger query
    rows, and the mean weight on the previous token (what a trigger asks to copy) at trigger rows."""
    pooled = {"bos_nontrigger": [], "bos_trigger": [], "previous_trigger": []}
    for ids in batches:
        _, weights = model(ids[:, :-1], need_weights=True)
        attn = torch.stack(weights, dim=1)[:, :, :, 1:]  # (B, L, H, query rows after BOS, keys)
        trigger = bb.is_trigger[ids[:, 1:-1]]  # (B, rows): the query's own token
        on_bos = attn[..., 0].permute(0, 3, 1, 2)  # (B, rows, L, H)
        on_previous = attn.diagonal(dim1=-2, dim2=-1).permute(0, 3, 1, 2)  # row t on key t - 1
        pooled["bos_nontrigger"].append(on_bos[~trigger])
        pooled["bos_trigger"].append(on_bos[trigger])
        pooled["previous_trigger"].append(on_previous[trigger])
    return {key: torch.cat(rows).mean(0) for key, rows in pooled.items()}


def test_a_short_run_starts_to_sink_on_bos_where_there_is_nothing_to_copy(short_run, bb):
    """The per-head BOS masses of the summary equal those recomputed from the saved model, and the
    head picked as the sink head is the copy head: at trigger rows it looks at the token to copy
    and not at BOS, elsewhere it starts to rest on BOS. Mutation caught: trigger and non-trigger
    rows swapped in ``task_metrics`` (the pick then fell on the other head, which passed the
    non-trigger > 2 x trigger check on the swapped numbers)."""
    cfg, out, summary = short_run
    assert summary["copy_accuracy"] > 0.9
    assert 0 < summary["val_loss_gap"] < 0.5
    model = Transformer(cfg.model_config(bb.vocab_size)).eval()
    load_checkpoint(latest_checkpoint(out), model, None)
    seen = attention_by_row_kind(model, bb, validation_batches(bb, cfg))
    for kind in ("nontrigger", "trigger"):
        torch.testing.assert_close(torch.tensor(summary[f"bos_mass_{kind}"]), seen[f"bos_{kind}"], atol=1e-5, rtol=0)
    head = (summary["sink_head"]["layer"], summary["sink_head"]["head"])
    assert summary["sink_head_bos_mass_nontrigger"] == pytest.approx(seen["bos_nontrigger"][head].item(), abs=1e-5)
    assert seen["previous_trigger"][head] > 0.5 and seen["bos_trigger"][head] < 0.01  # it copies at triggers
    assert seen["bos_nontrigger"][head] > 0.05  # about 0.1 after 150 steps: the sink is only starting


def test_copy_head_measures_the_runs_sink_head_on_the_batches_it_was_scored_on(short_run, bb):
    """benchmarks/bb_copy_head.py's ``measure``: the head the summary names, with the run's final
    weights, on the run's validation batches. Its trigger rows start at position 2, and a first
    character is never a trigger, so they are the rows :func:`attention_by_row_kind` pools from
    position 1: their BOS and previous-token shares must equal those recomputed here. Mutations
    caught: the other head read (``head`` as ``1 - head``), the untrained model measured (the
    checkpoint not loaded), batches drawn with another seed than the run's validation batches."""
    cfg, out, summary = short_run
    with benchmark_module("bb_copy_head") as copy_head:
        got = copy_head.measure(out, bb)
    assert got["sink_head"] == summary["sink_head"]
    assert (got["positions"], got["lr"], got["steps"], got["seed"]) == (cfg.positions, cfg.lr, cfg.steps, cfg.seed)
    head = (summary["sink_head"]["layer"], summary["sink_head"]["head"])
    seen = attention_by_row_kind(load_trained(out)[0], bb, validation_batches(bb, cfg))
    assert got["trigger"]["bos"] == pytest.approx(seen["bos_trigger"][head].item(), rel=1e-5, abs=1e-9)
    assert got["trigger"]["previous"] == pytest.approx(seen["previous_trigger"][head].item(), rel=1e-5)
    assert got["trigger"]["previous"] > 0.5 and got["nontrigger"]["bos"] > 0.05  # the copy head, starting to sink


def test_copy_head_refuses_a_run_with_sink_tokens_a_text_run_and_an_unfinished_run(tmp_path, short_run):
    """``load_run`` takes only finished Bigram-Backcopy runs without sink tokens: learned sink
    tokens come before BOS, so key 0 would be a sink token and every key index off by their count;
    a text run has no triggers. Mutations caught: the sink-token condition removed from
    ``load_run`` (the run then loads), the corpus condition removed."""
    tiny = dict(d_model=16, n_layers=1, n_heads=2, seq_len=8, batch=2, steps=2, eval_every=2, eval_batches=1, checkpoint_every=2)
    train_lm(PretrainConfig(corpus="bb", sink_tokens=1, **tiny), tmp_path / "sink")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(8):
        (corpus / f"doc{i}.txt").write_text(SAMPLE_TEXT[i * 40 :] + SAMPLE_TEXT[: i * 40])
    train_lm(PretrainConfig(corpus=str(corpus), tokenizer="bytes", **tiny), tmp_path / "text")
    shutil.copytree(short_run[1], tmp_path / "unfinished")
    (tmp_path / "unfinished" / "summary.json").unlink()
    with benchmark_module("bb_copy_head") as copy_head:
        for run in ("sink", "text"):
            with pytest.raises(SystemExit, match="a --corpus bb run without sink tokens is needed"):
                copy_head.load_run(tmp_path / run)
        with pytest.raises(SinklabError, match="has not finished"):
            copy_head.load_run(tmp_path / "unfinished")
        model, cfg, summary = copy_head.load_run(short_run[1])
    assert cfg == short_run[0] and summary["sink_head"] == short_run[2]["sink_head"] and not model.training


def test_null_mass_counts_attention_on_learned_sink_tokens():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(
            d_model=16,
            n_layers=2,
            n_heads=2,
            vocab_size=30,
            mlp=True,
            norm=True,
            rope=True,
            residual=True,
            scale_scores=True,
            sink_tokens=1,
            attention=AttentionSpec(),
            max_seq_len=20,
        )
    )
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
    """Refused before the run directory is claimed."""
    with pytest.raises(SinklabError, match=message):
        train_lm(PretrainConfig(corpus="bb", steps=2, **kwargs), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_copy_head_accounting_splits_each_row_by_key():
    """benchmarks/bb_copy_head.py: rows parked on BOS, on the previous token and spread evenly give
    exactly those shares and largest weights, counted at non-trigger and trigger rows apart.
    Mutations caught: the two row kinds' masks swapped; "previous" read two tokens back; "rest"
    not subtracting the own token; the wrong layer or head read."""
    with benchmark_module("bb_copy_head") as copy_head:
        bb = BigramBackcopy()
        ids = bb.batch("val", 4, 24, torch.Generator().manual_seed(0))
        T = ids.shape[1] - 1
        causal = torch.ones(T, T).tril()
        previous = torch.zeros(T, T)
        previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
        previous[0, 0] = 1.0
        on_bos = torch.zeros(T, T)
        on_bos[:, 0] = 1.0
        patterns = {"bos": on_bos, "previous": previous, "self": torch.eye(T), "even": causal / causal.sum(-1, keepdim=True)}

        class Fixed:  # a model of two layers of two heads: only layer 1, head 1 has the given pattern
            def __init__(self, pattern):
                self.pattern = pattern

            def __call__(self, inputs, need_weights):
                other = on_bos.expand(inputs.shape[0], 1, T, T)
                return None, [torch.cat([other, other], 1), torch.cat([other, self.pattern.expand(inputs.shape[0], 1, T, T)], 1)]

        got = {name: copy_head.head_targets(Fixed(p), bb, [ids], 1, 1) for name, p in patterns.items()}
        for kind in ("nontrigger", "trigger"):
            assert got["bos"][kind]["bos"] == pytest.approx(1) and got["bos"][kind]["largest"] == pytest.approx(1)
            assert got["previous"][kind]["previous"] == pytest.approx(1) and got["previous"][kind]["rest"] == pytest.approx(0)
            assert got["self"][kind]["self"] == pytest.approx(1) and got["self"][kind]["rest"] == pytest.approx(0)
        trigger_rows = bb.is_trigger[ids[:, 2:T]]
        spread = (1.0 / torch.arange(3, T + 1, dtype=torch.float64)).expand_as(trigger_rows)  # query t sees t + 1 keys
        assert got["even"]["trigger"]["largest"] == pytest.approx(spread[trigger_rows].mean().item())
        assert got["even"]["nontrigger"]["bos"] == pytest.approx(spread[~trigger_rows].mean().item())
