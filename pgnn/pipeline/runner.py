"""Running the stages of the table: the one place where a stage runs on a project, whatever the driver.

Every driver goes through :func:`run_item`: the DVC stage scripts (``stages/<name>.py`` ->
:func:`run_stage`), the Prefect flows (``flows/pipeline.py``: one task per stage item) and ``pgnn train``
(:mod:`pgnn.pipeline.standalone`). It loads what the stage reads (params.yaml for the ``params`` stage, the
effective params of ``params.resolved.yaml`` for the others) and calls ``<entry>.run(params, layout, item)``,
where the stage table's paths meet the step functions. A driver adds scheduling, fan-out, retries and
logging around it; it never lists a step's arguments itself::

    dvc repro ---------> stages/<name>.py --+
    Prefect flow ------> stage task --------+--> run_item(item, layout, params) --> <entry>.run(...)
    pgnn train --------> train_project -----+

A *stage item* is what DVC calls a stage: a stage of the table, or one split of a ``foreach`` stage
(``prepare@train``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgnn.core.lock import project_lock
from pgnn.pipeline.stages import PATHS, STAGES, Layout, Stage, stage


@dataclass(frozen=True)
class StageItem:
    """One stage of the table, for one split when the stage is a ``foreach`` stage."""

    stage: Stage
    item: str | None = None

    @property
    def target(self) -> str:
        """DVC's name of it: ``train``, ``prepare@val``."""
        return self.stage.name if self.item is None else f"{self.stage.name}@{self.item}"


def stage_items(names: Iterable[str] | None = None) -> tuple[StageItem, ...]:
    """The items of the named stages (default: all), in the table's order (upstream first)."""
    wanted = None if names is None else {stage(n).name for n in names}
    return tuple(
        StageItem(s, item)
        for s in STAGES
        if wanted is None or s.name in wanted
        for item in (s.foreach or (None,))
    )


def item_of(target: str) -> StageItem:
    """The stage item DVC calls ``target`` (``prepare@train``)."""
    name, _, item = target.partition("@")
    s = stage(name)
    if (s.foreach is None) != (not item) or (item and item not in (s.foreach or ())):
        splits = ", ".join(f"{name}@{i}" for i in s.foreach or ())
        raise ValueError(f"unknown stage item {target!r}; expected {splits or name}")
    return StageItem(s, item or None)


def upstream(names: Iterable[str], data_root: str) -> tuple[str, ...]:
    """The named stages and every stage they depend on, in the table's order. ``data_root`` is
    ``data.root`` (the ``synth`` stage is upstream of ``prepare`` only when that is its folder)."""
    producer = {out.artifact.partition(":")[0]: s.name for s in STAGES for out in s.outs}
    needed: set[str] = set()
    todo = [stage(n).name for n in names]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        s = stage(name)
        if not s.reads_params_yaml:
            todo.append(next(t.name for t in STAGES if t.reads_params_yaml))
        for dep in s.deps:
            if dep == "${data.root}":
                if data_root == PATHS["synthetic"]:
                    todo.append(producer["synthetic"])
            elif dep.partition(":")[0] in producer:
                todo.append(producer[dep.partition(":")[0]])
    return tuple(s.name for s in STAGES if s.name in needed)


def load_stage_params(s: Stage, layout: Layout, params_path: Path | None = None) -> Any:
    """What stage ``s`` reads: :class:`pgnn.config.params.Params` (``params_path``, default the project's
    params.yaml) for the ``params`` stage, else :class:`pgnn.config.params.ResolvedParams` of
    ``params.resolved.yaml``, checked to come from that file."""
    from pgnn.config.params import ResolvedParams, load_params

    params_path = layout.root / "params.yaml" if params_path is None else params_path
    if s.reads_params_yaml:
        return load_params(params_path)
    return ResolvedParams.load(layout.path("resolved"), params_path)


def run_item(it: StageItem, layout: Layout, params: Any) -> None:
    """Run one stage item on the project of ``layout``: ``<entry>.run(params, layout, item)``, with the
    ``params`` of :func:`load_stage_params` (or an equal object a driver built)."""
    importlib.import_module(it.stage.entry).run(params, layout, it.item)


def run_in_order(layout: Layout, names: Iterable[str], params_path: Path | None = None) -> None:
    """Run every item of the stages ``names`` in the table's order, each reading what
    :func:`load_stage_params` gives (no freshness check: each stage is content-keyed, a current one does
    little). What a plain driver without DVC does."""
    for it in stage_items(names):
        run_item(it, layout, load_stage_params(it.stage, layout, params_path))


def run_stage(name: str, argv: Sequence[str], root: Path) -> None:
    """The stage scripts' entry: run stage ``name`` on the project at ``root``. ``argv`` holds the split of
    a ``foreach`` stage (``prepare train``) and nothing otherwise."""
    s = stage(name)
    if s.foreach is not None:
        if len(argv) != 1 or argv[0] not in s.foreach:
            raise SystemExit(f"usage: python {s.script} {{{','.join(s.foreach)}}}")
        it = StageItem(s, argv[0])
    elif argv:
        raise SystemExit(f"usage: python {s.script} (no arguments)")
    else:
        it = StageItem(s)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # step and val-AP lines in the log
    layout = Layout(root)
    with project_lock(root, f"dvc stage {it.target}"):  # one writer of the project's outputs at a time
        run_item(it, layout, load_stage_params(s, layout))
