"""One function per pipeline step. DVC stages (``stages/``) and Prefect flows (``flows/``) both call these,
so neither holds logic of its own. Each step takes the sub-configs it needs and explicit paths.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pgnn.config.params import DataConfig, EvalConfig, SyntheticConfig
from pgnn.core.io import write_json_atomic


def split_name(data: DataConfig, which: str) -> str:
    """The ImageSets name of the logical split ``which`` ("train" or "val")."""
    names = {"train": data.train_split, "val": data.val_split}
    if which not in names:
        raise ValueError(f"expected split 'train' or 'val', got {which!r}")
    return names[which]


def synth_step(cfg: SyntheticConfig, out_dir: Path) -> None:
    """Write the synthetic KITTI root (deterministic per seed)."""
    from pgnn.data.synthetic import generate_dataset

    generate_dataset(out_dir, cfg.frames, cfg.seed, cfg.val_fraction)


def prepare_plan(data: DataConfig, which: str, out_dir: Path, root_dir: Path = Path(".")) -> Any:
    """The shard plan of the prepare step of one split (see :class:`pgnn.core.shards.ShardPlan`)."""
    from pgnn.data.kitti import frame_ids
    from pgnn.data.prepare import prepare_plan as plan

    root = root_dir / data.root
    ids = frame_ids(root, split_name(data, which), painted=data.painted)
    return plan(root, ids, out_dir, painted=data.painted, frames_per_shard=data.frames_per_shard)


def prepare_step(data: DataConfig, which: str, out_dir: Path, root_dir: Path = Path(".")) -> dict[str, Any]:
    """FOV crop + features + labels of one split into parquet shards."""
    from pgnn.core.shards import run_plan

    return run_plan(prepare_plan(data, which, out_dir, root_dir), workers=data.workers)


def evaluate_step(
    cfg: EvalConfig,
    prepared_dir: Path,
    pred_dir: Path,
    metrics_path: Path,
    curves_dir: Path,
    default_classes: tuple[str, ...] = ("Car", "Pedestrian", "Cyclist"),
) -> dict:
    """Official KITTI AP of the prediction folder against the labels of the prepared split.

    ``cfg.classes`` None reports ``default_classes`` (the stage passes the classes the preset detects).
    """
    from pgnn.data.kitti import read_labels
    from pgnn.data.prepare import read_prepared_dir
    from pgnn.eval.kitti import ap_from_curves, pr_curves
    from pgnn.eval.report import format_table, write_curves

    frames = read_prepared_dir(prepared_dir)
    gt = [f.labels for f in frames]
    dt = []
    for f in frames:
        path = pred_dir / f"{f.frame_id}.txt"
        dt.append(read_labels(path, allow_score=True) if path.exists() else [])
    curves = pr_curves(gt, dt, cfg.classes or default_classes)
    results = ap_from_curves(curves)
    print(format_table(results))
    write_json_atomic(metrics_path, results)
    if curves_dir.exists():
        shutil.rmtree(curves_dir)
    write_curves(curves, curves_dir)
    return results


def _summary_scalar(x: Any) -> Any:
    return float(x) if isinstance(x, np.floating | float) else x


# ---------------------------------------------------------------------------------------------- graphs


def frame_rng(seed: int, frame_id: str) -> np.random.Generator:
    """The generator of one frame's random choices: depends on (seed, frame id) only, not on shard order."""
    return np.random.default_rng([seed, int(frame_id) if frame_id.isdigit() else sum(frame_id.encode())])


def graph_record(frame: Any, graph_cfg: Any, targets_cfg: Any, seed: int) -> dict[str, np.ndarray]:
    """One frame's cached record: its graph, input features, and vertex targets (see pgnn/graphs/cache.py).

    Shapes: features (N0, F) float32; vertex_coord_i (N_i, 3); edges_i (E_i, 2); cls_labels (N_L,) int64;
    box_targets (N_L, 7) float32; valid_box (N_L,) bool, with L the last level.
    """
    from pgnn.data.kitti import labels_to_boxes
    from pgnn.graphs.build import build_graph
    from pgnn.graphs.features import FEATURES
    from pgnn.graphs.targets import assign_targets

    graph = build_graph(frame.points_rect, graph_cfg, frame_rng(seed, frame.frame_id))
    last = len(graph_cfg.levels)
    features = FEATURES[targets_cfg.input_features](frame.intensity, frame.rgb, frame.scores)  # (N0, F)
    cls_labels, box_targets, valid = assign_targets(
        graph[f"vertex_coord_{last}"],
        labels_to_boxes(frame.labels),
        [lab.type for lab in frame.labels],
        targets_cfg.label_method,
        targets_cfg.expend_factor,
        targets_cfg.encoding,
    )
    return {
        "frame_id": np.asarray(frame.frame_id),
        "features": features.astype(np.float32),
        **graph,
        "cls_labels": cls_labels,
        "box_targets": box_targets,
        "valid_box": valid,
    }


