"""The multiple-choice judge of a compressed cache (``sinklab compress --accuracy TASKS``): few-shot
prompts of BIG-bench tasks whose shots are the compressed context. Does a press that keeps the
sink keep the model's accuracy?

Each test example's prompt is lm-eval's own (:func:`~sinklab.accuracy.questions`: BOS, the task's
prefix, ``shots`` examples with their answers, then the query). Everything before the query is
prefilled once and compressed once per cell (:func:`.evaluate.score_each`, as every input); the query and
each choice are then read through the compressed cache, as a user's question after a compressed
document would be. lm-eval scores the result: its evaluator runs over :func:`replayed`, an lm-eval
``LM`` that answers each request with the log-likelihood read through the cell's cache, so acc,
acc_norm and their standard errors are lm-eval's, and the dense cell is lm-eval's plain run of the
same prompts.

The run directory holds the scores in lm-eval's own files too (:func:`lm_eval_files`,
:mod:`sinklab.accuracy.lm_eval_files`): ``lm_eval_results.json``, one entry per task and cell,
``<task>|<policy>:<cell>`` (``navigate|dense:0/0``, ``navigate|streaming_llm:0.875/1``: a press's
ratio and sinks kept; ``navigate|kivi:4/1``: a quantizer's bits and protect), and each entry's
per-example ``samples_<task>_<policy>_<cell>.jsonl``. A job carries lm-eval's output on its cells
in its result (``lm_eval``, kept under ``presses/``).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from functools import partial
from typing import Iterator

import torch

from ..accuracy import (
    Judged,
    LmEvalFiles,
    Question,
    Scored,
    TaskOutput,
    check_prompts_fit,
    check_tasks,
    evaluate,
    lm_for,
    questions,
    read_task,
)
from ..core.progress import progress_bar
from ..kvcache import branch
from .evaluate import score_each

SPLIT = "test"


def check_judge(cfg, tokenizer, max_positions) -> None:
    """Before the run directory is claimed: the tasks (:func:`~sinklab.accuracy.check_tasks`) and
    their test prompts within the model's positions (the full-cache cell must stay lm-eval's plain run)."""
    sizes = cfg.accuracy_sizes
    check_prompts_fit(check_tasks(cfg.accuracy, tokenizer, sizes), tokenizer, cfg.accuracy_shots, sizes, max_positions, (SPLIT,))


def score_tasks(model, tokenizer, policies: dict, cfg) -> Iterator[tuple[str, str, dict, dict]]:
    """(``accuracy:<task>``, cell, scores, lm-eval's output) for every task and cell of ``policies``:
    as scores, lm-eval's figures of the test split read through the cell's cache
    (:meth:`~sinklab.accuracy.Scored.record`, the per-example lists a paired verdict needs included), and the
    compressions' ``kept_fraction`` and ``bytes_ratio`` (means over the prompts: what the cell did
    to the shots, which a quantizer keeping its recent tokens whole may leave whole); then what
    lm-eval's evaluator returned on the cell (:meth:`~sinklab.accuracy.TaskOutput.record`, for
    :func:`lm_eval_files`). Each prompt's shots are one input of :func:`.evaluate.score_each`;
    ``cfg``: the :class:`~.config.CompressConfig` (its ``accuracy`` tasks, shots, test and rotations:
    each order of an example's choices is a prompt of its own)."""
    lm = lm_for(model, tokenizer, batch_size=1)
    shots, sizes, rotations = cfg.accuracy_shots, cfg.accuracy_sizes, cfg.accuracy_rotations
    for name in cfg.accuracy:
        task = read_task(name)
        asked = questions(lm, task, SPLIT, shots, sizes, rotations=rotations)
        inputs = [
            (str(i), torch.tensor([q.pairs[0][0][: q.query_start]]), partial(_answers, model, q)) for i, q in enumerate(asked)
        ]
        answers: dict = {cell: {} for cell in policies}
        done: dict = {cell: [] for cell in policies}
        for _, cell, scores in score_each(
            model, policies, progress_bar(inputs, desc="multiple-choice prompts", unit="prompt", leave=False)
        ):
            answers[cell].update(scores.pop("answers"))
            done[cell].append(scores)
        for cell in policies:
            (scored,) = evaluate(replayed(answers[cell]), [task], SPLIT, shots, sizes, rotations=rotations)
            kept = {key: statistics.fmean(d[key] for d in done[cell]) for key in ("kept_fraction", "bytes_ratio")}
            yield f"accuracy:{task.name}", cell, {**scored.record(), **kept}, scored.lm_eval.record()


def lm_eval_files(cfg, jobs: dict, model: str) -> LmEvalFiles:
    """Every job's cells of every task as lm-eval's files hold them: ``jobs`` maps a job (the dense
    cache, a press, a quantizer) to its result, in the run's order; a cell's entry is
    ``<task>|<job>:<cell>``."""
    judged = []
    for job, result in jobs.items():
        for name, cells in result["lm_eval"].items():
            task = name.split(":", 1)[1]
            for cell, output in cells.items():
                scored = Scored.from_record(result["rows"][name][cell])
                scored = replace(scored, lm_eval=TaskOutput.from_record(output))
                judged.append(Judged(task, f"{job}:{cell}", scored, {"policy": job, "cell": cell}))
    return LmEvalFiles(tuple(judged), model, 0, cfg.accuracy_rotations, cfg.splits)


@torch.no_grad()
def _answers(model, question: Question, cache) -> dict:
    """{"answers": {(context, continuation) strings: (log-likelihood, greedy)}} of ``question``'s
    choices, its query read through ``cache`` (the shots, compressed)."""
    query = torch.tensor([question.pairs[0][0][question.query_start :]], device=model.device)
    read = model(query, cache=cache, logits_to_keep=1)
    return {
        "answers": {strings: _choice_loglik(model, read, choice) for (_, choice), strings in zip(question.pairs, question.asked)}
    }


def _choice_loglik(model, read, choice: tuple[int, ...]) -> tuple[float, bool]:
    """The choice's log-likelihood after the query (``read``: the query's forward through the cell's
    cache) and whether greedy decoding gives it, as lm-eval's ``loglikelihood`` answers."""
    ids = torch.tensor([choice], device=read.logits.device)
    logits = read.logits[:, -1:]
    if len(choice) > 1:
        logits = torch.cat([logits, model(ids[:, :-1], cache=branch(read.cache)).logits], 1)
    logprobs = logits[0].float().log_softmax(-1)
    return float(logprobs.gather(1, ids[0, :, None]).sum()), bool((logprobs.argmax(-1) == ids[0]).all())


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
