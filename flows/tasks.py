"""The Prefect tasks of the pgnn flows. Each wraps one ``pgnn`` function (``pgnn/pipeline/steps/``,
``pgnn/core/shards.py``) and takes explicit paths, like the DVC stage scripts do.

Freshness never rests on Prefect's result cache
------------------------------------------------
What a flow skips is decided as ``dvc repro`` and :func:`pgnn.core.shards.run_plan` decide it: a shard is
skipped only when its folder's manifest lists it with the current key (a hash of its inputs' bytes, the
params and the code version) *and* the file on disk still has the listed sha256
(:func:`pgnn.core.shards.pending_tasks`). Only the other shards are submitted to :func:`build_shard`.

Prefect's cache records (in ``PREFECT_RESULTS_LOCAL_STORAGE_PATH``) are used, but verified:

- :func:`build_shard` is cached on the shard's content key plus its absolute path, and returns the sha256
  of what it wrote. This is the shortcut for files whose manifest entry was lost (a flow killed between a
  shard landing and its manifest update, a deleted manifest).
- :func:`synth_dataset`, :func:`build_gt_db` and :func:`predict_split` are cached on a description of
  everything their bytes depend on (config, input bytes, code version) plus their output paths, and return
  the sha256 of every file they wrote (:func:`outputs_digest`).

The cache key functions (:func:`verified_cache_key`) let Prefect use a record only while the bytes on disk
still have the recorded sha256s; otherwise the task runs (and its result is not persisted over the record).
So a task is never reported ``Cached`` while the files on disk came from a different build: a plain
input-hash cache did exactly that (ENVIRONMENT.md: graph radius 2.0 -> 2.5 -> 2.0 reported cached over the
2.5 files). Training is not cached by Prefect: it resumes from its own checkpoints
(:mod:`pgnn.pipeline.steps.train`).

Retries: shard builds retry twice (they read and write files); training does not retry (it resumes from
its own checkpoints when rerun, and a crash in it is a bug to see, not to paper over).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from pgnn.config.params import DataConfig, EvalConfig, SyntheticConfig
from pgnn.core.io import sha256_file
from pgnn.core.shards import (
    ShardPlan,
    ShardTask,
    code_version,
    finalize_plan,
    read_manifest,
    shard_entry,
    stable_hash,
)
from pgnn.pipeline.stages import stage


def stage_code(name: str) -> str:
    """The code version of a stage's outputs: the hash of its entry module's import closure (the code deps
    of its DVC stage, from the stage table)."""
    return code_version([stage(name).entry])


# ------------------------------------------------------------------------------------------- caching


def verified_cache_key(store: Any, key: str, still_valid: Callable[[Any], bool]) -> str | None:
    """``key`` if Prefect may use (or create) the cache record under it, else None (run, persist nothing).

    A record that exists is usable only while ``still_valid(cached_value)`` holds, i.e. while the files
    it describes are still on disk with the recorded bytes. ``store`` is the task run's result store
    (anything with ``exists(key)`` and ``read(key).result``).
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


def outputs_digest(paths: Sequence[str | Path]) -> dict[str, str]:
    """``{absolute path: sha256}`` of the given files and of every file under the given folders (missing
    paths contribute nothing)."""
    digest = {}
    for path in map(Path, paths):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        digest |= {str(p.resolve()): sha256_file(p) for p in files if p.is_file()}
    return digest


def folder_digest(folder: str | Path) -> dict[str, str]:
    """``{path relative to folder: sha256}`` of every file under ``folder`` ({} if it does not exist)."""
    root = Path(folder).resolve()
    return {Path(p).relative_to(root).as_posix(): sha for p, sha in outputs_digest([root]).items()}


def outputs_key(
    task_name: str, inputs: dict[str, Any], outputs: Sequence[str | Path]
) -> tuple[str, list[str]]:
    """The cache key of a task that writes ``outputs`` (files or folders) from ``inputs`` (a JSON-able
    description of everything the bytes depend on), and the outputs' absolute paths."""
    paths = [str(Path(p).resolve()) for p in outputs]
    return stable_hash({"task": task_name, "inputs": inputs, "outputs": paths}), paths


