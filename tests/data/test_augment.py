"""Tests for pgnn.data.augment and its ops (augment_ops, augment_box_ops): every op keeps points, attributes
and boxes together, is seeded, and means what the original's op meant; the ops and their config
(pgnn.config.augment) agree."""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable

import numpy as np
import pytest
from pydantic import ValidationError

from pgnn.config.augment import AUGMENT_KWARGS, ORIGINAL_CAR_AUGMENT, AugmentConfig, AugmentStep
from pgnn.core.boxes import expand_boxes, iou_3d, points_in_boxes
from pgnn.data.augment import AUGMENT_OPS, apply_augmentations, from_original_configs
from pgnn.data.augment_box_ops import (
    dilute_background,
    random_box_global_rotation,
    random_box_rotation,
    random_box_shift,
    remove_background,
)
from pgnn.data.augment_ops import (
    random_drop,
    random_flip_all,
    random_global_drop,
    random_jitter,
    random_rotation_all,
    random_scale_all,
    random_transition,
    random_voxel_downsample,
)
from pgnn.data.points import PointSet, Scene, rotation_y, wrap_angle

# The original's configs/car_auto_T3_train_train_config "data_aug_configs", verbatim.
ORIGINAL_T3_DATA_AUG = [
    {
        "method_kwargs": {
            "expend_factor": [1.0, 1.0, 1.0],
            "method_name": "normal",
            "yaw_std": 0.39269908169872414,
        },
        "method_name": "random_rotation_all",
    },
    {"method_kwargs": {"flip_prob": 0.5}, "method_name": "random_flip_all"},
    {
        "method_kwargs": {
            "appr_factor": 10,
            "expend_factor": [1.1, 1.1, 1.1],
            "max_overlap_num_allowed": 100,
            "max_overlap_rate": 0.01,
            "max_trails": 100,
            "method_name": "normal",
            "xyz_std": [3, 0, 3],
        },
        "method_name": "random_box_shift",
    },
]

ATTR_NAMES = ("id", "r", "g", "b", "s0", "s1", "s2", "s3")

# Ops that move points and boxes rigidly together (a point of box i stays in box i).
RIGID_OPS = (
    "random_rotation_all",
    "random_flip_all",
    "random_scale_all",
    "random_transition",
    "random_box_rotation",
    "random_box_global_rotation",
    "random_box_shift",
    "random_drop",
    "random_global_drop",
    "random_voxel_downsample",
    "dilute_background",
    "remove_background",
)
# Parameters that make each op actually do something on the test scene.
ACTIVE = {
    "random_flip_all": {"flip_prob": 1.0},
    "random_voxel_downsample": {"voxel_std": 1e6, "max_voxel": 0.3},
    "random_global_drop": {"drop_std": 0.5},
    "random_box_rotation": {"max_overlap_num_allowed": 1e9},
    "random_box_global_rotation": {"max_overlap_num_allowed": 1e9},
    "random_box_shift": {"max_overlap_num_allowed": 1e9},
}


def box_points(rng: np.random.Generator, box: np.ndarray, n: int, shrink: float = 0.9) -> np.ndarray:
    """n points strictly inside a box. (n, 3)."""
    x, y, z, l, h, w, ry = box
    local = np.column_stack(
        [
            rng.uniform(-l / 2, l / 2, n) * shrink,
            -rng.uniform(0.05, 0.95, n) * h,
            rng.uniform(-w / 2, w / 2, n) * shrink,
        ]
    )
    return local @ rotation_y(ry).T + np.array([x, y, z])


