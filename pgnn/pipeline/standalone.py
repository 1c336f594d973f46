"""Training without DVC: ``pgnn train --params P.yaml`` runs the stages that training needs, then trains,
through the same :func:`pgnn.pipeline.runner.run_item` as ``dvc repro`` and the Prefect flows.

The project root is the params file's folder: ``data.root`` is taken from there, and the artifacts go to
the stage table's paths under it. What runs: the ``params`` stage (``params.resolved.yaml`` from this file,
with the command line's overrides), then every stage upstream of ``train`` (``synth`` only when
``data.root`` is the synthetic folder), then ``train``. Each is content-keyed (shards by their inputs'
bytes, params and code; training by its run key), so a rerun reuses what is current and training resumes
from its checkpoints. Under ``torchrun`` only rank 0 runs the stages before ``train``; the other ranks wait
at a barrier, then all train together (DDP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pgnn.config.params import Params, ResolvedParams, load_params, params_digest, values_digest
from pgnn.pipeline.runner import item_of, run_item, stage_items, upstream
from pgnn.pipeline.stages import Layout
from pgnn.recipe.resolved import resolve_params, write_resolved
from pgnn.training.distributed import init_distributed


def with_train_overrides(params: Params, **train: Any) -> Params:
    """``params`` with ``train`` keys set (None values are left out)."""
    extra = {k: v for k, v in train.items() if v is not None}
    return params.model_copy(update={"train": {**params.train, **extra}}) if extra else params


def train_project(params_path: Path, **train: Any) -> Path:
    """Run the stages training needs and train the recipe of ``params_path`` (``train`` overrides its
    ``train`` keys, e.g. ``max_steps=2``); return the exported model's path."""
    params_path = Path(params_path).resolve()
    layout = Layout(params_path.parent)
    params = with_train_overrides(load_params(params_path), **train)
    resolved = resolve_params(params, params_path)
    extra = {k: v for k, v in train.items() if v is not None}
    digest = values_digest({"file": params_digest(params_path), "train": extra}) if extra else None
    dist = init_distributed(resolved.train.device)  # joins torchrun's group (one process: nothing to join)
    try:
        if dist.rank == 0:
            write_resolved(layout.path("resolved"), resolved, digest or params_digest(params_path))
            stage_params = ResolvedParams.load(layout.path("resolved"))
            before = [s for s in upstream(["train"], params.data.root) if s not in ("params", "train")]
            for it in stage_items(before):
                run_item(it, layout, stage_params)
        if dist.enabled:
            torch.distributed.barrier()
        run_item(item_of("train"), layout, ResolvedParams.load(layout.path("resolved")))
        return layout.path("model")
    finally:
        if dist.owns_group:
            torch.distributed.destroy_process_group()
