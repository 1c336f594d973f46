"""Running the stages of the table: the one place where a stage runs on a project, whatever the driver.

A driver opens a project with :func:`driver_session`, the one place that takes the project's lock, repairs
a half-written ``dvc.lock``, and decides whether DVC's record applies; its :class:`Session` holds the
rules every driver follows (upstream order, the params rule, freshness, the refusal of another driver's
stale stages). Every stage item runs through :func:`run_item`, which calls ``<entry>.run(params, layout,
item)`` with what the stage reads (:func:`load_stage_params`: the params file for the ``params`` stage,
the effective params of ``params.resolved.yaml`` for the others), where the stage table's paths meet the
step functions. A driver adds only scheduling, fan-out, retries and logging::

    make pipeline -> dvc repro -> stages/<name>.py -> run_stage --------+
    python -m flows -> Prefect flow (Session.run, its tasks as Execute) -+--> Session --> run_item(...)
    pgnn train -> train_project (Session.run) ---------------------------+        --> <entry>.run(...)

The shard stages fan their shards out with the driver's map (:func:`pgnn.core.shards.run_plans`: a
process pool here, Prefect's task map in ``flows/``). A *stage item* is what DVC calls a stage: a stage of
the table, or one split of a ``foreach`` stage (``prepare@train``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgnn.config.params import ParamsSource, ResolvedReader
from pgnn.core.errors import DataError
from pgnn.core.lock import project_lock
from pgnn.pipeline.lockfile import repair_lock
from pgnn.pipeline.record import is_dvc_project, record, stale_items
from pgnn.pipeline.stages import PARAMS_STAGE, PATHS, STAGES, Layout, Stage, stage


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
        if s is not PARAMS_STAGE:
            todo.append(PARAMS_STAGE.name)  # the params rule: every stage reads its output
        for dep in s.deps:
            if dep == "${data.root}":
                if data_root == PATHS["synthetic"]:
                    todo.append(producer["synthetic"])
            elif dep.partition(":")[0] in producer:
                todo.append(producer[dep.partition(":")[0]])
    return tuple(s.name for s in STAGES if s.name in needed)


def load_stage_params(s: Stage, layout: Layout, source: ParamsSource) -> Any:
    """What stage ``s`` reads: ``source`` itself for the ``params`` stage, else
    :class:`pgnn.config.params.ResolvedReader` of ``params.resolved.yaml``, checked to come from
    ``source`` (its digest)."""
    if s.reads_params_yaml:
        return source
    return ResolvedReader.load(layout.path("resolved"), source.path, digest=source.digest)


def run_item(it: StageItem, layout: Layout, params: Any) -> None:
    """Run one stage item on the project of ``layout``: ``<entry>.run(params, layout, item)``, with the
    ``params`` of :func:`load_stage_params`."""
    importlib.import_module(it.stage.entry).run(params, layout, it.item)


Execute = Callable[[Stage, list[StageItem]], Mapping[str, Any]]
"""How a driver runs the stale items of one stage (all of one stage, upstream ones done): returns what
each did, by target. The default, :meth:`Session.execute`, runs them here (a shard stage's shards in
``data.workers`` processes); the Prefect flows hand in their tasks."""


@dataclass(frozen=True)
class Session:
    """One driver's hold on one project, from :func:`driver_session`: the rules every driver follows.

    - **Upstream order**: a run of some stages runs every stage they depend on first, in the table's order
      (:func:`upstream`).
    - **The params rule**: the ``params`` stage is upstream of every other stage, and every driver may run
      it (validating params.yaml is never another driver's job).
    - **Freshness** is DVC's (``dvc status``, :mod:`pgnn.pipeline.record`) where its record applies
      (``recorded``: a DVC project run with its own params.yaml); a driver ``dvc commit``s what it ran, so
      ``dvc status`` stays true. Without the record every asked-for stage runs (each is content-keyed).
    - **The upstream refusal**: a stale stage outside the ``allowed`` ones (the other deployment's)
      stops the run with one line naming it, before anything runs.
    """

    layout: Layout
    source: ParamsSource
    recorded: bool
    log: Callable[[str], None] = print

    def work_plan(self, stages: Iterable[str]) -> tuple[str, ...]:
        """``stages`` and every stage upstream of them, in the table's order."""
        return upstream(stages, self.source.params.data.root)

    def params(self, s: Stage) -> Any:
        """What stage ``s`` reads (:func:`load_stage_params`)."""
        return load_stage_params(s, self.layout, self.source)

    def stale(self, targets: Sequence[str]) -> list[str]:
        """The ``targets`` that need a run: DVC's stale ones where its record applies, else all."""
        return stale_items(self.layout.root, targets) if self.recorded else list(targets)

    def refuse_stale(self, names: Iterable[str]) -> None:
        """Raise a :class:`DataError` naming the items of stages ``names`` that DVC calls stale (another
        driver's to run); nothing outside DVC's record or when all are current."""
        stale = self.stale([it.target for it in stage_items(names)]) if self.recorded else []
        if stale:
            raise DataError(
                self.layout.root / "dvc.lock",
                f"stale upstream stages {', '.join(stale)}: run them first (`dvc repro`, the "
                "pgnn-preprocess deployment or the pgnn-full flow)",
            )

    def execute(self, s: Stage, items: list[StageItem]) -> dict[str, Any]:
        """Run ``items`` of stage ``s`` here (:func:`run_item`); the default :data:`Execute`."""
        params = self.params(s)
        for it in items:
            run_item(it, self.layout, params)
        return {it.target: "ran" for it in items}

    def run(
        self, stages: Iterable[str], allowed: Iterable[str] | None = None, execute: Execute | None = None
    ) -> dict[str, Any]:
        """Run ``stages`` and the stale stages upstream of them, each stage's stale items (asked of DVC just
        before its turn: an upstream stage that ran may have changed its inputs) through ``execute``, then
        ``dvc commit`` them. Upstream stages outside ``allowed`` (default: all) are refused when stale
        (:meth:`refuse_stale`), ``params`` excepted. Returns what each item did, by target."""
        stages = tuple(stage(n).name for n in stages)
        permitted = None if allowed is None else {PARAMS_STAGE.name, *allowed}
        execute = self.execute if execute is None else execute
        summary: dict[str, Any] = {}
        for name in self.work_plan(stages):
            if not self.recorded and name not in (*stages, PARAMS_STAGE.name):
                continue  # no record to tell whether an upstream stage is stale: the caller asked for these
            if permitted is not None and name not in permitted:
                self.refuse_stale([name])
                continue
            items = stage_items([name])
            todo = set(self.stale([it.target for it in items]))
            if not todo:
                self.log(f"{name}: current ({', '.join(it.target for it in items)})")
                summary |= {it.target: "current" for it in items}
                continue
            ran = [it for it in items if it.target in todo]
            self.log(f"{name}: running {', '.join(it.target for it in ran)}")
            summary |= execute(stage(name), ran)
            if self.recorded:
                record(self.layout.root, [it.target for it in ran])
        return summary

    def check(self, stages: Iterable[str], allowed: Iterable[str]) -> None:
        """Before a driver that may run only ``allowed`` starts on ``stages``: bring ``params`` up to date
        (run and record it, as the run would first), then refuse (:meth:`refuse_stale`) a stale upstream
        stage outside ``allowed``."""
        self.run([PARAMS_STAGE.name])
        self.refuse_stale(n for n in self.work_plan(stages) if n not in {PARAMS_STAGE.name, *allowed})

    def pending(self, stages: Iterable[str]) -> list[str] | None:
        """The stale items of a run of ``stages`` (upstream ones included), as DVC sees them now; None
        outside DVC's record (then every asked-for stage runs)."""
        if not self.recorded:
            return None
        return self.stale([it.target for it in stage_items(self.work_plan(stages))])


def dvc_record(params_path: Path, layout: Layout) -> bool:
    """Whether DVC's record applies to a run of ``params_path`` on ``layout``'s project (a DVC project run
    with its own params.yaml); if it does, a ``dvc.lock`` or ``.dvc/tmp/rwlock`` that a killed ``dvc`` left
    half-written is repaired first (:func:`pgnn.pipeline.lockfile.repair_lock`, one line saying what it
    did): every driver that uses DVC's record asks here."""
    applies = is_dvc_project(layout.root) and params_path.resolve() == (layout.root / "params.yaml").resolve()
    if applies:
        repair_lock(layout.root)
    return applies


@contextmanager
def driver_session(
    params_path: str | Path,
    project_root: str | Path | None,
    who: str,
    *,
    record: bool = True,
    hold_lock: bool = True,
    log: Callable[[str], None] = print,
    **train: Any,
) -> Iterator[Session]:
    """The one way a driver opens a project: the params file (with ``train`` overrides,
    :class:`ParamsSource`), the layout (``project_root``, default the params file's folder), whether DVC's
    record applies (a DVC project run with its own params.yaml, unless ``record=False``; :func:`dvc_record`),
    and the project's lock held for the session (one writer of its outputs at a time; ``who`` names the holder
    in a refusal). ``hold_lock=False`` is for work inside a session that already holds it (a Prefect task of
    a flow's session, a DDP rank other than 0)."""
    source = ParamsSource(params_path, **train)
    layout = Layout(source.path.parent if project_root is None else Path(project_root).resolve())
    recorded = record and dvc_record(source.path, layout)
    with project_lock(layout.root, who) if hold_lock else contextlib.nullcontext():
        yield Session(layout, source, recorded, log)


def run_stage(name: str, argv: Sequence[str], root: Path) -> None:
    """The stage scripts' entry: run stage ``name`` on the project at ``root`` (``dvc repro`` decided it is
    stale and records it). ``argv`` holds the split of a ``foreach`` stage (``prepare train``) and nothing
    otherwise."""
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
    with driver_session(root / "params.yaml", root, f"dvc stage {it.target}", record=False) as session:
        session.execute(s, [it])


def run_in_order(layout: Layout, names: Iterable[str], params_path: Path | None = None) -> None:
    """Run every item of the stages ``names`` (and ``params``) in the table's order, outside DVC's record:
    what a plain driver without DVC does (each stage is content-keyed: a current one does little)."""
    path = layout.root / "params.yaml" if params_path is None else params_path
    with driver_session(path, layout.root, "pgnn (stages in order)", record=False) as session:
        session.run(names)