def make_scene(seed: int = 0) -> tuple[PointSet, np.ndarray, tuple[str, ...]]:
    """Three objects far apart, a ground plane, clutter, and a DontCare row; attrs[:, 0] is a point id."""
    rng = np.random.default_rng(seed)
    boxes = np.array(
        [
            [-8.0, 1.7, 15.0, 3.9, 1.5, 1.6, 0.4],
            [6.0, 1.7, 22.0, 0.8, 1.8, 0.6, -1.2],
            [0.0, 1.6, 38.0, 4.2, 1.6, 1.7, 2.9],
            [-1000.0, -1000.0, -1000.0, -1.0, -1.0, -1.0, -10.0],
        ]
    )
    names = ("Car", "Pedestrian", "Car", "DontCare")
    parts = [box_points(rng, b, n) for b, n in zip(boxes[:3], (300, 80, 150), strict=True)]
    ground = np.column_stack(
        [rng.uniform(-25, 25, 1500), 1.7 + rng.normal(0, 0.02, 1500), rng.uniform(2, 60, 1500)]
    )
    clutter = np.column_stack([rng.uniform(-25, 25, 400), rng.uniform(-2, 1.5, 400), rng.uniform(2, 60, 400)])
    clutter = clutter[~points_in_boxes(clutter, expand_boxes(boxes[:3], (1.3, 1.3, 1.3))).any(axis=1)]
    xyz = np.concatenate(parts + [ground, clutter]).astype(np.float32)
    n = xyz.shape[0]
    attrs = np.column_stack([np.arange(n), rng.random((n, 3)), rng.dirichlet(np.ones(4), n)]).astype(
        np.float32
    )
    return PointSet(xyz, attrs, ATTR_NAMES), boxes, names


def point_ids(points: PointSet) -> np.ndarray:
    return points.attrs[:, 0].astype(np.int64)


def assert_attrs_attached(before: PointSet, after: PointSet) -> None:
    """Every output point's attributes are the attributes of the input point with its id."""
    ids = point_ids(after)
    assert np.array_equal(after.attrs, before.attrs[ids])
    assert after.attr_names == before.attr_names
    assert len(np.unique(ids)) == len(ids)


def call(op: Callable[..., Scene], points, boxes, names, rng, **kwargs) -> Scene:
    """``op`` with ``kwargs`` and its config's defaults for the rest (the ops have none of their own)."""
    step = AugmentStep.model_validate({"method": op.__name__, **kwargs})
    return op(points, boxes, names, rng, **step.kwargs)


def run(op: str, scene, seed: int, **kwargs):
    points, boxes, names = scene
    return call(AUGMENT_OPS[op], points, boxes, names, np.random.default_rng(seed), **kwargs)


# ----------------------------------------------------------------------------------------------------------
# Properties shared by all ops


@pytest.mark.parametrize("op", sorted(AUGMENT_OPS))
def test_attributes_stay_attached_and_inputs_untouched(op: str) -> None:
    scene = make_scene()
    points, boxes, names = scene
    xyz0, attrs0, boxes0 = points.xyz.copy(), points.attrs.copy(), boxes.copy()
    out_points, out_boxes, out_names = run(op, scene, 3, **ACTIVE.get(op, {}))
    assert_attrs_attached(points, out_points)
    assert out_points.xyz.dtype == np.float32 and out_points.attrs.dtype == np.float32
    assert out_boxes.shape == (len(out_names), 7)
    # pure: the inputs are unchanged
    assert np.array_equal(points.xyz, xyz0) and np.array_equal(points.attrs, attrs0)
    assert np.array_equal(boxes, boxes0)


@pytest.mark.parametrize("op", RIGID_OPS)
def test_points_stay_in_their_boxes(op: str) -> None:
    scene = make_scene()
    points, boxes, names = scene
    before = points_in_boxes(points.xyz, boxes[:3])  # (N, 3)
    out_points, out_boxes, out_names = run(op, scene, 5, **ACTIVE.get(op, {}))
    rows = [i for i, n in enumerate(out_names) if n != "DontCare"]
    assert [out_names[i] for i in rows] == list(names[:3])
    after = points_in_boxes(out_points.xyz, out_boxes[rows], margin=1e-4)  # (N', 3)
    was_inside = before[point_ids(out_points)]  # (N', 3)
    assert was_inside.sum() > 100
    assert np.all(after[was_inside])
    if op not in ("random_box_shift", "random_box_rotation"):  # these may sweep ground points into a box
        strictly_after = points_in_boxes(out_points.xyz, out_boxes[rows], margin=-1e-4)
        assert not np.any(strictly_after & ~was_inside)


