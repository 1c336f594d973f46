"""A scene under construction: its road, ground and parts, and the bird's-eye footprints (velodyne x-y)
they cover; no two solids of a scene may come closer than ``FOOTPRINT_GAP``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pgnn.data.synthetic.primitives import AXES_IDENTITY, BOX, Primitives, frame_from_yaw
from pgnn.data.synthetic.road import Road, ground_height

# Least distance (metres) between the footprints of two solids.
FOOTPRINT_GAP = 0.25


def rectangle(cx: float, cy: float, half_l: float, half_w: float, yaw: float) -> np.ndarray:
    """Corners of a bird's-eye rectangle. Shapes: returns (4, 2)."""
    c, s = math.cos(yaw), math.sin(yaw)
    local = np.array([[half_l, half_w], [-half_l, half_w], [-half_l, -half_w], [half_l, -half_w]])
    return local @ np.array([[c, s], [-s, c]]) + np.array([cx, cy])


def _edge_normals(polys: np.ndarray) -> np.ndarray:
    """Unit normals of the edges of quadrilaterals. Shapes: (..., 4, 2) -> (..., 4, 2)."""
    edges = np.roll(polys, -1, axis=-2) - polys
    normals = np.stack([-edges[..., 1], edges[..., 0]], axis=-1)
    return normals / np.linalg.norm(normals, axis=-1, keepdims=True)


def free(candidate: np.ndarray, placed: list[np.ndarray], gap: float = FOOTPRINT_GAP) -> bool:
    """Whether a convex quadrilateral keeps ``gap`` from every placed one (separating-axis test).

    Shapes:
        candidate: (4, 2); placed: K x (4, 2).
    """
    if not placed:
        return True
    others = np.stack(placed)  # (K, 4, 2)
    axes = np.concatenate(
        [np.broadcast_to(_edge_normals(candidate), others.shape), _edge_normals(others)], axis=1
    )  # (K, 8, 2)
    mine = np.einsum("ci,kai->kca", candidate, axes)  # (K, 4, 8)
    theirs = np.einsum("kci,kai->kca", others, axes)  # (K, 4, 8)
    apart = (mine.max(axis=1) + gap <= theirs.min(axis=1)) | (theirs.max(axis=1) + gap <= mine.min(axis=1))
    return bool(apart.any(axis=1).all())


@dataclass
class Layout:
    """A scene under construction: its road and ground, the parts so far, and the footprints they cover."""

    road: Road
    ground: np.ndarray
    velo_to_rect: np.ndarray
    prims: Primitives = field(default_factory=Primitives)
    placed: list[np.ndarray] = field(default_factory=list)

    def add_block(
        self,
        u: float,
        s: float,
        half_u: float,
        half_s: float,
        height: float,
        reflectivity: float,
        rgb: tuple[float, float, float],
        texture: int = 0,
    ) -> None:
        """A road-aligned solid block (building, wall) around road (u, s), sunk 0.5 m into the ground."""
        x, y = self.road.to_velo(u, s)
        z0 = float(ground_height(self.ground, x, y)) - 0.5
        frame = frame_from_yaw(x, y, z0, self.road.heading)
        half_h = (height + 0.5) / 2.0
        self.prims.add(BOX, frame, (0.0, 0.0, half_h), AXES_IDENTITY, (half_u, half_s, half_h), -1,
                       reflectivity, rgb, texture)  # fmt: skip
        self.placed.append(rectangle(x, y, half_u, half_s, self.road.heading))