def outputs_cache_key(
    ctx: TaskRunContext, task_name: str, inputs: dict[str, Any], outputs: Sequence[str | Path]
) -> str | None:
    """Cache key of a task that writes ``outputs`` from ``inputs`` (:func:`outputs_key`). The task must
    return :func:`outputs_digest` of ``outputs``; a record is used only while the outputs on disk still have
    exactly those bytes."""
    key, paths = outputs_key(task_name, inputs, outputs)
    return verified_cache_key(ctx.result_store, key, lambda digest: outputs_digest(paths) == digest)


def current_outputs(store: Any, key: str, paths: Sequence[str]) -> dict[str, str] | None:
    """The digest a task's cache record holds under ``key`` when the files on disk still have it (the task
    would be a verified cache hit: nothing to do), else None. ``store``: the task's result store."""
    if not store.exists(key):
        return None
    try:
        digest = store.read(key).result
    except Exception:  # an unreadable record: the task would run
        return None
    return digest if outputs_digest(paths) == digest else None


def result_store_of(task_: Any, ask_api: bool | None = None) -> Any:
    """The result store ``task_``'s cache records are in, outside a run. With ``ask_api`` (default: when
    ``PREFECT_API_URL`` is set) or a default storage block, as Prefect finds it (``get_result_store()``,
    which asks the API for a server-side default: with no API URL, that starts an ephemeral server);
    otherwise, with no server, the local result storage (``PREFECT_RESULTS_LOCAL_STORAGE_PATH``) where this
    project's runs keep them."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore, get_result_store
    from prefect.settings import PREFECT_API_URL, get_current_settings

    results = get_current_settings().results
    if ask_api is None:
        ask_api = bool(PREFECT_API_URL.value())
    if ask_api or results.default_storage_block is not None:
        return get_result_store().update_for_task(task_)
    local = LocalFileSystem(basepath=str(results.local_storage_path))
    return ResultStore(result_storage=local).update_for_task(task_)


def _manifest_shas(folder: str | Path) -> list[str | None]:
    """The sha256 of every shard a folder's manifest lists (what a consumer of the folder reads)."""
    return [e.get("sha256") for e in (read_manifest(folder) or {}).get("shards", [])]


def synth_key(cfg: SyntheticConfig, out_dir: str | Path) -> tuple[str, list[str]]:
    """:func:`synth_dataset`: the config and the generator's code; the whole folder verified."""
    inputs = {"synthetic": cfg.model_dump(mode="json"), "code": stage_code("synth")}
    return outputs_key("synth", inputs, [out_dir])


def gt_db_key(prepared_dir: str | Path, out_path: str | Path) -> tuple[str, list[str]]:
    """:func:`build_gt_db`: the prepared train shards' bytes and the code; the parquet file verified."""
    inputs = {"prepared": _manifest_shas(prepared_dir), "code": stage_code("gt_db")}
    return outputs_key("gt_db", inputs, [out_path])


def synth_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    key, paths = synth_key(parameters["cfg"], parameters["out_dir"])
    return verified_cache_key(ctx.result_store, key, lambda digest: outputs_digest(paths) == digest)


def gt_db_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    key, paths = gt_db_key(parameters["prepared_dir"], parameters["out_path"])
    return verified_cache_key(ctx.result_store, key, lambda digest: outputs_digest(paths) == digest)


def predict_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """:func:`predict_split`: the model's bytes, the graphs and prepared frames read, the post-processing
    settings and the code; the predictions folder and timings file verified."""
    model = Path(parameters["model_path"])
    inputs = {
        "model": sha256_file(model) if model.is_file() else None,
        "graphs": _manifest_shas(parameters["graphs_dir"]),
        "prepared": _manifest_shas(parameters["prepared_dir"]),
        "postprocess": parameters["recipe"].postprocess.model_dump(mode="json"),
        "code": stage_code("predict"),
    }
    return outputs_cache_key(ctx, "predict", inputs, [parameters["out_dir"], parameters["timings_path"]])


