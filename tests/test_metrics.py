"""Every pure metric of the scanner on hand-made tensors whose answer is known by hand, and the
summary registry the scanner's summary.json is built from."""

import math

import pytest
import torch

from sinklab.models.native import ModelConfig, Transformer
from sinklab.models.subjects import NativeSubject
from sinklab.scan import SUMMARY_ENTRIES, MetricSettings, RecordOptions, metrics, record_subject, summarise
from sinklab.scan.summary import OMIT


def test_first_token_mass_skips_the_first_queries():
    column = torch.tensor([[1.0, 0.5, 0.25, 0.25]])  # (H=1, T=4): query 0 can only see itself
    assert metrics.first_token_mass(column, 1).item() == pytest.approx(1 / 3)
    assert metrics.first_token_mass(column, 0).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="min_query"):
        metrics.first_token_mass(column, 4)


def test_sink_scores_average_the_queries_after_each_key():
    """Mutation: dividing by T - k (Gu et al.'s count with the own row) gives [2/3, 1/4, ...]."""
    received = torch.tensor([3.0, 1.0, 0.5])  # key k is seen by T - k queries, its own row among them
    own = torch.tensor([1.0, 0.5, 0.5])
    torch.testing.assert_close(metrics.sink_scores(received, own), torch.tensor([1.0, 0.5, 0.0]))


def test_a_key_s_unbounded_weight_on_itself_is_no_sink():
    """ReLU-like rows need not sum to one: row 0's weight on itself (40) must not make key 0 a sink.
    Mutation: keeping the own row (subtracting nothing) gives alpha_0 = 41 / 4 > 0.3."""
    A = torch.tensor(
        [[40.0, 0, 0, 0], [0.1, 0.5, 0, 0], [0.0, 0.2, 0.3, 0], [0.2, 0.1, 0.1, 0.2]], dtype=torch.float64
    )  # (query, key)
    alpha = metrics.sink_scores(A.sum(0), A.diagonal())
    assert alpha[0].item() == pytest.approx(0.1) and metrics.sink_rate(alpha[:1], 0.3) == 0.0
    assert alpha[0].item() == pytest.approx(metrics.first_token_mass(A[:, 0], 1).item())  # k = 0: the first-token mass


def test_sink_rate_is_the_share_strictly_above_eps():
    alpha = torch.tensor([[0.5, 0.1], [0.31, 0.3]])
    assert metrics.sink_rate(alpha, 0.3) == 0.5


def test_secondary_sinks_rank_positions_and_skip_the_last_keys():
    alpha = torch.zeros(2, 3, 20)
    alpha[..., 0] = 0.9  # the first-token sink is excluded
    alpha[..., 4] = 0.4
    alpha[..., 7] = 0.2
    alpha[..., 18] = 0.99  # too few later queries to count
    found = metrics.secondary_sinks(alpha, top=2, min_queries=8, exclude=1)
    assert [p for p, _ in found] == [4, 7]
    assert found[0][1] == pytest.approx(0.4)


def test_dominance_ratio_is_max_over_mean_magnitude():
    h = torch.tensor([[[3.0, -1.0, 1.0, 1.0]]])
    assert metrics.dominance_ratio(h).item() == pytest.approx(3.0 / 1.5)


def test_massive_activations_need_both_thresholds_and_come_largest_first():
    h = torch.full((1, 3, 4), 0.01)
    h[0, 0, 2] = -500.0
    h[0, 1, 3] = 150.0
    h[0, 2, 0] = 50.0  # below the absolute threshold
    hits = metrics.massive_activations(h, layer=5, absolute=100.0, relative=1000.0)
    assert [(e["position"], e["dim"], e["value"]) for e in hits] == [(0, 2, -500.0), (1, 3, 150.0)]
    assert all(e["layer"] == 5 for e in hits)
    assert metrics.massive_activations(h, 5, absolute=100.0, relative=1e6) == []  # 1e6 x median 0.01 = 1e4
    assert len(metrics.massive_activations(h, 5, limit=1)) == 1


