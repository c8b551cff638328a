"""Experiments of the trigger lab: the paper grid, the variant table, the BOS-cap trade-off and
the hand-built ReLU solution. Each is an importable function; ``sinklab trigger`` calls them.

A lab run is a directory: ``config.json``, one ``records/<key>.json`` and
``models/<key>.safetensors`` per trained model (written as each finishes, so re-running the same
command resumes), ``maps/<key>.safetensors`` (mean and std attention over the evaluation set),
figures, and ``summary.json`` written last.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import torch
from safetensors.torch import load_file, save_file

from . import report
from .attention import ATTN_NORMS
from .errors import SinklabError
from .jobs import run_jobs
from .model import ModelConfig, Transformer
from .runs import atomic_path, prepare_run_dir, write_json
from .tasks import TRIGGER, TriggerTask
from .trigger import TriggerConfig, evaluate_trigger, summarise_seeds, train_trigger, trigger_record

PAPER_SHAPES = ((1, 1), (2, 2), (4, 4))
QUICK_SHAPES = ((1, 1), (2, 2))
PAPER_ATTNS = ("softmax", "relu")
EXTRAS = ((False, False), (True, False), (False, True))  # (gate, head_norm)


def run_one(cfg: TriggerConfig) -> tuple[dict, dict, dict]:
    """Train and evaluate one model: (record, state dict, attention maps). Runs in a worker."""
    model, log = train_trigger(cfg)
    metrics = evaluate_trigger(model, cfg)
    maps = {k: v.contiguous() for k, v in metrics.pop("maps").items()}
    return trigger_record(cfg, log, metrics), model.state_dict(), maps


def run_grid(configs: Sequence[TriggerConfig], out: Path, workers: Optional[int] = None) -> list[dict]:
    """Train every config (resuming finished ones from ``out``) and return their records."""
    for sub in ("records", "models", "maps"):
        (out / sub).mkdir(exist_ok=True)
    done = {cfg.key: rec for cfg in configs if (rec := _load_record(out, cfg)) is not None}
    todo = sorted((c for c in configs if c.key not in done), key=_expected_cost, reverse=True)

    def save(cfg: TriggerConfig, result: tuple[dict, dict, dict]) -> None:
        record, state, maps = result
        _save_tensors(out / "models" / f"{cfg.key}.safetensors", state)
        _save_tensors(out / "maps" / f"{cfg.key}.safetensors", maps)
        write_json(out / "records" / f"{cfg.key}.json", {"config": cfg.to_dict(), "record": record})
        done[cfg.key] = record

    if todo:
        run_jobs(run_one, todo, workers, desc="training", label=lambda c: c.key, on_result=save)
    return [done[c.key] for c in configs]


def _expected_cost(cfg: TriggerConfig) -> float:
    """Rough relative cost, to start the longest jobs first."""
    return cfg.layers * cfg.heads * (1 if cfg.layers == 1 else 12) * cfg.max_steps


def _load_record(out: Path, cfg: TriggerConfig) -> Optional[dict]:
    """A finished record for exactly this config, if one was saved by an earlier run."""
    path = out / "records" / f"{cfg.key}.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    if saved.get("config") != json.loads(json.dumps(cfg.to_dict())):
        return None
    if not (out / "maps" / f"{cfg.key}.safetensors").exists():
        return None
    return saved["record"]


def _save_tensors(path: Path, tensors: dict) -> None:
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))


def load_maps(out: Path, key: str) -> dict[str, torch.Tensor]:
    return load_file(str(out / "maps" / f"{key}.safetensors"))


def load_trigger_model(out: Path, cfg: TriggerConfig) -> Transformer:
    """The trained model of ``cfg`` saved in lab run ``out`` (safetensors, no pickle)."""
    model = Transformer(cfg.model_config())
    model.load_state_dict(load_file(str(out / "models" / f"{cfg.key}.safetensors")))
    return model


def paper_configs(seeds: Iterable[int], base: TriggerConfig, shapes=PAPER_SHAPES, attns=PAPER_ATTNS) -> list[TriggerConfig]:
    """The paper's grid: every shape with softmax and ReLU, for every seed."""
    return [
        replace(base, layers=l, heads=h, attn=a, seed=s, lr=None)
        for (l, h) in shapes
        for a in attns
        for s in seeds
    ]


def variant_configs(seeds: Iterable[int], base: TriggerConfig, shapes=((1, 1), (2, 2))) -> list[TriggerConfig]:
    """Every registered normalisation, plain, gated and head-normed, on the given shapes."""
    return [
        replace(base, layers=l, heads=h, attn=a, gate=g, head_norm=n, seed=s, lr=None)
        for (l, h) in shapes
        for a in ATTN_NORMS
        for (g, n) in EXTRAS
        for s in seeds
    ]


def cap_configs(caps: Iterable[float], seeds: Iterable[int], base: TriggerConfig) -> list[TriggerConfig]:
    """One-layer softmax models with the BOS mass capped at each level (1.0 = uncapped)."""
    return [replace(base, layers=1, heads=1, attn="softmax", bos_cap=c, seed=s, lr=None) for c in caps for s in seeds]


