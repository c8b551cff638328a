"""The keep-sink tables of BENCHMARKS.md 11, printed from a ``sinklab compress`` row of
``results/<name>.jsonl`` (written by ``record_run.py``), so each figure there can be checked against
the row it came from.

Run: `.venv/bin/python benchmarks/compress_table.py compress_2048 [--context 2048]`
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sinklab.compress.summary import current

RESULTS = Path(__file__).parent / "results"


def cell_text(cell: dict, texts: list[str]) -> str:
    """``ppl ratios / passkey accuracy (key log-probability mean ± spread over prompts)``."""
    parts = [f"{cell['ppl_ratio'][t]:.2f}" for t in texts if "ppl_ratio" in cell]
    if "passkey" in cell:
        key = cell["passkey"]
        parts.append(f"{key['accuracy']:.2f} ({key['logprob_mean']:.1f} ± {key['logprob_std']:.1f})")
    return " / ".join(parts)


def press_table(summary: dict, context: int) -> list[str]:
    texts = list(summary["dense"][str(context)].get("ppl", {}))
    keeps = summary["keep_sinks"]
    lines = ["| press | ratio | " + " | ".join(f"keep {k}" for k in keeps) + " |", "|---|---|" + "---|" * len(keeps)]
    cells = {(c["policy"], c["ratio"], c["keep_sinks"]): c for c in summary["cells"] if c["context"] == context}
    for press in summary["presses"]:
        for ratio in summary["ratios"]:
            row = [cell_text(cells[press, ratio, k], texts) for k in keeps]
            lines.append(f"| {press} | {ratio:g} | " + " | ".join(row) + " |")
    return lines


def decoding_table(summary: dict, context: int) -> list[str]:
    """A run of presses while decoding (``--during decode``): one row per press, one column per
    sinks-kept setting, each cell as in :func:`press_table`, then the kept fraction and bytes."""
    texts = list(summary["dense"][str(context)].get("ppl", {}))
    keeps = summary["keep_sinks"]
    lines = ["| press | " + " | ".join(f"keep {k}" for k in keeps) + " | kept / bytes |", "|---|" + "---|" * (len(keeps) + 1)]
    cells = {(c["policy"], c["keep_sinks"]): c for c in summary["cells"] if c["context"] == context}
    for press in summary["presses"]:
        row = [cell_text(cells[press, k], texts) for k in keeps]
        last = cells[press, keeps[-1]]
        lines.append(f"| {press} | " + " | ".join(row) + f" | {last['kept_fraction']:.3f} / {last['bytes_ratio']:.3f} |")
    return lines


def quantizer_table(summary: dict, context: int) -> list[str]:
    texts = list(summary["dense"][str(context)].get("ppl", {}))
    lines = [
        "| quantizer | bits | protect | "
        + " | ".join(f"ppl/full {t}" for t in texts)
        + " | passkey acc (log p ± spread) | bytes/dense |",
        "|---|---|---|" + "---|" * (len(texts) + 2),
    ]
    for cell in (c for c in summary["cells"] if c["kind"] == "quantizer" and c["context"] == context):
        ppl = [f"{cell['ppl_ratio'][t]:.3f}" for t in texts]
        key = cell.get("passkey")
        passkey = f"{key['accuracy']:.2f} ({key['logprob_mean']:.2f} ± {key['logprob_std']:.2f})" if key else "-"
        size = "-" if cell["bytes_ratio"] is None else f"{cell['bytes_ratio']:.3f}"
        lines.append(f"| {cell['policy']} | {cell['bits']} | {cell['keep_sinks']} | " + " | ".join([*ppl, passkey, size]) + " |")
    return lines


def dense_line(summary: dict, context: int) -> str:
    dense = summary["dense"][str(context)]
    ppl = " / ".join(f"{v:.2f}" for v in dense.get("ppl", {}).values())
    key = dense.get("passkey")
    passkey = f", passkey {key['accuracy']:.2f} (log p {key['logprob_mean']:.2f} ± {key['logprob_std']:.2f})" if key else ""
    sinks = sorted({p for cell in summary["cells"] if cell["context"] == context for s in cell["sinks"] for p in s})
    return f"full cache at {context} tokens: ppl {ppl}{passkey}; positions ever protected as detected or first-N sinks: {sinks}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the results file: results/NAME.jsonl (its last row)")
    parser.add_argument("--context", type=int, help="which context (default: every one in the row)")
    args = parser.parse_args()
    row = [json.loads(line) for line in (RESULTS / f"{args.name}.jsonl").read_text().splitlines()][-1]
    summary = current(row["result"])  # rows saved before the one cell schema read as today's
    print(f"{row['command']}  (commit {row['git']}, {row['wall_seconds'] / 60:.0f} minutes)")
    for context in [args.context] if args.context else summary["contexts"]:
        if summary.get("during") == "decode":
            print("", dense_line(summary, context), "", *decoding_table(summary, context), sep="\n")
            continue
        print(
            "", dense_line(summary, context), "", *press_table(summary, context), "", *quantizer_table(summary, context), sep="\n"
        )


if __name__ == "__main__":
    main()
