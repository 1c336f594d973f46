r"""The pgnn pipeline as Prefect 3 flows: the DVC diagram (``dvc.yaml``), stage for stage, calling the same
``pgnn`` functions (``pgnn/pipeline/steps/``) with the same paths as ``stages/*.py``::

    synth -> prepare@{train,val} -+-> gt_db ------------+-> train -> predict@val -> evaluate@val
                                  +-> graphs@{train,val} +
    \_______________ preprocess_flow _______________/      \______ train_evaluate_flow ______/

- :func:`pgnn_pipeline` runs the stages you list (default: all), as these two sub-flows.
- :func:`preprocess_flow`: synth; then for prepare and graphs, plan both splits, fan the shards that are
  missing or stale out on the chosen task runner (threads, processes or a Dask cluster), record each shard
  in its folder's manifest as it lands, finalize each folder; gt_db runs beside graphs. A failed shard fails
  the flow after every other shard is recorded; the rerun builds only what is still missing.
- :func:`train_evaluate_flow`: train (resumable from its checkpoints), predict, evaluate.

What runs and what is skipped is decided by content (input bytes, params, code), never by Prefect's cache
alone: see ``flows/tasks.py``. Run it with ``python -m flows.pipeline --help``, or deploy it
(``prefect.yaml``).
"""

from __future__ import annotations

import flows  # noqa: F401  (applies the offline Prefect settings before prefect is imported)

# isort: split
import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import TaskRunner

from flows.runners import RUNNER_KINDS, RunnerKind, has_api_url, make_task_runner, shared_api_server
from flows.tasks import (
    build_gt_db,
    build_shard,
    evaluate_predictions,
    finalize_shards,
    plan_graphs,
    plan_prepare,
    predict_split,
    synth_dataset,
    train_model,
)
from pgnn.config.params import Params, load_params
from pgnn.core.shards import ShardPlan, ShardTask, pending_tasks, record_shard
from pgnn.pipeline.stages import SPLITS, Layout
from pgnn.pipeline.stages import STAGES as STAGE_TABLE

STAGES: tuple[str, ...] = tuple(s.name for s in STAGE_TABLE)
PREPROCESS_STAGES: tuple[str, ...] = ("synth", "prepare", "gt_db", "graphs")
TRAIN_EVALUATE_STAGES: tuple[str, ...] = ("train", "predict", "evaluate")


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


def build_plans(plans: Mapping[str, ShardPlan], runner: TaskRunner) -> dict[str, dict[str, Any]]:
    """Build the missing or stale shards of several plans at once on ``runner``; return per-plan stats.

    Each shard that lands is recorded in its folder's manifest at once (so a killed flow resumes), each
    folder whose shards all landed is finalized. Raises :class:`ShardBuildError` naming the failed shards
    after that; a rerun builds only those.
    """
    logger = get_run_logger()
    stats: dict[str, dict[str, Any]] = {}
    futures: dict[PrefectFuture[Any], tuple[str, ShardTask]] = {}
    for label, plan in plans.items():
        todo = pending_tasks(plan)
        current = len(plan.tasks) - len(todo)
        stats[label] = {"shards": len(plan.tasks), "current": current}
        stats[label] |= {"built": [], "cached": [], "failed": []}
        names = ": " + ", ".join(t.file for t in todo) if todo else ""
        logger.info(f"{label}: {current} of {len(plan.tasks)} shards current, building {len(todo)}{names}")
        for shard in todo:
            fut = runner.submit(build_shard, {"plan": plan, "shard": shard, "label": label})
            futures[fut] = (label, shard)

    for fut in as_completed(list(futures)):
        label, shard = futures[fut]
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


@flow(name="pgnn-preprocess")
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
        task_runner: "threads", "processes" or "dask" (see :func:`flows.runners.make_task_runner`).
        dask_address: a Dask scheduler (``tcp://host:8786``); none = a temporary local cluster.
        max_workers: parallel shard builds (default ``data.workers`` of params.yaml).
    """
    stages = check_stages(stages, PREPROCESS_STAGES)
    params, layout = load_project(params_path, project_root)
    summary: dict[str, Any] = {}
    if "synth" in stages:
        summary["synth"] = {"files": len(synth_dataset(params.synthetic, layout.synthetic))}
    if not {"prepare", "gt_db", "graphs"} & set(stages):
        return summary
    if task_runner != "threads" and not has_api_url():
        get_run_logger().warning(
            f"task_runner={task_runner!r} without PREFECT_API_URL: each worker process will start its own "
            "ephemeral API server (slow). Start a server, or use `python -m flows.pipeline` (it shares one)."
        )
    with make_task_runner(task_runner, max_workers or params.data.workers, dask_address) as runner:
        if "prepare" in stages:
            plans = {
                f"prepare@{s}": plan_prepare(params.data, s, layout.prepared(s), layout.root) for s in SPLITS
            }
            summary |= build_plans(plans, runner)
        gt_db = build_gt_db.submit(layout.prepared("train"), layout.gt_db) if "gt_db" in stages else None
        if "graphs" in stages:  # meanwhile (the flow's own thread runner runs gt_db)
            from pgnn.config.presets import resolve

            recipe = resolve(params)
            plans = {
                f"graphs@{s}": plan_graphs(
                    recipe, s, layout.prepared(s), layout.graphs(s), params.data.frames_per_shard
                )
                for s in SPLITS
            }
            summary |= build_plans(plans, runner)
        if gt_db is not None:
            (sha,) = gt_db.result().values()
            summary["gt_db"] = {"path": str(layout.gt_db), "sha256": sha}
    return summary


@flow(name="pgnn-train-evaluate")
def train_evaluate_flow(
    params_path: str = "params.yaml",
    project_root: str | None = None,
    stages: tuple[str, ...] = TRAIN_EVALUATE_STAGES,
) -> dict[str, Any]:
    """train -> predict@val -> evaluate@val, on the outputs of :func:`preprocess_flow`.

    Training resumes a killed run of the same params from ``models/checkpoints`` (it is not retried: rerun
    the flow). Prediction is skipped while its verified cache holds (same model bytes, graphs, frames,
    post-processing and code, and the same files on disk).
    """
    stages = check_stages(stages, TRAIN_EVALUATE_STAGES)
    params, layout = load_project(params_path, project_root)
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


@flow(name="pgnn-pipeline")
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flows.pipeline``: run a flow locally (against PREFECT_API_URL, or an ephemeral server)."""
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--flow", choices=sorted(FLOWS), default="full")
    parser.add_argument("--params", default="params.yaml", help="params.yaml path")
    parser.add_argument("--root", default=None, help="project root (default: the params file's folder)")
    parser.add_argument("--stages", nargs="+", default=None, help=f"some of {' '.join(STAGES)}")
    parser.add_argument("--runner", choices=RUNNER_KINDS, default="threads", help="runner of shard builds")
    parser.add_argument("--dask-address", default=None, help="Dask scheduler address (with --runner dask)")
    parser.add_argument("--max-workers", type=int, default=None, help="parallel shard builds")
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"params_path": args.params, "project_root": args.root}
    if args.stages is not None:
        kwargs["stages"] = tuple(args.stages)
    if args.flow != "train-evaluate":
        kwargs |= {"task_runner": args.runner, "dask_address": args.dask_address}
        kwargs["max_workers"] = args.max_workers
    t0 = time.perf_counter()
    with shared_api_server():
        summary = FLOWS[args.flow](**kwargs)
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(f"{args.flow} flow finished in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