def run_lab(
    configs: Sequence[TriggerConfig],
    out: str,
    workers: Optional[int] = None,
    analyses: Sequence[Callable[[list[dict], Path], dict]] = (),
) -> dict:
    """Train ``configs``, write records, summary and heatmaps into ``out``; return the summary.

    Each analysis maps (records, run dir) to extra summary entries (tables, figures).
    """
    out_dir = prepare_run_dir(out)
    write_json(out_dir / "config.json", {"configs": [c.to_dict() for c in configs]})
    records = run_grid(configs, out_dir, workers)
    thresholds = sorted({c.sink_threshold for c in configs})
    summary = {
        "sink_threshold": thresholds[0] if len(thresholds) == 1 else thresholds,
        "non_trigger_rows": "query rows 1..L-1 except the trigger",
        "runs": records,
        "across_seeds": summarise_seeds(records),
        "figures": report.trigger_figures(out_dir, configs, records, load_maps),
    }
    for analysis in analyses:
        for key, value in analysis(records, out_dir).items():
            summary[key] = summary.get(key, []) + value if key == "figures" else value
    write_json(out_dir / "summary.json", summary)
    return summary


VARIANT_COLUMNS = [
    ("shape", "shape", "s"),
    ("attention", "variant", "s"),
    ("solved", "solved", "s"),
    ("eval MSE", "eval_mse_mean", ".2e"),
    ("BOS mass", "bos_mass_nontrigger", ".3f"),
    ("row mass", "row_mass_nontrigger", ".3f"),
    ("gate", "gate_nontrigger", ".3f"),
    ("do-nothing goes to", "where", "s"),
]


