r"""The pgnn pipeline as Prefect 3 flows: the DVC diagram (``dvc.yaml``), stage for stage, calling the same
``pgnn`` functions (``pgnn/pipeline/steps/``) with the same paths as ``stages/*.py``::

    synth -> prepare@{train,val} -+-> gt_db ------------+-> train -> predict@val -> evaluate@val
                                  +-> graphs@{train,val} +
    \_______________ preprocess_flow _______________/      \______ train_evaluate_flow ______/

- :func:`pgnn_pipeline` runs the stages you list (default: all), as these two sub-flows.
- :func:`preprocess_flow`: synth; then prepare, gt_db and graphs in :func:`shards_flow`, run with the task
  runner you choose (``shards_flow.with_options(task_runner=...)``: threads, processes or a Dask cluster).
  It plans both splits of prepare and graphs, fans the shards that are missing or stale out with
  ``build_shard.map``, records each shard in its folder's manifest as it lands and finalizes each folder;
  gt_db runs beside graphs. A failed shard fails the flow after every other shard is recorded; the rerun
  builds only what is still missing.
- :func:`train_evaluate_flow`: train (resumable from its checkpoints), predict, evaluate (the AP table is
  published as Prefect artifacts).

What runs and what is skipped is decided by content (input bytes, params, code), never by Prefect's cache
alone: see ``flows/tasks.py``. Prints of the pgnn steps go to the runs' logs (``log_prints``). Run it with
``python -m flows.pipeline --help`` (``flows/cli.py``), or deploy it (``prefect.yaml``).
"""

# ruff: noqa: E402

from __future__ import annotations

if (
    __name__ == "__main__"
):  # `python -m flows.pipeline`: check argv and params.yaml before prefect is imported
    from flows.cli import main

    raise SystemExit(main())

import flows  # noqa: F401  (applies the offline Prefect settings before prefect is imported)

# isort: split
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from flows import PREPROCESS_STAGES, SHARD_STAGES, STAGES, TRAIN_EVALUATE_STAGES
from flows.runners import RunnerKind, has_api_url, make_task_runner
from flows.tasks import (
    build_gt_db,
    build_shard,
    current_outputs,
    evaluate_predictions,
    finalize_shards,
    gt_db_key,
    plan_graphs,
    plan_prepare,
    predict_split,
    result_store_of,
    synth_dataset,
    synth_key,
    train_model,
)
from pgnn.config.params import Params, load_params
from pgnn.core.shards import MANIFEST, ShardPlan, ShardTask, pending_tasks, read_manifest, record_shard
from pgnn.pipeline.stages import SPLITS, Layout

__all__ = [
    "PREPROCESS_STAGES",
    "STAGES",
    "TRAIN_EVALUATE_STAGES",
    "FLOWS",
    "ShardBuildError",
    "check_stages",
    "load_project",
    "pgnn_pipeline",
    "preprocess_flow",
    "shards_flow",
    "train_evaluate_flow",
    "up_to_date",
]


class ShardBuildError(RuntimeError):
    """Some shards failed all their retries (every other shard was built and recorded)."""


def load_project(params_path: str | Path, project_root: str | Path | None = None) -> tuple[Params, Layout]:
    """The validated params and the layout. ``project_root`` defaults to the params file's folder; a
    relative ``params_path`` is taken from the working directory."""
    path = Path(params_path).resolve()
    root = path.parent if project_root is None else Path(project_root).resolve()
    return load_params(path), Layout(root)


