"""``pgnn runs``: the project's DVC experiments (and the workspace) side by side, in 120 columns.

One row per experiment: its name and short rev, the headline AP, the best and last validation AP logged
during training, the final step, and only the params that differ between the rows shown
(``pgnn.pipeline.runs``). Finished experiments whose params are equal except ``train.seed`` are one row, a
seed group, each figure its mean ± sd over the group's experiments; the closing lines say which AP
differences lie within noise (``pgnn.pipeline.spread``). ``--plot OUT.png`` overlays the rows' loss and
validation AP curves in one chart (``pgnn.viz.compare``): a group's mean curves, its val AP with a band of ±
sd.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath
from pgnn.pipeline.spread import RULE, SD

GROUPS_HELP = (
    "one row per experiment: no seed groups (by default, finished experiments whose params are equal except "
    f"train.seed are one row, each AP as mean ± sd over them ({SD}); AP differences between a group and "
    f"another row within noise, {RULE}, are named below the table)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="experiments to show (names or rev prefixes; default: all)"
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="the git + DVC project")
    parser.add_argument("--all", action="store_true", help="every param and metric column, no width limit")
    parser.add_argument("--no-groups", action="store_true", help=GROUPS_HELP)
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="CSV instead of the table")
    form.add_argument("--json", action="store_true", help="JSON instead of the table")
    parser.add_argument(
        "--width", type=width, default=None, help="widest line of the table (default: 120; none with --all)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        action=OutputPath,
        metavar="OUT.png",
        help="also write the rows' curves overlaid (a seed group: its mean, val AP ± sd shaded)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def width(text: str) -> int:
    """A ``--width`` value: a whole number of columns, at least 40 (the fixed columns take about 70, 100 with
    seed groups)."""
    if not text.isdigit() or int(text) < 40:
        raise argparse.ArgumentTypeError(f"expected a whole number of columns >= 40, got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from pgnn.core.outputs import check_output_file
    from pgnn.pipeline.experiments import collect, select
    from pgnn.pipeline.runs import table, to_csv, to_json

    if args.plot is not None:
        check_output_file(args.plot, force=args.force)  # before any work
    experiments = select(collect(args.root), args.names)
    if args.csv:
        print(to_csv(experiments, args.all), end="")
    elif args.json:
        print(to_json(experiments, args.all))
    else:
        print(table(experiments, args.width or (None if args.all else 120), args.all, not args.no_groups))
    if args.plot is not None:
        from pgnn.pipeline.runs import curves, group_rows
        from pgnn.viz.compare import compare_chart

        check_output_file(args.plot, force=args.force)  # again: after every read

        drawn = {r.name: curves(r) for r in (experiments if args.no_groups else group_rows(experiments))}
        loss = {name: (c[0].steps, c[0].values) for name, c in drawn.items()}
        val = {name: (c[1].steps, c[1].values) for name, c in drawn.items()}
        bands = {name: c[2] for name, c in drawn.items() if c[2]}
        label = next((c[1].name for c in drawn.values() if c[1].name), "")
        print(f"wrote {compare_chart(loss, val, args.plot, val_label=label, val_bands=bands)}")
    return 0
