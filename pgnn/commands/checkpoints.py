"""``pgnn checkpoints``: list the training runs under a checkpoint folder, and prune them explicitly.

Each run (one params combination that changes the trained weights: :func:`pgnn.training.source.train_run_key`)
keeps its own ``<key>/`` folder with its newest ``train.keep_last`` checkpoints; training never deletes
another run's folder. ``--prune`` removes every run folder except the ones named with ``--keep`` (and the
newest run when none is named), and says what it removed.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        type=Path,
        nargs="?",
        default=Path("models/checkpoints"),
        help="checkpoint root (%(default)s)",
    )
    parser.add_argument("--prune", action="store_true", help="delete the run folders not kept")
    parser.add_argument("--keep", nargs="+", default=None, help="run keys to keep (default: the newest run)")


def runs(folder: Path) -> list[tuple[str, int, float]]:
    """(run key, newest step, time of the newest checkpoint) of every run folder, newest first."""
    from pgnn.nn.checkpoint import latest_checkpoint

    out = []
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        latest = latest_checkpoint(run)
        step = int(latest.stem.removeprefix("ckpt-")) if latest is not None else 0
        out.append((run.name, step, latest.stat().st_mtime if latest is not None else run.stat().st_mtime))
    return sorted(out, key=lambda r: r[2], reverse=True)


def run(args: argparse.Namespace) -> int:
    from pgnn.core.errors import DataError

    found = runs(args.folder)
    if not found:
        print(f"{args.folder}: no runs")
        return 0
    for key, step, mtime in found:
        print(f"{key}  step {step:>9}  {time.strftime('%Y-%m-%d %H:%M', time.localtime(mtime))}")
    if not args.prune:
        return 0
    keep = set(args.keep) if args.keep else {found[0][0]}
    unknown = keep - {k for k, _, _ in found}
    if unknown:
        raise DataError(
            args.folder, f"expected run keys to keep among the runs listed, got {sorted(unknown)}"
        )
    for key, _, _ in found:
        if key not in keep:
            shutil.rmtree(args.folder / key)
            print(f"removed {args.folder / key}")
    return 0