GRAPH_MODULES = (
    "pgnn.pipeline.steps",
    "pgnn.graphs.build",
    "pgnn.graphs.targets",
    "pgnn.graphs.encoding",
    "pgnn.graphs.features",
    "pgnn.core.boxes",
    "pgnn.graphs.cache",
)


def _build_graph_shard(
    task: Any, path: Path, *, prepared: dict[str, str], graph_cfg: Any, targets_cfg: Any, seed: int
) -> None:
    from pgnn.data.prepare import read_prepared_shard
    from pgnn.graphs.cache import write_graph_shard

    wanted = set(task.frames)
    frames = []
    for shard in sorted(set(prepared[f] for f in task.frames)):
        frames += [f for f in read_prepared_shard(shard) if f.frame_id in wanted]
    order = {fid: i for i, fid in enumerate(task.frames)}
    frames.sort(key=lambda f: order[f.frame_id])
    write_graph_shard(path, [graph_record(f, graph_cfg, targets_cfg, seed) for f in frames])


def graphs_step(
    recipe: Any, which: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int, workers: int
) -> dict[str, Any]:
    """Graphs + targets of one split (training graph for "train", runtime graph otherwise) into npz shards."""
    from pgnn.core.shards import run_plan

    return run_plan(graphs_plan(recipe, which, prepared_dir, out_dir, frames_per_shard), workers=workers)


def graphs_plan(recipe: Any, which: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int) -> Any:
    """The shard plan of the graphs step of one split.

    Shard keys hash the prepared shards' bytes, the graph/targets params and the code version, so a changed
    training param never rebuilds graphs, and a killed run resumes (pgnn/core/shards.py).
    """
    from functools import partial

    from pgnn.core.io import sha256_file
    from pgnn.core.shards import ShardPlan, ShardTask, chunk_ids, code_version, read_manifest, stable_hash

    manifest = read_manifest(prepared_dir)
    if manifest is None:
        from pgnn.core.errors import DataError

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
    code = code_version(GRAPH_MODULES)
    tasks = []
    for i, ids in enumerate(chunk_ids(sorted(prepared), frames_per_shard)):
        inputs = sorted({shard_sha[prepared[f]] for f in ids})
        for p in {prepared[f] for f in ids}:
            if sha256_file(p) != shard_sha[p]:
                from pgnn.core.errors import DataError

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
    return ShardPlan(Path(out_dir), tuple(tasks), build, "graphs", params, code)


# ----------------------------------------------------------------------------------------------- gt_db


def _prepared_frames(prepared_dir: Path) -> Any:
    """The frames of a prepared split, one shard in memory at a time."""
    from pgnn.core.errors import DataError
    from pgnn.core.shards import read_manifest
    from pgnn.data.prepare import read_prepared_shard

    manifest = read_manifest(prepared_dir)
    if manifest is None:
        raise DataError(prepared_dir / "manifest.json", "expected a prepared split (run the prepare stage)")
    for entry in manifest["shards"]:
        yield from read_prepared_shard(prepared_dir / entry["file"])


def gt_db_step(
    prepared_dir: Path, out_path: Path, *, min_points: int = 10, box_scale: float = 1.1
) -> dict[str, int]:
    """The ground-truth database of a prepared split (every labelled object with more than ``min_points``
    points in its box scaled by ``box_scale``, the original's 10 and 1.1), written atomically to ``out_path``.
    Returns the number of crops per class."""
    from collections import Counter

    from pgnn.data.gt_db import build_gt_db, write_gt_db

    table = build_gt_db(_prepared_frames(prepared_dir), min_points=min_points, box_scale=box_scale)
    write_gt_db(out_path, table)
    counts = dict(sorted(Counter(table.column("name").to_pylist()).items()))
    print(f"gt_db: {table.num_rows} object crops {counts} -> {out_path}")
    return counts


# ----------------------------------------------------------------------------------------------- train


def train_augments(recipe: Any) -> bool:
    """Whether training rebuilds its samples every epoch (augmentation steps or ground-truth sampling) instead
    of reading the cached graphs."""
    return bool(recipe.augment.steps) or recipe.gt_sampling is not None


def train_records(
    recipe: Any, graphs_dir: Path, prepared_dir: Path | None = None, gt_db_path: Path | None = None
) -> Any:
    """The training record source: the graph cache, or, when the recipe augments, samples rebuilt on the fly
    from the prepared frames (and the ground-truth database) by
    :class:`pgnn.training.dataset.AugmentedRecords`,
    seeded by ``train.seed``."""
    from pgnn.graphs.cache import GraphCache

    if not train_augments(recipe):
        return GraphCache(graphs_dir)
    from pgnn.training.dataset import AugmentedRecords

    if prepared_dir is None or (recipe.gt_sampling is not None and gt_db_path is None):
        raise ValueError(
            "training with augmentation or gt_sampling needs prepared_dir (data/prepared/train) and, for "
            "gt_sampling, gt_db_path (data/gt_db/gt_db.parquet)"
        )
    return AugmentedRecords(
        prepared_dir,
        recipe.graph,
        recipe.targets,
        recipe.augment,
        seed=recipe.train.seed,
        gt_sampling=recipe.gt_sampling,
        gt_db=gt_db_path if recipe.gt_sampling is not None else None,
    )


