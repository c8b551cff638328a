"""OrthoAdam (Kaul et al., ICLR 2025, arXiv 2410.17174, their Algorithm 1): Adam whose moments live
in a fixed, randomly rotated basis per parameter, so that no coordinate of the model is singled out.

Each step rotates the gradient, g~ = Q g, runs Adam's moment and bias-correction arithmetic on g~,
and rotates the update back, theta -= Q^T (lr m^ / (sqrt(v^) + eps)). Weight decay, when a group
has it, is decoupled as in AdamW (``theta *= 1 - lr * wd``) and never rotated.

A dense rotation of a large tensor does not fit (a text run's embedding holds 2.44M entries: its
matrix would take 24 TB), so Q is built in blocks: the flattened parameter is permuted by a fixed
random permutation, cut into consecutive blocks of :data:`BLOCK` entries, and every block is
rotated by one random orthogonal matrix (the last, shorter block by its own). The permutation
mixes entries of different rows and columns into one block, so a residual dimension's weights
are not kept together. A parameter of at most :data:`BLOCK` entries gets one dense rotation, as in
the paper. Rotations and permutations are drawn from the run's seed and the parameter's index,
kept in the optimizer state and so saved in every checkpoint: a resumed run is exact.

With identity rotations (``rotate=False``) every step is torch.optim.Adam's ``foreach=False``
arithmetic in the same order, bit for bit (tests/test_orthoadam.py).
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch

#: The optimizers a training command offers (``--optimizer``): AdamW, or OrthoAdam with the same
#: groups, betas, eps and decoupled weight decay.
OPTIMIZERS = ("adamw", "orthoadam")
#: Entries per rotated block: each block's matrix holds BLOCK**2 floats (256 KB), and a step costs
#: about 2 * BLOCK multiply-adds per parameter entry (one block product each way).
BLOCK = 256
#: Parameters per optimizer: a parameter's generator seed is ``(seed << INDEX_BITS) + index``.
INDEX_BITS = 20


def build_optimizer(name: str, params: Iterable, *, seed: int, foreach: Optional[bool] = None, **adam) -> torch.optim.Optimizer:
    """One of :data:`OPTIMIZERS` over ``params`` (tensors or groups) with Adam's settings ``adam``
    (lr, betas, eps, weight_decay); OrthoAdam draws its rotations from ``seed``."""
    if name == "orthoadam":
        return OrthoAdam(params, seed=seed, **adam)
    return torch.optim.AdamW(params, foreach=foreach, **adam)


def random_rotation(size: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-random orthogonal matrix: QR of a Gaussian matrix, the signs fixed by R's diagonal."""
    q, r = torch.linalg.qr(torch.randn(size, size, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


class OrthoAdam(torch.optim.Optimizer):
    """Adam in a fixed random orthogonal basis per parameter (see the module's docstring).

    ``seed`` fixes every parameter's rotation; ``rotate=False`` keeps the identity (plain Adam)."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        seed: int = 0,
        rotate: bool = True,
        block: int = BLOCK,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.seed, self.rotate, self.block = seed, rotate, block
        count = sum(len(group["params"]) for group in self.param_groups)
        if count >= 1 << INDEX_BITS:
            raise ValueError(f"OrthoAdam draws one rotation per parameter for at most {1 << INDEX_BITS} parameters, got {count}")

    def _parameters(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _fresh_state(self, index: int, p: torch.Tensor) -> dict:
        n = p.numel()
        size = min(self.block, n)
        tail = n % size
        state = {
            "step": torch.tensor(0.0),
            "exp_avg": torch.zeros(n, dtype=p.dtype, device=p.device),
            "exp_avg_sq": torch.zeros(n, dtype=p.dtype, device=p.device),
        }
        if self.rotate:
            generator = torch.Generator().manual_seed((self.seed << INDEX_BITS) + index)
            state["permutation"] = torch.randperm(n, generator=generator).to(p.device)
            state["rotation"] = random_rotation(size, generator).to(p.device, p.dtype)
            if tail:
                state["tail_rotation"] = random_rotation(tail, generator).to(p.device, p.dtype)
        return state

    @staticmethod
    def _blocks(flat: torch.Tensor, state: dict, inverse: bool) -> torch.Tensor:
        """Q flat (``inverse=False``) or Q^T flat, for the permuted block rotation of ``state``."""
        rotation, tail_rotation = state["rotation"], state.get("tail_rotation")
        size = rotation.shape[0]
        full = flat.numel() - (0 if tail_rotation is None else tail_rotation.shape[0])
        # rows are blocks: x @ R^T rotates each block by R, x @ R by R^T
        head = flat[:full].view(-1, size) @ (rotation if inverse else rotation.T)
        if tail_rotation is None:
            return head.reshape(-1)
        tail = flat[full:] @ (tail_rotation if inverse else tail_rotation.T)
        return torch.cat([head.reshape(-1), tail])

    def _rotated(self, grad: torch.Tensor, state: dict) -> torch.Tensor:
        flat = grad.reshape(-1)
        if "rotation" not in state:
            return flat
        return self._blocks(flat[state["permutation"]], state, inverse=False)

    def _unrotated(self, update: torch.Tensor, state: dict) -> torch.Tensor:
        if "rotation" not in state:
            return update
        out = torch.empty_like(update)
        out[state["permutation"]] = self._blocks(update, state, inverse=True)
        return out

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(self._fresh_state(index - 1, p))
                state["step"] += 1
                if weight_decay != 0:
                    p.mul_(1 - lr * weight_decay)
                grad = self._rotated(p.grad, state)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                step_size = lr / (1 - beta1**step)
                denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
                # Adam's addcdiv_ order, -step_size * m / denom, then the rotation back
                update = torch.zeros_like(exp_avg).addcdiv_(exp_avg, denom, value=-step_size)
                p.add_(self._unrotated(update, state).view_as(p))
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        """As torch's, but the permutations stay integer indices (torch casts every state tensor
        but ``step`` to its parameter's float type, which would round indices past 2**24)."""
        permutations = {int(k): v["permutation"] for k, v in state_dict["state"].items() if "permutation" in v}
        super().load_state_dict(state_dict)
        parameters = self._parameters()
        for index, permutation in permutations.items():
            self.state[parameters[index]]["permutation"] = permutation.to(parameters[index].device, torch.long)