@pytest.mark.parametrize("op", sorted(AUGMENT_OPS))
def test_deterministic_per_seed(op: str) -> None:
    scene = make_scene()
    kwargs = ACTIVE.get(op, {})
    a = run(op, scene, 11, **kwargs)
    b = run(op, scene, 11, **kwargs)
    assert np.array_equal(a[0].xyz, b[0].xyz) and np.array_equal(a[0].attrs, b[0].attrs)
    assert np.array_equal(a[1], b[1]) and a[2] == b[2]
    if op in ("random_flip_all", "remove_background"):
        return  # nothing random left (p = 1; every object kept)
    others = [run(op, scene, s, **kwargs) for s in (12, 13, 14)]
    assert any(
        o[0].xyz.shape != a[0].xyz.shape
        or not np.array_equal(o[0].xyz, a[0].xyz)
        or not np.array_equal(o[1], a[1])
        for o in others
    )


@pytest.mark.parametrize(
    "op", ["random_rotation_all", "random_flip_all", "random_box_rotation", "random_box_global_rotation"]
)
def test_yaw_is_wrapped(op: str) -> None:
    points, boxes, names = make_scene()
    boxes = boxes.copy()
    boxes[:3, 6] = [3.1, -3.1, 3.13]
    for seed in range(5):
        _, out, out_names = run(op, (points, boxes, names), seed, **ACTIVE.get(op, {}))
        ry = out[[i for i, n in enumerate(out_names) if n != "DontCare"], 6]
        assert np.all(ry >= -np.pi) and np.all(ry < np.pi)


def test_wrap_angle() -> None:
    a = np.array([-np.pi, np.pi, 3 * np.pi / 2, -3 * np.pi / 2, 0.3, 7.0])
    w = wrap_angle(a)
    assert np.all(w >= -np.pi) and np.all(w < np.pi)
    assert np.allclose(np.cos(w), np.cos(a)) and np.allclose(np.sin(w), np.sin(a))


def test_dont_care_rows_pass_through_geometric_ops() -> None:
    scene = make_scene()
    for op in (
        "random_rotation_all",
        "random_flip_all",
        "random_scale_all",
        "random_transition",
        "random_box_shift",
    ):
        _, boxes, names = run(op, scene, 2, **ACTIVE.get(op, {}))
        assert names[3] == "DontCare"
        assert np.array_equal(boxes[3], scene[1][3])


# ----------------------------------------------------------------------------------------------------------
# Parameter semantics


def test_flip_mirrors_x_and_yaw() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(random_flip_all, points, boxes, names, np.random.default_rng(0), flip_prob=1.0)
    assert np.array_equal(out.xyz[:, 0], -points.xyz[:, 0])
    assert np.array_equal(out.xyz[:, 1:], points.xyz[:, 1:])
    assert np.allclose(out_boxes[:3, 0], -boxes[:3, 0])
    assert np.allclose(out_boxes[:3, 6], wrap_angle(np.pi - boxes[:3, 6]))
    assert np.allclose(out_boxes[:3, 1:6], boxes[:3, 1:6])
    same, same_boxes, _ = call(random_flip_all, points, boxes, names, np.random.default_rng(0), flip_prob=0.0)
    assert np.array_equal(same.xyz, points.xyz) and np.array_equal(same_boxes, boxes)


def test_flip_probability() -> None:
    points, boxes, names = make_scene()
    flips = [
        call(random_flip_all, points, boxes, names, np.random.default_rng(s), flip_prob=0.5)[1][0, 0] > 0
        for s in range(200)
    ]
    assert 70 < sum(flips) < 130


def test_rotation_all_is_a_rotation_by_the_drawn_angle() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(
        random_rotation_all, points, boxes, names, np.random.default_rng(7), yaw_std=math.pi / 8
    )
    delta = np.random.default_rng(7).normal(0.0, math.pi / 8)
    rot = rotation_y(delta)
    assert np.allclose(out.xyz, points.xyz.astype(np.float64) @ rot.T, atol=1e-4)
    assert np.allclose(out_boxes[:3, :3], boxes[:3, :3] @ rot.T)
    assert np.allclose(out_boxes[:3, 6], wrap_angle(boxes[:3, 6] + delta))
    # distances are preserved, heights untouched
    i, j = np.random.default_rng(0).integers(0, len(points), (2, 500))
    d0 = np.linalg.norm(points.xyz[i] - points.xyz[j], axis=1)
    d1 = np.linalg.norm(out.xyz[i] - out.xyz[j], axis=1)
    assert np.allclose(d0, d1, atol=1e-4)
    assert np.array_equal(out.xyz[:, 1], points.xyz[:, 1])


