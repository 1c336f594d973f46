"""Tests of pgnn.graphs.encoding: exact inverses, the original's formulas, the reference decoding of T1's
output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pgnn.graphs.encoding import (
    DEFAULT_ENCODING,
    ENCODINGS,
    MEDIAN_OBJECT_SIZE,
    class_table,
    decode_all_classes,
    get_encoding,
)
from pgnn.graphs.targets import CLASS_NAMES

CAR = CLASS_NAMES["Car"]
YAW = CLASS_NAMES["yaw"]
encode_default = get_encoding("classaware_all_class_box_encoding")[0]
encode_canonical = get_encoding("classaware_all_class_box_canonical_encoding")[0]
encode_voxelnet = get_encoding("voxelnet_box_encoding")[0]


def _random_case(n: int, class_names: tuple[str, ...], seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, len(class_names), n)
    xyz = rng.uniform(-40, 70, (n, 3))
    centre = xyz + rng.normal(0, 2, (n, 3))
    size = rng.uniform(0.3, 12.0, (n, 3))
    boxes = np.concatenate([centre, size, rng.uniform(-np.pi, np.pi, (n, 1))], axis=1)
    return boxes, xyz, ids


@pytest.mark.parametrize("name", sorted(ENCODINGS))
@pytest.mark.parametrize("layout", ["Car", "Pedestrian_and_Cyclist", "yaw"])
def test_decode_inverts_encode(name: str, layout: str) -> None:
    encode, decode = ENCODINGS[name]
    names = CLASS_NAMES[layout]
    boxes, xyz, ids = _random_case(2000, names)
    encoded = encode(boxes, xyz, ids, names)
    assert encoded.shape == (2000, 7) and encoded.dtype == np.float64
    np.testing.assert_allclose(decode(encoded, xyz, ids, names), boxes, rtol=1e-12, atol=1e-9)
    # float32 in, float32 out, still inverse to 1e-5
    b32, x32 = boxes.astype(np.float32), xyz.astype(np.float32)
    e32 = encode(b32, x32, ids, names)
    assert e32.dtype == np.float32
    np.testing.assert_allclose(decode(e32, x32, ids, names), b32, rtol=1e-5, atol=1e-5)


def test_default_encoding_formula_for_car() -> None:
    box = np.array([[1.0, 1.7, 20.0, 4.2, 1.4, 1.7, 0.3], [1.0, 1.7, 20.0, 4.2, 1.4, 1.7, 1.9]])
    p = np.array([[0.5, 1.0, 19.0], [0.5, 1.0, 19.0]])
    e = encode_default(box, p, np.array([1, 2]), CAR)
    expected_h = [
        0.5 / 3.88,
        0.7 / 1.5,
        1.0 / 1.63,
        np.log(4.2 / 3.88),
        np.log(1.4 / 1.5),
        np.log(1.7 / 1.63),
        0.3 / (np.pi / 4),
    ]
    np.testing.assert_allclose(e[0], expected_h)
    np.testing.assert_allclose(e[1, :6], expected_h[:6])
    np.testing.assert_allclose(e[1, 6], (1.9 - np.pi / 2) / (np.pi / 4))  # vertical id: yaw about pi/2


def test_background_and_dontcare_rows_are_only_centred() -> None:
    box = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.7]] * 2)
    p = np.array([[0.5, 0.5, 0.5]] * 2)
    e = encode_default(box, p, np.array([0, 3]), CAR)
    np.testing.assert_allclose(e, [[0.5, 1.5, 2.5, 4.0, 5.0, 6.0, 0.7]] * 2)


def test_class_table_orientation_and_sizes() -> None:
    size, yaw0, encoded = class_table(YAW, MEDIAN_OBJECT_SIZE)
    assert encoded.tolist() == [False, True, True, True, True, True, True, False]
    np.testing.assert_allclose(yaw0, [0, 0, np.pi / 2, 0, np.pi / 2, 0, np.pi / 2, 0])
    np.testing.assert_allclose(size[3], MEDIAN_OBJECT_SIZE["Pedestrian"])
    np.testing.assert_allclose(size[6], MEDIAN_OBJECT_SIZE["Cyclist"])
    _, yaw0, _ = class_table(("Background", "Car", "Car", "Car", "Car", "DontCare"), MEDIAN_OBJECT_SIZE)
    np.testing.assert_allclose(yaw0, [0, 0, np.pi / 2, np.pi, -np.pi / 2, 0])  # Car_heading's four bins
    with pytest.raises(ValueError, match="more than 4 ids"):
        class_table(("Background", *["Car"] * 5), MEDIAN_OBJECT_SIZE)


def test_voxelnet_divides_every_yaw_by_half_pi() -> None:
    box = np.array([[1.0, 1.7, 20.0, 3.9, 1.56, 1.6, 1.0]] * 2)
    p = np.zeros((2, 3))
    e = encode_voxelnet(box, p, np.array([0, 1]), CAR)
    np.testing.assert_allclose(e[:, 6], 1.0 / (np.pi / 2))
    np.testing.assert_allclose(e[1, 3:6], 0.0, atol=1e-12)  # the Car anchor itself
    np.testing.assert_allclose(e[1, :3], [1.0 / 3.9, 1.7 / 1.56, 20.0 / 1.6])


def test_canonical_encoding_centres_in_the_box_frame() -> None:
    # a box straight ahead of the vertex along its own heading: only e0 (along the length) is non-zero
    yaw = 0.4
    heading = np.array([np.cos(yaw), 0.0, -np.sin(yaw)])  # local +x in the camera frame
    p = np.array([[2.0, 1.0, 10.0]])
    box = np.concatenate([p[0] + 1.94 * heading, [3.88, 1.5, 1.63, yaw]])[None]
    e = encode_canonical(box, p, np.array([1]), CAR)
    np.testing.assert_allclose(e[0, :3], [0.5, 0.0, 0.0], atol=1e-12)


def test_bad_shapes_and_ids_are_rejected() -> None:
    boxes, xyz, ids = _random_case(5, CAR)
    with pytest.raises(ValueError, match=r"\(N, 7\)"):
        encode_default(boxes[:, :6], xyz, ids, CAR)
    with pytest.raises(ValueError, match="ids in"):
        encode_default(boxes, xyz, ids + 4, CAR)
    with pytest.raises(ValueError, match="unknown box encoding"):
        decode_all_classes(np.zeros((2, 4, 7)), np.zeros((2, 3)), CAR, encoding="nope")


def test_decoding_reproduces_the_reference_candidates(pointgnn_reference: Path) -> None:
    """T1's pred_box decoded at run.py's candidates equals its decoded nms_in_boxes."""
    with np.load(pointgnn_reference / "T1" / "000114.npz") as d:
        pred_box, xyz = d["pred_box"], d["vertex_coord_2"]
        box_indices, nms_in_boxes = d["box_indices"], d["nms_in_boxes"]
    decoded = decode_all_classes(pred_box, xyz, CAR, DEFAULT_ENCODING)  # (N, 4, 7)
    assert decoded.shape == pred_box.shape and decoded.dtype == np.float32
    assert len(box_indices) == 287
    np.testing.assert_allclose(decoded.reshape(-1, 7)[box_indices], nms_in_boxes, atol=1e-4, rtol=0)
    # both orientations occur among the candidates and decode differently
    classes = box_indices % 4
    assert set(classes.tolist()) == {1, 2}
