"""Tests for pgnn.inference.postprocess: the NMS variants on hand-made boxes, rescoring, candidates, result
lines, and
fidelity against the original Point-GNN's NMS, truncation, rescoring and result files on 7 real frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pgnn.config.inference import PostprocessConfig
from pgnn.core.boxes import alpha_from_box, iou_3d
from pgnn.inference.postprocess import (
    NMS_VARIANTS,
    NmsVariant,
    kitti_result_lines,
    nms_boxes_3d,
    nms_name_from_flags,
    occlusion_ratio,
    occlusion_rescore,
    postprocess_frame,
    select_candidates,
    truncation_filter,
    write_kitti_result,
)

# ------------------------------------------------------------------------------------- hand-made NMS cases

# Input order is deliberately not the score order.
BOXES = np.array(
    [
        [10.0, 1.0, 20.0, 4.0, 1.5, 2.0, 0.0],  # 0: far from the rest, score 0.7
        [0.0, 1.0, 10.0, 4.0, 1.5, 2.0, 0.0],  # 1: best, score 0.9
        [0.6, 1.2, 10.0, 4.2, 1.5, 2.0, 0.1],  # 2: overlaps 1, score 0.8
        [0.0, 1.0, 10.0, 4.0, 1.5, 2.0, 0.0],  # 3: same place as 1 but another class, score 0.6
        [0.3, 0.9, 10.2, 3.8, 1.6, 1.8, 0.05],  # 4: overlaps 1, score 0.5
    ]
)
SCORES = np.array([0.7, 0.9, 0.8, 0.6, 0.5])
LABELS = np.array([1, 1, 1, 3, 1])
ORDER = [1, 2, 0, 3, 4]  # decreasing score


def test_plain_nms_keeps_the_best_of_each_cluster() -> None:
    r = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01)
    np.testing.assert_array_equal(r.index, [1, 0, 3])  # score order; 2 and 4 removed by 1; 3 is another class
    np.testing.assert_array_equal(r.boxes, BOXES[[1, 0, 3]])
    np.testing.assert_array_equal(r.scores, SCORES[[1, 0, 3]])
    np.testing.assert_array_equal(r.labels, [1, 1, 3])


def test_merge_only_takes_the_cluster_median() -> None:
    r = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="merge_only")
    np.testing.assert_array_equal(r.index, [1, 0, 3])
    np.testing.assert_allclose(r.boxes[0], np.median(BOXES[[1, 2, 4]], axis=0))
    np.testing.assert_array_equal(r.boxes[1:], BOXES[[0, 3]])
    np.testing.assert_array_equal(r.scores, SCORES[[1, 0, 3]])


def test_circular_yaw_merge_across_plus_minus_pi() -> None:
    # A car heading along -x: its boxes' yaws straddle +-pi. The plain median (the original's) of
    # (3.10, -3.12, 3.12, -3.10) is 0.0, a box turned by 90 degrees; the circular merge keeps it at ~pi.
    yaws = np.array([3.10, -3.12, 3.12, -3.10])
    boxes = np.array([[0.1 * k, 1.0, 10.0, 4.0, 1.5, 1.8, y] for k, y in enumerate(yaws)])
    scores, labels = np.array([0.9, 0.8, 0.7, 0.6]), np.ones(4, int)
    for variant in ("merge_only", "merge_score"):
        plain = nms_boxes_3d(boxes, scores, labels, 0.01, variant=variant)
        circ = nms_boxes_3d(boxes, scores, labels, 0.01, variant=variant, circular_yaw=True)
        assert len(plain.boxes) == len(circ.boxes) == 1
        assert plain.boxes[0, 6] == pytest.approx(0.0, abs=1e-12)
        turn = (circ.boxes[0, 6] - np.pi + np.pi) % (2 * np.pi) - np.pi
        assert abs(turn) < 0.02  # ~pi (or -pi): median of the wrapped differences (0, -0.06, 0.02, 0.04)
        np.testing.assert_array_equal(circ.boxes[0, :6], plain.boxes[0, :6])
    # Within the original's yaw range [-pi/4, 3pi/4] the circular merge is the plain median.
    r = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="merge_score", circular_yaw=True)
    plain = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="merge_score")
    np.testing.assert_allclose(r.boxes, plain.boxes, atol=1e-12)


def test_score_only_adds_overlap_weighted_scores() -> None:
    r = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="score_only")
    np.testing.assert_array_equal(r.index, [1, 0, 3])
    np.testing.assert_array_equal(r.boxes, BOXES[[1, 0, 3]])
    ious = iou_3d(BOXES[[1]], BOXES[[2, 4]])[0]
    assert np.all(ious > 0.3)
    assert r.scores[0] == pytest.approx(0.9 + 0.8 * ious[0] + 0.5 * ious[1])
    np.testing.assert_array_equal(r.scores[1:], SCORES[[0, 3]])


def test_merge_score_uses_the_iou_with_the_median() -> None:
    r = nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="merge_score")
    np.testing.assert_array_equal(r.index, [1, 0, 3])
    median = np.median(BOXES[[1, 2, 4]], axis=0)
    np.testing.assert_allclose(r.boxes[0], median)
    assert not np.allclose(median, BOXES[1])
    ious = iou_3d(median[None], BOXES[[2, 4]])[0]
    assert r.scores[0] == pytest.approx(0.9 + 0.8 * ious[0] + 0.5 * ious[1])
    assert r.scores[0] != pytest.approx(
        nms_boxes_3d(BOXES, SCORES, LABELS, 0.01, variant="score_only").scores[0]
    )


def test_removed_boxes_remove_nothing() -> None:
    """Greedy: a box removed by a better one no longer removes the boxes it overlaps."""
    boxes = np.array(
        [
            [0.0, 1.0, 10.0, 4.0, 1.5, 2.0, 0.0],
            [3.0, 1.0, 10.0, 4.0, 1.5, 2.0, 0.0],  # overlaps 0 and 2
            [6.0, 1.0, 10.0, 4.0, 1.5, 2.0, 0.0],  # overlaps 1 only
        ]
    )
    for variant in NMS_VARIANTS:
        r = nms_boxes_3d(boxes, np.array([0.9, 0.8, 0.7]), np.ones(3, dtype=int), 0.01, variant=variant)
        np.testing.assert_array_equal(r.index, [0, 2])


def test_threshold_is_strict_and_ties_are_stable() -> None:
    a, b = BOXES[1], BOXES[2]
    iou = iou_3d(a[None], b[None])[0, 0]
    pair = np.stack([a, b])
    kept = nms_boxes_3d(pair, np.array([0.9, 0.8]), np.array([1, 1]), overlap_threshold=iou)
    np.testing.assert_array_equal(kept.index, [0, 1])  # IoU == threshold: not removed
    kept = nms_boxes_3d(pair, np.array([0.9, 0.8]), np.array([1, 1]), overlap_threshold=np.nextafter(iou, 0))
    np.testing.assert_array_equal(kept.index, [0])
    # Duplicated keypoints give identical candidates; the first in input order survives.
    dup = np.stack([b, a, a])
    for variant in NMS_VARIANTS:
        r = nms_boxes_3d(dup, np.array([0.5, 0.8, 0.8]), np.ones(3, dtype=int), 0.01, variant=variant)
        np.testing.assert_array_equal(r.index, [1])


def test_nms_empty_and_bad_input() -> None:
    for variant in NMS_VARIANTS:
        r = nms_boxes_3d(np.zeros((0, 7)), np.zeros(0), np.zeros(0, dtype=int), 0.01, variant=variant)
        assert r.boxes.shape == (0, 7) and r.scores.shape == (0,) and r.index.shape == (0,)
    with pytest.raises(ValueError, match="scores, labels"):
        nms_boxes_3d(BOXES, SCORES[:3], LABELS, 0.01)


def test_nms_does_not_modify_its_inputs() -> None:
    boxes, scores = BOXES.copy(), SCORES.copy()
    nms_boxes_3d(boxes, scores, LABELS, 0.01, variant="merge_score")
    np.testing.assert_array_equal(boxes, BOXES)
    np.testing.assert_array_equal(scores, SCORES)


def test_nms_names_and_flags() -> None:
    assert set(NMS_VARIANTS) == {"plain", "merge_only", "score_only", "merge_score"}
    assert nms_name_from_flags(True, True) == "merge_score"  # the original's nms_boxes_3d_uncertainty
    assert nms_name_from_flags(True, False) == "merge_only"  # nms_boxes_3d_merge_only
    assert nms_name_from_flags(False, True) == "score_only"  # nms_boxes_3d_score_only
    assert nms_name_from_flags(False, False) == "plain"  # nms_boxes_3d
    assert NMS_VARIANTS["merge_score"] == NmsVariant(merge=True, accumulate=True)
    assert NMS_VARIANTS["merge_only"] == NmsVariant(merge=True, accumulate=False)
    assert NMS_VARIANTS["score_only"] == NmsVariant(merge=False, accumulate=True)
    assert NMS_VARIANTS["plain"] == NmsVariant(merge=False, accumulate=False)


# ----------------------------------------------------------------------------------- occlusion, truncation


def test_occlusion_ratio_by_hand() -> None:
    box = np.array([[0.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0]])  # x in (-2, 2), y in (-2, 0), z in (-1, 1)
    pts = np.array([[-1.0, -0.5, -0.5], [1.0, -1.5, 0.5], [0.0, -1.0, 0.0], [0.0, -1.0, 0.0]])
    assert occlusion_ratio(box, pts)[0] == pytest.approx((2 / 4) * (1 / 2) * (1 / 2))
    # Points on the faces or outside do not count; one point inside spans nothing.
    on_faces = np.array([[2.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.0, -1.0, 1.0], [5.0, -1.0, 0.0]])
    assert occlusion_ratio(box, on_faces)[0] == 0.0
    assert occlusion_ratio(box, np.zeros((0, 3)))[0] == 0.0
    np.testing.assert_allclose(occlusion_rescore(np.array([2.0]), box, pts), 2.0 * (1 + 0.125))


def test_occlusion_ratio_follows_the_box_rotation() -> None:
    rng = np.random.default_rng(0)
    local = rng.uniform([-1.5, -1.2, -0.6], [1.0, -0.2, 0.9], size=(50, 3))
    ratio = occlusion_ratio(np.array([[0.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0]]), local)[0]
    ry = 0.7
    R = np.array([[np.cos(ry), 0, np.sin(ry)], [0, 1, 0], [-np.sin(ry), 0, np.cos(ry)]])
    moved = local @ R.T + [3.0, 1.0, 12.0]
    box = np.array([[3.0, 1.0, 12.0, 4.0, 2.0, 2.0, ry]])
    assert occlusion_ratio(box, moved)[0] == pytest.approx(ratio, abs=1e-12)
    assert 0.2 < ratio < 1.0


def test_truncation_filter_drops_boxes_leaving_the_image() -> None:
    P = np.array([[721.5, 0.0, 609.6, 0.0], [0.0, 721.5, 172.9, 0.0], [0.0, 0.0, 1.0, 0.0]])
    boxes = np.array([[0.0, 1.6, 15.0, 3.9, 1.5, 1.6, 0.3], [-9.5, 1.6, 7.0, 3.9, 1.5, 1.6, 0.0]])
    keep, box2d, trunc = truncation_filter(boxes, P, (1242, 375), 0.4)
    np.testing.assert_array_equal(keep, [True, False])
    assert trunc[0] == 0.0 and trunc[1] > 0.4
    assert box2d.shape == (2, 4)


# ----------------------------------------------------------------------------------- candidates and config


def test_select_candidates_folds_and_thresholds() -> None:
    probs = np.array(
        [
            [0.1, 0.6, 0.2, 0.1],  # Car
            [0.2, 0.3, 0.4, 0.1],  # both Car classes pass: two candidates, both folded to 1
            [0.25, 0.25, 0.25, 0.25],  # nothing > 0.25
            [0.0, 0.0, 0.1, 0.9],  # DontCare never becomes a detection
        ]
    )
    boxes = np.arange(4 * 4 * 7, dtype=float).reshape(4, 4, 7)
    cand = select_candidates(probs, boxes, PostprocessConfig())
    np.testing.assert_array_equal(cand.flat_index, [1, 5, 6])
    np.testing.assert_array_equal(cand.point_index, [0, 1, 1])
    np.testing.assert_array_equal(cand.labels, [1, 1, 1])
    np.testing.assert_array_equal(cand.scores, [0.6, 0.3, 0.4])
    np.testing.assert_array_equal(cand.boxes, boxes[[0, 1, 1], [1, 1, 2]])
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        select_candidates(probs[:, :3], boxes, PostprocessConfig())


def test_config_defaults_and_validation() -> None:
    cfg = PostprocessConfig()
    assert (cfg.nms, cfg.overlap_threshold, cfg.score_threshold, cfg.max_truncation) == (
        "merge_score",
        0.01,
        0.25,
        0.4,
    )
    assert cfg.class_fold == {2: 1} and cfg.occlusion_rescore
    with pytest.raises(ValidationError, match="joins different classes"):
        PostprocessConfig(class_fold={3: 1})
    with pytest.raises(ValidationError):
        PostprocessConfig(nms="soft")
    with pytest.raises(ValidationError):
        PostprocessConfig(unknown=1)
    ped_cyc = PostprocessConfig(
        class_names=("Background", "Pedestrian", "Pedestrian", "Cyclist", "Cyclist", "DontCare"),
        class_fold={2: 1, 4: 3},
        score_threshold=1 / 6,
        overlap_threshold=0.2,
    )
    assert ped_cyc.class_fold == {2: 1, 4: 3}


# ---------------------------------------------------------------------------------------- result lines


def test_kitti_result_lines_format(tmp_path: Path) -> None:
    boxes = np.array([[1.234, 1.6, 15.0, 3.9, 1.5, 1.6, 0.3], [-5.0, 1.7, 30.0, 4.1, 1.4, 1.7, -1.2]])
    box2d = np.array([[100.0, 150.0, 200.0, 220.0], [50.5, 160.25, 90.0, 200.0]])
    scores = np.array([12.3456789, 0.31234])
    lines = kitti_result_lines(["Car", "Car"], boxes, box2d, scores)
    expected = "Car -1 -1 0.22 100.00 150.00 200.00 220.00 1.50 1.60 3.90 1.23 1.60 15.00 0.30 12.3457"
    assert lines[0] == expected
    fields = lines[1].split()
    assert len(fields) == 16
    alpha = alpha_from_box(boxes)
    assert float(fields[3]) == pytest.approx(alpha[1], abs=0.005) and alpha[1] != 0.0
    assert [float(v) for v in fields[8:11]] == [1.4, 1.7, 4.1]  # h w l
    assert float(fields[15]) == pytest.approx(0.31234)
    with pytest.raises(ValueError, match="one non-empty word"):
        kitti_result_lines(["Big Car"], boxes[:1], box2d[:1], scores[:1])
    path = tmp_path / "data" / "000001.txt"
    write_kitti_result(path, lines)
    assert path.read_text().splitlines() == lines
    write_kitti_result(path, [])
    assert path.read_text() == ""


# ------------------------------------------------------------------------- fidelity with the original

FRAMES = ["000000", "000001", "000002", "000003", "000004", "000005", "000114"]
MODELS = ["T1", "T0"]
IMAGE_SIZE = (1242.0, 375.0)  # the original hard-codes this for every frame


def original_cam_to_image(calib_file: Path) -> np.ndarray:
    """The original's ``cam_to_image`` = [K | 0], K = P2[:, :3] parsed as float32 (its boxes are in the
    rectified frame of camera 2)."""
    for line in calib_file.read_text().splitlines():
        if line.startswith("P2:"):
            P2 = np.array(line.split()[1:], dtype=np.float32).reshape(3, 4).astype(np.float64)
            return np.hstack([P2[:, :3], np.zeros((3, 1))])
    raise AssertionError(f"no P2 in {calib_file}")


def read_original_lines(path: Path) -> tuple[list[str], np.ndarray]:
    """Class names and the 15 numbers of each non-blank line of a ``run.py`` detection file."""
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [r[0] for r in rows], np.array([[float(v) for v in r[1:]] for r in rows]).reshape(-1, 15)


@pytest.fixture(scope="module")
def reference(pointgnn_reference: Path, kitti_sample: Path):  # noqa: ANN201
    def load(model: str, frame: str) -> dict[str, np.ndarray]:
        data = dict(np.load(pointgnn_reference / model / f"{frame}.npz"))
        # T0 files lack the graph: T0's runtime graph is bit-identical to T1's (README).
        data["vertex_coord_2"] = np.load(pointgnn_reference / "T1" / f"{frame}.npz")["vertex_coord_2"]
        data["P"] = original_cam_to_image(kitti_sample / "training" / "calib" / f"{frame}.txt")
        data["txt"] = pointgnn_reference / model / f"{frame}_detections.txt"
        return data

    return load


@pytest.mark.parametrize("frame", FRAMES)
@pytest.mark.parametrize("model", MODELS)
def test_fidelity_nms_truncation_rescoring_lines(reference, model: str, frame: str) -> None:  # noqa: ANN001
    ref = reference(model, frame)
    # 1. Merge + score NMS (nms_boxes_3d_uncertainty, threshold 0.01).
    r = nms_boxes_3d(
        ref["nms_in_boxes"], ref["nms_in_scores"], ref["nms_in_labels"], 0.01, variant="merge_score"
    )
    np.testing.assert_array_equal(r.index, ref["nms_out_index"])
    np.testing.assert_array_equal(r.labels, ref["nms_out_labels"])
    np.testing.assert_allclose(r.boxes, ref["nms_out_boxes"].reshape(-1, 7), atol=1e-3, rtol=0)
    np.testing.assert_allclose(r.scores, ref["nms_out_scores"], atol=1e-4, rtol=0)
    # 2. Truncation drop with the original's projection and image size.
    keep, box2d, _ = truncation_filter(r.boxes, ref["P"], IMAGE_SIZE, 0.4)
    boxes = r.boxes[keep]
    np.testing.assert_allclose(boxes, ref["det_box3d"].reshape(-1, 7), atol=1e-3, rtol=0)
    np.testing.assert_allclose(box2d[keep], ref["det_box2d"].reshape(-1, 4), atol=1e-3, rtol=0)
    # 3. Occlusion rescoring with the keypoints of all candidates (with multiplicity).
    points = ref["vertex_coord_2"][ref["box_indices"] // 4]
    scores = occlusion_rescore(r.scores[keep], boxes, points)
    np.testing.assert_allclose(scores, ref["det_score"], atol=1e-4, rtol=0)
    # 4. The written lines carry the same numbers as the original's file (which writes alpha 0).
    names, numbers = read_original_lines(ref["txt"])
    lines = kitti_result_lines(["Car"] * len(boxes), boxes, box2d[keep], scores)
    assert [line.split()[0] for line in lines] == names
    ours = np.array([[float(v) for v in line.split()[1:]] for line in lines]).reshape(-1, 15)
    assert ours.shape == numbers.shape
    np.testing.assert_allclose(ours[:, 3:14], numbers[:, 3:14], atol=0.005 + 1e-6, rtol=0)  # 2 decimals
    np.testing.assert_allclose(ours[:, 14], numbers[:, 14], rtol=1e-5)  # score, 6 significant digits
    np.testing.assert_allclose(ours[:, 2], np.round(alpha_from_box(boxes), 2), atol=1e-9)


@pytest.mark.parametrize("frame", FRAMES)
@pytest.mark.parametrize("model", MODELS)
def test_fidelity_postprocess_frame(reference, model: str, frame: str) -> None:  # noqa: ANN001
    """The whole chain from the network's probabilities: candidates, NMS, truncation, rescoring."""
    ref = reference(model, frame)
    probs = ref["probs"]  # (N1, 4)
    # Decoding is another module's job: place the reference's decoded candidates, NaN elsewhere.
    boxes = np.full((*probs.shape, 7), np.nan)
    boxes.reshape(-1, 7)[ref["box_indices"]] = ref["nms_in_boxes"]
    det, _, _ = postprocess_frame(
        probs, boxes, ref["vertex_coord_2"], ref["P"], IMAGE_SIZE, PostprocessConfig()
    )
    assert len(det) == len(ref["det_score"])
    assert det.names == ("Car",) * len(det)
    np.testing.assert_array_equal(det.labels, ref["det_class"])
    np.testing.assert_allclose(det.boxes, ref["det_box3d"].reshape(-1, 7), atol=1e-3, rtol=0)
    np.testing.assert_allclose(det.boxes_2d, ref["det_box2d"].reshape(-1, 4), atol=1e-3, rtol=0)
    np.testing.assert_allclose(det.scores, ref["det_score"], atol=1e-4, rtol=0)
    assert np.all(np.isin(det.flat_index, ref["box_indices"]))
    assert np.all(det.truncation <= 0.4)
    np.testing.assert_allclose(det.alpha, alpha_from_box(det.boxes))


def test_fidelity_candidates(reference) -> None:  # noqa: ANN001
    """Candidate selection reproduces run.py's box_indices and folded labels on every frame."""
    for model in MODELS:
        for frame in FRAMES:
            ref = reference(model, frame)
            probs = ref["probs"]
            cand = select_candidates(probs, np.zeros((*probs.shape, 7)), PostprocessConfig())
            np.testing.assert_array_equal(cand.flat_index, ref["box_indices"])
            np.testing.assert_array_equal(cand.labels, ref["nms_in_labels"])
            np.testing.assert_array_equal(cand.scores, ref["nms_in_scores"].astype(np.float64))
