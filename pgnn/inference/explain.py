"""One frame's prediction with what led to it: the graph, the candidate boxes and the box-merge clusters.

``predict_frame`` returns only the detections; a picture of how they came about also wants the graph the
network ran on and, for every candidate (a keypoint whose class probability passed the threshold), the
detection its box merged into. NMS (``pgnn.inference.postprocess``) walks the candidates by decreasing score;
a candidate is removed by the first surviving box of its class, earlier in that order, whose 3D IoU with it
is above the overlap threshold (tested before the survivor is merged). :func:`merge_clusters` re-applies that
rule to the survivors NMS reports, so each candidate gets exactly the survivor that took it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pgnn.config.graphs import GraphConfig
from pgnn.config.inference import PostprocessConfig
from pgnn.core.boxes import iou_3d
from pgnn.data.frames import Frame
from pgnn.inference.postprocess import (
    NMS_FUNCTIONS,
    Candidates,
    Detections,
    postprocess_frame,
    select_candidates,
)
from pgnn.inference.predict import decode_boxes, frame_graph, run_network
from pgnn.inference.settings import frame_offset
from pgnn.nn.card import ModelCard

if TYPE_CHECKING:
    import torch

    from pgnn.nn.model import PointGNN


@dataclass(frozen=True)
class Explained:
    """A frame's detections and what they came from, all in KITTI's label frame.

    Shapes:
        graph: ``pgnn.graphs.build.build_graph``'s arrays, ``vertex_coord_i`` moved to the label frame
        candidate_keypoints: (K, 3) the keypoint of each candidate; cluster: (K,) the detection row it
        merged into, -1 for a box NMS kept that the truncation filter then dropped
    """

    detections: Detections
    graph: Mapping[str, np.ndarray]
    candidates: Candidates
    candidate_keypoints: np.ndarray
    cluster: np.ndarray


def merge_clusters(
    cand: Candidates, survivors: np.ndarray, detections: Detections, threshold: float
) -> np.ndarray:
    """The detection row each candidate merged into (-1: its survivor is not among ``detections``).

    ``survivors`` are the candidate rows NMS kept (``NmsResult.index``); a survivor is its own cluster's
    first member. A candidate that overlaps no survivor cannot occur (it would have survived itself).

    Shapes:
        survivors: (S,) rows of ``cand``; return: (K,) int64
    """
    order = np.argsort(-cand.scores, kind="stable")  # (K,) the NMS walk
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))  # (K,)
    survivors = survivors[np.argsort(rank[survivors], kind="stable")]  # (S,) in walk order
    row_of_flat = {int(f): i for i, f in enumerate(detections.flat_index)}
    cluster = np.full(len(order), -1, dtype=np.int64)
    owner = np.full(len(order), -1, dtype=np.int64)  # (K,) the survivor that took each candidate
    overlap = iou_3d(cand.boxes[survivors], cand.boxes) > threshold  # (S, K)
    for s_i, s in enumerate(survivors):
        free = (owner < 0) & (rank >= rank[s]) & (cand.labels == cand.labels[s]) & overlap[s_i]  # (K,)
        free[s] = True
        owner[free & (owner < 0)] = s
    known = owner >= 0
    cluster[known] = [row_of_flat.get(int(cand.flat_index[o]), -1) for o in owner[known]]
    return cluster


def explain_frame(
    model: PointGNN,
    card: ModelCard,
    frame: Frame,
    graph_cfg: GraphConfig,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    rng: np.random.Generator,
) -> Explained:
    """``predict_frame``'s detections (the same calls), with the graph, candidates and merge clusters."""
    graph = frame_graph(frame, card, graph_cfg, rng)
    probs, encodings = run_network(model, graph, device, f"frame {frame.frame_id}")  # (N1, C), (N1, C, L)
    offset = frame_offset(card.input_frame, frame.calib.P2)  # (3,)
    boxes, keypoints = decode_boxes(
        encodings,
        np.asarray(graph["vertex_coord_1"]),
        post_cfg.class_names,
        card.encoding,
        offset,
    )  # (N1, C, 7), (N1, 3)
    detections = postprocess_frame(probs, boxes, keypoints, frame.calib.P2, frame.image_size, post_cfg)
    cand = select_candidates(probs, boxes, post_cfg)
    kept = NMS_FUNCTIONS[post_cfg.nms](
        cand.boxes,
        cand.scores,
        cand.labels,
        post_cfg.overlap_threshold,
        circular_yaw=post_cfg.yaw_merge == "circular",
    )
    label_frame = {
        k: (np.asarray(v, dtype=np.float64) - offset) if k.startswith("vertex_coord_") else v
        for k, v in graph.items()
    }
    return Explained(
        detections=detections,
        graph=label_frame,
        candidates=cand,
        candidate_keypoints=keypoints[cand.point_index],
        cluster=merge_clusters(cand, kept.index, detections, post_cfg.overlap_threshold),
    )