def replace_folder_if_changed(staged: Path, out: Path) -> bool:
    """Move the folder ``staged`` to ``out`` unless ``out`` already holds exactly its files and bytes (then
    ``out`` is left untouched: same inodes, same mtimes). Returns whether ``out`` was replaced. ``staged``
    must be on ``out``'s file system (a sibling); what it held is left to its caller to delete."""
    if out.is_dir() and folder_digest(staged) == folder_digest(out):
        return False
    if out.exists():
        old = staged.with_name(staged.name + ".old")
        os.replace(out, old)
        os.replace(staged, out)
        shutil.rmtree(old)
    else:
        os.replace(staged, out)
    return True


# --------------------------------------------------------------------------------------------- tasks

AP_TABLE_KEY = "pgnn-eval-ap"
"""Key of the table artifact of :func:`evaluate_predictions` (``prefect.artifacts.Artifact.get(key)``)."""
METRICS_REPORT_KEY = "pgnn-eval-metrics"
"""Key of its markdown report artifact."""


@task(
    name="synth",
    cache_key_fn=synth_cache_key,
    persist_result=True,
    result_serializer="json",
    retries=1,
    log_prints=True,
)
def synth_dataset(cfg: SyntheticConfig, out_dir: Path) -> dict[str, str]:
    """Generate the synthetic KITTI root (:func:`pgnn.pipeline.steps.synth.synth_step`) beside ``out_dir``
    and put it in place only if its bytes differ from what ``out_dir`` holds (an identical folder is reused,
    not rewritten); return its :func:`outputs_digest` (what the cache record verifies against)."""
    from pgnn.pipeline.steps.synth import synth_step

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        synth_step(cfg, staged)
        if replace_folder_if_changed(staged, out):
            print(f"synth: wrote {out} ({cfg.frames} frames, seed {cfg.seed})")
        else:
            print(f"synth: {out} already holds these bytes; kept it")
    return outputs_digest([out])


@task(name="plan-prepare", cache_policy=NO_CACHE)
def plan_prepare(data: DataConfig, split: str, out_dir: Path, root_dir: Path) -> ShardPlan:
    """The shard plan of ``prepare@split`` (:func:`pgnn.pipeline.steps.prepare.prepare_plan`; hashes the input
    files)."""
    from pgnn.pipeline.steps.prepare import prepare_plan

    return prepare_plan(data, split, Path(out_dir), Path(root_dir))


