"""A training run folder: what counts as one, its marker, and the lock its trainer holds.

A run folder (``models/checkpoints/<run key>/``) holds only ``ckpt-<step>.pt`` files (and their
``.tmp-ckpt-*`` while one is written) and the marker ``.pgnn-output`` (``{"made_by": "pgnn train"}``,
``pgnn.core.outputs``); its lock file lives outside it (``pgnn.core.outputs.lock_path``). Training claims
its folder (creates it, or takes one that is empty or holds only checkpoints, and marks it) and holds the
lock for the whole run, so a second trainer of the same run is refused at once naming the first one's pid;
``pgnn checkpoints --prune`` deletes only marked run folders of exactly this content, each under its lock.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pgnn.core.lock import exclusive_lock
from pgnn.core.outputs import MARKER, OutputError, lock_path, made_by, write_marker

MAKER = "pgnn train"
_CHECKPOINT = re.compile(r"ckpt-\d{8}\.pt(\.corrupt)?|\.tmp-ckpt-.*")  # .corrupt: quarantined by resume


def foreign_entries(folder: Path) -> list[str]:
    """The entries of ``folder`` a run folder never holds (its checkpoints and marker aside)."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name != MARKER and not (p.is_file() and _CHECKPOINT.fullmatch(p.name))
    )


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a pgnn run folder by its own marker and content (safe for ``--prune``)."""
    return folder.is_dir() and made_by(folder) == MAKER and not foreign_entries(folder)


@contextlib.contextmanager
def run_folder_lock(out_dir: str | Path) -> Iterator[Path]:
    """Claim the run folder ``out_dir`` and hold its lock for the block.

    Raises:
        OutputError: ``out_dir`` holds files a run folder never holds (someone else's).
        pgnn.core.lock.LockedError: another process is training into it.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(out_dir, "expected a training run folder (or no such path), got a file")
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_claimable(out_dir)
    with exclusive_lock(lock_path(out_dir), None, about=out_dir):
        _check_claimable(out_dir)
        if made_by(out_dir) != MAKER:
            write_marker(out_dir, MAKER)
        yield out_dir


def _check_claimable(out_dir: Path) -> None:
    other = foreign_entries(out_dir)
    if other:
        shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        raise OutputError(
            out_dir,
            f"expected an empty folder or a pgnn training run folder (only ckpt-*.pt files), it holds "
            f"{len(other)} other entr{'y' if len(other) == 1 else 'ies'}: {shown}; "
            "choose another checkpoint folder",
        )


F = TypeVar("F", bound=Callable[..., Any])
