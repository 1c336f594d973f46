"""A train-step reference case (``pointgnn_reference/train_step/case_*.npz``): its arrays, its batch as pgnn's
``TrainBatch``, and weights between TF's layout (slim ``[in, out]``) and pgnn's; used by
:mod:`pgnn.training.check_step`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from pgnn.core.errors import DataError
from pgnn.nn.graph_input import GraphInput, graph_input_from_arrays
from pgnn.nn.model import PointGNN
from pgnn.training.batches import TrainBatch


def load_case(path: str | Path) -> dict[str, np.ndarray]:
    """All arrays of a case npz (``allow_pickle=False``); ``DataError`` when it cannot be read."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except FileNotFoundError as e:
        raise DataError(path, "expected a train-step reference case (npz), got no such file") from e
    except (OSError, ValueError) as e:
        raise DataError(path, f"expected a train-step reference case (npz), got {e}") from e


def need(arrays: Mapping[str, np.ndarray], key: str, source: Path, what: str = "") -> np.ndarray:
    if key not in arrays:
        raise DataError(source, f"expected an array {key!r}{what}, got none")
    return arrays[key]


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    """||a - ref|| / ||ref|| in float64 (the absolute ||a - ref|| when ref is all zeros)."""
    a64, r64 = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a64.shape != r64.shape:
        raise ValueError(f"shape {a64.shape} vs reference {r64.shape}")
    diff = float(np.linalg.norm(a64 - r64))
    scale = float(np.linalg.norm(r64))
    return diff / scale if scale > 0 else diff


# ----------------------------------------------------------------------------------------------------------
# Inputs and weights
# ----------------------------------------------------------------------------------------------------------


def case_batch(arrays: Mapping[str, np.ndarray], source: Path) -> TrainBatch:
    """The saved batch as pgnn's ``TrainBatch``: the merged graph (frames from ``batch/num_vertices``) and
    the targets of its keypoints (``input/class_labels`` (N1, 1), ``input/encoded_gt_boxes`` (N1, 1, 7),
    ``input/valid_gt_boxes`` (N1, 1, 1))."""
    graph_arrays = {"input_features": need(arrays, "input/initial_vertex_features", source)}
    level = 0
    while f"input/vertex_coord_list_{level}" in arrays:
        graph_arrays[f"vertex_coord_{level}"] = arrays[f"input/vertex_coord_list_{level}"]
        level += 1
    for i in range(level - 1):
        graph_arrays[f"keypoint_indices_{i}"] = need(arrays, f"input/keypoint_indices_list_{i}", source)
        graph_arrays[f"edges_{i}"] = need(arrays, f"input/edges_list_{i}", source)
    g = graph_input_from_arrays(graph_arrays, source=str(source))
    n1 = g.vertex_coord[1].shape[0]
    if "batch/num_vertices" in arrays:
        per_frame = np.asarray(arrays["batch/num_vertices"])[:, 1]  # (B,) level-1 vertices of each frame
        if int(per_frame.sum()) != n1:
            raise DataError(source, f"expected batch/num_vertices[:, 1] to add up to {n1}, got {per_frame}")
        frames = torch.repeat_interleave(
            torch.arange(len(per_frame)), torch.from_numpy(per_frame.astype(np.int64))
        )
        g = GraphInput(g.features, g.vertex_coord, g.keypoint_indices, g.edges, frames, len(per_frame))
    labels = np.asarray(need(arrays, "input/class_labels", source)).reshape(-1)
    boxes = np.asarray(need(arrays, "input/encoded_gt_boxes", source))
    valid = np.asarray(need(arrays, "input/valid_gt_boxes", source)).reshape(-1)
    if labels.shape != (n1,) or valid.shape != (n1,) or boxes.shape[0] != n1:
        raise DataError(
            source,
            f"expected targets for the {n1} keypoints, got class_labels {labels.shape}, encoded_gt_boxes "
            f"{boxes.shape}, valid_gt_boxes {valid.shape}",
        )
    return TrainBatch(
        graph=g,
        cls_labels=torch.from_numpy(labels.astype(np.int64)),
        box_targets=torch.from_numpy(np.ascontiguousarray(boxes.reshape(n1, -1), dtype=np.float32)),
        valid=torch.from_numpy(valid > 0),
        indices=(0,),
    )


def xavier_init_from_formula(shapes: Mapping[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    """The T3 supplement's initial weights: ``RandomState(seed)``, for each variable in order a weight
    ``uniform(-l, l, shape)`` with ``l = sqrt(6 / (fan_in + fan_out))`` (float32), a bias zeros (no draw).

    Shapes: shapes[var] is TF's ([in, out] for weights) -> the same shapes
    """
    rs = np.random.RandomState(seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("/weights"):
            limit = math.sqrt(6.0 / (shape[0] + shape[1]))
            out[name] = rs.uniform(-limit, limit, size=shape).astype(np.float32)
        else:
            out[name] = np.zeros(shape, np.float32)
    return out


def tf_shapes(model: PointGNN, names: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    params = dict(model.named_parameters())
    return {
        tf: tuple(reversed(params[key].shape)) if tf.endswith("/weights") else tuple(params[key].shape)
        for tf, key in names.items()
    }


def as_tf(t: torch.Tensor, tf_name: str) -> np.ndarray:
    a = t.detach().cpu().numpy()
    return a.T if tf_name.endswith("/weights") else a


def load_tf_weights(model: PointGNN, names: Mapping[str, str], weights: Mapping[str, np.ndarray]) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for tf, key in names.items():
            a = weights[tf].T if tf.endswith("/weights") else weights[tf]
            params[key].copy_(torch.from_numpy(np.ascontiguousarray(a)))
