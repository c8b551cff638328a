"""A judge's accuracy as lm-evaluation-harness's own files, for the tools that read them: beside
sinklab's summary, a run directory holds ``lm_eval_results.json`` (:data:`RESULTS_FILE`) and one
``samples_<task>_<run>.jsonl`` per scored run of a task.

``lm_eval_results.json`` has the layout ``lm_eval.simple_evaluate`` returns and ``lm-eval
--output_path`` writes: ``results``, ``group_subtasks``, ``configs``, ``versions``, ``n-shot``,
``higher_is_better`` and ``n-samples`` are lm-eval's evaluator's own output, kept as it returned
it (:class:`~.scored.TaskOutput`, taken in :func:`~.harness.evaluate`), not rebuilt; ``config`` holds what
``simple_evaluate`` records there that sinklab knows (the model, the shots' seed ``fewshot_seed``:
lm-eval records it there, not per task; ``bootstrap_iters``), and ``lm_eval_version`` the engine.
sinklab's additions are under ``sinklab``: the split, the split rule, the seed, the rotations
setting, and per entry its task and run, its samples file, the orders asked, sinklab's figures
(``figures``: the summary's row) and its per-example record (``scored``: what
:meth:`~.scored.Scored.from_record` reads back, so a paired verdict can be recomputed).

Entries. A judge scores one task several times (``tune``: the untouched and the tuned model on
test; ``intervene --accuracy``: the intact model and each experiment; ``compress --accuracy``: each
cell), so every key of the per-task parts is ``<task>|<run>`` (:attr:`Judged.name`): ``navigate|
untouched`` and ``navigate|tuned``; ``navigate|intact`` and ``navigate|<the experiment's label>``;
``navigate|<policy>:<cell>`` (``dense:0/0``, ``streaming_llm:0.875/1``: a press's ratio and sinks
kept, ``kivi:4/1``: a quantizer's bits and protect). lm-eval's ``alias`` is the entry's name (what
its tables print); ``name`` and ``configs[...]["task"]`` stay the lm-eval task sinklab built
(``sinklab_bb_<task>.<split>``). A samples file is named after its entry, every run of characters
other than letters, digits, ``.``, ``_`` and ``-`` written ``_`` (``samples_navigate_tuned.jsonl``);
``sinklab.entries[<entry>].samples`` names it.

Which figures are which. lm-eval scores docs: with rotations (:mod:`.rotations`) a doc is one
example asked in one order of its choices, so ``results``' ``acc,none`` and its standard error are
over docs and ``n-samples`` counts docs (examples times orders). sinklab's figures are over
examples: ``acc`` the rotation-averaged accuracy (each example's share of its orders answered
right), ``acc_strict`` right under every order, their standard errors over examples. With one
order (``rotations`` 1, or a task whose prompt lists no choices) a doc is an example and sinklab's
``acc``, ``acc_norm`` and their standard errors are lm-eval's own numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..core.atomic import write_json, write_jsonl
from ..core.errors import SinklabError, check
from .scored import PER_TASK, Scored, TaskOutput

RESULTS_FILE = "lm_eval_results.json"
#: What :func:`~.harness.evaluate` passes lm-eval: acc and acc_norm are means, whose standard error
#: lm-eval then gives in closed form (any count above 0 gives the same; 0 would give none).
BOOTSTRAP_ITERS = 1
#: What ``sinklab.about`` says of the two kinds of figures.
ABOUT = (
    "results, configs, versions, n-shot, higher_is_better, n-samples: lm-eval's evaluator output as it returned it, "
    "keyed <task>|<run>; its acc is over docs (one per example and order of the choices asked). "
    "sinklab.entries[...].figures: sinklab's, over examples (acc: each example's share of its orders answered right; "
    "acc_strict: right under every order); with one order they are lm-eval's own numbers."
)


def lm_eval_version() -> str:
    """The installed lm-evaluation-harness's version (what the judges record as their engine)."""
    from importlib.metadata import version

    return version("lm_eval")


