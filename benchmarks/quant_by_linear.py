"""Which linear layer's rounding costs a trained model its loss under static W8A8 quantization.

For finished ``sinklab pretrain`` runs and a scheme with static activation scales
(``w8a8_tensor_static``, the default, or ``w8a8_static``): the validation-loss penalty of the
scheme on every block linear at once (what ``summary.json`` records under ``quantization``), then
of each linear alone, with the largest |input| that sets its static scale (on the run's
calibration windows), the share of its validation inputs beyond that (clipped) and the share of its
nonzero validation inputs that round to 0 at that scale. One massive activation at the FFN's down
projection sets the scale for every other entry: whether the model can lose those small entries is
what one seed pays and another does not.

Run: `.venv/bin/python benchmarks/quant_by_linear.py RUN [RUN ...] [--scheme w8a8_tensor_static]`
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from common import record

from sinklab.adapt import QUANT_SCHEMES, quantize_activation, quantized
from sinklab.adapt.quantize import quantized_linears
from sinklab.core.text import format_table
from sinklab.pretrain import load_trained
from sinklab.pretrain.quantization import PAYOFF_SCHEMES, static_maxima
from sinklab.pretrain.sources import load_source
from sinklab.pretrain.train import calibration_windows, validation_batches, validation_loss

#: The schemes whose activations take a static scale, the one the columns describe.
STATIC_SCHEMES = [name for name, scheme in QUANT_SCHEMES.items() if scheme.activations == "static"]
COLUMNS = (
    ("linear", "linear", "s"),
    ("+loss alone", "penalty", ".4f"),
    ("static amax", "calibration_amax", ".1f"),
    ("clipped", "clipped_share", ".1e"),
    ("rounded to 0", "zero_share", ".3f"),
)


def input_rounding(model: torch.nn.Module, batches: list[torch.Tensor], module: torch.nn.Module, amax: float) -> dict:
    """Of ``module``'s inputs on ``batches``: the share beyond the static scale's ``amax`` (clipped),
    and the share of the nonzero ones that int8 at that scale rounds to 0."""
    counts = torch.zeros(4, dtype=torch.float64)  # clipped, all, rounded to 0, nonzero

    def hook(_module, args):
        x = args[0]
        q = quantize_activation(x, "static", 8, amax)
        shares = [(x.abs() > amax).sum(), x.numel(), ((q == 0) & (x != 0)).sum(), (x != 0).sum()]
        counts.add_(torch.tensor([float(n) for n in shares], dtype=torch.float64))

    handle = module.register_forward_pre_hook(hook)
    try:
        validation_loss(model, batches)
    finally:
        handle.remove()
    return {"clipped_share": float(counts[0] / counts[1]), "zero_share": float(counts[2] / counts[3].clamp_min(1))}


@torch.no_grad()
def measure(run_dir: Path, scheme_name: str) -> dict:
    model, cfg = load_trained(run_dir)
    data = load_source(cfg.corpus, cfg.tokenizer, cfg.bos, cfg.bb_triggers)
    batches, scheme = validation_batches(data, cfg), QUANT_SCHEMES[scheme_name]
    static = static_maxima(model, calibration_windows(data, cfg))
    exact = validation_loss(model, batches)
    with quantized(model, scheme, static, layers=model.blocks):
        whole = validation_loss(model, batches) - exact
    linears = []
    for name, (_, module) in quantized_linears(model, model.blocks).items():
        with quantized(model, scheme, static, layers=model.blocks, only=[name]):
            penalty = validation_loss(model, batches) - exact
        rounding = input_rounding(model, batches, module, static[name])
        linears.append({"linear": name, "penalty": penalty, "calibration_amax": static[name], **rounding})
    run = {"run": str(run_dir), "variant": cfg.variant, "seed": cfg.seed, "scheme": scheme_name}
    return {**run, "penalty": whole, "linears": linears}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of sinklab pretrain")
    parser.add_argument("--scheme", default=PAYOFF_SCHEMES[0], choices=STATIC_SCHEMES, help="default: %(default)s")
    args = parser.parse_args()
    results = [measure(run, args.scheme) for run in args.runs]
    for r in results:
        print(f"{r['run']} ({r['variant']}, seed {r['seed']}): {r['scheme']} +{r['penalty']:.4f} nats, each linear alone:")
        print(format_table(r["linears"], COLUMNS))
    record("quant_by_linear", {"runs": results})


if __name__ == "__main__":
    main()
