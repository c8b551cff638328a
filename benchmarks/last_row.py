"""The command line of the scripts that print a results page's tables from a recorded row
(``bench_table.py``, ``sweep_table.py``): ``NAME`` names ``results/NAME.jsonl``, whose last row
they read. Apart from ``common.py`` so that reading a row never asks for a clean tree, as
recording one does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def last_row(description: str) -> dict:
    """The last row of ``results/NAME.jsonl``, NAME given on the command line (``description``: the
    script's ``--help`` text)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the results file: results/NAME.jsonl (its last row)")
    args = parser.parse_args()
    return json.loads((RESULTS / f"{args.name}.jsonl").read_text().splitlines()[-1])
