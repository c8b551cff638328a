"""The ``sinklab bench`` tables of BENCHMARKS.md 12, printed from a row of ``results/<name>.jsonl``
(written by ``record_run.py``), so each figure there can be checked against the row it came from.

Run: `.venv/bin/python benchmarks/bench_table.py bench_sinks_v1`
"""

from __future__ import annotations

from last_row import last_row


def shown(metric: dict) -> str:
    """A metric as ``value`` or ``value ± spread (n over)``; n/a where there is none."""
    value = metric["value"]
    if value is None:
        return "none"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text + (f" ± {metric['spread']:.3g} ({metric['n']} {metric['over']})" if metric.get("spread") is not None else "")


def metric_table(summary: dict) -> list[str]:
    """Every task's metrics (the per-cell ones of a compression task left to the next table), one
    column per model."""
    models = summary["models"]
    lines = ["| task | metric | " + " | ".join(m["label"] for m in models) + " |", "|---|---|" + "---|" * len(models)]
    for name in summary["tasks"]:
        metrics = list(dict.fromkeys(k for m in models for k in m["tasks"][name]["metrics"] if "@" not in k))
        for key in metrics:
            cells = [m["tasks"][name]["metrics"].get(key) for m in models]
            row = [shown(c) if c else "n/a" for c in cells]
            lines.append(f"| {name} | {key} | " + " | ".join(row) + " |")
    return lines


KEYS = ("ppl_ratio", "ppl_ratio_outside", "passkey_accuracy")


def press_table(results: dict) -> list[str]:
    """compressed_context per press and ratio: ppl ratio (corpus / outside) and passkey, keep 0 | keep 1."""
    metrics = results["tasks"]["compressed_context"]["metrics"]
    cells = sorted({k.rsplit("/keep", 1)[0] for k in metrics if "@" in k})
    lines = ["| press @ ratio | no sink kept | first token kept |", "|---|---|---|"]
    for cell in cells:
        row = []
        for keep in (0, 1):
            ppl, outside, passkey = (metrics[f"{cell}/keep{keep}/{key}"]["value"] for key in KEYS)
            row.append(f"{ppl:.2f} / {outside:.2f}, passkey {passkey:.2f}")
        lines.append(f"| {cell} | " + " | ".join(row) + " |")
    return lines


def main() -> None:
    row = last_row(__doc__)
    summary = row["result"]
    print(f"commit {row['git'][:7]}, command: {row['command']}\n")
    print("\n".join(metric_table(summary)) + "\n")
    for results in summary["models"]:
        if results["tasks"].get("compressed_context", {}).get("metrics"):
            print(f"{results['label']}: compressed context\n")
            print("\n".join(press_table(results)) + "\n")
    for results in summary["models"]:
        print(f"{results['label']}: {results['wall_s']:.0f} s over its tasks ({results['model_name']})")
        for name, entry in results["tasks"].items():
            if entry["not_applicable"]:
                print(f"  n/a {name}: {entry['not_applicable']}")


if __name__ == "__main__":
    main()
