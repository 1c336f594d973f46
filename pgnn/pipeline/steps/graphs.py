"""Stage ``graphs@<split>``: graphs, input features and vertex targets of one split into npz shards (the
training graph for ``train``, the runtime graph otherwise)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from pgnn.config.graphs import GraphConfig, TargetsConfig
from pgnn.config.params import ResolvedReader
from pgnn.core.errors import DataError
from pgnn.core.io import sha256_files
from pgnn.core.shards import (
    ShardPlan,
    ShardTask,
    chunk_ids,
    code_version,
    read_manifest,
    run_plan,
    stable_hash,
)
from pgnn.data.prepare import read_prepared_shard
from pgnn.graphs import records
from pgnn.graphs.build import warm_up
from pgnn.graphs.cache import write_graph_shard
from pgnn.pipeline.stages import Layout, stage
from pgnn.recipe.presets import Recipe
from pgnn.recipe.resolved import Resolved


def _build_graph_shard(
    task: ShardTask,
    path: Path,
    *,
    prepared: dict[str, str],
    graph_cfg: GraphConfig,
    targets_cfg: TargetsConfig,
    seed: int,
) -> None:
    wanted = set(task.frames)
    frames = []
    for shard in sorted(set(prepared[f] for f in task.frames)):
        frames += [f for f in read_prepared_shard(shard) if f.frame_id in wanted]
    order = {fid: i for i, fid in enumerate(task.frames)}
    frames.sort(key=lambda f: order[f.frame_id])
    write_graph_shard(path, [records.graph_record(f, graph_cfg, targets_cfg, seed) for f in frames])


def graphs_plan(
    recipe: Recipe, which: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int
) -> ShardPlan:
    """The shard plan of the graphs step of one split.

    Shard keys hash the prepared shards' bytes, the graph/targets params and the code version, so a changed
    training param never rebuilds graphs, and a killed run resumes (pgnn/core/shards.py).
    """
    manifest = read_manifest(prepared_dir)
    if manifest is None:
        raise DataError(prepared_dir / "manifest.json", "expected a prepared split (run the prepare stage)")
    prepared = {fid: str(prepared_dir / e["file"]) for e in manifest["shards"] for fid in e["frames"]}
    shard_sha = {str(prepared_dir / e["file"]): e["sha256"] for e in manifest["shards"]}
    graph_cfg = recipe.graph if which == "train" else recipe.runtime_graph
    params = {
        "graph": graph_cfg.model_dump(mode="json"),
        "targets": recipe.targets.model_dump(mode="json"),
        "seed": recipe.graph_seed,
        "frames_per_shard": frames_per_shard,
    }
    with ThreadPoolExecutor(max_workers=1) as background:  # hash the shards while code_version parses
        files = list(dict.fromkeys(prepared.values()))
        hashes = background.submit(sha256_files, files)
        code = code_version(stage("graphs").shard_code)
        on_disk = dict(zip(files, hashes.result(), strict=True))
    tasks = []
    for i, ids in enumerate(chunk_ids(sorted(prepared), frames_per_shard)):
        inputs = sorted({shard_sha[prepared[f]] for f in ids})
        for p in {prepared[f] for f in ids}:
            if on_disk[p] != shard_sha[p]:
                raise DataError(p, "prepared shard changed since its manifest was written; rerun prepare")
        key = stable_hash({"inputs": inputs, "frames": ids, "params": params, "code": code})
        tasks.append(ShardTask(file=f"shard-{i:04d}.npz", frames=tuple(ids), key=key))
    build = partial(
        _build_graph_shard,
        prepared=prepared,
        graph_cfg=graph_cfg,
        targets_cfg=recipe.targets,
        seed=recipe.graph_seed,
    )
    warm = partial(warm_up, graph_cfg)
    return ShardPlan(Path(out_dir), tuple(tasks), build, "graphs", params, code, warm=warm)


def graphs_step(
    recipe: Recipe, which: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int, workers: int
) -> dict[str, Any]:
    """Graphs + targets of one split into npz shards (missing or stale shards only)."""
    return run_plan(graphs_plan(recipe, which, prepared_dir, out_dir, frames_per_shard), workers=workers)


def plan(params: ResolvedReader, layout: Layout, item: str | None) -> ShardPlan:
    """The stage's shard plan (what :func:`run` builds; the Prefect flow fans its shards out)."""
    assert item is not None
    resolved = params.whole(Resolved)
    prepared, out = layout.path("prepared", item), layout.path("graphs", item)
    return graphs_plan(resolved, item, prepared, out, resolved.data.frames_per_shard)


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    run_plan(plan(params, layout, item), workers=params.whole(Resolved).data.workers)
