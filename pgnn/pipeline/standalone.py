"""Training without DVC: ``pgnn train --params P.yaml`` builds (or reuses) what training reads, then
trains, with the same step functions and paths as the DVC stages (:mod:`pgnn.pipeline.steps`, ``Layout``).

The project root is the params file's folder: ``data.root`` is taken from there, and the artifacts go to
the stage table's paths under it. What is built: ``prepare@train`` (and ``prepare@val`` plus
``graphs@val`` when ``train.eval_every`` asks for validation AP), the ground-truth database when the recipe
samples from it, and ``graphs@train`` when training reads cached graphs. Every step is content-keyed, so a
rerun reuses what is current and training resumes from its checkpoints. Under ``torchrun`` only rank 0 builds;
the other ranks wait for it at a barrier, then all train together (DDP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pgnn.config.params import Params, load_params
from pgnn.config.presets import resolve
from pgnn.pipeline.stages import Layout
from pgnn.pipeline.steps.graphs import graphs_step
from pgnn.pipeline.steps.gt_db import gt_db_step
from pgnn.pipeline.steps.prepare import prepare_step
from pgnn.pipeline.steps.train import train_step
from pgnn.training.distributed import init_distributed
from pgnn.training.source import train_augments


def with_train_overrides(params: Params, **train: Any) -> Params:
    """``params`` with ``train`` keys set (None values are left out)."""
    extra = {k: v for k, v in train.items() if v is not None}
    return params.model_copy(update={"train": {**params.train, **extra}}) if extra else params


def prepare_training(params: Params, layout: Layout) -> None:
    """Build or reuse the prepared frames, database and graphs that training on ``params`` reads."""
    recipe = resolve(params)
    validate = recipe.train.eval_every is not None
    for split in ("train", "val") if validate else ("train",):
        prepare_step(params.data, split, layout.prepared(split), root_dir=layout.root)
    if recipe.gt_sampling is not None:
        gt_db_step(layout.prepared("train"), layout.gt_db)
    splits = (["train"] if not train_augments(recipe) else []) + (["val"] if validate else [])
    for split in splits:
        graphs_step(
            recipe,
            split,
            layout.prepared(split),
            layout.graphs(split),
            params.data.frames_per_shard,
            params.data.workers,
        )


def train_project(params_path: Path, **train: Any) -> Path:
    """Train the recipe of ``params_path`` (``train`` overrides its ``train`` keys, e.g. ``max_steps=2``);
    return the exported model's path."""
    params_path = Path(params_path).resolve()
    params = with_train_overrides(load_params(params_path), **train)
    layout = Layout(params_path.parent)
    recipe = resolve(params)
    dist = init_distributed(recipe.train.device)  # joins torchrun's group (one process: nothing to join)
    try:
        if dist.rank == 0:
            prepare_training(params, layout)
        if dist.enabled:
            torch.distributed.barrier()
        has_val = recipe.train.eval_every is not None
        return train_step(
            recipe,
            layout.graphs("train"),
            layout.checkpoints,
            layout.model,
            layout.live,
            layout.train_metrics,
            prepared_dir=layout.prepared("train"),
            gt_db_path=layout.gt_db,
            val_graphs_dir=layout.graphs("val") if has_val else None,
            val_prepared_dir=layout.prepared("val") if has_val else None,
        )
    finally:
        if dist.owns_group:
            torch.distributed.destroy_process_group()