@dataclass(frozen=True)
class Judged:
    """One scored run of a task: sinklab's ``task`` name, which ``run`` of it, its :class:`Scored`
    (from :func:`~.harness.evaluate`, lm-eval's output on it) and ``about``: sinklab's facts of the
    run, recorded in its entry (a cell's policy, a tuning's label)."""

    task: str
    run: str
    scored: Scored
    about: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The entry's key in every per-task part: ``<task>|<run>``."""
        return f"{self.task}|{self.run}"


@dataclass(frozen=True)
class LmEvalFiles:
    """A judge's scored runs and the settings they share, as :meth:`write` writes them: ``model``
    the model's name, ``seed`` the splits' and shots' seed, ``rotations`` the setting (0 every
    cyclic order, 1 the listed order, N that many), ``split_rule`` :data:`~sinklab.accuracy.SPLIT_RULE`'s."""

    judged: tuple[Judged, ...]
    model: str
    seed: int
    rotations: int
    split_rule: int

    def samples_files(self) -> dict[str, str]:
        """Entry name -> its samples file's name (a repeated name numbered ``-2``, ``-3``)."""
        stems = [re.sub(r"[^A-Za-z0-9._-]+", "_", f"{j.task}_{j.run}").strip("_") for j in self.judged]
        files = {j.name: f"samples_{stem}.jsonl" for j, stem in zip(self.judged, numbered(stems, "{name}-{i}"))}
        check(len(set(files.values())) == len(files), f"two samples files are named alike: {', '.join(sorted(files.values()))}")
        return files

    def layout(self) -> dict:
        """``lm_eval_results.json``'s content (see the module's docstring)."""
        names = [j.name for j in self.judged]
        check(bool(names), "no scored runs to write as lm-eval's results")
        check(len(set(names)) == len(names), f"two scored runs are named alike: {', '.join(sorted(names))}")
        outputs = {j.name: _output_of(j) for j in self.judged}
        files, splits = self.samples_files(), sorted({j.scored.split for j in self.judged})
        parts = {key: {name: output.parts[key] for name, output in outputs.items()} for key in PER_TASK}
        return {
            "results": {name: {**entry, "alias": name} for name, entry in parts["results"].items()},
            "group_subtasks": {},  # where lm-eval writes it; empty: sinklab's tasks are in no group
            **{key: parts[key] for key in PER_TASK[1:]},
            "config": {"model": self.model, "model_args": None, "bootstrap_iters": BOOTSTRAP_ITERS, "fewshot_seed": self.seed},
            "lm_eval_version": lm_eval_version(),
            "sinklab": {
                "about": ABOUT,
                "split": splits[0] if len(splits) == 1 else splits,
                "split_rule": self.split_rule,
                "seed": self.seed,
                "rotations": self.rotations,
                "entries": {
                    j.name: {
                        "task": j.task,
                        "run": j.run,
                        **j.about,
                        "lm_eval_task": outputs[j.name].name,
                        "samples": files[j.name],
                        "orders": j.scored.rotations,
                        "docs": len(outputs[j.name].samples),
                        "figures": j.scored.row(),
                        "scored": j.scored.record(),
                    }
                    for j in self.judged
                },
            },
        }

    def write(self, out: Path) -> list[str]:
        """The samples files, then ``lm_eval_results.json`` (each written atomically); their names
        (none where nothing was scored)."""
        if not self.judged:
            return []
        layout, files = self.layout(), self.samples_files()
        for j in self.judged:
            write_jsonl(Path(out) / files[j.name], list(_output_of(j).samples))
        write_json(Path(out) / RESULTS_FILE, layout)
        return [*files.values(), RESULTS_FILE]


def numbered(names: Sequence[str], form: str = "{name} #{i}") -> list[str]:
    """``names`` with each repeat told apart: its second occurrence ``form`` with i=2, and so on."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else form.format(name=name, i=seen[name]))
    return out


def _output_of(judged: Judged) -> TaskOutput:
    output: Optional[TaskOutput] = judged.scored.lm_eval
    if output is None:
        raise SinklabError(f"{judged.name}: its scores carry no lm-eval output (score it with sinklab.accuracy.evaluate)")
    return output