def variant_table(records: list[dict], out: Path) -> dict:
    """Per (shape, variant): how many seeds solved the task and where the do-nothing mass went.

    Solved means the paper's training rule was met within the step budget. Masses are means over
    seeds and heads at non-trigger rows; ``where`` counts the heads in each class of
    :func:`sinklab.trigger.classify_do_nothing` over all seeds.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        variant = r["attn"] + ("+gate" if r["gate"] else "") + ("+head_norm" if r["head_norm"] else "")
        groups.setdefault((f"{r['layers']}x{r['heads']}", variant), []).append(r)
    rows = []
    for (shape, variant), rs in groups.items():
        heads = [h for r in rs for h in r["heads_detail"]]
        gates = [h["gate_nontrigger"] for h in heads if h["gate_nontrigger"] is not None]
        classes = Counter(h["do_nothing"] for h in heads)
        rows.append(
            {
                "shape": shape,
                "variant": variant,
                "solved": f"{sum(r['converged'] for r in rs)}/{len(rs)}",
                "eval_mse_mean": sum(r["eval_mse"] for r in rs) / len(rs),
                "bos_mass_nontrigger": _mean_of(heads, "bos_mass_nontrigger"),
                "row_mass_nontrigger": _mean_of(heads, "row_mass_nontrigger"),
                "gate_nontrigger": sum(gates) / len(gates) if gates else None,
                "where": ", ".join(f"{k} {v}/{len(heads)}" for k, v in classes.most_common()),
            }
        )
    return {"variant_table": rows}


def _mean_of(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


CAP_COLUMNS = [
    ("BOS cap", "bos_cap", "g"),
    ("best eval MSE", "best_eval_mse", ".3e"),
    ("mean eval MSE", "eval_mse_mean", ".3e"),
    ("BOS mass reached", "bos_mass_nontrigger", ".3f"),
    ("seeds", "n_seeds", "d"),
]


def cap_tradeoff(records: list[dict], out: Path) -> dict:
    """Error reached against the BOS cap: the best (min over seeds) and the mean, plus a figure."""
    by_cap: dict[float, list[dict]] = {}
    for r in records:
        by_cap.setdefault(r["bos_cap"], []).append(r)
    rows = []
    for cap in sorted(by_cap):
        rs = by_cap[cap]
        errors = torch.tensor([r["eval_mse"] for r in rs], dtype=torch.float64)
        rows.append(
            {
                "bos_cap": cap,
                "best_eval_mse": errors.min().item(),
                "eval_mse_mean": errors.mean().item(),
                "eval_mse_std": errors.std().item() if len(rs) > 1 else 0.0,
                "bos_mass_nontrigger": sum(r["heads_detail"][0]["bos_mass_nontrigger"] for r in rs) / len(rs),
                "n_seeds": len(rs),
            }
        )
    figure = report.cap_tradeoff_figure(rows, out / "cap_tradeoff.png")
    return {"cap_tradeoff": rows, "figures": [figure.name]}


def run_cap_sweep(caps: Sequence[float], seeds: Sequence[int], base: TriggerConfig, out: str, workers=None) -> dict:
    """Train capped one-layer softmax models and measure the error-vs-cap trade-off."""
    return run_lab(cap_configs(caps, seeds, base), out, workers, analyses=[cap_tradeoff])


def run_variants(seeds: Sequence[int], base: TriggerConfig, out: str, workers=None) -> dict:
    """The all-variants table on 1x1 and 2x2."""
    return run_lab(variant_configs(seeds, base), out, workers, analyses=[variant_table])


def relu_construction(task: TriggerTask) -> Transformer:
    """A one-layer ReLU model whose weights solve the task exactly, set by hand.

    q_i = x_i[trigger] * e_0 and k_j = (x_j[bias] + x_j[trigger]) * e_0, so only the trigger row has
    non-zero scores, equal to 1 on every non-BOS key and 0 on BOS. ReLU attention divides row j by
    its j non-BOS keys, so with W_V = W_O = I the trigger row outputs mean(x_1..x_j) and every
    other row outputs exactly zero: a correct "do nothing" with no sink at all.
    """
    n = task.n
    model = Transformer(ModelConfig(d_model=n, n_layers=1, n_heads=1, head_dim=n, attn="relu", max_seq_len=task.length))
    with torch.no_grad():
        w_q, w_k, w_v = model.blocks[0].attn.qkv.weight.view(3, n, n)
        w_q.zero_()
        w_k.zero_()
        w_q[0, TRIGGER] = 1.0
        w_k[0, TRIGGER] = 1.0
        w_k[0, task.bias_channel] = 1.0
        w_v.copy_(torch.eye(n))
        model.blocks[0].attn.out.weight.copy_(torch.eye(n))
    return model


@torch.no_grad()
def check_relu_construction(task: TriggerTask, sequences: int = 10_000, seed: int = 0) -> dict:
    """Run the hand-built ReLU model on random sequences; report its error and non-trigger weights."""
    model = relu_construction(task)
    batch = task.sample(sequences, torch.Generator().manual_seed(seed))
    out, weights = model(batch.x, need_weights=True)
    non_trigger = task.non_trigger_rows(batch.trigger)
    w = weights[0][:, 0]  # (B, L, L)
    return {
        "sequences": sequences,
        "max_abs_error": (out - batch.y).abs().max().item(),
        "non_trigger_weight_max": w[non_trigger].abs().max().item(),
        "non_trigger_rows_exactly_zero": bool((w[non_trigger] == 0).all()),
        "bos_weight_max": w[..., 0].abs().max().item(),
    }


def construction_report(task: TriggerTask, out: str) -> dict:
    """Check the hand-built ReLU solution and write ``summary.json`` into ``out``."""
    out_dir = prepare_run_dir(out)
    result = check_relu_construction(task)
    write_json(out_dir / "summary.json", {"relu_construction": result, "task": task})
    return result


def run_trigger_interventions(cfg, lab_dir: Optional[str] = None) -> dict:
    """Apply interventions to one-layer softmax and ReLU trigger models (loaded from ``lab_dir``
    when it holds them, else trained now) and compare the errors before and after.

    The theory says the softmax model needs its BOS sink to do nothing at non-trigger rows, so
    removing the sink must raise the error there; the ReLU model has no sink to remove.
    """
    from .interventions import hooks_of, validate_all

    if not (cfg.mask_self or cfg.amplify is not None or cfg.scale is not None or cfg.value_zero or cfg.drop_first):
        cfg = replace(cfg, suppress_sink=True)
    experiments = cfg.experiments()
    out = prepare_run_dir(cfg.out)
    results = []
    for attn in PAPER_ATTNS:
        tcfg = TriggerConfig(attn=attn)
        model = _trained_model(tcfg, lab_dir)
        before = evaluate_trigger(model, tcfg)
        for exp in experiments:
            validate_all(exp.interventions, model.n_layers, model.cfg.n_heads, tcfg.length)
            after = evaluate_trigger(model, tcfg, hooks_of(exp.interventions, model.cfg.n_heads))
            results.append(
                {
                    "model": tcfg.key,
                    "intervention": exp.label,
                    **{f"{name}_{when}": m[name] for name in ("mse_nontrigger", "mse_trigger", "eval_mse") for when, m in (("before", before), ("after", after))},
                    "bos_mass_nontrigger_before": before["heads_detail"][0]["bos_mass_nontrigger"],
                    "bos_mass_nontrigger_after": after["heads_detail"][0]["bos_mass_nontrigger"],
                }
            )
    summary = {"lab_dir": lab_dir, "experiments": [[iv.describe() for iv in e.interventions] for e in experiments], "results": results}
    write_json(out / "summary.json", summary)
    return summary


def _trained_model(cfg: TriggerConfig, lab_dir: Optional[str]) -> Transformer:
    if lab_dir and (Path(lab_dir) / "models" / f"{cfg.key}.safetensors").exists():
        return load_trigger_model(Path(lab_dir), cfg)
    if lab_dir:
        raise SinklabError(f"{lab_dir} holds no trained {cfg.key}; run `sinklab trigger --out {lab_dir}` first or omit LAB_DIR")
    return train_trigger(cfg)[0]
