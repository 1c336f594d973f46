"""Training without DVC: ``pgnn train --params P.yaml`` runs the stages that training needs, then trains,
in a :func:`pgnn.pipeline.runner.driver_session` like ``dvc repro`` and the Prefect flows.

The project root is the params file's folder: ``data.root`` is taken from there, and the artifacts go to
the stage table's paths under it. What runs (:meth:`pgnn.pipeline.runner.Session.run` of ``train``): the
``params`` stage (``params.resolved.yaml`` from this file, with the command line's overrides), then every
stage upstream of ``train`` (``synth`` only when ``data.root`` is the synthetic folder), then ``train``.
Each is content-keyed (shards by their inputs' bytes, params and code; training by its run key), so a rerun
reuses what is current and training resumes from its checkpoints. DVC's record is not touched. Under
``torchrun`` only rank 0 holds the project's lock and runs the stages before ``train``; the other ranks
wait at a barrier, then all train together (DDP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pgnn.config.params import ParamsSource
from pgnn.pipeline.runner import driver_session, item_of, upstream
from pgnn.recipe.resolved import resolve
from pgnn.training.distributed import init_distributed


def train_project(params_path: Path, **train: Any) -> Path:
    """Run the stages training needs and train the recipe of ``params_path`` (``train`` overrides its
    ``train`` keys, e.g. ``max_steps=2``); return the exported model's path."""
    params_path = Path(params_path)
    source = ParamsSource(params_path, **train)
    dist = init_distributed(resolve(source.params, source.path).train.device)  # torchrun's group
    try:
        who = f"pgnn train --params {params_path}"
        main = dist.rank == 0
        with driver_session(params_path, None, who, record=False, hold_lock=main, **train) as session:
            if main:
                session.run([s for s in upstream(["train"], session.source.params.data.root) if s != "train"])
            if dist.enabled:
                torch.distributed.barrier()
            session.execute(item_of("train").stage, [item_of("train")])
            return session.layout.path("model")
    finally:
        if dist.owns_group:
            torch.distributed.destroy_process_group()
