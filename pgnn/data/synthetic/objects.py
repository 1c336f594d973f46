"""Placing labelled objects: KITTI-like sizes, a slot on the road, the exact (2-decimal) label box just
above the ground, a free footprint, then the object's parts."""

from __future__ import annotations

import math

import numpy as np

from pgnn.core.boxes import boxes_to_corners
from pgnn.data.synthetic.layout import Layout, free
from pgnn.data.synthetic.primitives import wrap
from pgnn.data.synthetic.road import Road, ground_height
from pgnn.data.synthetic.shapes import BUILDERS, PartAdder

# Bottom of a label box above the highest ground under it (metres; package docstring).
GROUND_CLEARANCE = 0.03

# KITTI training-set size statistics (mean, std) of (l, h, w) per class, metres.
_DIMS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "Car": ((3.88, 1.53, 1.63), (0.43, 0.14, 0.10)),
    "Van": ((5.08, 2.21, 1.90), (0.51, 0.32, 0.14)),
    "Pedestrian": ((0.84, 1.76, 0.66), (0.23, 0.11, 0.14)),
    "Cyclist": ((1.76, 1.74, 0.60), (0.18, 0.09, 0.12)),
}
_DIMS_MIN: dict[str, tuple[float, float, float]] = {
    "Car": (3.0, 1.30, 1.40),
    "Van": (4.0, 1.80, 1.65),
    "Pedestrian": (0.45, 1.45, 0.42),
    "Cyclist": (1.45, 1.55, 0.45),
}


def round2(value: float) -> float:
    """``value`` rounded to 2 decimals, as a label file holds it."""
    return float(f"{value:.2f}")


def _sample_dims(kind: str, rng: np.random.Generator) -> tuple[float, float, float]:
    """(l, h, w) from KITTI's per-class statistics (normal, clipped to 2.5 std), rounded to cm."""
    mean, std = (np.array(v) for v in _DIMS[kind])
    dims = np.maximum(mean + std * np.clip(rng.normal(size=3), -2.5, 2.5), np.array(_DIMS_MIN[kind]))
    return round2(dims[0]), round2(dims[1]), round2(dims[2])


def _label_box(
    x: float,
    y: float,
    yaw: float,
    dims: tuple[float, float, float],
    ground: np.ndarray,
    velo_to_rect: np.ndarray,
) -> np.ndarray:
    """The exact (2-decimal) KITTI box of an object standing at velodyne (x, y) heading ``yaw``.

    Its bottom lies at least GROUND_CLEARANCE above the highest ground point under its footprint (sampled on
    a 7 x 7 grid), so no ground return can fall inside it.

    Shapes:
        velo_to_rect: (4, 4); returns (7,) [x, y, z, l, h, w, ry] rectified camera frame.
    """
    l, h, w = dims
    rot, off = velo_to_rect[:3, :3], velo_to_rect[:3, 3]
    centre = rot @ np.array([x, y, float(ground_height(ground, x, y))]) + off  # (3,)
    heading = rot @ np.array([math.cos(yaw), math.sin(yaw), 0.0])  # (3,)
    ry = round2(wrap(np.array(math.atan2(-heading[2], heading[0]))).item())
    ry = min(max(ry, -3.14), 3.14)
    bx, bz = round2(centre[0]), round2(centre[2])
    c, s = math.cos(ry), math.sin(ry)
    ql, qw = np.meshgrid(np.linspace(-l / 2, l / 2, 7), np.linspace(-w / 2, w / 2, 7), indexing="ij")
    grid_rect = np.stack(
        [
            bx + c * ql.ravel() + s * qw.ravel(),
            np.full(ql.size, centre[1]),
            bz - s * ql.ravel() + c * qw.ravel(),
        ],
        axis=1,
    )  # (49, 3)
    inv = np.linalg.inv(velo_to_rect)
    grid_velo = grid_rect @ inv[:3, :3].T + inv[:3, 3]  # (49, 3)
    grid_velo[:, 2] = ground_height(ground, grid_velo[:, 0], grid_velo[:, 1])
    ground_y = grid_velo @ rot[1] + off[1]  # (49,) rect y (down) of the ground under the footprint
    by = round2(math.floor((float(ground_y.min()) - GROUND_CLEARANCE) * 100.0) / 100.0)
    return np.array([bx, by, bz, l, h, w, ry])


def _box_footprint_velo(box: np.ndarray, velo_to_rect: np.ndarray) -> np.ndarray:
    """Bird's-eye footprint of a rect-frame box in velodyne x-y. Shapes: (7,) -> (4, 2)."""
    corners = boxes_to_corners(box[None, :])[0, :4]  # (4, 3)
    inv = np.linalg.inv(velo_to_rect)
    return (corners @ inv[:3, :3].T + inv[:3, 3])[:, :2]


