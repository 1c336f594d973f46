r"""The pgnn pipeline as Prefect 3 flows: the stage table's items in its order, each run through the one
wiring (:func:`pgnn.pipeline.runner.run_item`, what ``dvc repro`` runs too) and recorded in ``dvc.lock``::

    params -> synth -> prepare@{train,val} -> gt_db -> graphs@{train,val} -> train -> predict -> evaluate
    \__________________ preprocess_flow ____________________/   \_____ train_evaluate_flow (+ plots) ___/
    \_________________________________ pgnn_pipeline (pgnn-full) ___________________________________/

For each stage it is asked for, a flow first asks DVC which of the stage's items are stale (``dvc status``,
:func:`pgnn.pipeline.record.stale_items`), runs those, and ``dvc commit``s them
(:func:`pgnn.pipeline.record.record`): so after any flow run ``dvc status`` is clean and ``dvc repro``
reruns nothing, and a flow after ``dvc repro`` runs nothing either. Stages upstream of those asked for are
run too when stale (:func:`pgnn_pipeline`); the two deployment flows, meant for two work pools, refuse
instead, naming the stale stages of the other flow (train-evaluate on a GPU machine never preprocesses on
it by surprise).

The shard stages (prepare, graphs) fan their pending shards out on the task runner you choose (threads,
processes or a Dask cluster: :func:`shards_flow`), from the plan the stage's own ``run`` builds. Outside a
DVC project (or with a params file other than the project's ``params.yaml``) nothing is recorded and every
asked-for stage runs (each is content-keyed: current shards are kept, training resumes).

Run it with ``python -m flows --help`` (``flows/cli.py``), or deploy it (``prefect.yaml``).
"""

from __future__ import annotations

import flows  # noqa: F401  (applies the offline Prefect settings before prefect is imported)

# isort: split
import importlib
import json
import runpy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import PREPROCESS_STAGES, SHARD_STAGES, STAGES, TRAIN_EVALUATE_STAGES
from flows.runners import RunnerKind, has_api_url, make_task_runner
from flows.tasks import build_shard, publish_ap, stage_task
from pgnn.config.params import load_params
from pgnn.core.lock import project_lock
from pgnn.core.shards import ShardPlan, ShardTask, finalize_plan, pending_tasks, record_shard
from pgnn.pipeline.lockfile import repair_lock
from pgnn.pipeline.record import project_paths, record, refuse_stale_upstream, stale_items, work_plan
from pgnn.pipeline.runner import item_of, load_stage_params, stage_items
from pgnn.pipeline.stages import Layout

__all__ = [
    "FLOWS",
    "ShardBuildError",
    "check_stages",
    "pgnn_pipeline",
    "preprocess_flow",
    "shards_flow",
    "train_evaluate_flow",
]


class ShardBuildError(RuntimeError):
    """Some shards failed all their retries (every other shard was built and recorded)."""


