"""Issue 52's optional larger pretraining budget on a lent GPU: softmax, then the survey's
mitigations (softpick, softmax-1 with OrthoAdam, TWEO, the value-state gate, ...), one seed each, on
natural text with a fixed first token at a budget where the softmax baseline may grow a sink, which
no CPU-sized budget grew (results 4). It is ``gpu_check.py``'s section ``pretrain_larger``, run only
when named, under a time limit of its own on a lent device (docs/contributing/gpu-check.md).

Run: `PYTHONPATH=src .venv/bin/python benchmarks/gpu_check.py --only pretrain_larger` (on a GPU), or
with ``--smoke`` at toy sizes on the CPU.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace

#: Issue 52's optional larger budget: natural text with a fixed first token and Gu et al.'s knobs for
#: stronger sinks (weight decay 0.5, lr 6e-3), as results 4b's CPU attempt ran them, on a model of
#: 4.7M non-embedding parameters (6 layers, d 256; 0.79M by default) for 1,000 steps of 16 x 512
#: tokens: 8.2M tokens, 6.7 times the CPU default's and 5.8 passes over the 1.42M-token training
#: split, as section 4's 2,000-step run. Two evaluation batches keep each run's summary short: it
#: scores the quantization schemes on the CPU, wherever the run trained.
LARGER_SETTINGS = {
    "bos": True,
    "weight_decay": 0.5,
    "lr": 6e-3,
    "d_model": 256,
    "n_layers": 6,
    "n_heads": 4,
    "seq_len": 512,
    "batch": 16,
    "eval_every": 250,
    "eval_batches": 2,
    "checkpoint_every": 500,
}
LARGER_STEPS = 1000
SMOKE_SETTINGS = {**LARGER_SETTINGS, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "batch": 4}
SMOKE_SETTINGS.update(eval_every=2, eval_batches=1, checkpoint_every=2, scan_tokens=16, scan_batch=2)
#: In the order they train: softmax first (does the baseline sink at all?), then the papers'
#: headline methods and pairs.
LARGER_VARIANTS = (
    "softmax",
    "softpick",
    "softmax1+orthoadam",
    "softmax+tweo",
    "softmax+vga",
    "softmax+gate+head_norm",
    "softpick+tweo",
    "softmax+orthoadam",
)
#: The time box: no run starts that the slowest so far predicts would end past this many seconds of
#: training (a prediction, not a bound: a slower variant can overrun it), leaving the rest of a lent
#: device's 10-minute call for the set-up before it and the margin after.
LARGER_SECONDS = 420


def larger_budget(smoke: bool) -> tuple[dict, int]:
    """The settings and steps of every run of :func:`measure` (toy sizes for the rehearsal)."""
    return (SMOKE_SETTINGS, 4) if smoke else (LARGER_SETTINGS, LARGER_STEPS)


def larger_runs(smoke: bool) -> list:
    """The runs of :func:`measure`, in :data:`LARGER_VARIANTS`' order (a sweep plans its own)."""
    from sinklab.pretrain.sweep import SweepConfig

    settings, steps = larger_budget(smoke)
    variants = LARGER_VARIANTS[:3] if smoke else LARGER_VARIANTS
    runs = SweepConfig("shakespeare", seeds=(0,), variants=variants, steps=steps, settings=settings).runs()
    return sorted(runs, key=lambda cfg: variants.index(cfg.variant))


def measure(device: str, smoke: bool) -> dict:
    """The survey's mitigations against softmax at :data:`LARGER_SETTINGS`, one seed each, one run
    after another; each run's figures (or its error: the others still train) are printed as it
    ends, so a call stopped at its limit keeps them, and the variants the time box left out are
    named. The corpus is tokenised before the box's clock starts."""
    from sinklab.pretrain import train_lm
    from sinklab.pretrain.results import sink_figures
    from sinklab.pretrain.sources import load_source

    (settings, steps), runs = larger_budget(smoke), larger_runs(smoke)
    load_source(runs[0].corpus, runs[0].tokenizer, runs[0].bos, runs[0].bb_triggers)
    finished, slowest, start = {}, 0.0, time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for cfg in runs:
            if time.perf_counter() - start + slowest > LARGER_SECONDS:
                break
            began = time.perf_counter()
            try:
                summary = train_lm(replace(cfg, device=device), f"{root}/{cfg.variant}").summary
                figures = {k: v for k, v in sink_figures(summary).items() if v is not None}
                finished[cfg.variant] = {
                    "final_val_loss": summary["final_val_loss"],
                    "tokens_per_s": round(summary["tokens_per_s"]),
                    "first_token_mass_by_layer": [round(m, 4) for m in summary["first_token_mass_by_layer"]],
                    "first_token_mass_head_max": round(max(max(row) for row in summary["first_token_mass"]), 4),
                    **figures,
                    "quantization_penalty": summary["quantization"]["loss_penalty"],
                }
            except Exception as exc:  # noqa: BLE001 - one variant's failure (a NaN loss) must not cost the others
                finished[cfg.variant] = {"error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"}
            seconds = time.perf_counter() - began
            slowest = max(slowest, seconds)
            finished[cfg.variant]["seconds"] = round(seconds, 1)
            print("pretrain_larger", cfg.variant, json.dumps(finished[cfg.variant]), flush=True)
    return {
        "settings": settings,
        "steps": steps,
        "runs": finished,
        "left_out_by_the_time_box": [c.variant for c in runs if c.variant not in finished],
    }
