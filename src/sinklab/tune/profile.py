"""Head profiling: which heads' edit moves the validation objective, and which way.

The papers profile by trying each head in turn (ZeroTuning scales one head's initial-token weight
at a fixed gamma and re-scores the validation split; ACT calibrates one head at a time): one
validation pass per head, 270 for a 30-layer, 9-head model, hours on a CPU. That is
:func:`ablation_profile` (``sinklab tune --profile ablation``). sinklab's default,
:func:`head_profile`, takes the derivative of the same objective with respect to every head's edit
strength at the identity instead (log gamma for ZeroTuning, 1 - beta for ACT), one backward pass per
validation example for all heads at once: the first-order answer to "does scaling this head help,
and which way". The search that follows (:mod:`.search`) judges whole tunings with lm-eval either
way, so no verdict rests on the profile; whether the two rank heads alike is measured
(``benchmarks/profile_ranking.py``).

The objective is read from the choices' log-likelihoods of the requests lm-eval builds
(:func:`sinklab.accuracy.harness.questions`): supervised, the log-probability of the correct choice
among the choices; unsupervised, minus the entropy over the choices (ZeroTuning's unsupervised
mode, which needs no labels).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from ..core.hooks import scoring_after
from ..core.progress import progress_bar
from ..intervene import _hooked
from .methods import TUNINGS

MODES = ("supervised", "unsupervised")
#: How heads are profiled: ``gradient`` (:func:`head_profile`) or ``ablation`` (:func:`ablation_profile`).
PROFILES = ("gradient", "ablation")


def choice_logliks(model, question) -> torch.Tensor:
    """(choices,): each choice's summed log-likelihood given its context, one right-padded batch,
    run as a prompt followed by the answers being scored (:func:`~sinklab.core.hooks.scoring_after`:
    ACT finds its sinks on the prompt's rows, as the judge has it do)."""
    rows = [list(ctx) + list(cont) for ctx, cont in question.pairs]
    width = max(map(len, rows))
    device = model.device
    ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, device=device)
        mask[i, : len(row)] = 1
    with scoring_after(len(question.pairs[0][0])):  # every choice shares the question's context
        logits = model(input_ids=ids, attention_mask=mask).logits
    logprobs = F.log_softmax(logits.float(), dim=-1)
    totals = []
    for i, (ctx, cont) in enumerate(question.pairs):
        start = len(ctx)
        targets = torch.tensor(cont, device=device)
        totals.append(logprobs[i, start - 1 : start - 1 + len(cont)].gather(-1, targets.unsqueeze(-1)).sum())
    return torch.stack(totals)


def objective(logliks: torch.Tensor, gold: int, mode: str) -> torch.Tensor:
    """Higher is better: log p(gold | the choices) (supervised) or minus the choices' entropy (unsupervised)."""
    logp = F.log_softmax(logliks, dim=-1)
    return logp[gold] if mode == "supervised" else (logp.exp() * logp).sum()


def head_profile(
    model,
    questions: Sequence,
    method: str,
    mode: str,
    shape: tuple[int, int],
    **options,
) -> torch.Tensor:
    """(L, H): the mean derivative of :func:`objective` over ``questions`` with respect to each
    head's strength of ``method``'s edit at the identity (positive: strengthening the edit on that
    head helps), the method's ``options`` (ACT: ``spare``, ``threshold``) given. Each question's
    choices follow its prompt, which ACT finds the sinks on (:func:`choice_logliks`)."""
    strength = torch.zeros(shape, device=model.device, requires_grad=True)
    total = torch.zeros(shape, device=model.device)
    hooked = TUNINGS[method].strength_hooks(strength, options)
    with _hooked(model, [], query_chunk=None) as hooks, hooks.attached(hooked):
        for question in progress_bar(questions, desc=f"profiling heads ({method})", unit="example", leave=False):
            value = objective(choice_logliks(model, question), question.gold, mode)
            (grad,) = torch.autograd.grad(value, strength, materialize_grads=True)  # no sink in this input: 0
            total += grad
    return total / max(len(questions), 1)


def ablation_profile(
    model,
    questions: Sequence,
    method: str,
    mode: str,
    shape: tuple[int, int],
    strength: float,
    heads: Optional[Sequence[tuple[int, int]]] = None,
    **options,
) -> torch.Tensor:
    """(L, H): for each (layer, head) of ``heads`` (None: every head; the others NaN), the mean of
    :func:`objective` over ``questions`` with that head alone edited at ``strength`` (ZeroTuning:
    log gamma; ACT: 1 - beta), minus the untouched model's: the papers' one-head-at-a-time profile."""
    base = _mean_objective(model, questions, mode, [])
    profile = torch.full(shape, float("nan"))
    tried = list(heads) if heads is not None else [(layer, head) for layer in range(shape[0]) for head in range(shape[1])]
    for layer, head in progress_bar(tried, desc=f"profiling heads one at a time ({method})", unit="head", leave=False):
        alone = torch.zeros(shape, device=model.device)
        alone[layer, head] = strength
        edited = TUNINGS[method].strength_hooks(alone, options)
        profile[layer, head] = _mean_objective(model, questions, mode, edited) - base
    return profile


@torch.no_grad()
def _mean_objective(model, questions: Sequence, mode: str, hooked: list) -> float:
    """:func:`objective`'s mean over ``questions`` with the hooks ``hooked`` attached."""
    total = 0.0
    with _hooked(model, [], query_chunk=None) as hooks, hooks.attached(hooked):
        for question in questions:
            total += float(objective(choice_logliks(model, question), question.gold, mode))
    return total / max(len(questions), 1)
