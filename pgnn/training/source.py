"""What a training run trains on and what names it: the record source (the cached graphs, or samples rebuilt
every epoch) and the run key that names a run's checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pgnn.config.training import RESUMABLE_CHANGES
from pgnn.core.io import sha256_file
from pgnn.core.shards import read_manifest, stable_hash
from pgnn.data.prepare import frames_with_classes, prepared_label_types
from pgnn.graphs.cache import GraphCache
from pgnn.graphs.targets import object_classes
from pgnn.recipe.presets import Recipe
from pgnn.recipe.resolved import ValidationConfig
from pgnn.training.batches import SubsetSource
from pgnn.training.dataset import AugmentedRecords


def train_augments(recipe: Recipe) -> bool:
    """Whether training rebuilds its samples every epoch (augmentation steps, ground-truth sampling, or a
    fresh random graph per epoch) instead of reading the cached graphs."""
    return bool(recipe.augment.steps) or recipe.gt_sampling is not None or recipe.train.resample_graph


def class_filtered(recipe: Recipe, frame_ids: list[str], prepared_dir: Path | None) -> list[int]:
    """Indices of ``frame_ids`` that training uses: with ``train.class_filter``, the frames holding an object
    of the label method's classes (read from the prepared split's metadata); else all."""
    if not recipe.train.class_filter:
        return list(range(len(frame_ids)))
    if prepared_dir is None:
        raise ValueError("train.class_filter needs the prepared split (data/prepared/train) for the labels")
    keep = set(
        frames_with_classes(prepared_label_types(prepared_dir), object_classes(recipe.targets.label_method))
    )
    return [i for i, fid in enumerate(frame_ids) if fid in keep]


def train_records(
    recipe: Recipe, graphs_dir: Path, prepared_dir: Path | None = None, gt_db_path: Path | None = None
) -> SubsetSource:
    """The training record source: the graph cache, or, when the recipe rebuilds samples, samples rebuilt on
    the fly from the prepared frames (and the ground-truth database) by :class:`AugmentedRecords`, seeded by
    ``train.seed``; restricted to the recipe's class filter (:func:`class_filtered`)."""
    if not train_augments(recipe):
        cache = GraphCache(graphs_dir)
        return SubsetSource(cache, class_filtered(recipe, list(cache.frame_ids), prepared_dir))
    if prepared_dir is None or (recipe.gt_sampling is not None and gt_db_path is None):
        raise ValueError(
            "training with augmentation or gt_sampling needs prepared_dir (data/prepared/train) and, for "
            "gt_sampling, gt_db_path (data/gt_db/gt_db.parquet)"
        )
    source = AugmentedRecords(
        prepared_dir,
        recipe.graph,
        recipe.targets,
        recipe.augment,
        seed=recipe.train.seed,
        gt_sampling=recipe.gt_sampling,
        gt_db=gt_db_path if recipe.gt_sampling is not None else None,
        resample=recipe.train.resample_graph,
    )
    ids = [str(fid) for fid in source.frames.frame_ids]
    return SubsetSource(source, class_filtered(recipe, ids, prepared_dir))


def train_run_key(
    recipe: Recipe,
    graphs_dir: Path,
    meta: dict[str, Any],
    prepared_dir: Path | None = None,
    gt_db_path: Path | None = None,
    validation: ValidationConfig | None = None,
) -> str:
    """What a training run's results depend on: model, loss, data, the train settings that change the weights
    or the logged curves (all but :data:`RESUMABLE_CHANGES`) and the validation settings (the val curves).

    Checkpoints live under ``<ckpt_root>/<key>/``: a killed run with the same key resumes, a changed param
    starts a fresh run (instead of resuming someone else's checkpoints). When the recipe augments, the data
    are the prepared frames, the database's bytes (with gt_sampling), the graph and targets settings and the
    augmentation and sampling configs; otherwise the cached graphs' shard keys (which hold the graph and
    targets settings).
    """
    manifest = read_manifest(graphs_dir) or {}
    train = {k: v for k, v in recipe.train.model_dump(mode="json").items() if k not in RESUMABLE_CHANGES}
    data: Any = [e.get("key") for e in manifest.get("shards", [])]
    if train_augments(recipe):
        prepared = (read_manifest(prepared_dir) or {}) if prepared_dir is not None else {}
        with_db = recipe.gt_sampling is not None and gt_db_path is not None and Path(gt_db_path).exists()
        data = {
            "prepared": [e.get("key") for e in prepared.get("shards", [])],
            "gt_db": sha256_file(gt_db_path) if with_db else None,
            "graph": recipe.graph.model_dump(mode="json"),
            "targets": recipe.targets.model_dump(mode="json"),
            "augment": recipe.augment.model_dump(mode="json"),
            "gt_sampling": None if recipe.gt_sampling is None else recipe.gt_sampling.model_dump(mode="json"),
        }
    return stable_hash(
        {
            "model": recipe.model.model_dump(mode="json"),
            "loss": recipe.loss.model_dump(mode="json"),
            "train": train,
            "meta": meta,
            "data": data,
            "validation": None if validation is None else validation.model_dump(mode="json"),
        }
    )[:16]
