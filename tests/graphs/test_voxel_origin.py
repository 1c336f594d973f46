"""``GraphConfig.voxel_origin``: with ``fixed`` an object and its neighbours get the same keypoints and edges
whether they come alone (a crop) or inside a larger scan; with ``points_min`` (the original's) they need not.

The input is synthetic: a car-sized cluster of points on a patch of ground (the crop), and the same points
with a few thousand more far away, some of them below every crop point (the larger scan, its points in
another order). The runtime graph of the Car model (``car_runtime``: 0.4 m voxels, 1 m and 4 m radii).
"""

from __future__ import annotations

import numpy as np
import pytest

from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig
from pgnn.graphs.build import build_graph
from pgnn.graphs.voxel import nearest_to_centroids

CENTRE = np.array([3.3, 1.0, 21.7])  # rectified camera frame: x right, y down, z forward
NEAR = 3.0  # keypoints this close to the centre (m) are compared, with their 4 m neighbours
HALF = 8.0  # the crop: |x - cx| and |z - cz| below this, more than NEAR + 4 m


def _scans() -> tuple[np.ndarray, np.ndarray]:
    """(crop (N, 3), scan (M, 3)) float32; every crop point is in the scan."""
    rng = np.random.default_rng(28)
    car = CENTRE + rng.uniform([-0.8, -1.5, -2.0], [0.8, 0.0, 2.0], size=(400, 3))  # (400, 3)
    ground = CENTRE + rng.uniform([-HALF, 0.0, -HALF], [HALF, 0.05, HALF], size=(1500, 3))  # (1500, 3)
    crop = np.concatenate([car, ground]).astype(np.float32)
    far = rng.uniform([-40.0, -3.0, -10.0], [40.0, 2.0, 70.0], size=(6000, 3))  # (6000, 3)
    outside = (np.abs(far[:, 0] - CENTRE[0]) > HALF + 1.0) | (np.abs(far[:, 2] - CENTRE[2]) > HALF + 1.0)
    far = far[outside].astype(np.float32)
    scan = np.concatenate([far, crop])[rng.permutation(len(far) + len(crop))]
    return crop, scan


def _near_neighbourhoods(points: np.ndarray, cfg: GraphConfig) -> dict[tuple[float, ...], frozenset]:
    """Each keypoint within NEAR of the centre -> the coordinates of its level-1 neighbours."""
    g = build_graph(points, cfg)
    kp = g["vertex_coord_1"]  # (N1, 3)
    edges = g["edges_1"]  # (E1, 2) [src row in vc_1, dst row in vc_2]; vc_2 == vc_1 (same scale)
    near = np.flatnonzero(np.linalg.norm(g["vertex_coord_2"] - CENTRE, axis=1) < NEAR)
    out = {}
    for d in near:
        src = edges[edges[:, 1] == d, 0]
        out[tuple(g["vertex_coord_2"][d].tolist())] = frozenset(map(tuple, kp[src].tolist()))
    return out


def _cfg(origin: str) -> GraphConfig:
    return GraphConfig.model_validate({**GRAPH_PRESETS["car_runtime"].model_dump(), "voxel_origin": origin})


def test_fixed_grid_gives_the_same_keypoints_and_edges_in_a_crop_and_in_the_scan() -> None:
    crop, scan = _scans()
    alone = _near_neighbourhoods(crop, _cfg("fixed"))
    inside = _near_neighbourhoods(scan, _cfg("fixed"))
    assert len(alone) > 50  # the car's and the ground's keypoints
    assert alone == inside


def test_the_original_grid_moves_with_the_crop() -> None:
    """The input above does exercise the anchoring: ``points_min`` keypoints near the car differ."""
    crop, scan = _scans()
    alone = _near_neighbourhoods(crop, _cfg("points_min"))
    inside = _near_neighbourhoods(scan, _cfg("points_min"))
    assert set(alone) != set(inside)


def test_points_min_is_the_default_and_is_not_written() -> None:
    cfg = GRAPH_PRESETS["car_runtime"]
    assert cfg.voxel_origin == "points_min" and "voxel_origin" not in cfg.model_dump(mode="json")
    assert _cfg("fixed").model_dump(mode="json")["voxel_origin"] == "fixed"
    with pytest.raises(ValueError, match="voxel_origin"):
        _cfg("middle")


def test_fixed_pick_is_the_member_nearest_the_centroid_ties_to_the_smallest_point() -> None:
    # voxel [0, 0.5)^3: two points equidistant from their centroid (binary fractions: an exact tie), in either
    # order; voxel [0.5, 1) x [0, 0.5)^2: three points
    pair = np.array([[0.375, 0.125, 0.125], [0.125, 0.125, 0.125]])
    three = np.array([[0.5, 0.125, 0.125], [0.875, 0.125, 0.125], [0.75, 0.125, 0.125]])
    for points in (np.concatenate([pair, three]), np.concatenate([three, pair[::-1]])):
        picked = points[nearest_to_centroids(points, 0.5, np.zeros(3))]
        assert sorted(map(tuple, picked.tolist())) == [(0.125, 0.125, 0.125), (0.75, 0.125, 0.125)]
