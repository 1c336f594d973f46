"""The Prefect tasks of the pgnn flows: one stage item, one shard of a shard stage, and the evaluation
artifacts.

:func:`stage_task` runs a stage item through :func:`pgnn.pipeline.runner.run_item`, the one wiring every
driver uses (``dvc repro`` calls it through ``stages/<name>.py``): the flow never lists a step's
arguments. The shard stages (prepare, graphs) are fanned out instead: the flow takes the stage's own plan
(``pgnn.pipeline.steps.<stage>.plan``, the plan its ``run`` builds) and maps :func:`build_shard` over its
pending shards on the task runner (:func:`prefect_map`, the map the one shard loop
:func:`pgnn.core.shards.run_plans` is handed; the stage's ``run`` hands it a process pool).

What to run is DVC's decision (``dvc status``, :mod:`pgnn.pipeline.record`), never Prefect's result cache:
the tasks persist no results, except :func:`build_shard`'s record, used only while the file on disk still
has the recorded sha256 (a shard that landed before a killed flow could update the manifest).

Retries: shard builds retry twice (they read and write files); other stages do not retry (training
resumes from its own checkpoints when rerun, and a crash in a stage is a bug to see, not to paper over).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext
from prefect.futures import PrefectFuture, as_completed

from pgnn.core.io import sha256_file
from pgnn.core.shards import Built, ShardJob, ShardPlan, ShardTask, shard_entry, stable_hash
from pgnn.pipeline.runner import driver_session, item_of


def verified_cache_key(store: Any, key: str, still_valid: Any) -> str | None:
    """``key`` if Prefect may use (or create) the cache record under it, else None (run, persist nothing).

    A record that exists is usable only while ``still_valid(cached_value)`` holds, i.e. while the file it
    describes is still on disk with the recorded bytes. ``store`` is the task run's result store (anything
    with ``exists(key)`` and ``read(key).result``).
    """
    if not store.exists(key):
        return key
    try:
        cached = store.read(key).result
    except Exception:  # an unreadable record (other serializer, partial write): never trust it
        return None
    return key if still_valid(cached) else None


def shard_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Cache key of :func:`build_shard`: the shard's content key + its absolute path, verified on disk."""
    plan: ShardPlan = parameters["plan"]
    shard: ShardTask = parameters["shard"]
    path = (Path(plan.out_dir) / shard.file).resolve()
    key = stable_hash({"task": "build_shard", "path": str(path), "key": shard.key})
    return verified_cache_key(ctx.result_store, key, lambda entry: _file_has(path, entry.get("sha256")))


def _file_has(path: Path, sha256: str | None) -> bool:
    return sha256 is not None and path.is_file() and sha256_file(path) == sha256


HEARTBEAT_S = 8.0
"""While a stage item runs, the flow's log says so this often (importing torch, say, prints nothing)."""