def _object_frame(box: np.ndarray, velo_to_rect: np.ndarray) -> np.ndarray:
    """(3, 4) velodyne -> object frame of a label box: x along the heading, y across, z up from the bottom.

    The object frame is the box's KITTI local frame (q = R_y(ry)^T (x_rect - bottom centre)) with its axes
    renamed (q_x, q_z, -q_y), so a part inside the object frame's [-l/2, l/2] x [-w/2, w/2] x [0, h] is
    inside the label box, exactly as ``pgnn.core.boxes.points_in_boxes`` tests it.
    """
    c, s = math.cos(box[6]), math.sin(box[6])
    r_y_t = np.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])
    rename = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    lin = rename @ r_y_t @ velo_to_rect[:3, :3]
    off = rename @ r_y_t @ (velo_to_rect[:3, 3] - box[:3])
    return np.concatenate([lin, off[:, None]], axis=1)


def _sample_slot(kind: str, road: Road, rng: np.random.Generator) -> tuple[float, float]:
    """Lateral road position s and heading relative to the road for an object of ``kind``."""
    edges = road.lane_edges
    lanes = len(edges) - 1
    if kind in ("Car", "Van"):
        modes = ["moving"] + ["parked"] * (road.parking_right or road.parking_left)
        modes += ["crossing"] * (not math.isnan(road.cross_u))
        weights = np.array([0.45, 0.4, 0.15][: len(modes)])
        mode = modes[int(rng.choice(len(modes), p=weights / weights.sum()))]
        if mode == "moving":
            lane = int(rng.integers(lanes))
            heading = 0.0 if lane < (lanes + 1) // 2 else math.pi
            return (edges[lane] + edges[lane + 1]) / 2.0 + float(rng.normal(0.0, 0.2)), heading + float(
                rng.normal(0.0, 0.03)
            )
        if mode == "parked":
            sides = [side for side, ok in ((-1, road.parking_right), (1, road.parking_left)) if ok]
            side = sides[int(rng.integers(len(sides)))]
            s = (edges[0] - 1.15) if side < 0 else (edges[-1] + 1.15)
            along = rng.random() < 0.85
            heading = (0.0 if side < 0 else math.pi) if along else (math.pi if side < 0 else 0.0)
            return s + float(rng.normal(0.0, 0.1)), heading + float(rng.normal(0.0, 0.05))
        return math.nan, (math.pi / 2.0 if rng.random() < 0.5 else -math.pi / 2.0) + float(
            rng.normal(0.0, 0.04)
        )
    if kind == "Pedestrian":
        if rng.random() < 0.8:
            offset = float(rng.uniform(0.4, road.sidewalk_width - 0.4))
            s = road.s_left + offset if rng.random() < 0.5 else road.s_right - offset
            heading = (0.0 if rng.random() < 0.5 else math.pi) + float(rng.normal(0.0, 0.3))
            if rng.random() < 0.3:
                heading = float(rng.uniform(-math.pi, math.pi))
            return s, heading
        s = float(rng.uniform(road.s_right, road.s_left))
        return s, (math.pi / 2.0 if rng.random() < 0.5 else -math.pi / 2.0) + float(rng.normal(0.0, 0.3))
    if rng.random() < 0.7:
        if rng.random() < 0.75:
            return edges[0] + float(rng.uniform(0.6, 1.2)), float(rng.normal(0.0, 0.08))
        return edges[-1] - float(rng.uniform(0.6, 1.2)), math.pi + float(rng.normal(0.0, 0.08))
    offset = float(rng.uniform(0.5, max(0.6, road.sidewalk_width - 0.5)))
    s = road.s_left + offset if rng.random() < 0.5 else road.s_right - offset
    return s, (0.0 if rng.random() < 0.5 else math.pi) + float(rng.normal(0.0, 0.1))


def place_object(
    layout: Layout,
    kind: str,
    owner: int,
    distance_range: tuple[float, float],
    front_fraction: float,
    rng: np.random.Generator,
) -> np.ndarray | None:
    """Try to put one object of ``kind`` into the scene, ``distance_range`` metres from the sensor and ahead
    of it with probability ``front_fraction``: its label box, or None when no slot was free."""
    road = layout.road
    dims = _sample_dims(kind, rng)
    near, far = distance_range
    for _ in range(40):
        s, heading = _sample_slot(kind, road, rng)
        if rng.random() < front_fraction:
            u = float(rng.uniform(near, far))
        else:
            u = float(rng.uniform(-0.6 * far, near))
        if math.isnan(s):  # crossing traffic: on the cross street, anywhere across
            u = (
                road.cross_u
                + (road.cross_width / 4.0) * (1.0 if heading > 0 else -1.0)
                + float(rng.normal(0, 0.2))
            )
            s = float(rng.uniform(road.s_right - 25.0, road.s_left + 25.0))
        x, y = road.to_velo(u, s)
        if not near <= math.hypot(x, y) <= far:
            continue
        box = _label_box(x, y, road.heading + heading, dims, layout.ground, layout.velo_to_rect)
        footprint = _box_footprint_velo(box, layout.velo_to_rect)
        if not free(footprint, layout.placed):
            continue
        layout.placed.append(footprint)
        frame = _object_frame(box, layout.velo_to_rect)
        BUILDERS[kind](PartAdder(layout.prims, frame, dims, owner), dims, rng)
        return box
    return None