def test_rotation_all_distribution() -> None:
    points, boxes, names = make_scene()
    small = PointSet(points.xyz[:10], points.attrs[:10], ATTR_NAMES)
    deltas = [
        wrap_angle(
            call(random_rotation_all, small, boxes, names, np.random.default_rng(s), yaw_std=0.39)[1][0, 6]
            - 0.4
        )
        for s in range(400)
    ]
    assert abs(np.std(deltas) - 0.39) < 0.05 and abs(np.mean(deltas)) < 0.06
    uniform = [
        call(
            random_rotation_all,
            small,
            boxes,
            names,
            np.random.default_rng(s),
            distribution="uniform",
            yaw_std=0.2,
        )[1][0, 6]
        - 0.4
        for s in range(100)
    ]
    assert np.all(np.abs(uniform) <= 0.2 + 1e-12)


def test_scaling_scales_points_and_box_dims() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(random_scale_all, points, boxes, names, np.random.default_rng(4), scale_std=0.05)
    scale = 1.0 + np.random.default_rng(4).normal(0.0, 0.05)
    assert np.allclose(out.xyz, points.xyz * scale, atol=1e-4)
    assert np.allclose(out_boxes[:3, :6], boxes[:3, :6] * scale)
    assert np.array_equal(out_boxes[:3, 6], boxes[:3, 6])


def test_transition_moves_everything_by_one_offset() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(
        random_transition, points, boxes, names, np.random.default_rng(9), xyz_std=(0.5, 0.2, 0.5)
    )
    delta = out_boxes[0, :3] - boxes[0, :3]
    assert np.allclose(out_boxes[:3, :3] - boxes[:3, :3], delta)
    assert np.allclose(out.xyz - points.xyz, delta, atol=1e-4)
    assert np.linalg.norm(delta) > 0


def test_jitter_noise_per_point() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(
        random_jitter, points, boxes, names, np.random.default_rng(1), xyz_std=(0.1, 0.0, 0.3)
    )
    noise = out.xyz.astype(np.float64) - points.xyz
    assert np.array_equal(out_boxes, boxes)
    assert np.array_equal(point_ids(out), point_ids(points))
    assert abs(noise[:, 0].std() - 0.1) < 0.01 and abs(noise[:, 2].std() - 0.3) < 0.03
    assert np.abs(noise[:, 1]).max() < 1e-5


def test_drop_rates() -> None:
    points, boxes, names = make_scene()
    out, _, _ = call(random_drop, points, boxes, names, np.random.default_rng(0), drop_prob=0.5)
    assert 0.45 < len(out) / len(points) < 0.55
    kept, _, _ = call(random_drop, points, boxes, names, np.random.default_rng(0), drop_prob=1.0)
    assert len(kept) == len(points)  # dropping all restores all (the original's rule)
    tiers = [
        len(
            call(
                random_drop,
                points,
                boxes,
                names,
                np.random.default_rng(s),
                drop_prob=(0.0, 0.9),
                tier_prob=(0.5, 0.5),
            )[0]
        )
        for s in range(40)
    ]
    assert len(points) in tiers and any(t < 0.2 * len(points) for t in tiers)
    out, _, _ = call(random_global_drop, points, boxes, names, np.random.default_rng(6), drop_std=0.25)
    expected = abs(np.random.default_rng(6).normal(0.0, 0.25))
    assert abs((1 - len(out) / len(points)) - expected) < 0.04


