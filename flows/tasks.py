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

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefect import task
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


def outputs_cache_key(
    ctx: TaskRunContext, task_name: str, inputs: dict[str, Any], outputs: Sequence[str | Path]
) -> str | None:
    """Cache key of a task that writes ``outputs`` (files or folders) from ``inputs`` (a JSON-able
    description of everything the bytes depend on). The task must return :func:`outputs_digest` of
    ``outputs``; a record is used only while the outputs on disk still have exactly those bytes."""
    paths = [str(Path(p).resolve()) for p in outputs]
    key = stable_hash({"task": task_name, "inputs": inputs, "outputs": paths})
    return verified_cache_key(ctx.result_store, key, lambda digest: outputs_digest(paths) == digest)


def _manifest_shas(folder: str | Path) -> list[str | None]:
    """The sha256 of every shard a folder's manifest lists (what a consumer of the folder reads)."""
    return [e.get("sha256") for e in (read_manifest(folder) or {}).get("shards", [])]


def synth_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """:func:`synth_dataset`: the config and the generator's code; the whole folder verified."""
    inputs = {"synthetic": parameters["cfg"].model_dump(mode="json"), "code": stage_code("synth")}
    return outputs_cache_key(ctx, "synth", inputs, [parameters["out_dir"]])


def gt_db_cache_key(ctx: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """:func:`build_gt_db`: the prepared train shards' bytes and the code; the parquet file verified."""
    inputs = {"prepared": _manifest_shas(parameters["prepared_dir"]), "code": stage_code("gt_db")}
    return outputs_cache_key(ctx, "gt_db", inputs, [parameters["out_path"]])


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


# --------------------------------------------------------------------------------------------- tasks


@task(name="synth", cache_key_fn=synth_cache_key, persist_result=True, result_serializer="json", retries=1)
def synth_dataset(cfg: SyntheticConfig, out_dir: Path) -> dict[str, str]:
    """Write the synthetic KITTI root (:func:`pgnn.pipeline.steps.synth.synth_step`) into an emptied
    ``out_dir``, as
    ``dvc repro`` does; return its :func:`outputs_digest` (what the cache record verifies against)."""
    from pgnn.pipeline.steps.synth import synth_step

    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    synth_step(cfg, out)
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


@task(name="gt-db", cache_key_fn=gt_db_cache_key, persist_result=True, result_serializer="json", retries=1)
def build_gt_db(prepared_dir: Path, out_path: Path) -> dict[str, str]:
    """The ground-truth database of the prepared train split (:func:`pgnn.pipeline.steps.gt_db.gt_db_step`);
    returns the
    :func:`outputs_digest` of the parquet file."""
    from pgnn.pipeline.steps.gt_db import gt_db_step

    gt_db_step(Path(prepared_dir), Path(out_path))
    return outputs_digest([out_path])


@task(name="train", cache_policy=NO_CACHE, retries=0)
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


@task(name="predict", cache_key_fn=predict_cache_key, persist_result=True, result_serializer="json")
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


@task(name="evaluate", cache_policy=NO_CACHE)
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
    ``default_classes`` are reported when params.yaml names none (the classes the preset detects)."""
    from pgnn.pipeline.steps.evaluate import evaluate_step

    return evaluate_step(
        cfg,
        Path(prepared_dir),
        Path(pred_dir),
        Path(metrics_path),
        Path(curves_dir),
        default_classes,
        headline_path=None if headline_path is None else Path(headline_path),
    )
