"""One task's multiple-choice scores as lm-eval gave them, gathered per example over the orders its
choices were asked in (:mod:`.rotations`): the figures of a table row, the per-example lists a
paired verdict reads, and the position bias (accuracy by the answer's listed position, the share of
the model's picks at each position); and lm-eval's own output on the task (:class:`TaskOutput`),
which :mod:`.lm_eval_files` writes as lm-eval's files."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..core.errors import check
from ..core.jsonable import jsonable

#: lm-eval's evaluator output kept per task (:class:`TaskOutput`), in the order lm-eval writes it.
PER_TASK = ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples")


@dataclass(frozen=True)
class TaskOutput:
    """What lm-eval's evaluator returned for one task: ``parts``, its entry of each of
    :data:`PER_TASK`, and ``samples``, its ``log_samples`` per doc (``doc_id``, ``doc``,
    ``target``, ``arguments``, ``resps``, ``filtered_resps``, ``acc``, ``acc_norm``, ...), both
    as JSON keeps them (a compress job carries them through its JSON file)."""

    name: str  # lm-eval's task name (sinklab_bb_<task>.<split>)
    parts: dict
    samples: tuple = field(repr=False)

    @classmethod
    def of(cls, out: dict, name: str) -> "TaskOutput":
        """Task ``name``'s pieces of ``out``, the evaluator's output (``log_samples=True``)."""
        missing = [key for key in (*PER_TASK, "samples") if name not in (out.get(key) or {})]
        check(not missing, f"lm-eval's output for {name} has no {', '.join(missing)} (evaluate with log_samples=True)")
        return cls(name, {key: jsonable(out[key][name]) for key in PER_TASK}, tuple(jsonable(out["samples"][name])))

    def record(self) -> dict:
        return {"name": self.name, "parts": self.parts, "samples": list(self.samples)}

    @classmethod
    def from_record(cls, record: dict) -> "TaskOutput":
        return cls(record["name"], record["parts"], tuple(record["samples"]))


@dataclass(frozen=True)
class Scored:
    """One task at one split and shot count, as lm-eval scored it, and its examples in order.

    ``acc`` is the rotation-averaged accuracy (the mean of ``score``) and ``acc_strict`` the share
    of examples right under every order (``correct``); with one order (``rotations`` 1, or a task
    whose prompt lists no choices) both are lm-eval's ``acc``, and ``acc``, ``acc_norm`` and their
    standard errors are lm-eval's own figures. ``lm_eval``: what lm-eval's evaluator returned for
    the task (:class:`TaskOutput`: its results, configuration and per-doc samples,
    what :mod:`.lm_eval_files` writes), where :func:`~.harness.evaluate` scored it; left out of
    :meth:`record`, :meth:`row` and equality."""

    task: str
    split: str
    shots: int
    chance: float
    rotations: int  # the most orders an example was asked in (1: the listed order alone)
    listed: bool  # whether the prompt lists the choices (False: there was nothing to rotate)
    acc: float
    acc_stderr: float
    acc_norm: float
    acc_norm_stderr: float
    acc_strict: float
    score: tuple[float, ...] = field(repr=False)  # per example: the share of its orders answered right
    correct: tuple[bool, ...] = field(repr=False)  # per example: right under every order
    gold_loglik: tuple[float, ...] = field(repr=False)  # the correct choice's log-likelihood (mean over orders)
    gold_logprob: tuple[float, ...] = field(repr=False)  # its log-probability among the choices (log-softmax)
    entropy: tuple[float, ...] = field(repr=False)  # of softmax over the choices' log-likelihoods (nats)
    acc_by_position: tuple[Optional[float], ...] = field(repr=False)  # acc where the answer is listed i-th
    picks_by_position: tuple[float, ...] = field(repr=False)  # share of the model's picks listed i-th
    answers_by_position: tuple[float, ...] = field(repr=False)  # share of the correct answers listed i-th
    lm_eval: Optional[TaskOutput] = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.correct)

    def record(self) -> dict:
        """Every field as JSON keeps it (the per-example lists included): :meth:`from_record` reads it back."""
        return {f: list(v) if isinstance(v, tuple) else v for f, v in vars(self).items() if f in RECORDED}

    @classmethod
    def from_record(cls, record: dict) -> "Scored":
        values: dict[str, Any] = {f: tuple(record[f]) if isinstance(record[f], list) else record[f] for f in RECORDED}
        return cls(**values)

    def row(self) -> dict:
        """The figures of a table row (no per-example lists; the first listed position's share of
        the picks beside its share of the answers, the position bias at a glance)."""
        return {
            "task": self.task,
            "split": self.split,
            "shots": self.shots,
            "n": self.n,
            "rotations": self.rotations,
            "listed": self.listed,
            "chance": round(self.chance, 4),
            "acc": self.acc,
            "acc_stderr": self.acc_stderr,
            "acc_strict": self.acc_strict,
            "acc_norm": self.acc_norm,
            "acc_norm_stderr": self.acc_norm_stderr,
            "gold_loglik": sum(self.gold_loglik) / self.n,
            "gold_logprob": sum(self.gold_logprob) / self.n,
            "entropy": sum(self.entropy) / self.n,
            "first_picked": self.picks_by_position[0],
            "first_correct": self.answers_by_position[0],
        }


#: The fields :meth:`Scored.record` keeps (all but lm-eval's raw output).
RECORDED = tuple(f for f in Scored.__dataclass_fields__ if f != "lm_eval")


def gathered(
    name: str,
    split: str,
    shots: int,
    listed: bool,
    samples: Sequence[dict],
    results: dict,
    lm_eval: Optional[TaskOutput] = None,
) -> Scored:
    """A :class:`Scored` from lm-eval's per-doc ``samples`` of one task (docs tagged with their
    ``example`` by :func:`.rotations.rotated_docs`) and its ``results`` entry; ``listed``: whether
    the task's prompts list the choices; ``lm_eval``: the evaluator's output kept on it."""
    by_example: dict[int, list[dict]] = {}
    for sample in sorted(samples, key=lambda s: int(s["doc_id"])):
        by_example.setdefault(int(sample["doc"]["example"]), []).append(_doc_figures(sample))
    asked = [by_example[i] for i in sorted(by_example)]
    per_doc = [doc for docs in asked for doc in docs]
    width, orders = max(doc["choices"] for doc in per_doc), max(len(docs) for docs in asked)
    score = [statistics.fmean(doc["correct"] for doc in docs) for docs in asked]
    norm = [statistics.fmean(doc["correct_norm"] for doc in docs) for docs in asked]
    single = orders == 1  # lm-eval's own figures; with rotations, the per-example means'

    def mean_of(key: str) -> tuple[float, ...]:
        return tuple(statistics.fmean(doc[key] for doc in docs) for docs in asked)

    return Scored(
        task=name,
        split=split,
        shots=shots,
        chance=statistics.fmean(1.0 / docs[0]["choices"] for docs in asked),
        rotations=orders,
        listed=listed,
        acc=float(results["acc,none"]) if single else statistics.fmean(score),
        acc_stderr=_lm_eval_float(results["acc_stderr,none"]) if single else _stderr(score),
        acc_norm=float(results["acc_norm,none"]) if single else statistics.fmean(norm),
        acc_norm_stderr=_lm_eval_float(results["acc_norm_stderr,none"]) if single else _stderr(norm),
        acc_strict=statistics.fmean(s == 1.0 for s in score),
        score=tuple(score),
        correct=tuple(s == 1.0 for s in score),
        gold_loglik=mean_of("gold_loglik"),
        gold_logprob=mean_of("gold_logprob"),
        entropy=mean_of("entropy"),
        acc_by_position=tuple(_mean_or_none([d["correct"] for d in per_doc if d["gold"] == i]) for i in range(width)),
        picks_by_position=tuple(statistics.fmean(d["pick"] == i for d in per_doc) for i in range(width)),
        answers_by_position=tuple(statistics.fmean(d["gold"] == i for d in per_doc) for i in range(width)),
        lm_eval=lm_eval,
    )


def _doc_figures(sample: dict) -> dict:
    """One asked order's figures: the answer's log-likelihood and log-probability among the choices
    (which a term shared by every choice cannot move: lm-eval's trailing whitespace where the
    tokenizer keeps it apart from the choice), the entropy over the choices (of the same
    distribution), and the listed positions of the answer and of the model's pick."""
    logliks = [float(r[0]) for r in sample["filtered_resps"]]
    gold = int(sample["doc"]["gold"])
    top = max(logliks)
    log_total = top + math.log(sum(math.exp(x - top) for x in logliks))
    logprobs = [x - log_total for x in logliks]
    return {
        "choices": len(logliks),
        "gold": gold,
        "pick": logliks.index(top),  # lm-eval's acc: the first of the largest log-likelihoods
        "correct": bool(sample["acc"]),
        "correct_norm": bool(sample["acc_norm"]),
        "gold_loglik": logliks[gold],
        "gold_logprob": logprobs[gold],
        "entropy": -sum(math.exp(lp) * lp for lp in logprobs if lp > -math.inf),  # nats; a choice of p = 0 adds 0
    }


def _stderr(values: Sequence[float]) -> float:
    """The standard error of a mean as lm-eval gives it (the sample standard deviation over sqrt(n));
    NaN for one example, where lm-eval writes 'N/A'."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def _lm_eval_float(value) -> float:
    """A figure of lm-eval's results: its 'N/A' (a standard error of one example) as NaN."""
    return math.nan if value == "N/A" else float(value)


def _mean_or_none(values: list) -> Optional[float]:
    return statistics.fmean(values) if values else None
