"""Synthetic tasks. The trigger-conditional task of Ran-Milo (2026), exactly as in the paper.

A sequence of L vectors in R^n is fed to attention directly:

* coordinate 0 flags BOS and is set only at position 0; the BOS vector is exactly e_0;
* coordinate 1 flags the single trigger, at 0-indexed position j;
* coordinates 2 .. n-2 are i.i.d. Uniform(-1, 1) for every non-BOS token (the trigger included);
* coordinate n-1 is a bias channel: 1 for content tokens, 0 for BOS and the trigger.

Targets (single layer, no residual): 0 everywhere except at j, where the target is the mean of
tokens 1..j inclusive. With residual connections the model must add that: the target is x_i at
i != j and x_j + mean(x_1..x_j) at j. At every non-trigger position the layer must therefore do
nothing, which softmax can only approximate by attending to BOS (the sink).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

import torch

from ..core.errors import check

BOS, TRIGGER = 0, 1


class TriggerBatch(NamedTuple):
    x: torch.Tensor  # (B, L, n) inputs
    y: torch.Tensor  # (B, L, n) targets
    trigger: torch.Tensor  # (B,) 0-indexed trigger positions


@dataclass(frozen=True)
class TriggerTask:
    """The trigger-conditional task; ``residual`` selects the multi-layer (residual) targets."""

    n: int = 16
    length: int = 16
    eval_trigger: int = 7
    residual: bool = False

    def __post_init__(self) -> None:
        check(self.n >= 3, f"the token dimension n must be at least 3 (BOS, trigger, bias), got {self.n}")
        check(self.length >= 4, f"the sequence length L must be at least 4, got {self.length}")
        self.check_trigger(self.eval_trigger)

    @property
    def bias_channel(self) -> int:
        return self.n - 1

    def check_trigger(self, position: int) -> None:
        check(
            2 <= position <= self.length - 1,
            f"trigger position {position} is outside the sequence: it must lie in 2..{self.length - 1} "
            f"(0-indexed) for L = {self.length}",
        )

    def sample(self, batch: int, generator: Optional[torch.Generator] = None, trigger: Optional[int] = None) -> TriggerBatch:
        """Draw ``batch`` sequences; the trigger is uniform in {2, ..., L-1} unless fixed."""
        if trigger is not None:
            self.check_trigger(trigger)
        return self._assemble(*self._draw(batch, generator, trigger))

    def sample_stacked(self, batch: int, generators: Sequence[torch.Generator]) -> TriggerBatch:
        """One batch per generator, stacked (S, batch, L, n): the same draws as calling
        :meth:`sample` with each generator in turn, with the rest of the work done once for all."""
        draws = [self._draw(batch, g) for g in generators]
        stacked = self._assemble(torch.cat([u for u, _ in draws]), torch.cat([j for _, j in draws]))
        return TriggerBatch(*(t.view(len(generators), batch, *t.shape[1:]) for t in stacked))

    def _draw(
        self, batch: int, generator: Optional[torch.Generator], trigger: Optional[int] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The random part of a batch: content values (batch, L-1, n-3) and trigger positions."""
        values = torch.rand(batch, self.length - 1, self.n - 3, generator=generator) * 2.0 - 1.0
        if trigger is None:
            return values, torch.randint(2, self.length, (batch,), generator=generator)
        return values, torch.full((batch,), trigger, dtype=torch.long)

    def _assemble(self, values: torch.Tensor, j: torch.Tensor) -> TriggerBatch:
        batch, n = values.shape[0], self.n
        x = torch.zeros(batch, self.length, n)
        x[:, 0, BOS] = 1.0
        x[:, 1:, 2 : n - 1] = values
        x[:, 1:, self.bias_channel] = 1.0
        rows = torch.arange(batch)
        x[rows, j, TRIGGER] = 1.0
        x[rows, j, self.bias_channel] = 0.0
        return TriggerBatch(x, self.targets(x, j), j)

    def targets(self, x: torch.Tensor, trigger: torch.Tensor) -> torch.Tensor:
        """Targets for inputs ``x`` (B, L, n) with triggers at ``trigger`` (B,)."""
        counts = torch.arange(1, self.length, dtype=x.dtype).view(1, -1, 1)
        prefix_mean = x[:, 1:].cumsum(dim=1) / counts  # (B, L-1, n): mean of tokens 1..i
        rows = torch.arange(x.shape[0])
        y = x.clone() if self.residual else torch.zeros_like(x)
        y[rows, trigger] += prefix_mean[rows, trigger - 1]
        return y

    def non_trigger_rows(self, trigger: torch.Tensor) -> torch.Tensor:
        """(B, L) bool: query rows 1..L-1 other than the trigger (row 0 can only see BOS)."""
        positions = torch.arange(self.length).unsqueeze(0)
        return (positions >= 1) & (positions != trigger.unsqueeze(1))
