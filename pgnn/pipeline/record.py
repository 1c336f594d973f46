"""DVC's record of a project, for drivers other than ``dvc repro``: which stage items are stale, and
recording the ones a driver ran (:class:`pgnn.pipeline.runner.Session` asks and records).

A Prefect flow runs each stage item through :func:`pgnn.pipeline.runner.run_item` (as ``dvc repro`` does
through the stage scripts) and then ``dvc commit``s it: DVC hashes the item's deps, params and outputs into
``dvc.lock`` and its cache exactly as after ``dvc repro``, so the record stays true and a later ``dvc
repro`` or ``dvc status`` finds nothing to do. Freshness is DVC's alone (:func:`stale_items`): a driver runs
an item when ``dvc status`` calls it changed.

Both run DVC's command line (``python -m dvc`` of this interpreter, analytics off): a second process, the
same answers as the user's ``dvc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pgnn.core.errors import DataError

QUIET_ENV = {
    "DVC_NO_ANALYTICS": "1",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def pipeline_env() -> dict[str, str]:
    """The environment the pipeline's subprocesses run in (DVC's command line, its stage scripts): no
    analytics, one thread per worker unless set, and this interpreter's ``bin/`` first on PATH so DVC's
    stage commands find the same ``python``."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env.setdefault("OMP_NUM_THREADS", "1")
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def is_dvc_project(root: Path) -> bool:
    """Whether ``root`` is a DVC project (a ``.dvc/`` folder and a ``dvc.yaml``)."""
    return (root / ".dvc").is_dir() and (root / "dvc.yaml").is_file()


def _dvc(root: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=root,
        env=pipeline_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise DataError(
            root / "dvc.yaml", f"`dvc {' '.join(args)}` failed: {said[-1] if said else proc.returncode}"
        )
    return proc.stdout


def stale_items(root: Path, targets: Sequence[str]) -> list[str]:
    """The ``targets`` (stage items, ``prepare@train``) that ``dvc status`` calls changed (their deps,
    params, outputs or command differ from ``dvc.lock``, or they never ran), in the order given."""
    if not targets:
        return []
    out = _dvc(root, "status", "--json", *targets)
    changed = set(json.loads(out or "{}"))
    return [t for t in targets if t in changed]


def record(root: Path, targets: Sequence[str]) -> None:
    """``dvc commit`` the ``targets`` after a driver ran them: their entries in ``dvc.lock`` and their
    outputs in DVC's cache, as ``dvc repro`` leaves them."""
    if targets:
        _dvc(root, "commit", "--force", "--quiet", *targets)
