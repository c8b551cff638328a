"""Multiple-choice accuracy through lm-evaluation-harness (lm-eval 0.4.13), on the user's own
model object: BIG-bench tasks become lm-eval task configurations over local JSON files, and
lm-eval's own evaluator scores them (acc, acc_norm, their standard errors, n). sinklab scores
nothing itself; it reads lm-eval's per-example log-likelihoods back for the continuous measures
(the gold answer's log-likelihood, the entropy over the choices) and the paired tests.

Whatever sinklab context manager is open around :func:`evaluate` (an intervention's or a tuning's
``applied``) acts on every forward lm-eval runs, so they are judged by the same engine. (A
KV-cache press acts on the steps after a prefill, and lm-eval scores each choice in one prefill:
a press inside the block changes nothing here; ``sinklab compress --accuracy`` reads the prompts
through a compressed cache itself and hands lm-eval the log-likelihoods, :mod:`sinklab.compress.judged`.)

Position 0 is the BOS token: ``BosLM`` (lm-eval's ``HFLM``) puts the tokenizer's BOS first in
every request, as sinklab's other inputs do (lm-eval would otherwise follow the tokenizer, and
SmolLM2's adds none), so "the initial token" is the same token in every judge.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Sequence

from ..core.errors import check
from ..core.hooks import PROMPT_UNKNOWN, scoring_after
from ..core.progress import progress_bar
from .bigbench import AccuracyTask
from .lm_eval_files import BOOTSTRAP_ITERS
from .rotations import EVERY, rotated_docs
from .scored import Scored, TaskOutput, gathered


def lm_for(model, tokenizer, batch_size: int = 8):
    """lm-eval's ``HFLM`` around a model object the user holds, BOS first in every log-likelihood
    request (multiple choice, what sinklab's judges ask; lm-eval's generation requests are left as
    lm-eval encodes them).

    lm-eval right-pads a batch and passes no padding mask (a causal model's real rows never see
    the padding); an edit that reads whole columns of attention, as ACT does, would count the
    padded rows, so ACT is judged at ``batch_size=1``. Each one-request forward runs inside
    :func:`~sinklab.core.hooks.scoring_after` with its prompt's length, so that an edit that reads
    the input's attention (ACT) finds the same sinks for every choice of a question."""
    from lm_eval.models.huggingface import HFLM

    class BosLM(HFLM):
        def tok_encode(self, string, add_special_tokens=None, left_truncate_len=None, **kwargs):
            ids = super().tok_encode(string, add_special_tokens=add_special_tokens, left_truncate_len=left_truncate_len, **kwargs)
            bos = self.tokenizer.bos_token_id
            return ids if bos is None or ids[:1] == [bos] else [bos, *ids]

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return super().loglikelihood(requests, disable_tqdm=True)  # sinklab's bar counts the evaluations

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
            self.prompts = prompt_lengths(requests)  # lm-eval runs each of these inputs once
            with progress_bar(total=len(self.prompts), desc="scoring choices", unit="input", leave=False) as self.bar:
                return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)

        def _model_call(self, inps, attn_mask=None, labels=None):
            prompts = getattr(self, "prompts", {})  # set per call of _loglikelihood_tokens
            found = prompts.get(tuple(inps[0].tolist())) if inps.shape[0] == 1 else None
            prompt_end = PROMPT_UNKNOWN if found is None else found
            with scoring_after(prompt_end):  # what ACT finds the sinks on: the prompt's rows (core.hooks)
                out = super()._model_call(inps, attn_mask=attn_mask, labels=labels)
            if getattr(self, "bar", None) is not None:
                self.bar.update(inps.shape[0])
            return out

    check_bos(tokenizer)
    with _quietly():
        return BosLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))


def prompt_lengths(requests) -> dict[tuple[int, ...], int]:
    """lm-eval's input ids of each request (the context and the continuation but its last token,
    what a causal model is run on) -> the context's length: where the prompt ends in that input. An
    input two requests share with different contexts (not seen in a task's prompts) keeps the shorter."""
    found: dict[tuple[int, ...], int] = {}
    for _, context, continuation in requests:
        key = tuple(context + continuation)[:-1]
        found[key] = min(found.get(key, len(context)), len(context))
    return found


def check_bos(tokenizer) -> None:
    """Refuse a tokenizer with no BOS token: the judges and the tunings read position 0 as BOS, and
    without one the initial token would be the prompt's first word."""
    check(
        getattr(tokenizer, "bos_token_id", None) is not None,
        "this tokenizer defines no BOS token: the tunings act on the initial token, "
        "and without BOS it would be the prompt's first word",
    )