@contextmanager
def heartbeat(target: str, every: float = HEARTBEAT_S) -> Iterator[None]:
    """Log ``<target>: running (N s)`` every ``every`` seconds until the block ends."""
    logger = get_run_logger()
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            logger.info(f"{target}: running ({time.monotonic() - t0:.0f} s)")

    thread = threading.Thread(target=beat, name=f"heartbeat-{target}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@task(name="stage", task_run_name="{target}", cache_policy=NO_CACHE, retries=0, log_prints=True)
def stage_task(target: str, root: str, params_path: str) -> str:
    """Run stage item ``target`` (``train``, ``prepare@val``) on the project at ``root``, reading
    ``params_path`` (the params stage) or the ``params.resolved.yaml`` resolved from it (the others), inside
    the flow's session (which holds the project's lock)."""
    it = item_of(target)
    with heartbeat(target), driver_session(params_path, root, "", record=False, hold_lock=False) as session:
        session.execute(it.stage, [it])
    return target


@task(
    name="build-shard",
    task_run_name="{label}:{shard.file}",
    cache_key_fn=shard_cache_key,
    persist_result=True,
    result_serializer="json",
    retries=2,
    retry_delay_seconds=1,
    log_prints=True,
)
def build_shard(plan: ShardPlan, shard: ShardTask, label: str) -> dict[str, Any]:
    """Build one shard with the plan's own builder and return its manifest entry (file, frames, key,
    sha256). Runs on any task runner: ``plan.build`` is picklable. :func:`pgnn.core.shards.run_plans` records
    the entry; ``label`` (e.g. ``graphs@val``) only names the task run."""
    out = Path(plan.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan.build(shard, out / shard.file)
    return shard_entry(plan, shard)


def prefect_map(jobs: Sequence[ShardJob]) -> Iterator[Built]:
    """The flows' :data:`pgnn.core.shards.ShardMap`: :func:`build_shard` mapped over the jobs on the
    current flow's task runner, each reported as it finishes (a failure once its retries are spent)."""
    futures = build_shard.map(
        plan=[plan for _, plan, _ in jobs],
        shard=[task for _, _, task in jobs],
        label=[lab for lab, _, _ in jobs],
    )
    index: dict[PrefectFuture[Any], int] = {fut: i for i, fut in enumerate(futures)}
    for fut in as_completed(list(futures)):
        fut.wait()  # sets the future's final state (without it, .state may ask the API and see "Running")
        state = fut.state
        if state.is_completed():
            yield Built(index[fut], sha256=fut.result()["sha256"], cached=state.name == "Cached")
        else:
            yield Built(index[fut], error=_failure(fut, state))


def _failure(fut: PrefectFuture[Any], state: Any) -> str:
    """What went wrong with a task run: its state's message, or the exception its result raises."""
    if state.message:
        return state.message
    try:
        fut.result()
    except BaseException as e:  # noqa: B036  (reported, not handled)
        return f"{type(e).__name__}: {e}"
    return f"state {state.name}"


AP_TABLE_KEY = "pgnn-eval-ap"
"""Key of the table artifact the flows publish after ``evaluate`` (``prefect.artifacts.Artifact.get``)."""
METRICS_REPORT_KEY = "pgnn-eval-metrics"
"""Key of its markdown report artifact."""


def publish_ap(results: dict[str, float], source: str) -> None:
    """The AP table of ``evaluate`` as Prefect artifacts of the run: a table (``pgnn-eval-ap``, one row per
    class and metric) and a markdown report (``pgnn-eval-metrics``)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from pgnn.eval.report import format_table

    create_table_artifact(
        table=ap_table(results), key=AP_TABLE_KEY, description=f"Official KITTI AP (%) of {source}"
    )
    create_markdown_artifact(
        markdown=f"## KITTI AP (%) of `{source}`\n\n```\n{format_table(results)}```\n",
        key=METRICS_REPORT_KEY,
        description="KITTI evaluation report",
    )


def ap_table(results: dict[str, float]) -> list[dict[str, Any]]:
    """Flat AP results (``Car/3d/moderate/R40``) as table rows: one per class and metric, with columns
    ``class``, ``metric`` and ``<difficulty> <R40|R11>`` (AP in percent, 2 decimals), in KITTI's order."""
    from pgnn.eval.kitti import CLASSES, DIFFICULTIES, METRICS

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for key, ap in results.items():
        cls, metric, difficulty, sampling = key.split("/")
        row = rows.setdefault((cls, metric), {"class": cls, "metric": metric})
        row[f"{difficulty} {sampling}"] = round(ap, 2)
    columns = [f"{d} {s}" for s in ("R40", "R11") for d in DIFFICULTIES]

    def order(cm: tuple[str, str]) -> tuple[int, str, int, str]:
        cls, metric = cm
        c = CLASSES.index(cls) if cls in CLASSES else len(CLASSES)
        m = METRICS.index(metric) if metric in METRICS else len(METRICS)
        return c, cls, m, metric

    return [
        {"class": rows[cm]["class"], "metric": rows[cm]["metric"], **{c: rows[cm].get(c) for c in columns}}
        for cm in sorted(rows, key=order)
    ]