def check_stages(stages: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """``stages`` as a tuple, after checking each is one of ``allowed``."""
    unknown = [s for s in stages if s not in allowed]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; expected some of {list(allowed)}")
    return tuple(stages)


def build_plans(plans: Mapping[str, ShardPlan]) -> dict[str, dict[str, Any]]:
    """Build the missing or stale shards of several plans at once on the flow's task runner
    (``build_shard.map``); return per-plan stats.

    Each shard that lands is recorded in its folder's manifest at once (so a killed flow resumes), each
    folder whose shards all landed is finalized. Raises :class:`ShardBuildError` naming the failed shards
    after that; a rerun builds only those.
    """
    logger = get_run_logger()
    stats: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, ShardTask]] = []
    for label, plan in plans.items():
        pending = pending_tasks(plan)
        current = len(plan.tasks) - len(pending)
        stats[label] = {
            "shards": len(plan.tasks),
            "current": current,
            "built": [],
            "cached": [],
            "failed": [],
        }
        names = ": " + ", ".join(t.file for t in pending) if pending else ""
        logger.info(f"{label}: {current} of {len(plan.tasks)} shards current, building {len(pending)}{names}")
        todo += [(label, shard) for shard in pending]
    if todo:
        futures = build_shard.map(
            plan=[plans[label] for label, _ in todo],
            shard=[shard for _, shard in todo],
            label=[label for label, _ in todo],
        )
        owner: dict[PrefectFuture[Any], tuple[str, ShardTask]] = dict(zip(futures, todo, strict=True))
        for fut in as_completed(list(futures)):
            label, shard = owner[fut]
            fut.wait()  # sets the future's final state (without it, .state may ask the API and see "Running")
            state = fut.state
            if state.is_completed():
                entry = fut.result()
                record_shard(plans[label], shard, entry["sha256"])
                how = "cached" if state.name == "Cached" else "built"
                stats[label][how].append(shard.file)
                verb = "reused verified cache of" if how == "cached" else "wrote"
                logger.info(f"{label}: {verb} {shard.file} ({len(shard.frames)} frames)")
            else:
                stats[label]["failed"].append(shard.file)
                logger.error(f"{label}: {shard.file} failed after retries: {_failure(fut, state)}")
    for label, plan in plans.items():
        for k in ("built", "cached", "failed"):
            stats[label][k].sort()
        if not stats[label]["failed"]:
            finalize_plan(plan)
    failed = [f"{label}:{f}" for label, s in stats.items() for f in s["failed"]]
    if failed:
        raise ShardBuildError(
            f"{len(failed)} shard(s) failed: {', '.join(failed)}; a rerun builds only those"
        )
    return stats


def _failure(fut: PrefectFuture[Any], state: Any) -> str:
    """What went wrong with a task run: its state's message, or the exception its result raises."""
    if state.message:
        return state.message
    try:
        fut.result()
    except BaseException as e:  # noqa: B036  (reported, not handled)
        return f"{type(e).__name__}: {e}"
    return f"state {state.name}"


@flow(name="pgnn-shards", task_runner=ThreadPoolTaskRunner(), log_prints=True)
def shards_flow(params_path: str, project_root: str, targets: list[str]) -> dict[str, Any]:
    """Shard stage items (``prepare@train``, ``graphs@val``, ...), their shards fanned out on this flow's task
    runner: the plans are the stages' own (``pgnn.pipeline.steps.<stage>.plan``)."""
    layout = Layout(Path(project_root))
    plans = {}
    for target in targets:
        it = item_of(target)
        params = load_stage_params(it.stage, layout, Path(params_path))
        plans[target] = importlib.import_module(it.stage.entry).plan(params, layout, it.item)
    return build_plans(plans)