def task_config(task: AccuracyTask, docs: dict[str, list[dict]], split: str) -> dict:
    """The lm-eval configuration of ``task`` scored on ``split``; its splits' docs (``train`` is the
    shot pool) are handed to lm-eval in memory (``custom_dataset``), so nothing is written or cached."""
    from datasets import Dataset

    name = "sinklab_bb_" + task.name.replace("/", "__")
    splits = {part: Dataset.from_list([{**doc, "prefix": task.prefix} for doc in rows]) for part, rows in docs.items()}
    return {
        "task": f"{name}.{split}",
        "custom_dataset": lambda **metadata: splits,
        "output_type": "multiple_choice",
        "training_split": "train",
        "fewshot_split": "train",
        "test_split": split,
        "doc_to_text": "query",  # fields of the docs, read as they are (no template)
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "description": "{{prefix}}",  # a template whose value is the task_prefix, never parsed itself
        "target_delimiter": "",  # BIG-bench's output prefix ends the query ("\nA: ")
        "fewshot_delimiter": task.separator,
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
        "metadata": {"version": 1.0},
    }


def loaded(tasks: Sequence[AccuracyTask], split: str, shots: int, sizes: dict, seed: int = 0, rotations: int = EVERY) -> dict:
    """lm-eval's tasks for ``tasks`` on ``split`` (``validation`` or ``test``), loaded by its task
    manager, with ``shots`` shots from each task's ``train`` pool drawn with ``seed`` (what
    ``simple_evaluate``'s ``fewshot_random_seed`` sets; its other seeds touch nothing a
    multiple-choice log-likelihood reads). ``sizes``: the seeded splits' counts (:func:`sizes_for`);
    ``rotations``: the orders each example of ``split`` is asked in (:mod:`.rotations`)."""
    check(split in ("validation", "test"), f"split must be validation or test, got {split!r}")
    check(
        0 <= shots <= sizes["shots"],
        f"{shots} shots asked for, but the shot pool holds {sizes['shots']} examples: "
        f"take the sizes from sizes_for({shots}, ...), which makes the pool large enough",
    )
    configs = [task_config(t, _docs(t, split, sizes, seed, rotations), split) for t in tasks]
    with _quietly():
        built = _task_manager().load(configs)
    for task in built["tasks"].values():
        task.set_config(key="num_fewshot", value=shots)
        task.set_fewshot_seed(seed=seed)
        if rotations != 1:
            _same_shots_per_example(task, seed)
    return built


def _same_shots_per_example(task, seed: int) -> None:
    """Every order of an example gets the same shots: lm-eval draws each doc's shots from one
    generator that advances per doc, which would give an example's orders different shots (and
    mix which shots were drawn into the position balance); here each example's draw is seeded by
    (``seed``, its index). With one order, lm-eval's own draw stays (its run, key for key)."""
    own = task.fewshot_context

    def fewshot_context(doc, num_fewshot, *args, **kwargs):
        task.sampler.set_rnd(seed * 1_000_003 + int(doc["example"]))
        return own(doc, num_fewshot, *args, **kwargs)

    task.fewshot_context = fewshot_context


def evaluate(
    lm,
    tasks: Sequence[AccuracyTask],
    split: str,
    shots: int,
    sizes: dict,
    seed: int = 0,
    rotations: int = EVERY,
) -> list[Scored]:
    """Score ``tasks`` on ``split`` with ``shots`` shots through lm-eval's evaluator
    (``lm_eval.evaluator.evaluate``, what ``simple_evaluate`` calls after collecting the machine's
    environment, which takes seconds a call), requests never cached: a context manager around this
    call must change what is scored. Each example is asked under ``rotations`` orders of its
    listed choices (:mod:`.rotations`; default every cyclic one, 1: the listed order alone). Each
    :class:`Scored` keeps lm-eval's output for its task (``lm_eval``: what :mod:`.lm_eval_files`
    writes as lm-eval's own files)."""
    from lm_eval.evaluator import evaluate as lm_evaluate

    built = loaded(tasks, split, shots, sizes, seed, rotations)
    with _quietly():
        out = lm_evaluate(lm=lm, task_dict=built, bootstrap_iters=BOOTSTRAP_ITERS, log_samples=True)
    listed = [t.examples[0].listing is not None for t in tasks]
    return [
        gathered(t.name, split, shots, lists, out["samples"][name], out["results"][name], TaskOutput.of(out, name))
        for t, lists, name in zip(tasks, listed, built["tasks"])
    ]


