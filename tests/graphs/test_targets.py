"""Tests of pgnn.graphs.targets: the original's label rules on hand-made boxes, and on a real frame against a
straightforward per-label re-statement of ``assign_classaware_*_label_to_points``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pgnn.data.frames import load_frame
from pgnn.data.labels import labels_to_boxes
from pgnn.graphs.encoding import DEFAULT_ENCODING, get_encoding
from pgnn.graphs.targets import (
    CLASS_NAMES,
    assign_targets,
    fold_yaw,
    label_classes,
    method_class_names,
    num_classes,
    object_classes,
)


def _box(x: float, z: float, yaw: float = 0.0, l: float = 4.0, h: float = 1.5, w: float = 2.0) -> list[float]:
    return [x, 1.5, z, l, h, w, yaw]


def _decode_targets(targets: np.ndarray, xyz: np.ndarray, labels: np.ndarray, method: str) -> np.ndarray:
    return get_encoding(DEFAULT_ENCODING)[1](targets, xyz, labels, CLASS_NAMES[method])


def test_class_layouts() -> None:
    assert num_classes("Car") == 4 and num_classes("Pedestrian_and_Cyclist") == 6 and num_classes("yaw") == 8
    assert method_class_names("Car") == ("Background", "Car", "Car", "DontCare")
    assert object_classes("yaw") == ("Car", "Pedestrian", "Cyclist")
    with pytest.raises(ValueError, match="unknown label method"):
        num_classes("Truck")


def test_fold_yaw_matches_the_original_loops() -> None:
    assert fold_yaw(0.1) == 0.1
    assert fold_yaw(-3.0) == pytest.approx(-3.0 + np.pi)
    assert fold_yaw(2.5) == pytest.approx(2.5 - np.pi)
    assert fold_yaw(0.75 * np.pi) == 0.75 * np.pi  # the loops keep both end points
    assert fold_yaw(-0.25 * np.pi) == -0.25 * np.pi
    assert fold_yaw(7.0) == pytest.approx(7.0 - 2 * np.pi)


def test_car_method_orientation_classes_and_box_targets() -> None:
    boxes = np.array([_box(0, 10, yaw=0.1), _box(10, 10, yaw=1.4), _box(20, 10, yaw=-3.0)])
    xyz = np.array([[0.0, 1.0, 10.0], [10.0, 1.0, 10.0], [20.0, 1.0, 10.0], [30.0, 1.0, 10.0]])
    labels, targets, valid = assign_targets(xyz, boxes, ["Car", "Car", "Car"], "Car")
    assert labels.dtype == np.int64 and targets.dtype == np.float32 and valid.dtype == bool
    assert labels.tolist() == [1, 2, 1, 0]
    assert valid.tolist() == [True, True, True, False]
    decoded = _decode_targets(targets[:3], xyz[:3], labels[:3], "Car")
    expected = boxes.copy()
    expected[2, 6] = -3.0 + np.pi  # the folded yaw
    np.testing.assert_allclose(decoded, expected, atol=1e-5)
    np.testing.assert_array_equal(targets[3], 0.0)


def test_car_heading_keeps_the_direction() -> None:
    """Car_heading: four yaw bins (0, pi/2, pi, -pi/2), so a car and its reverse get different targets."""
    yaws = np.array([0.1, 1.4, -3.0, -1.5, 3.0, 2.5, -0.9])
    assert label_classes(["Car"] * 7, yaws, "Car_heading").tolist() == [1, 2, 3, 4, 3, 3, 4]
    assert label_classes(["Car"] * 7, yaws, "Car").tolist() == [1, 2, 1, 2, 1, 1, 2]  # the original: mod pi
    boxes = np.array([_box(10 * k, 10, yaw=y) for k, y in enumerate(yaws)])
    xyz = boxes[:, :3] - [0.0, 0.5, 0.0]
    labels, targets, valid = assign_targets(xyz, boxes, ["Car"] * 7, "Car_heading")
    assert valid.all() and labels.tolist() == [1, 2, 3, 4, 3, 3, 4]
    assert np.abs(targets[:, 6]).max() <= 1.0 + 1e-6  # |yaw - yaw centre| <= pi/4
    decoded = _decode_targets(targets, xyz, labels, "Car_heading")
    np.testing.assert_allclose(np.cos(decoded[:, 6] - yaws), 1.0, atol=1e-6)  # the heading itself, not mod pi
    np.testing.assert_allclose(decoded[:, :6], boxes[:, :6], atol=1e-5)


def test_other_classes_become_dontcare_and_dontcare_regions_stay_background() -> None:
    boxes = np.array([_box(0, 10), _box(10, 10), _box(20, 10), _box(30, 10)])
    names = ["Van", "DontCare", "Pedestrian", "Truck"]
    xyz = boxes[:, :3] - [0.0, 0.5, 0.0]
    labels, targets, valid = assign_targets(xyz, boxes, names, "Car")
    assert labels.tolist() == [3, 0, 3, 3]
    assert not valid.any()
    np.testing.assert_array_equal(targets, 0.0)


def test_later_boxes_win_overlaps() -> None:
    xyz = np.array([[0.0, 1.0, 10.0], [2.0, 1.0, 10.0], [-2.0, 1.0, 10.0]])
    car, van = _box(0.5, 10), _box(-0.5, 10)  # both hold vertex 0; 1 only the car, 2 only the van
    labels, _, valid = assign_targets(xyz, np.array([car, van]), ["Car", "Van"], "Car")
    assert labels.tolist() == [3, 1, 3] and valid.tolist() == [False, True, False]
    labels, _, valid = assign_targets(xyz, np.array([van, car]), ["Van", "Car"], "Car")
    assert labels.tolist() == [1, 1, 3] and valid.tolist() == [True, True, False]
    # a DontCare label over a car changes nothing
    labels, _, valid = assign_targets(xyz, np.array([car, van]), ["Car", "DontCare"], "Car")
    assert labels.tolist() == [1, 1, 0] and valid.tolist() == [True, True, False]


def test_expend_factor_enlarges_the_region_not_the_target() -> None:
    box = np.array([_box(0, 10, l=4.0, h=1.5, w=2.0)])
    xyz = np.array([[2.2, 1.0, 10.0], [0.0, 1.65, 10.0], [0.0, 1.0, 11.05]])  # outside in l, below, in w
    labels, _, _ = assign_targets(xyz, box, ["Car"], "Car")
    assert labels.tolist() == [0, 0, 0]
    labels, targets, valid = assign_targets(xyz, box, ["Car"], "Car", expend_factor=(1.25, 1.1, 1.2))
    assert labels.tolist() == [1, 1, 1] and valid.all()
    decoded = _decode_targets(targets, xyz, labels, "Car")
    np.testing.assert_allclose(decoded, np.repeat(box, 3, axis=0), atol=1e-5)


@pytest.mark.parametrize(
    ("method", "expected"),
    [("Pedestrian_and_Cyclist", [5, 2, 3, 0]), ("yaw", [1, 4, 5, 0]), ("Car", [1, 3, 3, 0])],
)
def test_multi_class_methods(method: str, expected: list[int]) -> None:
    boxes = np.array([_box(0, 10), _box(10, 10, yaw=1.5, l=0.8, w=0.6), _box(20, 10, yaw=0.2, l=1.8, w=0.6)])
    xyz = np.array([[0.0, 1.0, 10.0], [10.0, 1.0, 10.0], [20.0, 1.0, 10.0], [40.0, 1.0, 10.0]])
    labels, _, valid = assign_targets(xyz, boxes, ["Car", "Pedestrian", "Cyclist"], method)
    assert labels.tolist() == expected
    assert valid.tolist() == [0 < c < num_classes(method) - 1 for c in expected]


def test_empty_inputs() -> None:
    labels, targets, valid = assign_targets(np.zeros((0, 3)), np.array([_box(0, 10)]), ["Car"], "Car")
    assert labels.shape == (0,) and targets.shape == (0, 7) and valid.shape == (0,)
    labels, targets, valid = assign_targets(np.ones((4, 3)), np.zeros((0, 7)), [], "Car")
    assert labels.tolist() == [0] * 4 and not valid.any()
    with pytest.raises(ValueError, match="a class name per box"):
        assign_targets(np.ones((4, 3)), np.zeros((1, 7)), [], "Car")


def _original_rules(
    xyz: np.ndarray, boxes: np.ndarray, names: list[str], method: str, expend: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Label by label, strict inside test in each box's frame, as dataset/kitti_dataset.py does."""
    ids = CLASS_NAMES[method]
    dontcare = len(ids) - 1
    labels = np.zeros(len(xyz), np.int64)
    valid = np.zeros(len(xyz), bool)
    for box, name in zip(boxes, names, strict=True):
        if name == "DontCare":
            continue
        x, y, z, l, h, w, yaw = box
        d = xyz - [x, y, z]
        c, s = np.cos(yaw), np.sin(yaw)
        lx, lz = c * d[:, 0] - s * d[:, 2], s * d[:, 0] + c * d[:, 2]
        dh = h * (expend[0] - 1)
        inside = (
            (np.abs(lx) < l * expend[2] / 2)
            & (np.abs(lz) < w * expend[1] / 2)
            & (d[:, 1] < dh / 2)
            & (d[:, 1] > -h - dh / 2)
        )
        if name in ids:
            labels[inside] = ids.index(name) + (0 if fold_yaw(yaw) < np.pi / 4 else 1)
            valid[inside] = True
        else:
            labels[inside] = dontcare
            valid[inside] = False
    return labels, valid


@pytest.mark.parametrize("method", ["Car", "Pedestrian_and_Cyclist", "yaw"])
def test_real_frame_matches_the_original_rules(kitti_sample: Path, method: str) -> None:
    frame = load_frame(kitti_sample, "000114")
    boxes = labels_to_boxes(frame.labels)
    names = [lb.type for lb in frame.labels]
    assert {"Car", "Van", "DontCare"} <= set(names)
    expend = (1.1, 1.2, 1.3)
    labels, targets, valid = assign_targets(frame.points_rect, boxes, names, method, expend_factor=expend)
    xyz = frame.points_rect.astype(np.float64)
    want_labels, want_valid = _original_rules(xyz, boxes, names, method, expend)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(valid, want_valid)
    if method != "Pedestrian_and_Cyclist":
        assert valid.sum() > 500  # the frame's cars hold many points
    np.testing.assert_array_equal(targets[~valid], 0.0)
