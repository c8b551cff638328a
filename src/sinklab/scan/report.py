"""The scanner's terminal tables (its figures are in :mod:`.plots`); every model or token string
goes through :func:`~sinklab.core.text.safe_text`."""

from __future__ import annotations

from collections import defaultdict

from ..core.text import format_table, safe_text


def scan_table(summary: dict) -> str:
    """One line per layer: first-token mass, sink share, dominance ratios, kurtosis, outliers."""
    massive = defaultdict(int)
    for entry in summary["massive_activations"]:
        massive[entry["layer"]] += 1
    supers = defaultdict(list)
    for entry in summary["super_neurons"]:
        supers[entry["layer"]].append(str(entry["neuron"]))
    rows = [
        {
            "layer": layer,
            "mass": summary["first_token_mass_by_layer"][layer],
            "share": summary["sink_share_by_layer"][layer],
            "dom0": summary["dominance_ratio_first"][layer],
            "dom": summary["dominance_ratio_rest"][layer],
            "max0": summary["max_abs_first"][layer],
            "kurt": summary["kurtosis"][layer],
            "massive": massive[layer],
            "super": ",".join(supers[layer][:3]) or "-",
        }
        for layer in range(summary["layers"])
    ]
    return format_table(
        rows,
        [
            ("layer", "layer", "d"),
            ("first-token mass", "mass", ".3f"),
            (f"heads with alpha>{summary['sink_rate']['eps']:g}", "share", ".2f"),
            ("dominance pos0", "dom0", ".1f"),
            ("dominance rest", "dom", ".1f"),
            ("max|h| pos0", "max0", ".1f"),
            ("kurtosis", "kurt", ".1f"),
            ("massive acts", "massive", "d"),
            ("super neurons", "super", "s"),
        ],
    )


def scan_headline(summary: dict) -> str:
    """The few numbers a reader wants first, as text."""
    rate = summary["sink_rate"]
    lines = [
        f"{safe_text(summary['model'], 80)}: {summary['sequences']} x {summary['tokens']} tokens "
        f"({summary['inputs']['kind']}, BOS {'prepended' if summary['bos_prepended'] else 'not prepended'}), "
        f"loss {summary['loss']:.3f}",
        f"Sink_{rate['k']}^{rate['eps']:g} = {rate['value']:.3f} (share of layer-head pairs); "
        f"sink share >= 0.5 from layer {summary['sink_start_layer']}, "
        f"first-token mass >= 0.5 from layer {summary['first_token_mass_start_layer']}",
        f"massive activations: {len(summary['massive_activations'])}"
        + (
            f", largest {summary['massive_activations'][0]['value']:.1f} at layer {summary['massive_activations'][0]['layer']}, "
            f"position {summary['massive_activations'][0]['position']}, dim {summary['massive_activations'][0]['dim']}"
            if summary["massive_activations"]
            else ""
        ),
        f"super neurons: {len(summary['super_neurons'])}"
        + "".join(f"; L{s['layer']}#{s['neuron']} (x{s['ratio']:.0f})" for s in summary["super_neurons"][:4]),
        "secondary sinks: "
        + (
            ", ".join(
                f"pos {s['position']} {safe_text(repr(s['tokens'][0]))} ({s['alpha_mean']:.2f})"
                for s in summary["secondary_sinks"]
            )
            or "none"
        ),
    ]
    return "\n".join(lines)
