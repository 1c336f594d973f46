"""``pgnn predict --checkpoint model.onnx``: the backend follows the file, end to end on a real frame.

Exports the authors' T1 weights (the shared ``t1_checkpoint`` fixture) with ``pgnn export`` and runs
``pgnn predict`` on KITTI frame 000114's raw scan (the shared KITTI sample: CC BY-NC-SA 3.0, non-commercial
use) through ONNX Runtime, with no other flag than the file. Its result file is compared with the boxes the
original TF code wrote for that frame, as ``tests/inference/test_predict.py`` does for the eager model.
(The outputs' equality with eager PyTorch on all 7 reference frames: ``tests/nn/test_export.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli

from pgnn.core.boxes import iou_bev
from pgnn.data.frames import points_cam2_to_rect
from pgnn.data.kitti import read_calib
from pgnn.data.labels import labels_to_boxes, read_labels
from pgnn.inference.backends import OnnxNetwork, load_detector
from pgnn.nn.model import PointGNN

FRAME = "000114"


def test_predict_runs_an_onnx_model_end_to_end(
    tmp_path: Path, kitti_sample: Path, pointgnn_reference: Path, t1_checkpoint: Path
) -> None:
    threads = torch.get_num_threads()
    ckpt, model = t1_checkpoint, tmp_path / "model.onnx"
    rc, printed = cli(["export", str(ckpt), str(model)])
    assert rc == 0 and json.loads(printed)["format"] == "onnx"
    training = kitti_sample / "training"
    try:
        rc, table = cli(
            [
                "predict",
                "--bin",
                str(training / "velodyne" / f"{FRAME}.bin"),
                "--calib",
                str(training / "calib" / f"{FRAME}.txt"),
                "--checkpoint",
                str(model),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
                "--threads",
                "1",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0 and "1 frame" in table
    ours = read_labels(tmp_path / "out" / f"{FRAME}.txt", allow_score=True)
    ref = np.load(pointgnn_reference / "T1" / f"{FRAME}.npz")
    ref_boxes = ref["det_box3d"].astype(np.float64).reshape(-1, 7).copy()  # (M, 7) camera 2's frame
    ref_boxes[:, :3] = points_cam2_to_rect(
        ref_boxes[:, :3], read_calib(training / "calib" / f"{FRAME}.txt").P2
    )
    ref_scores = ref["det_score"].astype(np.float64)
    assert abs(len(ours) - len(ref_boxes)) <= 1 and len(ours) > 0
    iou = iou_bev(ref_boxes, labels_to_boxes(ours))  # (M_ref, M_ours)
    assert iou.max(axis=1).min() >= 0.9
    top = int(np.argmax(ref_scores))
    assert ours[int(iou[top].argmax())].score == pytest.approx(ref_scores[top], rel=1e-3)

    onnx = load_detector(model)  # the same file through the API: ONNX Runtime, T1's card
    assert isinstance(onnx.network, OnnxNetwork) and onnx.card.input_frame == "cam2"
    eager = load_detector(ckpt)
    assert isinstance(eager.network, PointGNN) and eager.step == onnx.step
    assert eager.card == onnx.card
