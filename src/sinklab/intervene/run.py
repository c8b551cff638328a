"""``sinklab intervene``: run interventions on a model and compare every metric before and after.

:func:`apply_interventions` is the one runner: it attaches the interventions' hooks next to the
scanner's recorder and returns the scanner's :class:`~sinklab.recorder.Record` plus the
next-token loss, so anything the scanner measures is available before and after an edit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import torch

from ..core.errors import check
from ..core.figures import save_images
from ..core.results import stamped
from ..core.runs import prepare_run_dir, record_model, write_json
from ..models.hf import MODEL_FACTS, QUERY_CHUNK, LoadOptions
from ..models.subjects import HFSubject, Subject
from ..scan import InputSpec, Record, RecordOptions, record_subject, scan_inputs
from . import page, plots
from .interventions import MU_DEFINITION, Experiment, Intervention, experiments_for, hooks_of, validate_all


def apply_interventions(
    subject: Subject, ids: torch.Tensor, interventions: Sequence[Intervention], options: RecordOptions, progress: bool = False
) -> tuple[Record, float]:
    """Run ``subject`` on ``ids`` with ``interventions`` applied; return (record, mean loss)."""
    validate_all(interventions, subject.n_layers, subject.n_heads, ids.shape[1])
    record, loss = record_subject(subject, ids, options, extra_hooks=hooks_of(interventions, subject.n_heads), progress=progress)
    return record, loss.item()


def share_at(record: Record, k: int) -> list[float]:
    """Per layer: the mean attention that queries after k give to key k (heads averaged)."""
    column = record.columns[k]  # (L, H, T)
    check(k + 1 < column.shape[-1], f"position {k} has no later queries in a {column.shape[-1]}-token input")
    return column[..., k + 1 :].mean(-1).mean(-1).tolist()


@dataclass
class InterveneConfig:
    model: Optional[str] = None
    inputs: InputSpec = field(default_factory=InputSpec)
    edits: dict = field(default_factory=dict)  # intervention option (see INTERVENTIONS) -> its value
    lams: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    layers: Optional[tuple[int, ...]] = None
    heads: Optional[tuple[int, ...]] = None
    query_chunk: int = QUERY_CHUNK
    load: LoadOptions = field(default_factory=LoadOptions)
    out: Optional[str] = "runs/intervene"  # None: nothing is written (sinklab.intervene_model)

    def experiments(self) -> list[Experiment]:
        """The interventions the options ask for, one experiment per setting."""
        return experiments_for(self.edits, self.lams, {"layers": self.layers, "heads": self.heads})


def _entry(record: Record, loss: float, ks: Sequence[int]) -> dict:
    return {
        "share_at_0": share_at(record, 0),
        "share_at": {str(k): share_at(record, k) for k in ks},
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
    }


def measure_intervene(cfg: InterveneConfig, subject: Optional[Subject] = None) -> tuple[dict, Record, dict[str, Record]]:
    """Baseline plus every experiment, in memory: the summary, the baseline's record and each
    experiment's record by label."""
    experiments = cfg.experiments()
    subject = subject or HFSubject(cfg.load.load(cfg.model), cfg.query_chunk)
    ids = scan_inputs(subject, cfg.inputs).ids
    for exp in experiments:  # fail before any work on a bad position, layer or head
        validate_all(exp.interventions, subject.n_layers, subject.n_heads, ids.shape[1])
    ks = sorted({0, *(e.k for e in experiments)})
    options = RecordOptions(key_columns=tuple(ks), patterns=ids.shape[1] <= 256)
    base_record, base_loss = apply_interventions(subject, ids, (), options, progress=True)
    baseline = {"k": experiments[0].k, "share_at_k": share_at(base_record, experiments[0].k), **_entry(base_record, base_loss, ks)}
    results, records = [], {}
    for exp in experiments:
        record, loss = apply_interventions(subject, ids, exp.interventions, options, progress=True)
        records[exp.label] = record
        described = [iv.describe() for iv in exp.interventions]
        results.append(
            {
                "label": exp.label,
                "intervention": described[0] if len(described) == 1 else described,
                "lam": exp.lam,
                "k": exp.k,
                "share_at_k": share_at(record, exp.k),
                **_entry(record, loss, ks),
            }
        )
    summary = {
        "model": subject.name,
        "architecture": getattr(subject, "architecture", type(subject).__name__),
        **subject.facts(),
        "layers": subject.n_layers,
        "tokens": ids.shape[1],
        "sequences": ids.shape[0],
        "mu": MU_DEFINITION,
        "baseline": baseline,
        "results": results,
    }
    return stamped("intervene", summary), base_record, records


def run_intervene(cfg: InterveneConfig, subject: Optional[Subject] = None) -> dict:
    """Baseline plus every experiment; writes config.json, summary.json, maps.safetensors, figures
    and report.html to ``cfg.out``."""
    check(cfg.out is not None, "run_intervene writes a run directory: give InterveneConfig.out (or use sinklab.intervene_model)")
    out = prepare_run_dir(cfg.out)
    experiments = cfg.experiments()
    write_json(out / "config.json", {**asdict(cfg), "experiments": [[iv.describe() for iv in e.interventions] for e in experiments], "mu": MU_DEFINITION})
    summary, base_record, records = measure_intervene(cfg, subject)
    record_model(out, **{key: summary[key] for key in MODEL_FACTS})
    data = plots.data_from(base_record, records, summary)
    summary.update(save_images(plots.figures(summary, data), out).summary_entries())
    plots.save_data(out, data)
    write_json(out / "summary.json", summary)
    page.write(out)
    return summary


