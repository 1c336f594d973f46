"""The road and the ground of a scene: lanes, parking strips, sidewalks, a cross street; the ground's
height field and its materials (asphalt, lane markings, pavement, grass)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Ground materials: (reflectivity, RGB).
_GROUND_ASPHALT, _GROUND_MARKING, _GROUND_PAVEMENT, _GROUND_GRASS = 0, 1, 2, 3
GROUND_REFLECTIVITY = np.array([0.36, 0.85, 0.42, 0.5])
GROUND_RGB = np.array([[78.0, 78.0, 82.0], [225.0, 225.0, 215.0], [150.0, 146.0, 138.0], [88.0, 112.0, 58.0]])


@dataclass(frozen=True)
class Road:
    """A straight road through the sensor's surroundings, in road coordinates (u along it, s to its left).

    ``lane_edges`` holds the lateral positions of the lane boundaries (right to left); the drivable area
    (lanes plus parking strips) spans ``s_right .. s_left``; sidewalks follow outwards, then front yards and
    buildings. ``cross_u`` is the centre of a cross street (NaN: none) of width ``cross_width``.
    """

    heading: float
    lane_edges: np.ndarray
    s_right: float
    s_left: float
    parking_right: bool
    parking_left: bool
    sidewalk_width: float
    cross_u: float
    cross_width: float

    def to_road(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Velodyne (x, y) -> road (u, s)."""
        c, s = math.cos(self.heading), math.sin(self.heading)
        return c * x + s * y, -s * x + c * y

    def to_velo(self, u: float, s: float) -> tuple[float, float]:
        """Road (u, s) -> velodyne (x, y)."""
        c, sn = math.cos(self.heading), math.sin(self.heading)
        return c * u - sn * s, sn * u + c * s

    def in_cross_street(self, u: np.ndarray, margin: float = 0.0) -> np.ndarray:
        if math.isnan(self.cross_u):
            return np.zeros(np.shape(u), dtype=bool)
        return np.abs(np.asarray(u) - self.cross_u) < self.cross_width / 2.0 + margin


def sample_road(rng: np.random.Generator) -> Road:
    """A 2-4 lane road with the sensor in one of the right-hand lanes."""
    lanes = int(rng.choice([2, 3, 4], p=[0.5, 0.3, 0.2]))
    lane_width = float(rng.uniform(3.2, 3.7))
    ego_lane = int(rng.integers(0, max(1, lanes // 2)))  # counted from the right
    right = -(ego_lane + 0.5) * lane_width + float(rng.normal(0.0, 0.2))
    edges = right + lane_width * np.arange(lanes + 1)
    parking_right = bool(rng.random() < 0.6)
    parking_left = bool(rng.random() < 0.6)
    has_cross = bool(rng.random() < 0.35)
    return Road(
        heading=float(np.clip(rng.normal(0.0, 0.04), -0.1, 0.1)),
        lane_edges=edges,
        s_right=float(edges[0] - (2.3 if parking_right else 0.3)),
        s_left=float(edges[-1] + (2.3 if parking_left else 0.3)),
        parking_right=parking_right,
        parking_left=parking_left,
        sidewalk_width=float(rng.uniform(1.8, 4.0)),
        cross_u=float(rng.uniform(14.0, 45.0)) if has_cross else math.nan,
        cross_width=float(rng.uniform(7.0, 10.0)),
    )


def sample_ground(rng: np.random.Generator, mount_height: float) -> np.ndarray:
    """Ground height field coefficients (velodyne frame): z = h0 + sx x + sy y + sum_k A_k sin(k_k.xy + p_k).

    Slopes within 1.5 %, two undulations of 2-8 cm amplitude and 20-60 m wavelength.

    Shapes:
        returns (11,) float64 [h0, sx, sy, A1, kx1, ky1, p1, A2, kx2, ky2, p2].
    """
    coeffs = [-mount_height + float(rng.normal(0.0, 0.02))]
    coeffs += list(np.clip(rng.normal(0.0, 0.006, 2), -0.015, 0.015))
    for _ in range(2):
        amplitude = rng.uniform(0.02, 0.08)
        wavelength = rng.uniform(20.0, 60.0)
        direction = rng.uniform(0.0, 2.0 * np.pi)
        k = 2.0 * np.pi / wavelength
        coeffs += [amplitude, k * np.cos(direction), k * np.sin(direction), rng.uniform(0.0, 2.0 * np.pi)]
    return np.array(coeffs, dtype=np.float64)


def ground_height(ground: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ground z (velodyne frame) under (x, y). Shapes: x, y (...) -> (...)."""
    g = ground
    return (
        g[0]
        + g[1] * x
        + g[2] * y
        + g[3] * np.sin(g[4] * x + g[5] * y + g[6])
        + g[7] * np.sin(g[8] * x + g[9] * y + g[10])
    )


def ground_material(road: Road, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Material id of the ground at velodyne (x, y): asphalt, lane marking, pavement or grass.

    Shapes:
        x, y: (N,) -> (N,) int64.
    """
    u, s = road.to_road(x, y)
    on_road = (s >= road.s_right) & (s <= road.s_left)
    cross = road.in_cross_street(u)
    sidewalk = ((s >= road.s_left) & (s < road.s_left + road.sidewalk_width)) | (
        (s <= road.s_right) & (s > road.s_right - road.sidewalk_width)
    )
    material = np.full(x.shape, _GROUND_GRASS, dtype=np.int64)
    material[sidewalk] = _GROUND_PAVEMENT
    material[on_road | cross] = _GROUND_ASPHALT
    inner = road.lane_edges[1:-1]
    dashed = np.zeros(x.shape, dtype=bool)
    for edge in inner:
        dashed |= (np.abs(s - edge) < 0.07) & (np.mod(u, 9.0) < 3.0)
    solid = (np.abs(s - road.lane_edges[0]) < 0.08) | (np.abs(s - road.lane_edges[-1]) < 0.08)
    marking = (dashed | solid) & on_road & ~cross
    material[marking] = _GROUND_MARKING
    return material
