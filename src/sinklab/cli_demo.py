"""``sinklab demo``: the quick form of every capability (what `make demo` runs)."""

from __future__ import annotations

from .cli import command
from .demo import run_demo


def add_parsers(sub) -> None:
    p = sub.add_parser("demo", help="run every capability briefly on the built-in defaults (make demo)")
    p.add_argument("--out", default="runs/demo", help="root directory of the demo runs (default runs/demo)")
    p.set_defaults(command="demo")


@command("demo")
def demo_command(args) -> int:
    dirs = run_demo(args.out)
    print("\noutputs:")
    for d in dirs:
        print(f"  {d}/summary.json (+ figures)")
    return 0