def test_voxel_downsample_one_point_per_voxel() -> None:
    rng = np.random.default_rng(0)
    centres = np.stack(np.meshgrid(np.arange(10) * 3.0, [0.0], np.arange(10) * 3.0), -1).reshape(
        -1, 3
    )  # (100, 3)
    xyz = (np.repeat(centres, 20, axis=0) + rng.uniform(-0.01, 0.01, (2000, 3))).astype(np.float32)
    points = PointSet(xyz, np.arange(2000, dtype=np.float32)[:, None])
    empty = np.zeros((0, 7))
    out, _, _ = call(
        random_voxel_downsample, points, empty, (), np.random.default_rng(3), voxel_std=1e6, max_voxel=1.0
    )
    per_cluster = np.bincount(point_ids(out) // 20, minlength=100)
    assert np.all(per_cluster >= 1) and np.all(per_cluster <= 2) and per_cluster.sum() < 110
    assert np.all(np.diff(point_ids(out)) > 0)  # input order kept
    same, _, _ = call(random_voxel_downsample, points, empty, (), np.random.default_rng(3), voxel_std=0.0)
    assert same is points  # a voxel below min_voxel changes nothing


def test_box_rotation_turns_object_points_about_box_centre() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(random_box_rotation, points, boxes, names, np.random.default_rng(2))
    for i in range(3):
        own = points_in_boxes(points.xyz, expand_boxes(boxes[i : i + 1], (1.1, 1.0, 1.1)))[:, 0]
        delta = out_boxes[i, 6] - boxes[i, 6]
        assert abs(wrap_angle(delta)) > 0
        ids = np.flatnonzero(own)
        moved = out.xyz[np.isin(point_ids(out), ids)]
        expect = (points.xyz[ids] - boxes[i, :3]) @ rotation_y(delta).T + boxes[i, :3]
        assert np.allclose(moved, expect, atol=1e-4)
        assert np.allclose(out_boxes[i, :6], boxes[i, :6])


def test_box_rotation_blocked_by_neighbours_stays() -> None:
    points, boxes, names = make_scene()
    # a dense ring of points hugging car 0: any turn sweeps its corners into them
    rng = np.random.default_rng(0)
    ring = box_points(rng, expand_boxes(boxes[:1], (1.4, 1.0, 1.4))[0], 4000, shrink=1.0)
    ring = ring[~points_in_boxes(ring, expand_boxes(boxes[:1], (1.12, 1.0, 1.12)))[:, 0]]
    attrs = np.zeros((len(ring), points.attrs.shape[1]), np.float32)
    crowded = PointSet.concat([points, PointSet(ring, attrs, ATTR_NAMES)])
    out, out_boxes, _ = call(
        random_box_rotation, crowded, boxes, names, np.random.default_rng(1), yaw_std=0.5
    )
    # only a turn too small to reach the ring may pass, and the turned box holds none of the ring
    assert abs(wrap_angle(out_boxes[0, 6] - boxes[0, 6])) < 0.02
    gained = points_in_boxes(out.xyz, expand_boxes(out_boxes[:1], (1.1, 1.0, 1.1)))[:, 0]
    assert not np.any(gained[len(points) :])


def test_box_global_rotation_keeps_range_and_clears_destination() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(
        random_box_global_rotation,
        points,
        boxes,
        names,
        np.random.default_rng(8),
        max_overlap_num_allowed=1e9,
        yaw_std=0.3,
    )
    r0 = np.hypot(boxes[:3, 0], boxes[:3, 2])
    r1 = np.hypot(out_boxes[:3, 0], out_boxes[:3, 2])
    assert np.allclose(r0, r1) and np.allclose(out_boxes[:3, 1], boxes[:3, 1])
    # the destination holds only the object's own points: the rest were removed
    own_before = points_in_boxes(points.xyz, expand_boxes(boxes[:3], (1.1, 1.1, 1.1))).any(axis=1)
    at_dest = points_in_boxes(out.xyz, expand_boxes(out_boxes[:3], (1.1, 1.1, 1.1))).any(axis=1)
    assert np.all(own_before[point_ids(out)[at_dest]])
    assert len(out) < len(points)  # ground points at the destinations went


def test_box_shift_defaults_and_vertical_std() -> None:
    points, boxes, names = make_scene()
    out, out_boxes, _ = call(
        random_box_shift, points, boxes, names, np.random.default_rng(0), max_overlap_num_allowed=1e9
    )
    shift = out_boxes[:3, :3] - boxes[:3, :3]
    assert np.all(np.abs(shift[:, [0, 2]]) > 0) and np.all(shift[:, 1] == 0)  # xyz_std (1, 0, 1)
    for i in range(3):
        own = points_in_boxes(points.xyz, expand_boxes(boxes[i : i + 1], (1.1, 1.0, 1.1)))[:, 0]
        ids = np.flatnonzero(own)
        assert np.allclose(out.xyz[np.isin(point_ids(out), ids)], points.xyz[ids] + shift[i], atol=1e-4)


def crowded_scene(seed: int) -> tuple[PointSet, np.ndarray, tuple[str, ...]]:
    """A parking lot: 12 cars in two rows with gaps of ~1 m, points inside each."""
    rng = np.random.default_rng(seed)
    xs = np.arange(6) * 2.8 - 7.0
    boxes = np.array(
        [[x, 1.7, z, 4.2, 1.5, 1.8, -np.pi / 2 + rng.normal(0, 0.05)] for z in (14.0, 19.5) for x in xs]
    )
    xyz = np.concatenate([box_points(rng, b, 60) for b in boxes]).astype(np.float32)
    attrs = np.column_stack([np.arange(len(xyz)), np.zeros((len(xyz), 7))]).astype(np.float32)
    return PointSet(xyz, attrs, ATTR_NAMES), boxes, ("Car",) * len(boxes)


@pytest.mark.parametrize("seed", range(6))
def test_box_shift_avoids_collisions(seed: int) -> None:
    points, boxes, names = crowded_scene(seed)
    assert iou_3d(boxes, boxes)[~np.eye(len(boxes), dtype=bool)].max() < 0.01
    shift = ORIGINAL_CAR_AUGMENT.steps[2].kwargs
    out, out_boxes, _ = random_box_shift(points, boxes, names, np.random.default_rng(seed), **shift)
    iou = iou_3d(out_boxes, out_boxes)[~np.eye(len(boxes), dtype=bool)]
    assert iou.max() < 0.01
    assert (np.abs(out_boxes - boxes).sum(axis=1) > 0).sum() >= 3  # some cars did move


def test_box_shift_point_rule_blocks_moves_into_points() -> None:
    points, boxes, names = make_scene()
    rng = np.random.default_rng(0)
    wall = np.column_stack(
        [rng.uniform(-30, 30, 60000), rng.uniform(0.3, 1.7, 60000), rng.uniform(0, 60, 60000)]
    )
    wall = wall[~points_in_boxes(wall, expand_boxes(boxes[:3], (1.15, 1.15, 1.15))).any(axis=1)]
    filled = PointSet.concat([points, PointSet(wall, np.zeros((len(wall), 8)), ATTR_NAMES)])
    _, out_boxes, _ = call(random_box_shift, filled, boxes, names, np.random.default_rng(0), max_tries=20)
    # any real move takes in wall points (default: none allowed), so objects stay or barely move
    assert np.all(np.linalg.norm(out_boxes[:3, :3] - boxes[:3, :3], axis=1) < 0.1)
    assert np.array_equal(out_boxes[:, 3:], boxes[:, 3:])


def test_background_ops() -> None:
    points, boxes, names = make_scene()
    rng = np.random.default_rng(1)
    dense = rng.uniform(0, 1, (3000, 3)) + np.array([20.0, 0.5, 50.0])  # far from every object
    dense_attrs = np.column_stack([len(points) + np.arange(3000), np.zeros((3000, 7))])
    points = PointSet.concat([points, PointSet(dense, dense_attrs, ATTR_NAMES)])
    near = points_in_boxes(points.xyz, expand_boxes(boxes[:3], (4.0, 4.0, 4.0))).any(axis=1)
    out, out_boxes, out_names = call(dilute_background, points, boxes, names, np.random.default_rng(0))
    assert out_names == names[:3] and np.array_equal(out_boxes, boxes[:3])
    ids = point_ids(out)
    assert set(np.flatnonzero(near)) <= set(ids)  # everything near an object stays
    assert 0 < (~near[ids]).sum() < (~near).sum()  # the background is thinned, not removed
    out, out_boxes, out_names = call(remove_background, points, boxes, names, np.random.default_rng(0))
    assert out_names == names[:3]
    assert set(point_ids(out)) == set(np.flatnonzero(near))
    one, _, _ = call(remove_background, points, boxes, names, np.random.default_rng(0), num_object=1)
    assert 0 < len(one) < len(out)
    # keep_list with no match falls back to every non-DontCare row
    _, _, fallback = call(
        remove_background, points, boxes, names, np.random.default_rng(0), keep_list=("Tram",)
    )
    assert fallback == names[:3]


def test_empty_point_set_and_no_boxes() -> None:
    empty = PointSet(np.zeros((0, 3)), np.zeros((0, 2)))
    for op in sorted(AUGMENT_OPS):
        out, boxes, names = call(AUGMENT_OPS[op], empty, np.zeros((0, 7)), (), np.random.default_rng(0))
        assert len(out) == 0 and boxes.shape == (0, 7) and names == ()


def test_point_set_validation() -> None:
    with pytest.raises(ValueError, match="xyz"):
        PointSet(np.zeros((4, 2)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="attrs"):
        PointSet(np.zeros((4, 3)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="attr_names"):
        PointSet(np.zeros((4, 3)), np.zeros((4, 2)), ("a",))
    with pytest.raises(ValueError, match="names"):
        call(
            random_flip_all,
            PointSet(np.zeros((1, 3)), np.zeros((1, 1))),
            np.zeros((2, 7)),
            ("Car",),
            np.random.default_rng(),
        )


# ----------------------------------------------------------------------------------------------------------
# Configuration


def test_the_ops_take_exactly_their_config_kwargs() -> None:
    """The registry and the config name the same ops, and each op's keyword arguments are its config model's
    fields, in the same order and with the same types (so the two cannot drift apart)."""
    assert list(AUGMENT_OPS) == list(AUGMENT_KWARGS)
    for method, op in AUGMENT_OPS.items():
        assert op.__name__ == method
        params = inspect.signature(op).parameters.values()
        assert [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY] == [
            "points",
            "boxes",
            "names",
            "rng",
        ]
        kw = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert all(p.default is inspect.Parameter.empty for p in kw), (
            method
        )  # the defaults live in the config
        model = AUGMENT_KWARGS[method]
        assert [p.name for p in kw] == list(model.model_fields), method
        op_types = typing.get_type_hints(op, include_extras=True)
        model_types = typing.get_type_hints(model, include_extras=True)
        assert {p.name: op_types[p.name] for p in kw} == {n: model_types[n] for n in model.model_fields}


def test_original_preset_matches_the_original_config() -> None:
    assert from_original_configs(ORIGINAL_T3_DATA_AUG) == ORIGINAL_CAR_AUGMENT
    steps = ORIGINAL_CAR_AUGMENT.steps
    assert [s.method for s in steps] == ["random_rotation_all", "random_flip_all", "random_box_shift"]
    assert steps[0].kwargs["yaw_std"] == pytest.approx(math.pi / 8)
    assert steps[0].kwargs["distribution"] == "normal"
    assert steps[1].kwargs["flip_prob"] == 0.5
    assert steps[2].kwargs["xyz_std"] == (3.0, 0.0, 3.0) and steps[2].kwargs["max_tries"] == 100


def test_config_round_trip_and_defaults() -> None:
    dumped = ORIGINAL_CAR_AUGMENT.model_dump()
    assert dumped["steps"][1] == {"method": "random_flip_all", "flip_prob": 0.5}
    assert AugmentConfig.model_validate(dumped) == ORIGINAL_CAR_AUGMENT
    cfg = AugmentConfig(steps=[{"method": "random_jitter"}])
    assert cfg.steps[0].kwargs == {"xyz_std": (0.1, 0.1, 0.1)}


def test_config_rejects_unknown_methods_and_kwargs() -> None:
    with pytest.raises(ValidationError, match="unknown augmentation method 'random_spin'.*random_flip_all"):
        AugmentConfig(steps=[{"method": "random_spin"}])
    with pytest.raises(ValidationError, match="flip_probability"):
        AugmentConfig(steps=[{"method": "random_flip_all", "flip_probability": 0.5}])
    with pytest.raises(ValidationError):
        AugmentConfig(steps=[{"method": "random_flip_all", "flip_prob": 1.5}])
    with pytest.raises(ValidationError):
        AugmentConfig(steps=[{"method": "random_rotation_all", "distribution": "cauchy"}])


def test_apply_augmentations_runs_steps_in_order() -> None:
    scene = make_scene()
    out = apply_augmentations(*scene, ORIGINAL_CAR_AUGMENT, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    manual = scene
    for step in ORIGINAL_CAR_AUGMENT.steps:
        manual = AUGMENT_OPS[step.method](*manual, rng, **step.kwargs)
    assert np.array_equal(out[0].xyz, manual[0].xyz) and np.array_equal(out[1], manual[1])
    same = apply_augmentations(*scene, AugmentConfig(), np.random.default_rng(5))
    assert same[0] is scene[0] and np.array_equal(same[1], scene[1])
    assert_attrs_attached(scene[0], out[0])
