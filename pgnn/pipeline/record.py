"""DVC's record of a project, for drivers other than ``dvc repro``: which stage items are stale, and
recording the ones a driver ran.

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
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pgnn.config.params import load_params
from pgnn.core.errors import DataError
from pgnn.core.lock import project_lock
from pgnn.pipeline.lockfile import repair_lock
from pgnn.pipeline.run import pipeline_env
from pgnn.pipeline.runner import stage_items, upstream
from pgnn.pipeline.stages import Layout


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


def project_paths(params_path: str | Path, project_root: str | Path | None) -> tuple[Path, Layout, bool]:
    """The params file, the layout, and whether DVC's record applies (a DVC project run with its own
    params.yaml). ``project_root`` defaults to the params file's folder."""
    path = Path(params_path).resolve()
    layout = Layout(path.parent if project_root is None else Path(project_root).resolve())
    recorded = is_dvc_project(layout.root) and path == (layout.root / "params.yaml").resolve()
    return path, layout, recorded


def work_plan(
    params_path: str | Path, project_root: str | Path | None, stages: Sequence[str]
) -> tuple[str, ...]:
    """The stages a flow asked for ``stages`` goes through: those and every stage upstream of them, in the
    table's order (:func:`pgnn.pipeline.runner.upstream`)."""
    path, _, _ = project_paths(params_path, project_root)
    return upstream(stages, load_params(path).data.root)


def pending(
    params_path: str | Path, project_root: str | Path | None, stages: Sequence[str]
) -> list[str] | None:
    """The stale stage items of a run of ``stages`` (upstream ones included), as DVC sees them now; None
    outside DVC's record (then a flow runs every item). What ``python -m flows`` checks before it starts
    Prefect."""
    path, layout, recorded = project_paths(params_path, project_root)
    if not recorded:
        return None
    repair_lock(layout.root)
    return stale_items(layout.root, [it.target for it in stage_items(work_plan(path, layout.root, stages))])


def refuse_stale_upstream(layout: Layout, targets: Sequence[str]) -> None:
    """Raise a :class:`DataError` naming the ``targets`` (upstream items another flow runs) that ``dvc
    status`` calls stale; nothing when all are current."""
    stale = stale_items(layout.root, targets)
    if stale:
        raise DataError(
            layout.root / "dvc.lock",
            f"stale upstream stages {', '.join(stale)}: run them first (`dvc repro`, the pgnn-preprocess "
            "deployment or the pgnn-full flow)",
        )


def check_upstream(
    params_path: str | Path, project_root: str | Path | None, stages: Sequence[str], allowed: Sequence[str]
) -> None:
    """Before a flow that runs only ``allowed`` starts: bring the ``params`` stage up to date (run and record
    it, as the flow would first), then refuse (:func:`refuse_stale_upstream`) when a stage upstream of
    ``stages`` outside ``allowed`` is stale. Nothing outside DVC's record."""
    from pgnn.pipeline.runner import item_of, load_stage_params, run_item

    path, layout, recorded = project_paths(params_path, project_root)
    if not recorded:
        return
    repair_lock(layout.root)
    if stale_items(layout.root, ["params"]):
        it = item_of("params")
        with project_lock(layout.root, "python -m flows (the params stage)"):
            run_item(it, layout, load_stage_params(it.stage, layout, path))
        record(layout.root, ["params"])
    names = [n for n in work_plan(path, layout.root, stages) if n not in {"params", *allowed}]
    refuse_stale_upstream(layout, [it.target for it in stage_items(names)])