def run_stages(
    params_path: str,
    project_root: str | None,
    stages: Sequence[str],
    allowed: Sequence[str],
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """Run ``stages`` and the stages upstream of them (:func:`work_plan`), in the table's order, holding the
    project's lock (one writer of its outputs at a time): each stage's stale items (``dvc status`` just
    before its turn, since an upstream stage that ran may have changed its inputs), then ``dvc commit`` of
    them. A stale upstream stage outside ``allowed`` (the other deployment's, ``params`` excepted: every
    flow validates and resolves params.yaml) stops the run with one line naming it. Without DVC's record,
    the asked-for stages (and ``params``) run, each content-keyed. Returns what each item did."""
    logger = get_run_logger()
    path, layout, recorded = project_paths(params_path, project_root)
    if recorded:
        repair_lock(layout.root)
    else:
        logger.warning(f"{layout.root}: no DVC record (not a DVC project or not its params.yaml): run all")
    shards = {"task_runner": task_runner, "dask_address": dask_address, "max_workers": max_workers}
    summary: dict[str, Any] = {}
    with project_lock(layout.root, f"prefect flow {get_run_context().flow_run.name}"):
        for name in work_plan(path, layout.root, stages):
            targets = [it.target for it in stage_items([name])]
            if not recorded and name not in (*stages, "params"):
                continue  # no record to tell whether an upstream stage is stale: the caller asked for these
            if name not in {"params", *allowed}:
                if recorded:
                    refuse_stale_upstream(layout, targets)
                continue
            todo = stale_items(layout.root, targets) if recorded else targets
            if not todo:
                logger.info(f"{name}: current ({', '.join(targets)})")
                summary |= {t: "current" for t in targets}
                continue
            summary |= run_stage_items(name, todo, path, layout, **shards)
            if recorded:
                record(layout.root, todo)
    return summary


def run_stage_items(
    name: str,
    targets: list[str],
    params_path: Path,
    layout: Layout,
    task_runner: RunnerKind,
    dask_address: str | None,
    max_workers: int | None,
) -> dict[str, Any]:
    """Run the items ``targets`` of stage ``name``: a shard stage's shards fanned out on the task runner
    (:func:`shards_flow`), any other item as one :func:`stage_task`; after ``evaluate``, its AP table as
    the run's artifacts."""
    logger = get_run_logger()
    logger.info(f"{name}: running {', '.join(targets)}")
    if name in SHARD_STAGES:
        if task_runner != "threads" and not has_api_url():
            logger.warning(
                f"task_runner={task_runner!r} without PREFECT_API_URL: each worker process starts its own "
                "ephemeral API server (slow): start one, or use `python -m flows` (it shares one)"
            )
        workers = max_workers or load_params(params_path).data.workers
        runner = make_task_runner(task_runner, workers, dask_address)
        return shards_flow.with_options(task_runner=runner)(str(params_path), str(layout.root), targets)
    for target in targets:
        stage_task(target, str(layout.root), str(params_path))
    summary: dict[str, Any] = {t: "ran" for t in targets}
    if name == "evaluate":
        publish_ap(
            json.loads(layout.path("eval_metrics").read_text()), str(layout.path("predictions", "val"))
        )
        summary["ap"] = json.loads(layout.path("ap").read_text())
    return summary


@flow(name="pgnn-pipeline", log_prints=True)
def pgnn_pipeline(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = STAGES,
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """The whole pipeline (the ``pgnn-full`` deployment), or the ``stages`` listed and every stage upstream
    of them that is stale.

    Args:
        params_path: the params.yaml (relative to the working directory).
        project_root: the project (default: the params file's folder).
        stages: some of the stage table's stages.
        task_runner: "threads", "processes" or "dask" (:func:`flows.runners.make_task_runner`): where the
            shards of prepare and graphs are built.
        dask_address: a Dask scheduler (``tcp://host:8786``); none = a temporary local cluster.
        max_workers: parallel shard builds (default ``data.workers`` of params.yaml).
    """
    stages = check_stages(stages, STAGES)
    return run_stages(params_path, project_root, stages, STAGES, task_runner, dask_address, max_workers)


@flow(name="pgnn-preprocess", log_prints=True)
def preprocess_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = PREPROCESS_STAGES,
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """params -> synth -> prepare -> gt_db -> graphs, shards fanned out on ``task_runner`` (the CPU work
    pool's deployment ``pgnn-preprocess``; arguments as :func:`pgnn_pipeline`)."""
    stages = check_stages(stages, PREPROCESS_STAGES)
    return run_stages(
        params_path, project_root, stages, PREPROCESS_STAGES, task_runner, dask_address, max_workers
    )


@flow(name="pgnn-train-evaluate", log_prints=True)
def train_evaluate_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = TRAIN_EVALUATE_STAGES,
) -> dict[str, Any]:
    """train -> predict -> evaluate -> plots on the preprocessed data (the GPU work pool's deployment
    ``pgnn-train-evaluate``). Refuses, naming them, when preprocessing stages are stale."""
    stages = check_stages(stages, TRAIN_EVALUATE_STAGES)
    return run_stages(params_path, project_root, stages, TRAIN_EVALUATE_STAGES)


FLOWS = {"full": pgnn_pipeline, "preprocess": preprocess_flow, "train-evaluate": train_evaluate_flow}


OLD_ENTRY_NOTE = (
    "python -m flows.pipeline: note: this entry is now `python -m flows` (the same arguments); "
    "the old name stays for one release"
)

if __name__ == "__main__":  # the entry the docs named before `python -m flows`: it runs that, with a note
    print(OLD_ENTRY_NOTE, file=sys.stderr)
    runpy.run_module("flows", run_name="__main__", alter_sys=True)  # as `python -m flows`, these arguments
