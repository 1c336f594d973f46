"""Tests for pgnn.core.boxes: corners, points in boxes, rotated IoU against shapely, projection, alpha."""

from __future__ import annotations

import numpy as np
import pytest
from shapely.geometry import Polygon

from pgnn.core.boxes import (
    alpha_from_box,
    boxes_bev_footprints,
    boxes_to_corners,
    boxes_to_image_2d,
    expand_boxes,
    iou_2d,
    iou_3d,
    iou_bev,
    points_in_boxes,
    points_in_boxes_index,
)

# KITTI 000114's P2 (rounded): a realistic camera.
P2 = np.array(
    [
        [721.5377, 0.0, 609.5593, 44.85728],
        [0.0, 721.5377, 172.854, 0.2163791],
        [0.0, 0.0, 1.0, 0.002745884],
    ]
)


def random_boxes(rng: np.random.Generator, m: int, spread: float = 3.0) -> np.ndarray:
    """(m, 7) boxes scattered so that many pairs overlap."""
    return np.column_stack(
        [
            rng.uniform(-spread, spread, m),
            rng.uniform(-1.0, 1.0, m),
            rng.uniform(-spread, spread, m),
            rng.uniform(0.3, 4.0, m),
            rng.uniform(0.3, 2.0, m),
            rng.uniform(0.3, 4.0, m),
            rng.uniform(-2 * np.pi, 2 * np.pi, m),
        ]
    )


def reference_corners(box: np.ndarray) -> np.ndarray:
    """Corners by the textbook formula: R @ local + centre (the original's convention)."""
    x, y, z, l, h, w, ry = box
    R = np.array([[np.cos(ry), 0, np.sin(ry)], [0, 1, 0], [-np.sin(ry), 0, np.cos(ry)]])
    local = np.array(
        [
            [l / 2, 0, w / 2],
            [l / 2, 0, -w / 2],
            [-l / 2, 0, -w / 2],
            [-l / 2, 0, w / 2],
            [l / 2, -h, w / 2],
            [l / 2, -h, -w / 2],
            [-l / 2, -h, -w / 2],
            [-l / 2, -h, w / 2],
        ]
    )
    return local @ R.T + np.array([x, y, z])