def train_run_key(
    recipe: Any,
    graphs_dir: Path,
    meta: dict[str, Any],
    prepared_dir: Path | None = None,
    gt_db_path: Path | None = None,
) -> str:
    """What a training run's result depends on: model, loss, data and the train settings that change it.

    Checkpoints live under ``<ckpt_root>/<key>/``: a killed run with the same key resumes, a changed param
    starts a fresh run (instead of resuming someone else's checkpoints). When the recipe augments, the data
    are the prepared frames, the database's bytes (with gt_sampling), the graph and targets settings and the
    augmentation and sampling configs; otherwise the cached graphs' shard keys (which hold the graph and
    targets settings).
    """
    from pgnn.config.training import RESUMABLE_CHANGES
    from pgnn.core.shards import read_manifest, stable_hash

    manifest = read_manifest(graphs_dir) or {}
    train = {k: v for k, v in recipe.train.model_dump(mode="json").items() if k not in RESUMABLE_CHANGES}
    data: Any = [e.get("key") for e in manifest.get("shards", [])]
    if train_augments(recipe):
        from pgnn.core.io import sha256_file

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
        }
    )[:16]


def train_step(
    recipe: Any,
    graphs_dir: Path,
    ckpt_root: Path,
    model_path: Path,
    live_dir: Path,
    metrics_path: Path,
    *,
    prepared_dir: Path | None = None,
    gt_db_path: Path | None = None,
) -> Path:
    """Train (resuming a killed run of the same params); export the model.

    The samples are the cached training graphs or, when the recipe augments (``augment.steps`` or
    ``gt_sampling``), rebuilt every epoch from ``prepared_dir`` (and ``gt_db_path``): :func:`train_records`.
    """
    import json

    import torch

    from pgnn.nn.checkpoint import export_model, latest_checkpoint
    from pgnn.training.loop import train

    torch.set_num_threads(int(os.environ.get("PGNN_TORCH_THREADS", "1")))
    records = train_records(recipe, graphs_dir, prepared_dir, gt_db_path)
    meta = {
        "input_frame": "rect",
        "graph_preset": recipe.runtime_graph_name,
        "encoding": recipe.targets.encoding,
        "label_method": recipe.targets.label_method,
        "input_features": recipe.targets.input_features,
        "runtime_graph": recipe.runtime_graph.model_dump(mode="json"),
        "postprocess": recipe.postprocess.model_dump(mode="json"),
    }
    key = train_run_key(recipe, graphs_dir, meta, prepared_dir, gt_db_path)
    ckpt_dir = ckpt_root / key
    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 touches files
    if main_rank and ckpt_root.exists():
        for old in ckpt_root.iterdir():
            if old.name != key:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
    if main_rank and latest_checkpoint(ckpt_dir) is None and live_dir.exists():
        shutil.rmtree(live_dir)  # a fresh run: no stale curves from another run's params
    source = "augmented on the fly" if train_augments(recipe) else "cached graphs"
    print(f"train: run {key} ({len(records)} frames, {source}), checkpoints in {ckpt_dir}")
    final = train(records, recipe.model, recipe.train, recipe.loss, ckpt_dir, live_dir=live_dir, meta=meta)
    if not main_rank:
        return model_path
    export_model(final, model_path)
    summary = live_dir / "metrics.json"
    write_json_atomic(metrics_path, json.loads(summary.read_text()) if summary.exists() else {})
    return model_path


# --------------------------------------------------------------------------------------------- predict


def predict_step(
    recipe: Any, model_path: Path, graphs_dir: Path, prepared_dir: Path, out_dir: Path, timings_path: Path
) -> dict[str, float]:
    """Detect objects on the cached runtime graphs of a split; write KITTI result files and stage timings."""
    import torch

    from pgnn.data.prepare import read_prepared_dir
    from pgnn.graphs.cache import GraphCache
    from pgnn.inference.predict import GraphFrame, predict_records, resolve_device
    from pgnn.nn.checkpoint import load_model

    torch.set_num_threads(int(os.environ.get("PGNN_TORCH_THREADS", "1")))
    device = resolve_device("auto")
    model, meta = load_model(model_path, device)
    frames = {f.frame_id: f for f in read_prepared_dir(prepared_dir)}
    cache = GraphCache(graphs_dir)

    def records() -> Any:
        for i, frame_id in enumerate(cache.frame_ids):
            f = frames[frame_id]
            yield GraphFrame(frame_id, cache[i], f.calib.P2, f.image_size)

    if out_dir.exists():
        shutil.rmtree(out_dir)
    summary = predict_records(model, meta, records(), out_dir, post_cfg=recipe.postprocess, device=device)
    timings = {f"ms_{k}": round(v, 3) for k, v in summary.mean_ms().items()}
    timings["frames"] = summary.num_frames
    timings["detections"] = int(sum(summary.num_detections))
    write_json_atomic(timings_path, timings)
    print(f"predict: {summary.num_frames} frames, {timings['detections']} detections; mean ms {timings}")
    return timings
