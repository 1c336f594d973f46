"""Tests of what a prediction came from (pgnn.inference.predict.Prediction): the box-merge clusters of NMS's
walk, the graph and the candidates, beside the detections.

The frame test reads ../shared/data/kitti_sample: KITTI data, CC BY-NC-SA 3.0 (non-commercial; Geiger et al.,
CVPR 2012).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from helpers import TINY_MODEL

from pgnn.core.boxes import iou_3d
from pgnn.data.frames import load_frame
from pgnn.inference.postprocess import Candidates, merge_clusters, nms_boxes_3d
from pgnn.inference.predict import frame_graph, predict_frame, predict_graph
from pgnn.nn.card import card_of
from pgnn.nn.checkpoint import make_checkpoint
from pgnn.nn.model import PointGNN


def _candidates(boxes: list[list[float]], scores: list[float], labels: list[int]) -> Candidates:
    n = len(boxes)
    return Candidates(
        boxes=np.array(boxes, dtype=np.float64),
        scores=np.array(scores, dtype=np.float64),
        labels=np.array(labels, dtype=np.int64),
        flat_index=np.arange(n, dtype=np.int64) * 4 + 1,
        point_index=np.arange(n, dtype=np.int64),
    )


def _greedy_owner(cand: Candidates, threshold: float) -> np.ndarray:
    """Reference: the candidate row that removed (or is) each candidate, by the NMS walk itself."""
    order = np.argsort(-cand.scores, kind="stable")
    owner = np.full(len(order), -1)
    for i in order:
        if owner[i] >= 0:
            continue
        owner[i] = i
        for j in order:
            iou = iou_3d(cand.boxes[i : i + 1], cand.boxes[j : j + 1])[0, 0]
            if owner[j] < 0 and cand.labels[j] == cand.labels[i] and iou > threshold:
                owner[j] = i
    return owner


def test_merge_clusters_follow_the_nms_walk() -> None:
    car = [1.7, 4.0, 1.5, 1.8, 0.0]
    cand = _candidates(
        [
            [0.0, car[0], 10.0, *car[1:]],  # 0: survivor A
            [0.5, car[0], 10.2, *car[1:]],  # 1: in A's cluster
            [20.0, car[0], 30.0, *car[1:]],  # 2: survivor B, dropped later (truncation)
            [3.5, car[0], 10.0, *car[1:]],  # 3: overlaps A a little (3D IoU 0.07): in its cluster
            [0.3, car[0], 10.1, *car[1:]],  # 4: A's box, but another class: its own survivor C
        ],
        scores=[0.9, 0.8, 0.7, 0.6, 0.5],
        labels=[1, 1, 1, 1, 2],
    )
    kept = nms_boxes_3d(cand.boxes, cand.scores, cand.labels, 0.01, variant="merge_score")
    assert sorted(kept.index.tolist()) == [0, 2, 4]
    cluster = merge_clusters(kept.owner, np.array([4, 0]))  # detections: C first, then A; B dropped
    np.testing.assert_array_equal(cluster, [1, 1, -1, 1, 0])
    owner = _greedy_owner(cand, 0.01)
    np.testing.assert_array_equal(owner, [0, 0, 2, 0, 4])
    np.testing.assert_array_equal(kept.owner, owner)


def test_predicted_frame_has_the_graphs_detections_and_their_clusters(kitti_sample: Path) -> None:
    model = PointGNN(TINY_MODEL, generator=torch.Generator().manual_seed(0)).eval()
    meta = make_checkpoint(
        model,
        input_frame="cam2",  # exercises the frame offset
        graph_preset="ped_cyc",
        encoding="classaware_all_class_box_encoding",
        label_method="Car",
        input_features="i",
        step=0,
    )
    card = card_of(meta)
    frame = load_frame(kitti_sample, "000008")
    graph_cfg = card.runtime_graph
    post_cfg = card.postprocess
    graph = frame_graph(frame, card, graph_cfg, np.random.default_rng(5))
    P2, size = frame.calib.P2, frame.image_size
    want = predict_graph(model, card, graph, P2, size, post_cfg, "cpu", graph_frame="cam2").detections
    got = predict_frame(model, card, frame, graph_cfg, post_cfg, "cpu", np.random.default_rng(5))
    assert len(want) > 0
    np.testing.assert_array_equal(got.detections.boxes, want.boxes)
    np.testing.assert_array_equal(got.detections.scores, want.scores)
    np.testing.assert_allclose(got.graph["vertex_coord_0"], frame.points_rect, atol=1e-5)  # label frame again
    cand = got.candidates
    owner = _greedy_owner(cand, post_cfg.overlap_threshold)
    row_of_flat = {int(f): i for i, f in enumerate(want.flat_index)}
    expected = [row_of_flat.get(int(cand.flat_index[o]), -1) for o in owner]
    np.testing.assert_array_equal(got.cluster, expected)
    assert set(range(len(want))) <= set(got.cluster.tolist())  # every detection has its cluster
    assert got.candidate_keypoints.shape == (len(cand.scores), 3)