@dataclass(frozen=True)
class Question:
    """One example as lm-eval asks it: per choice the (context, continuation) token ids its
    tokenisation gives (lm-eval's ``_encode_pair``, BOS first) and the strings it asked them as
    (``asked``), the correct choice, and where the query starts in the context's ids
    (``query_start``: the tokens before it are BOS, the task's prefix and the shots)."""

    pairs: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    gold: int
    asked: tuple[tuple[str, str], ...]
    query_start: int


def questions(
    lm, task: AccuracyTask, split: str, shots: int, sizes: dict, seed: int = 0, rotations: int = EVERY
) -> list[Question]:
    """The requests :func:`evaluate` would score (same configuration, shots, seed and rotations,
    built by lm-eval's own task), as token ids, one per example and order: what a tuning
    differentiates through, since lm-eval returns log-likelihoods, not gradients."""
    by_doc: dict[int, list] = {}
    for instance in _requests(task, split, shots, sizes, seed, rotations):
        by_doc.setdefault(instance.doc_id, []).append(instance)
    out = []
    for doc_id in sorted(by_doc):
        asked = sorted(by_doc[doc_id], key=lambda inst: inst.idx)
        pairs = tuple(tuple(map(tuple, lm._encode_pair(*inst.arguments))) for inst in asked)
        start = _query_start(lm, asked[0].arguments[0], asked[0].doc["query"], pairs[0][0])
        out.append(Question(pairs, int(asked[0].doc["gold"]), tuple(inst.arguments for inst in asked), start))
    return out


def longest_request(task: AccuracyTask, tokenizer, split: str, shots: int, sizes: dict, seed: int = 0) -> int:
    """The tokens of the longest request (prompt and choice, BOS first) lm-eval would make of
    ``task``: what must fit in the model's positions (every order of the choices has the same
    length but for the tokens where they join: all are asked). The tokenizer alone, no model."""
    bos = 0 if tokenizer.bos_token_id is None else 1
    asked = [inst.arguments for inst in _requests(task, split, shots, sizes, seed, EVERY)]
    return bos + max(len(tokenizer(context + choice, add_special_tokens=False)["input_ids"]) for context, choice in asked)


def _requests(task: AccuracyTask, split: str, shots: int, sizes: dict, seed: int, rotations: int) -> list:
    """lm-eval's request instances for ``task`` (one per example, order and choice), built by its own task."""
    (built,) = loaded([task], split, shots, sizes, seed, rotations)["tasks"].values()
    with _quietly():
        built.build_all_requests(rank=0, world_size=1)
    return built.instances


def _docs(task: AccuracyTask, split: str, sizes: dict, seed: int, rotations: int) -> dict[str, list[dict]]:
    """The docs of each of ``task``'s splits: those of ``split`` asked under ``rotations`` orders, the
    others (the shot pool's shots) in their listed order."""
    parts = task.splits(seed, sizes["shots"], sizes["validation"], sizes["test"])
    return {part: rotated_docs(rows, rotations) if part == split else [e.as_doc() for e in rows] for part, rows in parts.items()}


def _query_start(lm, context: str, query: str, context_ids: tuple[int, ...]) -> int:
    """The tokens of ``context`` (lm-eval's prompt: prefix, shots, then ``query``) that come before
    the query: those its own encoding shares with the encoding of the text before the query (a
    token that straddles the boundary counts as the query's)."""
    check(context.endswith(query), "lm-eval's prompt does not end with the example's query")
    before = lm.tok_encode(context[: len(context) - len(query)])
    shared = 0
    for mine, theirs in zip(before, context_ids):
        if mine != theirs:
            break
        shared += 1
    return shared


@lru_cache(maxsize=1)
def _task_manager():
    """lm-eval's task manager without its own task index (sinklab's tasks are configurations in
    memory; indexing the thousands of task files lm-eval ships would take seconds per process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=False)


@contextmanager
def _quietly() -> Iterator[None]:
    """Inside the block, lm-eval neither logs below ERROR ("Overwriting default num_fewshot ...",
    each configuration) nor draws its per-task bar while it builds the requests (``lm_eval.api.task``'s
    ``tqdm``, which has no switch: that module's name is a disabled bar for the block); sinklab
    reports what it ran and counts the evaluations itself. Both are restored after the block."""
    from functools import partial

    import lm_eval.api.task as task_module

    loggers = [logging.getLogger(name) for name in ("lm-eval", "lm_eval")]
    levels = [logger.level for logger in loggers]
    drawn = task_module.tqdm
    task_module.tqdm = partial(drawn, disable=True)
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        task_module.tqdm = drawn
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