def check_stages(stages: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """``stages`` as a tuple, after checking each is one of ``allowed``."""
    unknown = [s for s in stages if s not in allowed]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; expected some of {list(allowed)}")
    return tuple(stages)


def _check_lock(layout: Layout) -> None:
    """The dvc.lock check of the pipeline, before a flow (or the command line's nothing-to-do check) reads
    or writes outputs."""
    from pgnn.pipeline.lockfile import repair_lock

    repair_lock(layout.root)


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
        stats[label] = {"shards": len(plan.tasks), "current": current}
        stats[label] |= {"built": [], "cached": [], "failed": []}
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
                sha = entry["sha256"][:12]
                logger.info(f"{label}: {verb} {shard.file} ({len(shard.frames)} frames, sha256 {sha})")
            else:
                stats[label]["failed"].append(shard.file)
                logger.error(f"{label}: {shard.file} failed after retries: {_failure(fut, state)}")

    for label, plan in plans.items():
        for k in ("built", "cached", "failed"):
            stats[label][k].sort()
        if not stats[label]["failed"]:
            finalize_shards(plan, label)
    failed = [f"{label}:{f}" for label, s in stats.items() for f in s["failed"]]
    if failed:
        listing = ", ".join(failed)
        raise ShardBuildError(f"{len(failed)} shard(s) failed: {listing}; a rerun builds only those")
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
def shards_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = SHARD_STAGES,
) -> dict[str, Any]:
    """prepare@{train,val} -> gt_db and graphs@{train,val}, shards fanned out on this flow's task runner.

    :func:`preprocess_flow` runs it as ``shards_flow.with_options(task_runner=make_task_runner(...))``;
    alone it runs on threads.
    """
    stages = check_stages(stages, SHARD_STAGES)
    params, layout = load_project(params_path, project_root)
    summary: dict[str, Any] = {}
    if "prepare" in stages:
        plans = {
            f"prepare@{s}": plan_prepare(params.data, s, layout.prepared(s), layout.root) for s in SPLITS
        }
        summary |= build_plans(plans)
    gt_db = build_gt_db.submit(layout.prepared("train"), layout.gt_db) if "gt_db" in stages else None
    if "graphs" in stages:  # meanwhile
        from pgnn.config.presets import resolve

        recipe = resolve(params)
        plans = {
            f"graphs@{s}": plan_graphs(
                recipe, s, layout.prepared(s), layout.graphs(s), params.data.frames_per_shard
            )
            for s in SPLITS
        }
        summary |= build_plans(plans)
    if gt_db is not None:
        (sha,) = gt_db.result().values()
        summary["gt_db"] = {"path": str(layout.gt_db), "sha256": sha}
    return summary


@flow(name="pgnn-preprocess", log_prints=True)
def preprocess_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = PREPROCESS_STAGES,
    task_runner: RunnerKind = "threads",
    dask_address: str | None = None,
    max_workers: int | None = None,
) -> dict[str, Any]:
    """synth -> prepare@{train,val} -> gt_db and graphs@{train,val}; shards fanned out on ``task_runner``.

    Args:
        params_path: the params.yaml (relative to the working directory).
        project_root: the folder holding ``data/`` (default: the params file's folder).
        stages: some of synth, prepare, gt_db, graphs (each assumes the earlier ones' outputs exist).
        task_runner: "threads", "processes" or "dask" (see :func:`flows.runners.make_task_runner`): the
            task runner of :func:`shards_flow`.
        dask_address: a Dask scheduler (``tcp://host:8786``); none = a temporary local cluster.
        max_workers: parallel shard builds (default ``data.workers`` of params.yaml).
    """
    stages = check_stages(stages, PREPROCESS_STAGES)
    params, layout = load_project(params_path, project_root)
    _check_lock(layout)
    summary: dict[str, Any] = {}
    if "synth" in stages:
        summary["synth"] = {"files": len(synth_dataset(params.synthetic, layout.synthetic))}
    shard_stages = tuple(s for s in stages if s in SHARD_STAGES)
    if not shard_stages:
        return summary
    if task_runner != "threads" and not has_api_url():
        get_run_logger().warning(
            f"task_runner={task_runner!r} without PREFECT_API_URL: each worker process will start its own "
            "ephemeral API server (slow). Start a server, or use `python -m flows.pipeline` (it shares one)."
        )
    runner = make_task_runner(task_runner, max_workers or params.data.workers, dask_address)
    summary |= shards_flow.with_options(task_runner=runner)(params_path, project_root, shard_stages)
    return summary


