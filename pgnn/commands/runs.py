"""``pgnn runs``: the project's DVC experiments (and the workspace) side by side, in 120 columns.

One row per run: its name and short rev, the headline AP, the best and last validation AP logged during
training, the final step, and only the params that differ between the rows shown (``pgnn.pipeline.runs``).
``--plot OUT.png`` overlays the runs' loss and validation AP curves in one chart (``pgnn.viz.compare``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="experiments to show (names or rev prefixes; default: all)"
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="the git + DVC project")
    parser.add_argument("--all", action="store_true", help="every param and metric column, no width limit")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="CSV instead of the table")
    form.add_argument("--json", action="store_true", help="JSON instead of the table")
    parser.add_argument(
        "--width", type=width, default=None, help="widest line of the table (default: 120; none with --all)"
    )
    parser.add_argument(
        "--plot", type=Path, action=OutputPath, metavar="OUT.png", help="also write the runs' curves overlaid"
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def width(text: str) -> int:
    """A ``--width`` value: a whole number of columns, at least 40 (the fixed columns take about 70)."""
    if not text.isdigit() or int(text) < 40:
        raise argparse.ArgumentTypeError(f"expected a whole number of columns >= 40, got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from pgnn.core.outputs import check_output_file
    from pgnn.pipeline.runs import collect, select, table, to_csv, to_json

    if args.plot is not None:
        check_output_file(args.plot, force=args.force)  # before any work
    runs = select(collect(args.root), args.names)
    if args.csv:
        print(to_csv(runs, args.all), end="")
    elif args.json:
        print(to_json(runs, args.all))
    else:
        print(table(runs, args.width or (None if args.all else 120), args.all))
    if args.plot is not None:
        from pgnn.viz.compare import compare_chart

        check_output_file(args.plot, force=args.force)  # again: after every read

        loss = {r.name: (r.loss.steps, r.loss.values) for r in runs}
        val = {r.name: (r.val.steps, r.val.values) for r in runs}
        label = next((r.val.name for r in runs if r.val.name), "")
        print(f"wrote {compare_chart(loss, val, args.plot, val_label=label)}")
    return 0