def test_kurtosis_of_known_distributions_and_streaming_moments():
    assert metrics.kurtosis(torch.tensor([-1.0, 1.0] * 50)) == pytest.approx(1.0)  # a fair coin
    x = torch.tensor([0.0, 0.0, 0.0, 10.0])
    assert metrics.kurtosis(x) == pytest.approx((0.75 * 2.5**4 + 0.25 * 7.5**4) / 18.75**2)
    streamed = metrics.Moments()
    for part in x.split(1):
        streamed.add(part)
    assert streamed.kurtosis() == pytest.approx(metrics.kurtosis(x))
    assert math.isnan(metrics.kurtosis(torch.ones(5)))  # no variance: undefined
    assert metrics.nan_to_none(float("nan")) is None and metrics.nan_to_none(2.0) == 2.0


def test_variance_by_position_is_the_unbiased_variance_across_sequences():
    z = torch.tensor([[[1.0, 2.0], [0.0, 0.0]], [[3.0, 2.0], [0.0, 0.0]], [[5.0, 2.0], [0.0, 3.0]]])  # (n=3, T=2, F=2)
    variance = metrics.variance_by_position(z.sum(0), z.pow(2).sum(0), 3)
    torch.testing.assert_close(variance, z.var(0, unbiased=True).mean(-1))
    with pytest.raises(ValueError, match="at least 2"):
        metrics.variance_by_position(z[0], z[0].pow(2), 1)


def test_super_neurons_need_ratio_and_size_and_report_what_they_write():
    act_first = torch.tensor([500.0, 1.0, 200.0, 300.0])
    act_rest = torch.tensor([1.0, 1.0, 10.0, 1.0])  # neuron 2: ratio 20, too low
    down = torch.zeros(3, 4)  # (d, I)
    down[1, 0], down[2, 0] = 2.0, -0.5
    found = metrics.super_neurons(act_first, act_rest, down, layer=7, min_ratio=100.0, min_activation=100.0)
    assert [n["neuron"] for n in found] == [0, 3]  # strongest ratio first
    assert found[0]["ratio"] == pytest.approx(500.0) and found[0]["layer"] == 7
    assert [w["dim"] for w in found[0]["writes_to"][:2]] == [1, 2]
    assert found[0]["writes_to"][0]["magnitude"] == pytest.approx(1000.0)
    assert "writes_to" not in metrics.super_neurons(act_first, act_rest, None, 0)[0]


def test_null_mass_counts_the_slot_and_the_sink_tokens():
    torch.testing.assert_close(metrics.null_mass(torch.tensor([1.0, 0.8])), torch.tensor([0.0, 0.2]))
    torch.testing.assert_close(metrics.null_mass(torch.tensor([1.0, 0.8]), torch.tensor([0.5, 0.1])), torch.tensor([0.5, 0.3]))
    torch.testing.assert_close(metrics.null_mass(torch.tensor([1.5])), torch.tensor([-0.5]))  # ReLU rows above one


def test_norm_ratio_first_is_the_first_over_the_mean_of_the_rest():
    norms = torch.tensor([[10.0, 1.0, 3.0], [1.0, 2.0, 2.0]])
    torch.testing.assert_close(metrics.norm_ratio_first(norms), torch.tensor([5.0, 0.5]))


def test_every_summary_entry_is_computed_or_omitted_on_a_native_model():
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(
            d_model=16, n_layers=2, n_heads=2, vocab_size=40, mlp=True, norm=True, rope=True, residual=True, scale_scores=True
        )
    )
    subject = NativeSubject(model)
    ids = torch.randint(0, 40, (3, 10))
    record, _ = record_subject(subject, ids, RecordOptions(variance=True), progress=False)
    summary = summarise(record, MetricSettings(), subject, ids)
    omitted = {key for key in SUMMARY_ENTRIES if key not in summary}
    assert omitted == {"null_mass"}  # softmax rows sum to one over content keys
    assert set(summary) | omitted == set(SUMMARY_ENTRIES)
    assert OMIT not in summary.values()
    assert len(summary["first_token_mass"]) == 2 and len(summary["first_token_mass"][0]) == 2
