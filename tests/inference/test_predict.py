"""Tests of pgnn.inference.predict, settings and run and ``pgnn predict``.

The end-to-end tests read the session fixture ``t1_predictions`` (tests/conftest.py): ``pgnn predict`` with
the authors' T1 weights on the raw velodyne scans of the 7 reference frames (000000-000005 through ``--root``;
000114 through ``--bin``, without its image). They compare the written result files with the boxes the
original TF code wrote. The T1 network on a runtime graph takes seconds a frame, so that run is shared with
tests/commands/test_detect.py. Everything else uses small synthetic graphs and a randomly initialised small
model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import BIN_FRAME, REFERENCE_FRAMES
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig
from pgnn.config.inference import PostprocessConfig
from pgnn.config.network import MODEL_PRESETS
from pgnn.core.boxes import alpha_from_box, boxes_to_image_2d, iou_bev
from pgnn.core.errors import DataError
from pgnn.data.frames import (
    DEFAULT_IMAGE_SIZE,
    frame_from_scan,
    load_frame,
    points_cam2_to_rect,
    points_rect_to_cam2,
    rect_to_cam2_offset,
)
from pgnn.data.kitti import read_calib, read_velodyne
from pgnn.data.labels import labels_to_boxes, read_labels
from pgnn.graphs.build import build_graph
from pgnn.inference.postprocess import Detections
from pgnn.inference.predict import predict_graph
from pgnn.inference.results import (
    TIMING_KEYS,
    GraphFrame,
    PredictSummary,
    detections_to_labels,
    predict_records,
    write_detections,
    write_pictures,
)
from pgnn.inference.settings import runtime_graph
from pgnn.nn.card import ModelCard, card_of
from pgnn.nn.model import PointGNN
from pgnn.viz.render import project_box_edges


def _reference_boxes_rect(
    pointgnn_reference: Path, kitti_sample: Path, frame_id: str
) -> tuple[np.ndarray, np.ndarray]:
    """The original's written boxes (camera 2's frame) moved into the label frame, and their scores."""
    ref = np.load(pointgnn_reference / "T1" / f"{frame_id}.npz")
    boxes = ref["det_box3d"].astype(np.float64).reshape(-1, 7).copy()  # (M, 7) cam2 frame
    P2 = read_calib(kitti_sample / "training" / "calib" / f"{frame_id}.txt").P2
    boxes[:, :3] = points_cam2_to_rect(boxes[:, :3], P2)
    return boxes, ref["det_score"].astype(np.float64).reshape(-1)


@pytest.mark.parametrize("frame_id", REFERENCE_FRAMES)
def test_t1_end_to_end_matches_the_original(
    t1_predictions: dict[str, Any], pointgnn_reference: Path, kitti_sample: Path, frame_id: str
) -> None:
    ref_boxes, ref_scores = _reference_boxes_rect(pointgnn_reference, kitti_sample, frame_id)
    ours = read_labels(t1_predictions["files"][frame_id], allow_score=True)
    our_boxes = labels_to_boxes(ours)  # (M, 7) label frame
    print(f"\n{frame_id}: ours {len(ours)}, original {len(ref_boxes)}")
    assert abs(len(ours) - len(ref_boxes)) <= 1
    if len(ref_boxes):
        assert len(ours) > 0
        iou = iou_bev(ref_boxes, our_boxes)  # (M_ref, M_ours)
        best = iou.max(axis=1)  # (M_ref,)
        match = iou.argmax(axis=1)
        our_scores = np.array([lab.score for lab in ours])[match]
        for b, s_ref, s_ours in zip(best, ref_scores, our_scores, strict=True):
            print(f"  BEV IoU {b:.4f}  score original {s_ref:.3f} ours {s_ours:.3f}")
        assert best.min() >= 0.9
        # the most confident detection is the same object with the same score (to the written 6 digits)
        top = int(np.argmax(ref_scores))
        assert our_scores[top] == pytest.approx(ref_scores[top], rel=1e-3)


def test_result_files_parse_with_real_alpha(t1_predictions: dict[str, Any], kitti_sample: Path) -> None:
    total = 0
    for path in t1_predictions["files"].values():
        labels = read_labels(path, allow_score=True)
        total += len(labels)
        width, height = DEFAULT_IMAGE_SIZE
        for lab in labels:
            assert lab.type == "Car" and lab.score is not None and lab.score > 0
            assert (lab.truncated, lab.occluded) == (-1.0, -1)
            expected = alpha_from_box(labels_to_boxes([lab]))[0]  # from the written (rounded) box
            assert lab.alpha != 0.0
            assert abs(math.remainder(lab.alpha - expected, 2 * math.pi)) < 0.011
            x0, y0, x1, y1 = lab.bbox
            assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        if not labels:
            assert path.read_bytes() == b""  # no detections: an empty file, not a blank line
    assert total >= 18  # 20 boxes in the original's files


def test_bin_path_writes_bev_png_and_no_image_png(t1_predictions: dict[str, Any]) -> None:
    png_dir = t1_predictions["dir"] / "bin" / "png"
    bev = png_dir / f"{BIN_FRAME}_bev.png"
    with Image.open(bev) as im:
        assert im.format == "PNG" and im.size[0] > 500
    assert not (png_dir / f"{BIN_FRAME}_image.png").exists()  # --bin without --image: nothing to draw on


def test_timings_have_every_stage(t1_predictions: dict[str, Any]) -> None:
    root, single = t1_predictions["timings"]
    assert root["frames"] == len(REFERENCE_FRAMES) - 1 and single["frames"] == 1
    assert set(root["mean_ms_after_first"]) == set(TIMING_KEYS) and single["mean_ms_after_first"] is None
    for summary in (root, single):
        assert set(summary["mean_ms"]) == set(TIMING_KEYS)
        for frame in summary["per_frame"]:
            assert all(frame[k] > 0 for k in TIMING_KEYS)
            assert frame["total"] >= sum(frame[k] for k in ("read", "graph", "gnn", "decode", "nms"))
            assert frame["gnn"] > frame["decode"]
    for table in t1_predictions["tables"]:
        assert all(k in table for k in TIMING_KEYS) and "paper" in table
    print("\n" + t1_predictions["tables"][0] + "\n" + t1_predictions["tables"][1])


# ----------------------------------------------------------------------------------------------------------
# Frames: label frame <-> camera 2
# ----------------------------------------------------------------------------------------------------------


def test_cam2_offset_of_real_calibs(kitti_sample: Path) -> None:
    for frame_id in REFERENCE_FRAMES:
        P2 = read_calib(kitti_sample / "training" / "calib" / f"{frame_id}.txt").P2
        offset = rect_to_cam2_offset(P2)
        assert 0.0595 < offset[0] < 0.0610 and -0.002 < offset[1] < 0 and 0.002 < offset[2] < 0.006
        pts = np.random.default_rng(0).normal(size=(5, 3))
        cam2 = points_rect_to_cam2(pts, P2)
        # projecting with P2 in the label frame = projecting with [K | 0] in camera 2's frame
        hom = np.hstack([pts, np.ones((5, 1))]) @ P2.T
        assert np.allclose(cam2 @ P2[:, :3].T, hom)
        assert np.allclose(points_cam2_to_rect(cam2, P2), pts)


def test_frame_from_scan_without_image_matches_load_frame(kitti_sample: Path) -> None:
    training = kitti_sample / "training"
    full = load_frame(kitti_sample, BIN_FRAME)  # its image is 1242 x 375
    calib = read_calib(training / "calib" / f"{BIN_FRAME}.txt")
    bare = frame_from_scan(BIN_FRAME, read_velodyne(training / "velodyne" / f"{BIN_FRAME}.bin"), calib)
    assert bare.image_size == DEFAULT_IMAGE_SIZE == full.image_size
    assert np.array_equal(bare.points_rect, full.points_rect)
    assert np.array_equal(bare.intensity, full.intensity)
    assert not bare.rgb.any() and full.rgb.any()
    smaller = frame_from_scan(
        BIN_FRAME, read_velodyne(training / "velodyne" / f"{BIN_FRAME}.bin"), calib, image_size=(600, 375)
    )
    assert 0 < len(smaller.points_rect) < len(full.points_rect)


# ----------------------------------------------------------------------------------------------------------
# Settings from a checkpoint
# ----------------------------------------------------------------------------------------------------------


def postprocess_config(entries: dict[str, Any], **overrides: Any) -> PostprocessConfig:
    """The post-processing of a card without one (a run's checkpoint, an older file) with ``entries``."""
    base = {k: v for k, v in _meta("rect").entries().items() if k != "postprocess"}
    return card_of({**base, **entries}).with_postprocess(**overrides)


def runtime_graph_config(entries: dict[str, Any], name: str | None = None) -> GraphConfig:
    """The runtime graph of a card without one, with ``entries`` (and ``--graph-preset name``)."""
    base = {k: v for k, v in _meta("rect").entries().items() if k != "runtime_graph"}
    return runtime_graph(card_of({**base, **entries}), name)


def test_postprocess_config_follows_the_label_method() -> None:
    car = postprocess_config({"label_method": "Car"})
    assert car.class_names == ("Background", "Car", "Car", "DontCare")
    assert car.class_fold == {2: 1} and car.score_threshold == 0.25 and car.overlap_threshold == 0.01
    ped = postprocess_config({"label_method": "Pedestrian_and_Cyclist"}, score_threshold=0.5)
    assert ped.class_fold == {2: 1, 4: 3} and ped.score_threshold == 0.5 and ped.overlap_threshold == 0.2
    imported = postprocess_config({"label_method": "Car", "original_config": {"nms_overlapped_thres": 0.3}})
    assert imported.overlap_threshold == 0.3
    with pytest.raises(DataError, match="label_method"):
        postprocess_config({"label_method": "Trucks"})


def test_runtime_graph_config() -> None:
    assert runtime_graph_config({"graph_preset": "car"}) == GRAPH_PRESETS["car_runtime"]
    assert runtime_graph_config({"graph_preset": "car_runtime"}) == GRAPH_PRESETS["car_runtime"]
    assert runtime_graph_config({"graph_preset": "car"}, "ped_cyc") == GRAPH_PRESETS["ped_cyc_runtime"]
    with pytest.raises(DataError, match="graph preset"):
        runtime_graph_config({"graph_preset": "nope"})


# ----------------------------------------------------------------------------------------------------------
# predict_graph / predict_records on a synthetic graph with a small random model
# ----------------------------------------------------------------------------------------------------------


def _P2() -> np.ndarray:
    K = np.array([[720.0, 0.0, 610.0], [0.0, 720.0, 175.0], [0.0, 0.0, 1.0]])
    return np.hstack([K, (K @ np.array([0.06, -0.001, 0.004]))[:, None]])  # (3, 4)


def _small_model() -> PointGNN:
    return PointGNN(MODEL_PRESETS["small"], generator=torch.Generator().manual_seed(0)).eval()


def _meta(input_frame: str) -> ModelCard:
    return card_of(
        {
            "model_config": MODEL_PRESETS["small"].model_dump(mode="json"),
            "input_frame": input_frame,
            "graph_preset": "car",
            "label_method": "Car",
            "input_features": "i",
            "encoding": "classaware_all_class_box_encoding",
        }
    )


def _graph_rect() -> dict[str, np.ndarray]:
    """A synthetic scene in the label frame: two car-sized point blobs and ground, with its runtime graph."""
    rng = np.random.default_rng(1)
    blobs = [
        rng.uniform([x - 2, 0.2, z - 1], [x + 2, 1.7, z + 1], size=(200, 3)) for x, z in ((-3, 12), (4, 20))
    ]
    ground = rng.uniform([-8, 1.6, 6], [8, 1.75, 30], size=(300, 3))
    points = np.concatenate([*blobs, ground]).astype(np.float32)  # (700, 3)
    graph = build_graph(points, GRAPH_PRESETS["car_runtime"], rng)
    graph["features"] = rng.uniform(0, 1, size=(len(points), 1)).astype(np.float32)
    return graph


def _shifted(graph: dict[str, np.ndarray], delta: np.ndarray) -> dict[str, np.ndarray]:
    return {
        k: ((v.astype(np.float64) + delta).astype(np.float32) if k.startswith("vertex_coord_") else v)
        for k, v in graph.items()
    }


def test_cam2_checkpoint_shifts_points_in_and_boxes_back() -> None:
    model = _small_model()
    P2 = _P2()
    offset = rect_to_cam2_offset(P2)
    post = PostprocessConfig(score_threshold=0.0, max_truncation=1.0)  # every candidate counts
    rect_graph = _graph_rect()
    cam2_graph = _shifted(rect_graph, offset)
    size = (1242, 375)
    # The network of a cam2 checkpoint sees the cam2 coordinates, whichever frame the cached graph is in ...
    from_rect = predict_graph(
        model, _meta("cam2"), rect_graph, P2, size, post, "cpu", graph_frame="rect"
    ).detections
    from_cam2 = predict_graph(
        model, _meta("cam2"), cam2_graph, P2, size, post, "cpu", graph_frame="cam2"
    ).detections
    assert len(from_rect) == len(from_cam2) > 0
    assert np.allclose(from_rect.boxes, from_cam2.boxes, atol=1e-5)
    assert np.allclose(from_rect.scores, from_cam2.scores, rtol=1e-5)
    # ... and its boxes come back in the label frame: the same network run as a "rect" model on the cam2
    # coordinates gives the cam2-frame boxes, which sit exactly one offset away.
    in_cam2 = predict_graph(
        model, _meta("rect"), cam2_graph, P2, size, post, "cpu", graph_frame="rect"
    ).detections
    assert np.allclose(in_cam2.boxes[:, :3] - offset, from_cam2.boxes[:, :3], atol=1e-5)
    assert np.allclose(in_cam2.boxes[:, 3:], from_cam2.boxes[:, 3:], atol=1e-6)
    # 2D boxes and alpha are computed in the label frame with P2
    box2d, _ = boxes_to_image_2d(from_cam2.boxes, P2, *size)
    assert np.allclose(from_cam2.boxes_2d, box2d)
    assert np.allclose(from_cam2.alpha, alpha_from_box(from_cam2.boxes))


def test_predict_records_writes_every_frame_empty_ones_too(tmp_path: Path) -> None:
    model = _small_model()
    graph = _graph_rect()
    records = [GraphFrame(fid, graph, _P2(), (1242, 375)) for fid in ("000007", "000008")]
    post = PostprocessConfig(score_threshold=0.0, max_truncation=1.0)
    summary = predict_records(model, _meta("rect"), records[:1], tmp_path, post_cfg=post, device="cpu")
    strict = PostprocessConfig(score_threshold=0.999)  # nothing passes
    empty = predict_records(model, _meta("rect"), records[1:], tmp_path, post_cfg=strict, device="cpu")
    assert summary.num_detections[0] > 0 and empty.num_detections == [0]
    assert len(read_labels(tmp_path / "000007.txt", allow_score=True)) == summary.num_detections[0]
    assert (tmp_path / "000008.txt").read_bytes() == b""
    no_points = build_graph(
        np.zeros((0, 3), np.float32), GRAPH_PRESETS["car_runtime"], np.random.default_rng(0)
    )
    no_points["features"] = np.zeros((0, 1), np.float32)
    nothing = predict_records(
        model,
        _meta("cam2"),
        [GraphFrame("000009", no_points, _P2(), (1242, 375))],
        tmp_path,
        post_cfg=post,
        device="cpu",
    )
    assert nothing.num_detections == [0] and (tmp_path / "000009.txt").read_bytes() == b""
    for s in (summary, empty):
        assert set(s.timings[0]) == set(TIMING_KEYS) and s.timings[0]["graph"] == 0.0
        assert s.timings[0]["gnn"] > 0 and s.timings[0]["total"] >= s.timings[0]["gnn"]
    assert set(summary.as_dict()["mean_ms"]) == set(TIMING_KEYS)


def test_empty_summary_and_table() -> None:
    summary = PredictSummary()
    assert all(math.isnan(v) for v in summary.mean_ms().values())
    summary.add("000001", 2, {k: 0.5 for k in TIMING_KEYS})
    assert summary.mean_ms()["gnn"] == pytest.approx(500.0)
    assert math.isnan(summary.mean_ms(skip_first=True)["gnn"])
    table = summary.table("cpu")
    assert "gnn" in table and "643" in table and "500.0" in table and "frames 2-" not in table
    summary.add("000002", 0, {k: 0.1 for k in TIMING_KEYS})  # a warm frame after a slow first one
    assert summary.mean_ms()["nms"] == pytest.approx(300.0)
    assert summary.mean_ms(skip_first=True)["nms"] == pytest.approx(100.0)
    assert "frames 2-2" in summary.table() and summary.as_dict()["mean_ms_after_first"]["total"] == 100.0


# ----------------------------------------------------------------------------------------------------------
# Pictures
# ----------------------------------------------------------------------------------------------------------


def _detections_of(boxes: np.ndarray, P2: np.ndarray, size: tuple[int, int]) -> Detections:
    box2d, trunc = boxes_to_image_2d(boxes, P2, *size)
    m = len(boxes)
    return Detections(
        boxes=boxes,
        labels=np.ones(m, np.int64),
        names=("Car",) * m,
        scores=np.linspace(2, 1, m),
        probabilities=np.linspace(1, 0.5, m),
        boxes_2d=box2d,
        truncation=trunc,
        alpha=alpha_from_box(boxes),
        flat_index=np.arange(m),
    )


def test_write_pictures_of_a_real_frame(kitti_sample: Path, tmp_path: Path) -> None:
    frame = load_frame(kitti_sample, "000114")
    cars = labels_to_boxes([lab for lab in frame.labels if lab.type == "Car"])  # (8, 7)
    dets = _detections_of(cars + np.array([0.3, 0, 0.2, 0, 0, 0, 0.1]), frame.calib.P2, frame.image_size)
    labels = detections_to_labels(dets)
    assert [lab.score for lab in labels] == pytest.approx(dets.scores.tolist())
    assert labels[0].x == pytest.approx(dets.boxes[0, 0]) and labels[0].bbox == tuple(dets.boxes_2d[0])
    write_pictures(tmp_path, frame, dets, kitti_sample / "training" / "image_2" / "000114.png")
    with Image.open(tmp_path / "000114_image.png") as im:
        assert im.size == frame.image_size  # drawn at the image's own pixel size
        pixels = np.asarray(im.convert("RGB")).astype(int)
    with Image.open(kitti_sample / "training" / "image_2" / "000114.png") as im:
        original = np.asarray(im.convert("RGB")).astype(int)
    changed = np.abs(pixels - original).sum(axis=2) > 60  # (H, W) where boxes were drawn
    u0, v0, u1, v1 = dets.boxes_2d[0].astype(int)
    assert changed[v0 : v1 + 1, u0 : u1 + 1].mean() > changed.mean()  # ink concentrates on the boxes
    assert (tmp_path / "000114_bev.png").stat().st_size > 10_000


def test_project_box_edges_near_plane() -> None:
    P2 = _P2()
    ahead = np.array([[0.0, 1.5, 10.0, 4.0, 1.5, 1.6, 0.3]])
    segments = project_box_edges(ahead, P2)[0]  # (12, 2, 2)
    assert segments.shape == (12, 2, 2)
    box2d, _ = boxes_to_image_2d(ahead, P2, 1e5, 1e5)
    uv = segments.reshape(-1, 2)
    assert np.allclose([uv[:, 0].min(), uv[:, 1].min(), uv[:, 0].max(), uv[:, 1].max()], box2d[0])
    behind = np.array([[0.0, 1.5, -10.0, 4.0, 1.5, 1.6, 0.0]])
    assert project_box_edges(behind, P2)[0].shape == (0, 2, 2)
    straddling = np.array([[0.0, 1.5, 0.5, 4.0, 1.5, 1.6, math.pi / 2]])  # its length runs along z past 0.1
    cut = project_box_edges(straddling, P2)[0]
    assert 0 < len(cut) < 12 and np.isfinite(cut).all()


# ----------------------------------------------------------------------------------------------------------
# The command's arguments
# ----------------------------------------------------------------------------------------------------------


def test_parse_ids(tmp_path: Path) -> None:
    from pgnn.commands.predict import parse_ids

    (tmp_path / "ImageSets").mkdir()
    (tmp_path / "ImageSets" / "val.txt").write_text("000003\n000114\n")
    split = tmp_path / "mine.txt"
    split.write_text("000001\n")
    assert parse_ids("val", tmp_path) == (["000003", "000114"], "val")
    assert parse_ids(str(split), tmp_path) == (["000001"], None)
    assert parse_ids("3, 000114", tmp_path) == (["000003", "000114"], None)
    with pytest.raises(DataError, match="comma-separated"):
        parse_ids("train", tmp_path)


def test_predict_command_argument_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "missing.pt"
    assert cli_main(["predict", "--checkpoint", str(ckpt), "--out", str(tmp_path)]) == 1
    assert "either --root" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "predict",
                "--root",
                str(tmp_path),
                "--bin",
                "x.bin",
                "--checkpoint",
                str(ckpt),
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert cli_main(["predict", "--bin", "x.bin", "--checkpoint", str(ckpt), "--out", str(tmp_path)]) == 1
    assert "checkpoint" in capsys.readouterr().err  # the checkpoint is read before the frames
    empty = tmp_path / "empty.txt"
    write_detections(empty, _detections_of(np.zeros((0, 7)), _P2(), (1242, 375)))
    assert empty.read_bytes() == b""
