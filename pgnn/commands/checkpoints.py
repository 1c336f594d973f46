"""``pgnn checkpoints``: list the training runs under a checkpoint folder, and prune them explicitly.

Each run (one params combination that changes the trained weights: :func:`pgnn.training.source.train_run_key`)
keeps its own ``<key>/`` folder with its newest ``train.keep_last`` checkpoints; training never deletes
another run's folder. ``--prune`` removes every run folder except the ones named with ``--keep`` (and the
newest run when none is named), and says what it removed. It removes only pgnn run folders by their own
marker and content (``pgnn.training.run_folder.is_run_folder``: ``ckpt-*.pt`` files and the ``.pgnn-output``
marker, nothing else), each under its lock (a run being trained is refused); anything else in the folder is
left alone, and a folder holding no run folder at all is an error.
"""

from __future__ import annotations

import argparse
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
    """(run key, newest step, time of the newest checkpoint) of every run folder, newest first: the
    subfolders holding a checkpoint or pgnn's run marker."""
    from pgnn.core.outputs import made_by
    from pgnn.nn.checkpoint import latest_checkpoint
    from pgnn.training.run_folder import MAKER

    out = []
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        latest = latest_checkpoint(run)
        if latest is None and made_by(run) != MAKER:
            continue  # not a run: someone else's folder
        step = int(latest.stem.removeprefix("ckpt-")) if latest is not None else 0
        out.append((run.name, step, latest.stat().st_mtime if latest is not None else run.stat().st_mtime))
    return sorted(out, key=lambda r: r[2], reverse=True)


def prune(folder: Path, found: list[tuple[str, int, float]], keep: set[str]) -> None:
    """Remove the run folders of ``found`` not in ``keep`` that are pgnn run folders by marker and content,
    each under its run lock; say which ones were left alone and why."""
    import shutil

    from pgnn.core.lock import exclusive_lock
    from pgnn.core.outputs import lock_path
    from pgnn.training.run_folder import foreign_entries, is_run_folder

    for key, _, _ in found:
        path = folder / key
        if key in keep:
            continue
        if not is_run_folder(path):
            other = foreign_entries(path)
            why = f"it holds {', '.join(other[:3])}" if other else "it has no .pgnn-output marker"
            print(f"left {path}: not a pgnn run folder ({why})")
            continue
        with exclusive_lock(lock_path(path), about=path):
            shutil.rmtree(path)
        print(f"removed {path}")


def run(args: argparse.Namespace) -> int:
    from pgnn.core.errors import DataError

    found = runs(args.folder)
    if not found:
        if args.prune:
            raise DataError(
                args.folder,
                "expected a folder of pgnn training runs (<key>/ with ckpt-*.pt and .pgnn-output), "
                "it holds none; nothing removed",
            )
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
    prune(args.folder, found, keep)
    return 0