@task(name="plan-graphs", cache_policy=NO_CACHE)
def plan_graphs(
    recipe: Any, split: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int
) -> ShardPlan:
    """The shard plan of ``graphs@split`` (:func:`pgnn.pipeline.steps.graphs.graphs_plan`; needs a finalized
    prepare)."""
    from pgnn.pipeline.steps.graphs import graphs_plan

    return graphs_plan(recipe, split, Path(prepared_dir), Path(out_dir), frames_per_shard)


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
    sha256). Runs on any task runner: ``plan.build`` is picklable. The caller records the entry
    (:func:`pgnn.core.shards.record_shard`); ``label`` (e.g. ``graphs@val``) only names the task run."""
    out = Path(plan.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan.build(shard, out / shard.file)
    return shard_entry(plan, shard)


@task(name="finalize-shards", task_run_name="finalize:{label}", cache_policy=NO_CACHE)
def finalize_shards(plan: ShardPlan, label: str) -> dict[str, Any]:
    """Write the folder's final manifest, drop files it does not list
    (:func:`pgnn.core.shards.finalize_plan`)."""
    return finalize_plan(plan)


@task(
    name="gt-db",
    cache_key_fn=gt_db_cache_key,
    persist_result=True,
    result_serializer="json",
    retries=1,
    log_prints=True,
)
def build_gt_db(prepared_dir: Path, out_path: Path) -> dict[str, str]:
    """The ground-truth database of the prepared train split (:func:`pgnn.pipeline.steps.gt_db.gt_db_step`);
    returns the
    :func:`outputs_digest` of the parquet file."""
    from pgnn.pipeline.steps.gt_db import gt_db_step

    gt_db_step(Path(prepared_dir), Path(out_path))
    return outputs_digest([out_path])


@task(name="train", cache_policy=NO_CACHE, retries=0, log_prints=True)
def train_model(
    recipe: Any,
    graphs_dir: Path,
    ckpt_root: Path,
    model_path: Path,
    live_dir: Path,
    metrics_path: Path,
    prepared_dir: Path,
    gt_db_path: Path,
) -> str:
    """Train (resuming a killed run of the same params from ``ckpt_root``) and export the model
    (:func:`pgnn.pipeline.steps.train.train_step`; it reads ``prepared_dir`` and ``gt_db_path`` when the
    recipe
    augments)."""
    from pgnn.pipeline.steps.train import train_step

    model = train_step(
        recipe,
        Path(graphs_dir),
        Path(ckpt_root),
        Path(model_path),
        Path(live_dir),
        Path(metrics_path),
        prepared_dir=Path(prepared_dir),
        gt_db_path=Path(gt_db_path),
    )
    return str(model)


@task(
    name="predict",
    cache_key_fn=predict_cache_key,
    persist_result=True,
    result_serializer="json",
    log_prints=True,
)
def predict_split(
    recipe: Any, model_path: Path, graphs_dir: Path, prepared_dir: Path, out_dir: Path, timings_path: Path
) -> dict[str, str]:
    """KITTI result files of the model on a split's cached runtime graphs, plus mean stage timings
    (:func:`pgnn.pipeline.steps.predict.predict_step`); returns the :func:`outputs_digest` of both."""
    from pgnn.pipeline.steps.predict import predict_step

    predict_step(
        recipe, Path(model_path), Path(graphs_dir), Path(prepared_dir), Path(out_dir), Path(timings_path)
    )
    return outputs_digest([out_dir, timings_path])


@task(name="evaluate", cache_policy=NO_CACHE, log_prints=True)
def evaluate_predictions(
    cfg: EvalConfig,
    prepared_dir: Path,
    pred_dir: Path,
    metrics_path: Path,
    curves_dir: Path,
    default_classes: tuple[str, ...],
    headline_path: Path | None = None,
) -> dict[str, Any]:
    """Official KITTI AP of the predictions against the prepared labels
    (:func:`pgnn.pipeline.steps.evaluate.evaluate_step`);
    ``default_classes`` are reported when params.yaml names none (the classes the preset detects).

    The AP table is also published as Prefect artifacts of the run: a table (``pgnn-eval-ap``, one row per
    class and metric) and a markdown report (``pgnn-eval-metrics``)."""
    from pgnn.eval.report import format_table
    from pgnn.pipeline.steps.evaluate import evaluate_step

    results = evaluate_step(
        cfg,
        Path(prepared_dir),
        Path(pred_dir),
        Path(metrics_path),
        Path(curves_dir),
        default_classes,
        headline_path=None if headline_path is None else Path(headline_path),
    )
    create_table_artifact(
        table=ap_table(results),
        key=AP_TABLE_KEY,
        description=f"Official KITTI AP (%) of {pred_dir} (R40 and R11 sampling)",
    )
    create_markdown_artifact(
        markdown=(
            f"## KITTI AP (%) of `{pred_dir}`\n\n```\n{format_table(results)}```\n\n"
            f"Metrics: `{metrics_path}`; precision-recall curves: `{curves_dir}`.\n"
        ),
        key=METRICS_REPORT_KEY,
        description="KITTI evaluation report",
    )
    return results


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
