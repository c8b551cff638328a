"""OrthoAdam (Kaul et al. 2025, Algorithm 1): identity rotations are torch's Adam bit for bit, the
rotated update is Algorithm 1 with the dense orthogonal matrix, and a resumed run is exact."""

import copy

import pytest
import torch

from sinklab.core.orthoadam import OrthoAdam


def params(seed=0):
    torch.manual_seed(seed)
    # a matrix larger than one block (tail included), a small vector, and a scalar-sized parameter
    return [torch.nn.Parameter(torch.randn(37, 11)), torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(1))]


def run(opt, ps, steps=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * 3
        opt.step()


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_identity_rotations_equal_torch_adam_bit_for_bit(weight_decay):
    ours, theirs = params(), params()
    groups = lambda ps: [{"params": ps[:1], "weight_decay": weight_decay}, {"params": ps[1:], "weight_decay": 0.0}]  # noqa: E731
    reference = torch.optim.AdamW if weight_decay else torch.optim.Adam  # OrthoAdam's decay is decoupled
    run(OrthoAdam(groups(ours), lr=1e-2, betas=(0.9, 0.95), rotate=False), ours)
    run(reference(groups(theirs), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False), theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def dense_rotation(state: dict, n: int) -> torch.Tensor:
    """The n x n matrix Q that OrthoAdam applies, built from its state: Q = blockdiag(R, ..., R, R_tail) P."""
    blocks = [state["rotation"]] * (n // state["rotation"].shape[0])
    if "tail_rotation" in state:
        blocks.append(state["tail_rotation"])
    permutation = torch.eye(n)[state["permutation"]]  # (P x)_i = x[perm[i]]
    return torch.block_diag(*blocks).double() @ permutation.double()


def test_rotated_steps_are_algorithm_1_with_the_dense_orthogonal_matrix():
    ps = params()
    start = [p.detach().clone().double() for p in ps]
    opt = OrthoAdam(ps, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, block=16)
    g = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=g) * 3 for p in ps] for _ in range(4)]
    for step in grads:
        for p, grad in zip(ps, step):
            p.grad = grad
        opt.step()
    for i, p in enumerate(ps):
        state = opt.state[p]
        n = p.numel()
        q = dense_rotation(state, n)
        torch.testing.assert_close(q @ q.T, torch.eye(n, dtype=torch.float64), atol=1e-6, rtol=0)
        theta, m, v = start[i].reshape(-1), torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
        for t, step in enumerate(grads, start=1):
            rotated = q @ step[i].reshape(-1).double()
            m, v = 0.9 * m + 0.1 * rotated, 0.95 * v + 0.05 * rotated**2
            update = (m / (1 - 0.9**t)) / ((v / (1 - 0.95**t)).sqrt() + 1e-8)
            theta = theta - 1e-2 * (q.T @ update)
        torch.testing.assert_close(p.detach().reshape(-1).double(), theta, atol=1e-5, rtol=0)
        assert n == 1 or not torch.allclose(q, torch.eye(n, dtype=torch.float64))  # a real rotation was drawn


def test_rotations_are_fixed_by_the_seed_and_differ_between_parameters():
    a, b, c = params(), params(), params()
    opts = [OrthoAdam(a, seed=3), OrthoAdam(b, seed=3), OrthoAdam(c, seed=4)]
    for opt, ps in zip(opts, (a, b, c)):
        run(opt, ps, steps=1)
    assert torch.equal(opts[0].state[a[0]]["rotation"], opts[1].state[b[0]]["rotation"])
    assert not torch.equal(opts[0].state[a[0]]["rotation"], opts[2].state[c[0]]["rotation"])
    twins = [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(2)]  # same shape: same-sized rotations
    opt = OrthoAdam(twins)
    run(opt, twins, steps=1)
    assert not torch.equal(opt.state[twins[0]]["rotation"], opt.state[twins[1]]["rotation"])
    assert not torch.equal(opt.state[twins[0]]["permutation"], opt.state[twins[1]]["permutation"])


def test_a_resumed_run_continues_exactly():
    whole, first = params(), params()
    run(OrthoAdam(whole, lr=1e-2), whole, steps=6)
    opt = OrthoAdam(first, lr=1e-2)
    run(opt, first, steps=3)
    saved = copy.deepcopy(opt.state_dict())
    resumed = [torch.nn.Parameter(p.detach().clone()) for p in first]
    again = OrthoAdam(resumed, lr=1e-2, seed=99)  # the saved rotations win over a new seed's
    again.load_state_dict(saved)
    assert again.state[resumed[0]]["permutation"].dtype == torch.long
    g = torch.Generator().manual_seed(1)
    for _ in range(3):  # replay the first three steps' draws so the last three match
        for p in resumed:
            torch.randn(p.shape, generator=g)
    for _ in range(3):
        for p in resumed:
            p.grad = torch.randn(p.shape, generator=g) * 3
        again.step()
    for a, b in zip(resumed, whole):
        assert torch.equal(a, b)
