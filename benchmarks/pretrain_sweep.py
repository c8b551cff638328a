"""Every attention variant pretrained under one budget, several seeds, then compared.

Text (default): the 8 variants, 2 seeds, the default text budget, one run after another (each
uses every core) into runs/sweep/. Bigram-Backcopy (`--corpus bb`, `make sweep-bb`): the 9 variants
of the mitigation sweep (every normalisation, +gate, +head_norm, softmax with one learned sink
token), 3 seeds, the calibrated BB budget, two single-threaded runs at a time into runs/sweep-bb/.
Finished runs are kept and half-finished ones resumed, so a sweep can be stopped and restarted;
a run of another training configuration, or trained by other code than this commit's, is refused
(or trained again with `--rerun-stale`): the row is stamped with this commit.

Each run is one job of `--launcher` (local: this machine's process pool; slurm: a Slurm job array
through submitit; ray), written by the job into its own run directory, so a sweep stopped under one
launcher resumes under another. Each variant is also compared seed by seed with softmax (mean
difference, t, exact sign-flip p-value).

Run: `.venv/bin/python benchmarks/pretrain_sweep.py [--corpus bb] [--seeds 0,1,2] [--variants softmax,softmax+gate] [--steps N]
[--set KEY=VALUE ...] [--record NAME] [--root DIR] [--rerun-stale] [--launcher slurm --partition P ...]`
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Optional

from common import DIRTY, REVISION, RUNS, UNKNOWN, record

from sinklab.cli.args import add_launcher_arguments, launcher_settings
from sinklab.core.attention import ATTN_NORMS, AttentionSpec
from sinklab.core.checkpoint import latest_checkpoint
from sinklab.core.errors import SinklabError
from sinklab.core.launchers import LOCAL, LauncherSettings, launch
from sinklab.core.runs import claim_run_dir, first_difference, jsonable, read_run_info
from sinklab.core.text import format_table
from sinklab.pretrain import COLUMNS, PretrainConfig, compare_runs, train_lm
from sinklab.pretrain.train import TRAINING_KEYS

SETTINGS = {  # corpus -> (default seeds, worker processes, extra variants, run root)
    "shakespeare": ("0,1", 1, [], "sweep"),
    "bb": ("0,1,2", 2, [{"sink_tokens": 1}], "sweep-bb"),
}


def sweep_configs(corpus: str, seeds, steps=None, variants: Optional[list[str]] = None, overrides: Optional[dict] = None) -> list[PretrainConfig]:
    """The sweep's runs, seed-major; ``variants`` keeps only those names (``PretrainConfig.variant``);
    ``overrides`` sets training fields of every run (``--set lr=3e-3``)."""
    base = PretrainConfig(corpus=corpus, steps=steps, **(overrides or {}))
    settings = [{"attention": AttentionSpec(name)} for name in ATTN_NORMS] + [{"attention": s} for s in AttentionSpec().with_each_extra()]
    configs = [replace(base, **v, seed=s, max_seq_len=None) for s in seeds for v in settings + SETTINGS[corpus][2]]
    if variants is None:
        return configs
    known = list(dict.fromkeys(c.variant for c in configs))
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)}; the sweep has {', '.join(known)}")
    return [c for c in configs if c.variant in variants]


def train_one(cfg: PretrainConfig, rerun_stale: bool = False) -> str:
    """Train (or resume, or skip when finished) one run; returns its directory. A run there that
    :func:`stale_reason` rejects is refused, or with ``rerun_stale`` removed and trained again."""
    out = Path(cfg.out)
    finished = (out / "summary.json").exists()
    resume = not finished and latest_checkpoint(out) is not None
    if (finished or resume) and (why := stale_reason(out, cfg, REVISION)):
        if not rerun_stale:
            raise SinklabError(f"{out} holds a run this sweep cannot use: {why}; pass --rerun-stale to train it again, or give the sweep its own --root")
        claim_run_dir(out, cfg, overwrite=True)  # removes it
        finished = resume = False
    if not finished:
        train_lm(cfg, resume=resume, progress=False)
    return cfg.out


def stale_reason(run_dir: Path, cfg: PretrainConfig, revision: str) -> Optional[str]:
    """Why the run in ``run_dir`` may not stand in a row stamped ``revision``: its config.json
    differs from ``cfg`` (compared as ``sinklab pretrain`` compares a rerun: lr, lengths, seed,
    steps, ...), or run.json's ``git`` names another commit, none, or uncommitted changes the
    row would not be flagged with. None when it may."""
    try:
        saved = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return "its config.json is missing or unreadable"
    if differs := first_difference(saved, jsonable(cfg)):
        return f"another configuration ({differs})"
    source, commit = read_run_info(run_dir).get("git"), revision.removesuffix(DIRTY)
    if not source:
        return "its run.json records no git commit"
    if commit == UNKNOWN or not source["commit"].startswith(commit):
        return f"it was trained at commit {source['commit'][:7]}, and this tree is at {commit}"
    if source["uncommitted_changes"] and not revision.endswith(DIRTY):
        return "it was trained with uncommitted changes, and this row would be stamped clean"
    return None


#: What ``--set`` may change: the training configuration less what the sweep itself varies or derives
#: (``max_seq_len`` follows each variant's length and sink tokens).
SETTABLE = [k for k in TRAINING_KEYS if k not in ("corpus", "attention", "sink_tokens", "seed", "steps", "max_seq_len")]


def parse_overrides(pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs as fields of PretrainConfig; a value is read as JSON (numbers, true,
    false), else kept as text (``positions=learned``)."""
    overrides, defaults = {}, PretrainConfig(corpus="bb")
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in SETTABLE:
            raise SystemExit(f"--set {pair}: expected KEY=VALUE with KEY one of {', '.join(SETTABLE)}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        expected = type(getattr(defaults, key))
        if not (type(value) is expected or expected is float and type(value) is int):
            raise SystemExit(f"--set {pair}: {key} takes {expected.__name__} values")
        overrides[key] = value
    return overrides


def run_sweep(configs: list[PretrainConfig], root: Path, workers: int, launcher: LauncherSettings = LOCAL, rerun_stale: bool = False) -> dict:
    """Train every config into ``root/<variant>-seed<seed>`` (one job each on ``launcher``, finished
    runs kept) and compare them in ``root/compare``; returns the comparison."""
    configs = [replace(cfg, out=str(root / f"{cfg.variant}-seed{cfg.seed}")) for cfg in configs]
    runs = launch(partial(train_one, rerun_stale=rerun_stale), configs, launcher, root, workers, desc=f"sweep {configs[0].corpus}", label=lambda c: Path(c.out).name)
    return compare_runs(runs, None, str(root / "compare"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", choices=list(SETTINGS), default="shakespeare")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: 0,1 for text, 0,1,2 for bb)")
    parser.add_argument("--variants", default=None, help="comma-separated variants to run (default: all), e.g. softmax,softmax+gate")
    parser.add_argument("--steps", type=int, default=None, help="override the default budget (for a quick look)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a training field of every run, e.g. --set lr=3e-3 --set positions=learned (repeatable)")
    parser.add_argument("--record", default=None, help="the results file: results/NAME.jsonl (default pretrain_sweep, or pretrain_sweep_bb for --corpus bb)")
    parser.add_argument("--workers", type=int, default=None, help="runs at a time (default: 1 for text, 2 single-threaded for bb)")
    parser.add_argument("--root", default=None, help="folder of the run directories (default: runs/sweep, runs/sweep-bb)")
    parser.add_argument("--rerun-stale", action="store_true", help="train again a run of another configuration or commit (default: refuse it)")
    add_launcher_arguments(parser)
    args = parser.parse_args()
    seeds, workers, _, root_name = SETTINGS[args.corpus]
    root = Path(args.root) if args.root else RUNS / root_name
    variants = args.variants.split(",") if args.variants else None
    overrides = parse_overrides(args.set)
    try:
        configs = sweep_configs(args.corpus, [int(s) for s in (args.seeds or seeds).split(",")], args.steps, variants, overrides)
        launcher = launcher_settings(args)
        result = run_sweep(configs, root, args.workers or workers, launcher, args.rerun_stale)
    except SinklabError as exc:
        sys.exit(f"pretrain_sweep: {exc}")
    print(format_table(result["by_variant"], [("variant", "variant", "s"), ("seeds", "seeds", "d")] + [(h, k, f) for h, k, f in COLUMNS if k not in ("run", "variant", "seed")]))
    for entry in result["paired"]:
        print(f"{entry['variant']} - {entry['baseline']}, seeds {entry['seeds']}: " + "; ".join(
            f"{k} {v['mean']:+.3f} (sd {v['sd']:.3f}, p {v['p_sign_flip']:.3f})" for k, v in entry.items() if isinstance(v, dict)))
    record(args.record or "pretrain_sweep" + ("_bb" if args.corpus == "bb" else ""),
           {"corpus": args.corpus, "steps": configs[0].steps, "overrides": overrides, "variants": variants, "launcher": launcher.launcher, "target": result["target"],
            "by_variant": result["by_variant"], "paired": result["paired"], "rows": result["rows"]})


if __name__ == "__main__":
    main()
