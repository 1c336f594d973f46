"""Stage ``train``: train (resuming a killed run of the same params) and export the model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from pgnn.config.params import ResolvedParams
from pgnn.config.presets import Recipe
from pgnn.config.resolved import Resolved, ValidationConfig
from pgnn.core.io import write_json_atomic
from pgnn.eval.validation import make_validator
from pgnn.graphs.targets import object_classes
from pgnn.nn.checkpoint import export_model, latest_checkpoint
from pgnn.pipeline.stages import Layout
from pgnn.training.loop import train
from pgnn.training.source import train_augments, train_records, train_run_key


def train_meta(recipe: Recipe) -> dict[str, Any]:
    """What a trained model states about its data: only what training decides (the frame, encoding, label
    method, features and the runtime-graph preset the recipe pairs with them). Post-processing and the
    runtime graph's settings are read from params at predict time, so they are not here."""
    return {
        "input_frame": "rect",
        "graph_preset": recipe.runtime_graph_name,
        "encoding": recipe.targets.encoding,
        "label_method": recipe.targets.label_method,
        "input_features": recipe.targets.input_features,
    }


def train_step(
    recipe: Recipe,
    graphs_dir: Path,
    ckpt_root: Path,
    model_path: Path,
    live_dir: Path,
    metrics_path: Path,
    *,
    prepared_dir: Path | None = None,
    gt_db_path: Path | None = None,
    val_graphs_dir: Path | None = None,
    val_prepared_dir: Path | None = None,
    validation: ValidationConfig | None = None,
    timings_path: Path | None = None,
) -> Path:
    """Train (resuming a killed run of the same params); export the model.

    The samples are the cached training graphs or, when the recipe rebuilds samples (``augment.steps``,
    ``gt_sampling`` or ``train.resample_graph``), rebuilt every epoch from ``prepared_dir`` (and
    ``gt_db_path``): :func:`pgnn.training.source.train_records`. Checkpoints go to
    ``ckpt_root/<run key>/``; other runs' folders are left alone (``pgnn checkpoints --prune`` removes
    them). With ``train.eval_every`` and the val split's graphs and prepared frames, the official AP on
    ``train.eval_frames`` val frames is logged during training, post-processed as ``validation`` says (None:
    the recipe's post-processing and classes).

    ``metrics_path`` gets the results only (the final interval's losses: a DVC metric); ``timings_path`` the
    seconds per step; the whole dvclive summary stays in ``live_dir/metrics.json``.
    """
    torch.set_num_threads(int(os.environ.get("PGNN_TORCH_THREADS", "1")))
    records = train_records(recipe, graphs_dir, prepared_dir, gt_db_path)
    meta = train_meta(recipe)
    key = train_run_key(recipe, graphs_dir, meta, prepared_dir, gt_db_path)
    ckpt_dir = ckpt_root / key
    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 touches files
    if main_rank and latest_checkpoint(ckpt_dir) is None and live_dir.exists():
        shutil.rmtree(live_dir)  # a fresh run: no stale curves from another run's params
    validate = None
    if recipe.train.eval_every is not None and val_graphs_dir is not None and val_prepared_dir is not None:
        if validation is None:
            validation = ValidationConfig(
                postprocess=recipe.postprocess, classes=object_classes(recipe.targets.label_method)
            )
        validate = make_validator(
            val_graphs_dir,
            val_prepared_dir,
            meta,
            validation.postprocess,
            validation.classes,
            recipe.train.eval_frames,
        )
    source = "rebuilt every epoch" if train_augments(recipe) else "cached graphs"
    print(f"train: run {key} ({len(records)} frames, {source}), checkpoints in {ckpt_dir}")
    final = train(
        records,
        recipe.model,
        recipe.train,
        recipe.loss,
        ckpt_dir,
        live_dir=live_dir,
        meta=meta,
        validate=validate,
    )
    if not main_rank:
        return model_path
    export_model(final, model_path)
    summary_path = live_dir / "metrics.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    write_json_atomic(metrics_path, train_results(summary))
    if timings_path is not None:
        write_json_atomic(timings_path, {"step": summary.get("step"), **summary.get("time", {})})
    return model_path


def train_results(summary: dict[str, Any]) -> dict[str, Any]:
    """What of dvclive's summary is a result (the DVC metric ``metrics/train.json``): the final interval's
    losses. Per-class vertex metrics, learning rate, timings and the val AP logged during training stay in
    the summary and the curves."""
    return {"loss": summary["loss"]} if "loss" in summary else {}


def run(params: ResolvedParams, layout: Layout, item: str | None) -> None:
    resolved = params.whole(Resolved)
    train_step(
        resolved,
        layout.graphs("train"),
        layout.checkpoints,
        layout.model,
        layout.live,
        layout.train_metrics,
        prepared_dir=layout.prepared("train"),
        gt_db_path=layout.gt_db,
        val_graphs_dir=layout.graphs("val"),
        val_prepared_dir=layout.prepared("val"),
        validation=resolved.validation,
        timings_path=layout.train_timings,
    )
