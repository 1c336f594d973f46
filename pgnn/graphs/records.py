"""One frame's training/prediction record: its graph, input features and vertex targets, and the seeding of
every per-frame random choice.

This is the only record builder: the graph cache (``graphs`` stage), the samples rebuilt every epoch
(:class:`pgnn.training.dataset.AugmentedRecords`) and prediction on raw frames all call :func:`scene_record`
(or :func:`graph_with_features` when there are no labels to assign), and every per-frame generator comes
from :func:`frame_rng`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from pgnn.config.graphs import GraphConfig, TargetsConfig
from pgnn.data.frames import Frame
from pgnn.data.labels import labels_to_boxes
from pgnn.graphs.build import build_graph
from pgnn.graphs.features import input_features
from pgnn.graphs.targets import assign_targets

# A stream word that keeps the augmentation generators apart from the cached graphs' ("aug").
AUGMENT_STREAM = 0x617567


def frame_words(frame_id: str) -> list[int]:
    """A frame id as seed words, different for different ids.

    KITTI's ids (six digits) give ``[number]``; any other id gives the two 32-bit halves of 64 bits of its
    sha256 and a marker ``1`` (three words, so no other id can give the words of a KITTI id: "1" and "01"
    differ from "000001" and from each other, and "ab" from "ba").
    """
    if len(frame_id) == 6 and frame_id.isdigit():
        return [int(frame_id)]
    h = int.from_bytes(hashlib.sha256(frame_id.encode()).digest()[:8], "little")
    return [h & 0xFFFFFFFF, h >> 32, 1]


def frame_rng(seed: int, frame_id: str, *stream: int) -> np.random.Generator:
    """The generator of one frame's random choices: a pure function of (seed, stream words, frame id), so it
    does not depend on shard order, worker or restart. ``stream`` separates uses (e.g. ``AUGMENT_STREAM,
    epoch``); none is the cached training graph's stream."""
    if any(w < 0 for w in stream):
        raise ValueError(f"stream words must be >= 0, got {stream}")
    return np.random.default_rng([seed, *stream, *frame_words(frame_id)])


def graph_with_features(
    points: np.ndarray,
    intensity: np.ndarray,
    rgb: np.ndarray,
    scores: np.ndarray | None,
    graph_cfg: GraphConfig,
    features: str,
    rng: np.random.Generator,
    source: str,
) -> dict[str, np.ndarray]:
    """The multi-level graph of ``points`` and their input features.

    Shapes:
        points: (N0, 3); intensity (N0,); rgb (N0, 3); scores (N0, 4) or None -> features (N0, F) float32,
        vertex_coord_i (N_i, 3), keypoint_indices_i (N_{i+1}, 1), edges_i (E_i, 2)
    """
    graph = build_graph(points, graph_cfg, rng)
    feats = input_features(features, intensity, rgb, scores, source=source)
    return {"features": feats.astype(np.float32), **graph}


def scene_record(
    frame_id: str,
    points: np.ndarray,
    intensity: np.ndarray,
    rgb: np.ndarray,
    scores: np.ndarray | None,
    boxes: np.ndarray,
    names: Sequence[str],
    graph_cfg: GraphConfig,
    targets_cfg: TargetsConfig,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """A record of a labelled scene: its graph, input features, and the targets of the last level's vertices.

    Shapes:
        points: (N0, 3) rect frame; boxes: (M, 7); names: M -> frame_id (), features (N0, F) float32,
        vertex_coord_i (N_i, 3), keypoint_indices_i, edges_i (E_i, 2), cls_labels (N_L,) int64,
        box_targets (N_L, 7) float32, valid_box (N_L,) bool, with L the last level
    """
    graph = graph_with_features(
        points, intensity, rgb, scores, graph_cfg, targets_cfg.input_features, rng, f"frame {frame_id}"
    )
    last = len(graph_cfg.levels)
    cls_labels, box_targets, valid = assign_targets(
        graph[f"vertex_coord_{last}"],
        np.asarray(boxes, np.float64).reshape(-1, 7),
        list(names),
        targets_cfg.label_method,
        targets_cfg.expend_factor,
        targets_cfg.encoding,
    )
    return {
        "frame_id": np.asarray(frame_id),
        **graph,
        "cls_labels": cls_labels,
        "box_targets": box_targets,
        "valid_box": valid,
    }


def graph_record(
    frame: Frame, graph_cfg: GraphConfig, targets_cfg: TargetsConfig, seed: int
) -> dict[str, Any]:
    """The cached record of a prepared frame (no augmentation), drawn from :func:`frame_rng`\\ (seed, id)."""
    return scene_record(
        frame.frame_id,
        frame.points_rect,
        frame.intensity,
        frame.rgb,
        frame.scores,
        labels_to_boxes(frame.labels),
        [lab.type for lab in frame.labels],
        graph_cfg,
        targets_cfg,
        frame_rng(seed, frame.frame_id),
    )
