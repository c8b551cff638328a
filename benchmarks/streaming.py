"""The StreamingLLM benchmark on the default model: 16,384 tokens of Shakespeare (twice the
model's 8,192-position context), 4 sinks + 1,020 recent tokens, every policy, and the ablation on
the number of kept initial tokens (0, 1, 2, 4, 8) at the same total cache size of 1,024.

Run: `.venv/bin/python benchmarks/streaming.py [--tokens 16384]` (about half an hour on 2 cores)
"""

from __future__ import annotations

import argparse

from common import RUNS, record

from sinklab.core import pipeline
from sinklab.stream import STREAM, StreamConfig, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--recompute-every", type=int, default=128)
    parser.add_argument("--out", default=str(RUNS / "stream-benchmark"))
    args = parser.parse_args()
    cfg = StreamConfig(tokens=args.tokens, sinks=4, window=1020, recompute_every=args.recompute_every, ablation=(0, 1, 2, 4, 8))
    summary = pipeline.run(STREAM, cfg, out=args.out, overwrite=True).summary
    print(report.stream_table(summary))
    record(
        "streaming",
        {
            k: summary[k]
            for k in ("model", "max_positions", "tokens", "sinks", "window", "policies", "ablation", "one_pass_check")
        },
    )


if __name__ == "__main__":
    main()