@flow(name="pgnn-train-evaluate", log_prints=True)
def train_evaluate_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = TRAIN_EVALUATE_STAGES,
) -> dict[str, Any]:
    """train -> predict@val -> evaluate@val, on the outputs of :func:`preprocess_flow`.

    Training resumes a killed run of the same params from ``models/checkpoints`` (it is not retried: rerun
    the flow). Prediction is skipped while its verified cache holds (same model bytes, graphs, frames,
    post-processing and code, and the same files on disk). Evaluation publishes the AP table as the
    artifacts ``pgnn-eval-ap`` (a table) and ``pgnn-eval-metrics`` (markdown).
    """
    stages = check_stages(stages, TRAIN_EVALUATE_STAGES)
    params, layout = load_project(params_path, project_root)
    _check_lock(layout)
    from pgnn.config.presets import resolve
    from pgnn.graphs.targets import object_classes

    recipe = resolve(params)
    summary: dict[str, Any] = {}
    if "train" in stages:
        model = train_model(
            recipe,
            layout.graphs("train"),
            layout.checkpoints,
            layout.model,
            layout.live,
            layout.train_metrics,
            layout.prepared("train"),
            layout.gt_db,
        )
        summary["train"] = {"model": model, "metrics": json.loads(layout.train_metrics.read_text())}
    if "predict" in stages:
        predict_split(
            recipe,
            layout.model,
            layout.graphs("val"),
            layout.prepared("val"),
            layout.predictions("val"),
            layout.predict_metrics,
        )
        summary["predict"] = json.loads(layout.predict_metrics.read_text())
    if "evaluate" in stages:
        summary["evaluate"] = evaluate_predictions(
            params.eval,
            layout.prepared("val"),
            layout.predictions("val"),
            layout.eval_metrics,
            layout.curves,
            object_classes(recipe.targets.label_method),
            layout.ap_metrics,
        )
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
    """The whole pipeline, or the ``stages`` listed: :func:`preprocess_flow` then
    :func:`train_evaluate_flow` (arguments as there)."""
    stages = check_stages(stages, STAGES)
    summary: dict[str, Any] = {}
    pre = tuple(s for s in stages if s in PREPROCESS_STAGES)
    post = tuple(s for s in stages if s in TRAIN_EVALUATE_STAGES)
    if pre:
        summary |= preprocess_flow(params_path, project_root, pre, task_runner, dask_address, max_workers)
    if post:
        summary |= train_evaluate_flow(params_path, project_root, post)
    return summary


FLOWS = {"full": pgnn_pipeline, "preprocess": preprocess_flow, "train-evaluate": train_evaluate_flow}


# ------------------------------------------------------------------------------ nothing to do? (no server)


def plan_is_final(plan: ShardPlan) -> bool:
    """Whether the folder is exactly what building and finalizing ``plan`` would leave: every shard current
    (:func:`pgnn.core.shards.pending_tasks`), the manifest final, no other file."""
    if pending_tasks(plan):
        return False
    manifest = read_manifest(plan.out_dir) or {}
    files = [t.file for t in plan.tasks]
    expected = {"kind": plan.kind, "params": plan.params, "code_version": plan.code}
    if {k: manifest.get(k) for k in expected} != json.loads(json.dumps(expected)):
        return False
    if [e.get("file") for e in manifest.get("shards", [])] != files:
        return False
    return {p.name for p in Path(plan.out_dir).iterdir() if p.is_file()} == {*files, MANIFEST}


def up_to_date(
    params_path: str | Path,
    project_root: str | Path | None,
    stages: Sequence[str],
    ask_api: bool | None = None,
) -> dict[str, Any] | None:
    """The summary a run of these preprocessing ``stages`` would return if it has nothing to do (it would
    build, write and delete nothing), else None. Decided as the flow decides it (shard manifests checked
    against the files, the synth and gt_db cache records verified against the bytes on disk), with no API
    server (``ask_api``: see :func:`flows.tasks.result_store_of`): ``python -m flows.pipeline`` runs no
    flow when this says there is nothing to do.
    """
    stages = check_stages(stages, PREPROCESS_STAGES)
    params, layout = load_project(params_path, project_root)
    _check_lock(layout)
    summary: dict[str, Any] = {}

    def stats(plan: ShardPlan) -> dict[str, Any]:
        n = len(plan.tasks)
        return {"shards": n, "current": n, "built": [], "cached": [], "failed": []}

    if "synth" in stages:
        store = result_store_of(synth_dataset, ask_api)
        digest = current_outputs(store, *synth_key(params.synthetic, layout.synthetic))
        if digest is None:
            return None
        summary["synth"] = {"files": len(digest)}
    if "prepare" in stages:
        for s in SPLITS:
            plan = plan_prepare.fn(params.data, s, layout.prepared(s), layout.root)
            if not plan_is_final(plan):
                return None
            summary[f"prepare@{s}"] = stats(plan)
    if "gt_db" in stages:
        store = result_store_of(build_gt_db, ask_api)
        digest = current_outputs(store, *gt_db_key(layout.prepared("train"), layout.gt_db))
        if digest is None:
            return None
        (sha,) = digest.values()
        summary["gt_db"] = {"path": str(layout.gt_db), "sha256": sha}
    if "graphs" in stages:
        from pgnn.config.presets import resolve

        recipe = resolve(params)
        for s in SPLITS:
            frames = params.data.frames_per_shard
            plan = plan_graphs.fn(recipe, s, layout.prepared(s), layout.graphs(s), frames)
            if not plan_is_final(plan):
                return None
            summary[f"graphs@{s}"] = stats(plan)
    return summary