def shapely_ious(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference BEV and 3D IoU from shapely polygons; NaN where the union is 0."""
    pa = [Polygon(f) for f in boxes_bev_footprints(a)]
    pb = [Polygon(f) for f in boxes_bev_footprints(b)]
    bev = np.full((len(a), len(b)), np.nan)
    v3 = np.full((len(a), len(b)), np.nan)
    for i, p in enumerate(pa):
        for k, q in enumerate(pb):
            inter = p.intersection(q).area
            union = p.area + q.area - inter
            if union > 0:
                bev[i, k] = inter / union
            y_ov = max(0.0, min(a[i, 1], b[k, 1]) - max(a[i, 1] - a[i, 4], b[k, 1] - b[k, 4]))
            vi = inter * y_ov
            vu = p.area * a[i, 4] + q.area * b[k, 4] - vi
            if vu > 0:
                v3[i, k] = vi / vu
    return bev, v3


# ---------------------------------------------------------------------------------------------- corners


def test_corners_match_rotation_formula() -> None:
    rng = np.random.default_rng(0)
    boxes = random_boxes(rng, 50)
    corners = boxes_to_corners(boxes)
    assert corners.shape == (50, 8, 3)
    for box, c in zip(boxes, corners, strict=True):
        np.testing.assert_allclose(c, reference_corners(box), atol=1e-12)


def test_corner_order_and_axes() -> None:
    box = np.array([[1.0, 2.0, 10.0, 4.0, 1.5, 2.0, 0.0]])
    c = boxes_to_corners(box)[0]
    np.testing.assert_allclose(c[0], [3.0, 2.0, 11.0])  # +l/2 along x, +w/2 along z, bottom (y = 2)
    np.testing.assert_allclose(c[2], [-1.0, 2.0, 9.0])
    np.testing.assert_allclose(c[:4, 1], 2.0)  # bottom face at y
    np.testing.assert_allclose(c[4:, 1], 0.5)  # top face at y - h (y points down)
    np.testing.assert_allclose(c[4:, [0, 2]], c[:4, [0, 2]])
    # ry = -pi/2 turns the heading (local +x) to +z: the length now runs along z.
    c90 = boxes_to_corners(np.array([[0.0, 0.0, 0.0, 4.0, 1.0, 2.0, -np.pi / 2]]))[0]
    np.testing.assert_allclose(np.ptp(c90[:, 2]), 4.0, atol=1e-12)
    np.testing.assert_allclose(np.ptp(c90[:, 0]), 2.0, atol=1e-12)
    assert np.mean(c90[[0, 1], 2]) == pytest.approx(2.0)  # front corners 0, 1 are at +z


def test_bad_box_shape_raises() -> None:
    with pytest.raises(ValueError, match=r"\(M, 7\)"):
        boxes_to_corners(np.zeros((3, 6)))


def test_expand_boxes_keeps_vertical_middle() -> None:
    box = np.array([[0.0, 1.0, 5.0, 4.0, 2.0, 1.0, 0.3]])
    same = expand_boxes(box, (1.0, 1.0, 1.0))
    np.testing.assert_allclose(same, box)
    big = expand_boxes(box, (1.1, 1.2, 1.5))[0]
    np.testing.assert_allclose(big[3:6], [4.4, 2.4, 1.5])
    assert big[1] - big[4] / 2 == pytest.approx(1.0 - 2.0 / 2)  # middle height unchanged
    assert big[1] == pytest.approx(1.2)


# ---------------------------------------------------------------------------------------- points in boxes


def brute_points_in_boxes(points: np.ndarray, boxes: np.ndarray, margin: float) -> np.ndarray:
    out = np.zeros((len(points), len(boxes)), dtype=bool)
    for j, (x, y, z, l, h, w, ry) in enumerate(boxes):
        d = points.astype(np.float64) - [x, y, z]
        lx = np.cos(ry) * d[:, 0] - np.sin(ry) * d[:, 2]
        lz = np.sin(ry) * d[:, 0] + np.cos(ry) * d[:, 2]
        out[:, j] = (
            (np.abs(lx) <= l / 2 + margin)
            & (np.abs(lz) <= w / 2 + margin)
            & (d[:, 1] <= margin)
            & (d[:, 1] >= -h - margin)
        )
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("margin", [0.0, 0.25, -0.1])
def test_points_in_boxes_matches_brute_force(dtype: type, margin: float) -> None:
    rng = np.random.default_rng(1)
    boxes = random_boxes(rng, 30)
    points = rng.uniform([-5, -2.5, -5], [5, 1.5, 5], size=(20_000, 3)).astype(dtype)
    mask = points_in_boxes(points, boxes, margin)
    assert mask.shape == (20_000, 30) and mask.dtype == bool
    ref = brute_points_in_boxes(points, boxes, margin)
    # Same float64 arithmetic as the kernel, so not even points within rounding of a face may differ.
    assert np.count_nonzero(mask != ref) == 0
    assert 0 < mask.sum() < mask.size


def test_points_on_faces_are_inside() -> None:
    box = np.array([[0.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0]])
    # Face centres, and a corner (2, y, 1) of the footprint.
    on_faces = np.array([[2.0, -1.0, 0.0], [-2.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.0, -2.0, 0.0], [2, 0, 1.0]])
    outside = np.array([[2.001, -1.0, 0.0], [0.0, 0.001, 0.0], [0.0, -2.001, 0.0], [0.0, -1.0, -1.001]])
    assert points_in_boxes(on_faces, box).all()
    assert not points_in_boxes(outside, box).any()
    assert points_in_boxes(outside, box, margin=0.01).all()


def test_points_in_boxes_empty_inputs() -> None:
    boxes = np.array([[0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]])
    assert points_in_boxes(np.zeros((0, 3)), boxes).shape == (0, 1)
    assert points_in_boxes(np.zeros((5, 3)), np.zeros((0, 7))).shape == (5, 0)
    np.testing.assert_array_equal(points_in_boxes_index(np.zeros((4, 3)), np.zeros((0, 7))), [-1] * 4)


def test_points_in_boxes_index_later_box_wins() -> None:
    boxes = np.array(
        [
            [0.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0],
            [1.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0],  # overlaps box 0 on x in [-1, 2]
            [10.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0],
        ]
    )
    points = np.array([[-1.5, -1.0, 0.0], [0.5, -1.0, 0.0], [2.5, -1.0, 0.0], [10.0, -0.5, 0.0], [5, -1, 0]])
    np.testing.assert_array_equal(points_in_boxes_index(points, boxes), [0, 1, 1, 2, -1])
    rng = np.random.default_rng(2)
    boxes = random_boxes(rng, 20)
    pts = rng.uniform(-4, 4, size=(5000, 3))
    mask = points_in_boxes(pts, boxes)
    idx = points_in_boxes_index(pts, boxes)
    last = np.where(mask.any(axis=1), mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1), -1)
    np.testing.assert_array_equal(idx, last)


# ------------------------------------------------------------------------------------------------ IoU


def special_boxes() -> np.ndarray:
    """Identical, contained, touching, 90-degree-rotated, degenerate, far and stacked boxes."""
    base = [0.0, 0.0, 0.0, 4.0, 1.5, 2.0, 0.3]
    return np.array(
        [
            base,
            base,  # identical
            [0.0, 0.0, 0.0, 2.0, 1.0, 1.0, 0.3],  # contained (same centre and yaw, smaller)
            [0.0, 0.0, 0.0, 2.0, 1.5, 4.0, 0.3 + np.pi / 2],  # same footprint, l and w swapped
            [4.0, 0.0, 0.0, 4.0, 1.5, 2.0, 0.0],  # touches [0, 0, 0, 4, 1.5, 2, 0] along x = 2
            [0.0, 0.0, 0.0, 4.0, 1.5, 2.0, 0.0],
            [0.0, 0.0, 0.0, 4.0, 1.5, 2.0, np.pi],  # 180 degrees: same footprint as the previous
            [0.0, 0.0, 0.0, 4.0, 1.5, 2.0, np.pi / 4],
            [0.0, -1.5, 0.0, 4.0, 1.5, 2.0, 0.0],  # stacked on top of the ry = 0 box: touches in y
            [0.0, -0.75, 0.0, 4.0, 1.5, 2.0, 0.0],  # half overlapping in y
            [0.0, 0.0, 0.0, 0.0, 1.5, 2.0, 0.0],  # zero length
            [0.0, 0.0, 0.0, 4.0, 0.0, 2.0, 0.0],  # zero height
            [50.0, 0.0, 50.0, 4.0, 1.5, 2.0, 1.0],  # far away
            [1.0, 0.0, 0.5, 4.0, 1.5, 2.0, 1e-9],  # nearly axis-aligned
            [0.0, 0.0, 0.0, 1e-3, 1.5, 1e-3, 0.7],  # tiny
        ]
    )


def test_iou_matches_shapely_random_and_special() -> None:
    rng = np.random.default_rng(3)
    boxes = np.concatenate([random_boxes(rng, 150), special_boxes()])
    bev = iou_bev(boxes, boxes)
    v3 = iou_3d(boxes, boxes)
    ref_bev, ref_3d = shapely_ious(boxes, boxes)
    assert bev.shape == v3.shape == (len(boxes), len(boxes))
    for got, ref in ((bev, ref_bev), (v3, ref_3d)):
        defined = ~np.isnan(ref)
        np.testing.assert_allclose(got[defined], ref[defined], atol=1e-6, rtol=0)
        assert np.all(got[~defined] == 0.0)  # zero union: 0, not NaN
        assert np.all((got >= 0.0) & (got <= 1.0))
    assert 0.2 < np.mean(bev > 0) < 0.9  # the random set really overlaps


def test_iou_special_cases_exact_values() -> None:
    s = special_boxes()
    bev = iou_bev(s, s)
    v3 = iou_3d(s, s)
    assert bev[0, 1] == pytest.approx(1.0, abs=1e-12)
    assert bev[0, 2] == pytest.approx(2.0 / 8.0, abs=1e-12)  # contained: area ratio
    assert v3[0, 2] == pytest.approx((2.0 * 1.0) / (8.0 * 1.5), abs=1e-12)  # contained: volume ratio
    assert bev[0, 3] == pytest.approx(1.0, abs=1e-12)  # l and w swapped, turned 90 degrees
    assert bev[5, 6] == pytest.approx(1.0, abs=1e-12)
    assert bev[4, 5] == 0.0 and v3[4, 5] == 0.0  # touching
    assert bev[5, 8] == pytest.approx(1.0) and v3[5, 8] == 0.0  # stacked: same footprint, touching in y
    assert v3[5, 9] == pytest.approx(0.75 / 2.25, abs=1e-12)  # half height overlap: 0.75 / (3 - 0.75)
    assert np.all(bev[10] == 0.0) and np.all(v3[11] == 0.0)  # degenerate boxes
    assert bev[0, 12] == 0.0
    # 45 degrees vs axis-aligned 4 x 2 rectangle: compare with shapely once more, explicitly.
    ref_bev, _ = shapely_ious(s[[5]], s[[7]])
    assert bev[5, 7] == pytest.approx(ref_bev[0, 0], abs=1e-12)


def test_iou_symmetric_and_shapes() -> None:
    rng = np.random.default_rng(4)
    a = random_boxes(rng, 20)
    b = random_boxes(rng, 7)
    np.testing.assert_allclose(iou_3d(a, b), iou_3d(b, a).T, atol=1e-12)
    np.testing.assert_allclose(iou_bev(a, b), iou_bev(b, a).T, atol=1e-12)
    assert iou_3d(a, np.zeros((0, 7))).shape == (20, 0)
    assert iou_bev(np.zeros((0, 7)), b).shape == (0, 7)


def test_iou_2d() -> None:
    a = np.array([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 15.0, 15.0], [0.0, 0.0, 0.0, 0.0]])
    b = np.array([[0.0, 0.0, 10.0, 10.0], [10.0, 0.0, 20.0, 10.0], [2.0, 2.0, 4.0, 4.0]])
    got = iou_2d(a, b)
    expected = np.array(
        [
            [1.0, 0.0, 4.0 / 100.0],
            [25.0 / 175.0, 25.0 / 175.0, 0.0],
            [0.0, 0.0, 0.0],
        ]
    )
    np.testing.assert_allclose(got, expected, atol=1e-12)
    with pytest.raises(ValueError, match=r"\(M, 4\)"):
        iou_2d(np.zeros((2, 3)), b)


# ------------------------------------------------------------------------------------- image projection


def project_corners(boxes: np.ndarray, P: np.ndarray) -> np.ndarray:
    c = boxes_to_corners(boxes)  # (M, 8, 3)
    hom = np.concatenate([c, np.ones((*c.shape[:2], 1))], axis=2) @ P.T
    return hom[..., :2] / hom[..., 2:3]


def test_box_in_view_projects_its_corners() -> None:
    boxes = np.array([[1.0, 1.6, 15.0, 3.9, 1.5, 1.6, 0.4], [-4.0, 1.7, 30.0, 4.2, 1.6, 1.7, -1.2]])
    box2d, trunc = boxes_to_image_2d(boxes, P2, 1242, 375)
    uv = project_corners(boxes, P2)
    np.testing.assert_allclose(box2d, np.concatenate([uv.min(axis=1), uv.max(axis=1)], axis=1), atol=1e-9)
    np.testing.assert_allclose(trunc, 0.0)


def test_box_leaving_the_image_is_truncated() -> None:
    box = np.array([[-9.0, 1.6, 8.0, 3.9, 1.5, 1.6, 0.0]])  # left edge of the view
    box2d, trunc = boxes_to_image_2d(box, P2, 1242, 375)
    uv = project_corners(box, P2)[0]
    lo, hi = uv.min(axis=0), uv.max(axis=0)
    assert lo[0] < 0  # really leaves the image
    clipped = np.clip(np.concatenate([lo, hi]), 0, [1242, 375, 1242, 375])
    np.testing.assert_allclose(box2d[0], clipped, atol=1e-9)
    expected = 1 - (clipped[2] - clipped[0]) * (clipped[3] - clipped[1]) / np.prod(hi - lo)
    assert trunc[0] == pytest.approx(expected)
    assert 0 < trunc[0] < 1


def test_boxes_behind_or_outside_the_camera() -> None:
    boxes = np.array(
        [
            [0.0, 1.6, -10.0, 3.9, 1.5, 1.6, 0.0],  # wholly behind
            [3.0, 1.6, 0.5, 3.9, 1.5, 1.6, 1.57],  # straddles the camera plane
            [300.0, 1.6, 10.0, 3.9, 1.5, 1.6, 0.0],  # in front but far right of the image
        ]
    )
    box2d, trunc = boxes_to_image_2d(boxes, P2, 1242, 375)
    assert np.all(np.isfinite(box2d)) and np.all(np.isfinite(trunc))
    np.testing.assert_array_equal(box2d[0], 0.0)
    assert trunc[0] == 1.0
    assert trunc[1] > 0.9  # the near-plane cut projects far outside the image
    assert trunc[2] == 1.0  # outside: nothing left after clipping
    assert np.all((box2d[:, [0, 2]] >= 0) & (box2d[:, [0, 2]] <= 1242))
    assert np.all((box2d[:, [1, 3]] >= 0) & (box2d[:, [1, 3]] <= 375))


def test_alpha_from_box() -> None:
    boxes = np.array(
        [
            [0.0, 1.0, 10.0, 4, 1.5, 1.6, 0.0],
            [10.0, 1.0, 10.0, 4, 1.5, 1.6, 0.0],
            [-10.0, 1.0, 10.0, 4, 1.5, 1.6, 3.0],  # 3 + pi/4 wraps
            [0.0, 1.0, 10.0, 4, 1.5, 1.6, np.pi],  # exactly pi maps to -pi
        ]
    )
    alpha = alpha_from_box(boxes)
    np.testing.assert_allclose(alpha, [0.0, -np.pi / 4, 3.0 + np.pi / 4 - 2 * np.pi, -np.pi], atol=1e-12)
    rng = np.random.default_rng(5)
    alpha = alpha_from_box(random_boxes(rng, 1000, spread=40.0))
    assert np.all((alpha >= -np.pi) & (alpha < np.pi))
