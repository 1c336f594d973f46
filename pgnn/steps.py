"""One function per pipeline step. DVC stages (``stages/``) and Prefect flows (``flows/``) both call these,
so neither holds logic of its own. Each step takes the sub-configs it needs and explicit paths.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pgnn.config import DataConfig, EvalConfig, SyntheticConfig
from pgnn.io import atomic_path, write_json_atomic


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
    """The shard plan of the prepare step of one split (see :class:`pgnn.shards.ShardPlan`)."""
    from pgnn.data.kitti import frame_ids
    from pgnn.prepare import prepare_plan as plan

    root = root_dir / data.root
    ids = frame_ids(root, split_name(data, which), painted=data.painted)
    return plan(root, ids, out_dir, painted=data.painted, frames_per_shard=data.frames_per_shard)


def prepare_step(data: DataConfig, which: str, out_dir: Path, root_dir: Path = Path(".")) -> dict[str, Any]:
    """FOV crop + features + labels of one split into parquet shards."""
    from pgnn.shards import run_plan

    return run_plan(prepare_plan(data, which, out_dir, root_dir), workers=data.workers)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` via a temp file (never writing into an existing, maybe DVC-linked, file)."""
    with atomic_path(dest, suffix=dest.suffix) as tmp:
        shutil.copyfile(src, tmp)


def evaluate_step(
    cfg: EvalConfig, prepared_dir: Path, pred_dir: Path, metrics_path: Path, curves_dir: Path
) -> dict:
    """Official KITTI AP of the prediction folder against the labels of the prepared split."""
    from pgnn.data.kitti import read_labels
    from pgnn.eval.kitti import ap_from_curves, pr_curves
    from pgnn.eval.report import format_table, write_curves
    from pgnn.prepare import read_prepared_dir

    frames = read_prepared_dir(prepared_dir)
    gt = [f.labels for f in frames]
    dt = []
    for f in frames:
        path = pred_dir / f"{f.frame_id}.txt"
        dt.append(read_labels(path, allow_score=True) if path.exists() else [])
    curves = pr_curves(gt, dt, cfg.classes)
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
    """One frame's cached record: its graph, input features, and vertex targets (see pgnn/cache.py).

    Shapes: features (N0, F) float32; vertex_coord_i (N_i, 3); edges_i (E_i, 2); cls_labels (N_L,) int64;
    box_targets (N_L, 7) float32; valid_box (N_L,) bool, with L the last level.
    """
    from pgnn.data.kitti import labels_to_boxes
    from pgnn.features import FEATURES
    from pgnn.graph import build_graph
    from pgnn.targets import assign_targets

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
    "pgnn.steps",
    "pgnn.graph",
    "pgnn.targets",
    "pgnn.encoding",
    "pgnn.features",
    "pgnn.boxes",
    "pgnn.cache",
)


def _build_graph_shard(
    task: Any, path: Path, *, prepared: dict[str, str], graph_cfg: Any, targets_cfg: Any, seed: int
) -> None:
    from pgnn.cache import write_graph_shard
    from pgnn.prepare import read_prepared_shard

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
    from pgnn.shards import run_plan

    return run_plan(graphs_plan(recipe, which, prepared_dir, out_dir, frames_per_shard), workers=workers)


def graphs_plan(recipe: Any, which: str, prepared_dir: Path, out_dir: Path, frames_per_shard: int) -> Any:
    """The shard plan of the graphs step of one split.

    Shard keys hash the prepared shards' bytes, the graph/targets params and the code version, so a changed
    training param never rebuilds graphs, and a killed run resumes (pgnn/shards.py).
    """
    from functools import partial

    from pgnn.io import sha256_file
    from pgnn.shards import ShardPlan, ShardTask, chunk_ids, code_version, read_manifest, stable_hash

    manifest = read_manifest(prepared_dir)
    if manifest is None:
        from pgnn.errors import DataError

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
                from pgnn.errors import DataError

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


# ----------------------------------------------------------------------------------------------- train


def train_step(
    recipe: Any, graphs_dir: Path, ckpt_dir: Path, model_path: Path, live_dir: Path, metrics_path: Path
) -> Path:
    """Train on the cached training graphs (resuming from ``ckpt_dir``); export the final model."""
    import json

    from pgnn.cache import GraphCache
    from pgnn.train import train

    records = GraphCache(graphs_dir)
    meta = {
        "input_frame": "rect",
        "graph_preset": recipe.runtime_graph_name,
        "encoding": recipe.targets.encoding,
        "label_method": recipe.targets.label_method,
        "input_features": recipe.targets.input_features,
        "runtime_graph": recipe.runtime_graph.model_dump(mode="json"),
        "postprocess": recipe.postprocess.model_dump(mode="json"),
    }
    final = train(records, recipe.model, recipe.train, recipe.loss, ckpt_dir, live_dir=live_dir, meta=meta)
    copy_atomic(final, model_path)
    summary = live_dir / "metrics.json"
    write_json_atomic(metrics_path, json.loads(summary.read_text()) if summary.exists() else {})
    return model_path
