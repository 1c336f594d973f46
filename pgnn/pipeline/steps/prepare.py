"""Stage ``prepare@<split>``: FOV crop, features and labels of one split into parquet shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pgnn.config.params import DataConfig, ResolvedReader
from pgnn.core.shards import ShardPlan, run_plan
from pgnn.data.kitti import frame_ids
from pgnn.data.prepare import prepare_plan
from pgnn.pipeline.stages import Layout, stage


def split_plan(data: DataConfig, which: str, out_dir: Path, root_dir: Path = Path(".")) -> ShardPlan:
    """The shard plan of the prepare step of one split (see :class:`pgnn.core.shards.ShardPlan`)."""
    root = root_dir / data.root
    ids = frame_ids(root, data.split_name(which), painted=data.painted)
    return prepare_plan(
        root,
        ids,
        out_dir,
        painted=data.painted,
        frames_per_shard=data.frames_per_shard,
        code_modules=stage("prepare").shard_code,
    )


def prepare_step(data: DataConfig, which: str, out_dir: Path, root_dir: Path = Path(".")) -> dict[str, Any]:
    """FOV crop + features + labels of one split into parquet shards (missing or stale shards only)."""
    return run_plan(split_plan(data, which, out_dir, root_dir), workers=data.workers)


def plan(params: ResolvedReader, layout: Layout, item: str | None) -> ShardPlan:
    """The stage's shard plan (what :func:`run` builds; the Prefect flow fans its shards out)."""
    assert item is not None
    return split_plan(params.section("data", DataConfig), item, layout.path("prepared", item), layout.root)


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    run_plan(plan(params, layout, item), workers=params.section("data", DataConfig).workers)
