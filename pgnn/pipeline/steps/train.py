"""Stage ``train``: train (resuming a run of the same key from its checkpoints) and export the model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pgnn.config.params import ResolvedReader
from pgnn.core.cpu import pinned_state
from pgnn.core.io import write_json_atomic
from pgnn.eval.validation import make_validator
from pgnn.nn.card import TRAINING_FACTS, ModelCard
from pgnn.nn.checkpoint import export_model
from pgnn.pipeline.stages import Layout
from pgnn.recipe.presets import Recipe
from pgnn.recipe.resolved import Resolved
from pgnn.training.loop import train
from pgnn.training.source import train_augments, train_records, train_run_key


def model_card(recipe: Recipe) -> ModelCard:
    """The card of the model the recipe trains: its network, the label frame (pgnn's data), the runtime
    graph, the targets' encoding, label method and features, the post-processing (the predict stage's, and
    so every path's) and the train settings."""
    return ModelCard(
        network=recipe.model,
        input_frame="rect",
        graph_preset=recipe.runtime_graph_name,
        runtime_graph=recipe.runtime_graph.model_dump(),  # all of it, as postprocess
        encoding=recipe.targets.encoding,
        label_method=recipe.targets.label_method,
        input_features=recipe.targets.input_features,
        postprocess=recipe.postprocess.model_dump(),  # all of it: the card carries the whole section
        train=recipe.train,
    )


def train_meta(recipe: Recipe) -> dict[str, Any]:
    """What a training run's checkpoints state about its data: only what training decides (the card's
    :data:`pgnn.nn.card.TRAINING_FACTS`), so that a post-processing setting is no part of the run key."""
    return training_facts(model_card(recipe))


def training_facts(card: ModelCard) -> dict[str, Any]:
    """The card's :data:`pgnn.nn.card.TRAINING_FACTS` (the ``meta`` of the training loop)."""
    entries = card.entries()
    return {key: entries[key] for key in TRAINING_FACTS}


def train_and_export(resolved: Resolved, layout: Layout) -> Path:
    """Train the recipe of ``resolved`` on the project of ``layout``; export the model; return its path.

    The samples are the cached training graphs or, when the recipe rebuilds samples (``augment.steps``,
    ``gt_sampling`` or ``train.resample_graph``), rebuilt every epoch from the prepared train split (and the
    ground-truth database): :func:`pgnn.training.source.train_records`. Checkpoints go to
    ``models/checkpoints/<run key>/`` (not a DVC output: a run's resumable state); a run with the same key
    resumes from its newest checkpoint at or before ``train.max_steps``, other runs' folders are left alone
    (``pgnn checkpoints --prune`` removes them). With ``train.eval_every``, the official AP on
    ``train.eval_frames`` val frames is logged during training, post-processed as ``validation`` says.

    ``train_metrics`` gets the results only (the final interval's losses: a DVC metric), ``train_summary``
    dvclive's summary (from the curves), ``train_timings`` the seconds per step (not tracked).
    """
    for problem in pinned_state():  # pgnn imported after torch or numpy, or a CPU without AVX2
        print(f"train: warning: CPU numerics not pinned ({problem}): other machines may train other weights")
    graphs, prepared, gt_db = (
        layout.path("graphs", "train"),
        layout.path("prepared", "train"),
        layout.path("gt_db"),
    )
    records = train_records(resolved, graphs, prepared, gt_db)
    card = model_card(resolved)
    meta = training_facts(card)
    key = train_run_key(resolved, graphs, meta, prepared, gt_db, resolved.validation)
    ckpt_dir = layout.path("checkpoints") / key
    validate = None
    if resolved.validation is not None:
        validate = make_validator(
            layout.path("graphs", "val"),
            layout.path("prepared", "val"),
            card,
            resolved.validation.postprocess,
            resolved.validation.classes,
            resolved.train.eval_frames,
        )
    source = "rebuilt every epoch" if train_augments(resolved) else "cached graphs"
    print(f"train: run {key} ({len(records)} frames, {source}), checkpoints in {ckpt_dir}")
    final = train(
        records,
        resolved.model,
        resolved.train,
        resolved.loss,
        ckpt_dir,
        live_dir=layout.path("live"),
        meta=meta,
        validate=validate,
        timings_path=layout.path("train_timings"),
    )
    model_path = layout.path("model")
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only rank 0 touches files
        return model_path
    export_model(final, model_path, card)
    summary_path = layout.path("train_summary")
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    write_json_atomic(layout.path("train_metrics"), train_results(summary))
    return model_path


def train_results(summary: dict[str, Any]) -> dict[str, Any]:
    """What of dvclive's summary is a result (the DVC metric ``metrics/train.json``): the final interval's
    losses. Per-class vertex metrics, learning rate and the val AP logged during training stay in the summary
    and the curves."""
    return {"loss": summary["loss"]} if "loss" in summary else {}


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    train_and_export(params.whole(Resolved), layout)
