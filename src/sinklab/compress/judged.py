"""The multiple-choice judge of a compressed cache (``sinklab compress --accuracy TASKS``): few-shot
prompts of BIG-bench tasks whose shots are the compressed context. Does a press that keeps the
sink keep the model's accuracy?

Each test example's prompt is lm-eval's own (:func:`~sinklab.accuracy.questions`: BOS, the task's
prefix, ``shots`` examples with their answers, then the query). Everything before the query is
prefilled once and compressed once per cell (:mod:`.evaluate`'s prefill and branches); the query and
each choice are then read through the compressed cache, as a user's question after a compressed
document would be. lm-eval scores the result: its evaluator runs over :func:`replayed`, an lm-eval
``LM`` that answers each request with the log-likelihood read through the cell's cache, so acc,
acc_norm and their standard errors are lm-eval's, and the dense cell is lm-eval's plain run of the
same prompts.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterator, Sequence

import torch

from ..accuracy import Question, Scored, check_tasks, evaluate, lm_for, questions, read_task, sizes_for, verdict
from ..core.errors import check
from ..core.progress import progress_bar
from ..press import attention_for, branch
from .evaluate import compressed, prefill

SPLIT = "test"


def check_shots(tasks: Sequence[str], shots: int, test: int, tokenizer) -> None:
    """Before anything runs: the tasks (:func:`~sinklab.accuracy.check_tasks`), and shots to compress."""
    check(shots >= 1, f"--accuracy-shots must be at least 1: the shots are the context a press compresses, got {shots}")
    check_tasks(tasks, shots, test, tokenizer)


def score_tasks(model, tokenizer, policies: dict, tasks: Sequence[str], shots: int, test: int) -> Iterator[tuple[str, str, dict]]:
    """(``accuracy:<task>``, cell, scores) for every task and cell of ``policies``: lm-eval's figures
    of the test split read through the cell's cache (:func:`scored_record`: the per-example lists a
    paired verdict needs included)."""
    lm = lm_for(model, tokenizer, batch_size=1)
    sizes = sizes_for(shots, test=test)
    for name in tasks:
        task = read_task(name)
        asked = questions(lm, task, SPLIT, shots, sizes)
        for cell, answers in _read_through(model, policies, asked).items():
            (scored,) = evaluate(replayed(answers), [task], SPLIT, shots, sizes)
            yield f"accuracy:{task.name}", cell, scored_record(scored)


@torch.no_grad()
def _read_through(model, policies: dict, asked: Sequence[Question]) -> dict:
    """Per cell: {(context, continuation) strings: (log-likelihood, greedy)} for every request."""
    family = list(policies.values())
    out: dict = {cell: {} for cell in policies}
    with attention_for(model, family[0]):
        for question in progress_bar(asked, desc="multiple-choice prompts", unit="prompt", leave=False):
            context = question.pairs[0][0]
            shots = torch.tensor([context[: question.query_start]], device=model.device)
            query = torch.tensor([context[question.query_start :]], device=model.device)
            cache, tally = prefill(model, shots, family)
            for cell, policy in policies.items():
                twin, _ = compressed(cache, policy, tally)
                read = model(query, cache=twin, logits_to_keep=1)
                for (_, choice), strings in zip(question.pairs, question.asked):
                    out[cell][strings] = _choice_loglik(model, read, choice)
    return out


def _choice_loglik(model, read, choice: tuple[int, ...]) -> tuple[float, bool]:
    """The choice's log-likelihood after the query (``read``: the query's forward through the cell's
    cache) and whether greedy decoding gives it, as lm-eval's ``loglikelihood`` answers."""
    ids = torch.tensor([choice], device=read.logits.device)
    logits = read.logits[:, -1:]
    if len(choice) > 1:
        logits = torch.cat([logits, model(ids[:, :-1], cache=branch(read.cache)).logits], 1)
    logprobs = logits[0].float().log_softmax(-1)
    return float(logprobs.gather(1, ids[0, :, None]).sum()), bool((logprobs.argmax(-1) == ids[0]).all())


def scored_record(scored: Scored) -> dict:
    """A :class:`Scored` as a job keeps it in JSON (its per-example lists included)."""
    return asdict(scored)


def scored_from(record: dict) -> Scored:
    fields = Scored.__dataclass_fields__
    return Scored(**{k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in fields})


def choice_verdict(base: dict, cell: dict) -> dict:
    """The paired verdict of a cell's :func:`scored_record` against another's (the same prompts)."""
    return verdict(scored_from(base), scored_from(cell))


def replayed(answers: dict):
    """An lm-eval language model that answers each log-likelihood request from ``answers`` (what a
    compressed cache gave for it), so that lm-eval's evaluator scores what sinklab read."""
    from lm_eval.api.model import LM

    class Replayed(LM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return [answers[tuple(request.args)] for request in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("the compressed-cache judge asks multiple-choice log-likelihoods only")

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("the compressed-cache judge asks multiple-choice log-likelihoods only")

    return Replayed()
