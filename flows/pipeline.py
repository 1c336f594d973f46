r"""The pgnn pipeline as Prefect 3 flows: the stage table's items in its order, each run through the one
wiring (:func:`pgnn.pipeline.runner.run_item`, what ``dvc repro`` runs too) and recorded in ``dvc.lock``::

    params -> synth -> prepare@{train,val} -> gt_db -> graphs@{train,val} -> train -> predict -> evaluate
    \__________________ preprocess_flow ____________________/   \_____ train_evaluate_flow (+ plots) ___/
    \___________________________________ full_flow (pgnn-full) ____________________________________/

Each flow is a driver session (:func:`pgnn.pipeline.runner.driver_session`, the rules every driver follows)
whose stage items run as Prefect tasks. For each stage it is asked for, it first asks DVC which of the stage's
items are stale (``dvc status``), runs those, and ``dvc commit``s them: so after any flow run ``dvc status``
is clean and ``dvc repro`` reruns nothing, and a flow after ``dvc repro`` runs nothing either. Stages upstream
of those asked for are run too when stale (:func:`full_flow`); the two deployment flows, meant for two work
pools, refuse instead, naming the stale stages of the other flow (train-evaluate on a GPU machine never
preprocesses on it by surprise).

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
from collections.abc import Sequence
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.task_runners import ThreadPoolTaskRunner

from flows import PREPROCESS_STAGES, STAGES, TRAIN_EVALUATE_STAGES
from flows.runners import RunnerKind, has_api_url, make_task_runner
from flows.tasks import prefect_map, publish_ap, stage_task
from pgnn.core.shards import ShardBuildError, run_plans
from pgnn.pipeline.runner import StageItem, driver_session, item_of
from pgnn.pipeline.stages import Layout, Stage

__all__ = [
    "FLOWS",
    "ShardBuildError",
    "check_stages",
    "full_flow",
    "pgnn_pipeline",
    "preprocess_flow",
    "shards_flow",
    "train_evaluate_flow",
]


def check_stages(stages: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """``stages`` as a tuple, after checking each is one of ``allowed``."""
    unknown = [s for s in stages if s not in allowed]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; expected some of {list(allowed)}")
    return tuple(stages)


@flow(name="pgnn-shards", task_runner=ThreadPoolTaskRunner(), log_prints=True)
def shards_flow(params_path: str, project_root: str, targets: list[str]) -> dict[str, Any]:
    """Shard stage items (``prepare@train``, ``graphs@val``, ...), their shards fanned out on this flow's task
    runner (:func:`flows.tasks.prefect_map`) by the one shard loop (:func:`pgnn.core.shards.run_plans`),
    from the stages' own plans (``pgnn.pipeline.steps.<stage>.plan``)."""
    plans = {}
    with driver_session(params_path, project_root, "", record=False, hold_lock=False) as session:
        for target in targets:
            it = item_of(target)
            plans[target] = importlib.import_module(it.stage.entry).plan(
                session.params(it.stage), session.layout, it.item
            )
    return run_plans(plans, prefect_map, get_run_logger().info)


def run_stages(
    params_path: str,
    project_root: str | None,
    stages: Sequence[str],
    allowed: Sequence[str],
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """Run ``stages`` and the stages upstream of them in a driver session
    (:meth:`pgnn.pipeline.runner.Session.run`: the project's lock, DVC's record, the params rule, the
    refusal of a stale stage outside ``allowed``), each stage's items as Prefect tasks: a shard stage's
    shards fanned out on ``task_runner`` (:func:`shards_flow`), any other item one :func:`stage_task`;
    after ``evaluate``, its AP table as the run's artifacts. Returns what each item did."""
    logger = get_run_logger()
    who = f"prefect flow {get_run_context().flow_run.name}"

    def execute(s: Stage, items: list[StageItem]) -> dict[str, Any]:
        targets = [it.target for it in items]
        if s.sharded:
            if task_runner != "threads" and not has_api_url():
                logger.warning(
                    f"task_runner={task_runner!r} without PREFECT_API_URL: each worker process starts its "
                    "own ephemeral API server (slow): start one, or use `python -m flows` (it shares one)"
                )
            workers = max_workers or session.source.params.data.workers
            runner = make_task_runner(task_runner, workers, dask_address)
            root = str(session.layout.root)
            return shards_flow.with_options(task_runner=runner)(str(session.source.path), root, targets)
        for target in targets:
            stage_task(target, str(session.layout.root), str(session.source.path))
        done: dict[str, Any] = {t: "ran" for t in targets}
        if s.name == "evaluate":
            layout: Layout = session.layout
            publish_ap(
                json.loads(layout.path("eval_metrics").read_text()), str(layout.path("predictions", "val"))
            )
            done["ap"] = json.loads(layout.path("ap").read_text())
        return done

    with driver_session(params_path, project_root, who, log=logger.info) as session:
        if not session.recorded:
            logger.warning(
                f"{session.layout.root}: no DVC record (not a DVC project or not its params.yaml): run all"
            )
        return session.run(stages, allowed, execute)


@flow(name="pgnn-full", log_prints=True)
def full_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = STAGES,
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """The whole pipeline (the ``pgnn-full`` flow and deployment, ``--flow full``), or the ``stages`` listed
    and every stage upstream of them that is stale.

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
    pool's deployment ``pgnn-preprocess``; arguments as :func:`full_flow`)."""
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


pgnn_pipeline = full_flow
"""The full flow's name until this release (``flows/pipeline.py:pgnn_pipeline`` in a deployment's entrypoint
still works; its Prefect name is now ``pgnn-full``, was ``pgnn-pipeline``). Goes in the next release."""

FLOWS = {"full": full_flow, "preprocess": preprocess_flow, "train-evaluate": train_evaluate_flow}


OLD_ENTRY_NOTE = (
    "python -m flows.pipeline: note: this entry is now `python -m flows` (the same arguments); "
    "the old name stays for one release"
)

if __name__ == "__main__":  # the entry the docs named before `python -m flows`: it runs that, with a note
    print(OLD_ENTRY_NOTE, file=sys.stderr)
    runpy.run_module("flows", run_name="__main__", alter_sys=True)  # as `python -m flows`, these arguments
