"""Softpick (Zuhri et al. 2025): its formula, its stable form, its masking and its gradient.

Mutations tried: the masked keys left in the denominator (each adds |exp(-inf) - 1| = 1) fails the
formula on causal rows; the shift by the row maximum alone (not max(0, it)) overflows on a row of
very negative scores (exp(-m) = inf, NaN weights); ``abs`` dropped from the denominator fails the
formula on rows with negative scores."""

import torch

from sinklab.core.attention import causal_mask, make_norm


def naive(scores: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The paper's formula in float64 over the visible keys only (no shift)."""
    e = torch.where(mask, torch.exp(scores.double()) - 1, torch.zeros((), dtype=torch.float64))
    return (torch.relu(e) / (e.abs().sum(-1, keepdim=True) + eps)).float()


def test_softpick_is_the_papers_formula_over_the_visible_keys_of_causal_rows():
    g = torch.Generator().manual_seed(0)
    scores, mask = torch.randn(2, 3, 9, 9, generator=g) * 2, causal_mask(9, 9)
    weights = make_norm("softpick", 3)(scores, mask)
    torch.testing.assert_close(weights, naive(scores, mask), atol=1e-6, rtol=1e-5)
    assert torch.all(weights[..., ~mask[0, 0]] == 0) and torch.all(weights.sum(-1) <= 1 + 1e-6)
    assert torch.all((weights == 0) == ((scores <= 0) | ~mask))  # exactly zero where the score is not positive
    assert (weights == 0).float().mean() > 0.3  # random scores: about half the visible keys at exactly zero


def test_a_row_whose_scores_are_all_below_zero_gives_an_all_zero_output_even_far_below():
    scores = torch.tensor([[[[-0.5, -2.0, -0.1], [-300.0, -200.0, -400.0], [3.0, -1.0, 200.0]]]])
    weights = make_norm("softpick", 1)(scores, causal_mask(3, 3))  # row 1 sees -300 and -200, not -400
    assert torch.isfinite(weights).all()
    assert torch.all(weights[0, 0, :2] == 0)  # nothing above zero: the head does nothing, no sink needed
    expected = naive(scores[..., 2:, :].double(), torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(
        weights[0, 0, 2], expected[0, 0, 0], atol=1e-6, rtol=1e-5
    )  # exp(200) overflows float32: the shift keeps it finite


def test_softpick_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(1)
    scores = (torch.randn(1, 2, 5, 5, generator=g) * 1.5).double()
    scores = torch.where(scores.abs() < 0.05, scores + 0.2, scores)  # away from the kink at 0
    mask = causal_mask(5, 5)
    probe = torch.randn(1, 2, 5, 5, generator=g).double()
    norm = make_norm("softpick", 2)
    x = scores.clone().requires_grad_(True)
    (norm(x, mask).double() * probe).sum().backward()
    numeric = torch.zeros_like(scores)
    step = 1e-3
    for index in torch.nonzero(mask.expand_as(scores)):
        i = tuple(index.tolist())
        up, down = scores.clone(), scores.clone()
        up[i] += step
        down[i] -= step
        numeric[i] = ((norm(up, mask).double() - norm(down, mask).double()) * probe).sum() / (2 * step)
    torch.testing.assert_close(x.grad, numeric, atol=2e-3, rtol=2e-2)
    assert torch.all(x.grad[..., ~mask[0, 0]] == 0)
