"""Pretraining's plots, each defined once (the PNG files of a run or a ``sinklab compare`` directory
and the report page draw the same traces): the sink metrics and the loss against the step (one line
per run, one colour per run in every panel), and, by layer at the end of training, the first-token
mass and the outlier figures the training mitigations of issue 52 claim to change."""

from __future__ import annotations

from typing import Optional

from ..core.figures import LEGEND_BELOW, layer_axis
from ..core.text import html_text

#: Curves against the step (metrics.jsonl key -> label), in the order they are plotted.
CURVES = {
    "val_loss": "validation loss",
    "val_loss_gap": "gap to the optimum (bb)",
    "first_token_mass_mean": "first-token mass",
    "sink_rate_value": "Sink_1^0.3",
    "sink_head_bos_mass_nontrigger": "sink head: BOS mass, non-trigger rows (bb)",
    "sink_head_bos_mass_trigger": "sink head: BOS mass, trigger rows (bb)",
    "null_mass_mean": "null mass (slot or sink tokens)",
    "value_drain_max": "value drain (max over layers)",
    "residual_peak_max": "residual peak (max over layers)",
    "dominance_first_max": "largest dominance ratio at position 0",
}
PANEL_COLUMNS = 3

#: Figures by layer at the end of training (summary.json key -> label), in the order they are
#: plotted; a key that holds layers x heads is drawn as its mean over heads.
LAYER_PANELS = {
    "first_token_mass_by_layer": "first-token mass",
    "kurtosis": "kurtosis of the residual stream",
    "max_abs_first": "largest |h| at position 0",
    "max_abs_rest": "largest |h| elsewhere",
    "value_state_drain": "value-state norm, position 0 / rest (before any gate)",
    "attention_zero_share": "share of exactly-zero attention weights",
}
#: Panels whose values span orders of magnitude between variants (TWEO's |h| of 4 beside softmax's
#: thousands): drawn on a log axis.
LOG_PANELS = ("kurtosis", "max_abs_first", "max_abs_rest")


def run_figures(name: str, rows: list[dict]) -> dict:
    """The static figures of one training run (``rows``: its metrics.jsonl), by file name."""
    return {"emergence.png": emergence_figure({name: rows})}


def compare_figures(metrics_by_run: dict[str, list[dict]], summaries: dict[str, dict]) -> dict:
    """The static figures of ``sinklab compare``, by file name: runs by name, their metrics.jsonl
    rows and their summaries."""
    return {
        "val_loss.png": curve_figure(metrics_by_run, "val_loss"),
        "by_layer.png": by_layer_figure(summaries),
        "emergence.png": emergence_figure(metrics_by_run),
    }


def present_curves(metrics_by_run: dict[str, list[dict]]) -> list[str]:
    """The keys of :data:`CURVES` some run recorded."""
    return [key for key in CURVES if any(key in row for rows in metrics_by_run.values() for row in rows)]


def _traces(metrics_by_run: dict[str, list[dict]], key: str, legend: bool = True) -> list:
    """One line per run of metric ``key`` against the step; run i has the i-th colour wherever it is drawn."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    return [
        go.Scatter(
            x=[r["step"] for r in rows if key in r],
            y=[r[key] for r in rows if key in r],
            mode="lines+markers",
            name=html_text(name, 50),
            legendgroup=html_text(name, 50),
            showlegend=legend,
            line=dict(color=palette[i % len(palette)]),
        )
        for i, (name, rows) in enumerate(metrics_by_run.items())
    ]


def curve_figure(metrics_by_run: dict[str, list[dict]], key: str):
    """Metric ``key`` against the step, one line per run."""
    import plotly.graph_objects as go

    title = CURVES[key]
    return go.Figure(_traces(metrics_by_run, key)).update_layout(
        title=title[0].upper() + title[1:] + " against the step", xaxis_title="step", yaxis_title=title, height=360
    )


def emergence_figure(metrics_by_run: dict[str, list[dict]]):
    """Every recorded metric against the step, a panel each (Gu et al. Fig. 4 style)."""
    keys = present_curves(metrics_by_run)
    fig = _panels([CURVES[k] for k in keys], [_traces(metrics_by_run, key, legend=i == 0) for i, key in enumerate(keys)])
    fig.update_xaxes(title_text="step", title_font_size=10)
    return fig.update_layout(title="Sink metrics against the step")


def _panels(titles: list[str], traces: list[list]):
    """A grid of :data:`PANEL_COLUMNS` panels, ``traces[i]`` drawn in the panel titled ``titles[i]``."""
    from plotly.subplots import make_subplots

    rows = max(1, -(-len(titles) // PANEL_COLUMNS))
    fig = make_subplots(rows=rows, cols=PANEL_COLUMNS, subplot_titles=titles, vertical_spacing=0.5 / max(rows, 1))
    for i, panel in enumerate(traces):
        for trace in panel:
            fig.add_trace(trace, row=i // PANEL_COLUMNS + 1, col=i % PANEL_COLUMNS + 1)
    fig.update_annotations(font_size=11)
    return fig.update_layout(width=1200, height=280 * rows + 140, legend={**LEGEND_BELOW, "y": -0.4 / rows})


def by_layer_figure(summaries: dict[str, Optional[dict]]):
    """The :data:`LAYER_PANELS` figures some run's summary holds, per layer, a panel each, one line
    per run (run i has the i-th colour in every panel, as in the curves; an unfinished run's
    summary is None: it keeps its colour and draws nothing)."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    finished = [s for s in summaries.values() if s is not None]
    keys = [key for key in LAYER_PANELS if any(key in s for s in finished)]
    traces = [
        [
            go.Scatter(
                y=_per_layer(s[key]),
                mode="lines+markers",
                name=html_text(name, 50),
                legendgroup=html_text(name, 50),
                showlegend=i == 0,
                line=dict(color=palette[n % len(palette)]),
            )
            for n, (name, s) in enumerate(summaries.items())
            if s is not None and key in s
        ]
        for i, key in enumerate(keys)
    ]
    fig = _panels([LAYER_PANELS[k] + (" (log)" if k in LOG_PANELS else "") for k in keys], traces)
    for i, key in enumerate(keys):
        if key in LOG_PANELS:
            fig.update_yaxes(type="log", row=i // PANEL_COLUMNS + 1, col=i % PANEL_COLUMNS + 1)
    layers = max((len(s["first_token_mass_by_layer"]) for s in finished), default=1)
    fig.update_xaxes(**layer_axis(layers))
    return fig.update_layout(title="At the end of training, per layer")


def _per_layer(values: list) -> list:
    """A per-layer list as it is, or the mean over heads of a layers x heads one."""
    return [sum(row) / len(row) if isinstance(row, list) else row for row in values]
