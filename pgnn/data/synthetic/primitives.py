"""The solid parts of a scene (boxes, cylinders, ellipsoids, each in its own local frame), as the ray
caster reads them, and the frames they are placed with."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Primitive kinds of the ray caster (``Primitives.kind``).
BOX, CYLINDER, ELLIPSOID = 0, 1, 2
EGO = -2  # owner of the recording car's own body: rays that hit it return nothing
TEXTURE_WINDOWS = 1  # a facade with windows (``Primitives.texture``)


@dataclass
class Primitives:
    """The scene's solid parts for the ray caster: each a box, cylinder or ellipsoid in its own local frame.

    A world (velodyne) point p has local coordinates ``A[:, :3] @ p + A[:, 3]``; boxes are centred with half
    extents ``params``; cylinders run along local z with (radius, half height); ellipsoids have semi-axes
    ``params``. ``owner`` is the index of the scene object a part belongs to (-1: clutter, -2: the recording
    car, which returns nothing); an object's parts are contiguous.
    """

    kind: list[int] = field(default_factory=list)
    affine: list[np.ndarray] = field(default_factory=list)
    params: list[tuple[float, float, float]] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)
    reflectivity: list[float] = field(default_factory=list)
    rgb: list[tuple[float, float, float]] = field(default_factory=list)
    texture: list[int] = field(default_factory=list)

    def add(
        self,
        kind: int,
        frame: np.ndarray,
        centre: tuple[float, float, float],
        axes: np.ndarray,
        params: tuple[float, float, float],
        owner: int,
        reflectivity: float,
        rgb: tuple[float, float, float],
        texture: int = 0,
    ) -> None:
        """Add a part centred at ``centre`` of a parent frame (3, 4), local axes = the rows of ``axes``."""
        lin = axes @ frame[:, :3]
        off = axes @ (frame[:, 3] - np.asarray(centre, dtype=np.float64))
        self.kind.append(kind)
        self.affine.append(np.concatenate([lin, off[:, None]], axis=1))
        self.params.append(tuple(float(v) for v in params))
        self.owner.append(owner)
        self.reflectivity.append(float(reflectivity))
        self.rgb.append(tuple(float(v) for v in rgb))
        self.texture.append(texture)

    def arrays(self) -> PrimitiveArrays:
        n = len(self.kind)
        return PrimitiveArrays(
            kind=np.array(self.kind, dtype=np.int64).reshape(n),
            affine=np.array(self.affine, dtype=np.float64).reshape(n, 3, 4),
            params=np.array(self.params, dtype=np.float64).reshape(n, 3),
            owner=np.array(self.owner, dtype=np.int64).reshape(n),
            reflectivity=np.array(self.reflectivity, dtype=np.float64).reshape(n),
            rgb=np.array(self.rgb, dtype=np.float64).reshape(n, 3),
            texture=np.array(self.texture, dtype=np.int64).reshape(n),
        )


@dataclass(frozen=True)
class PrimitiveArrays:
    """``Primitives`` as arrays. Shapes: kind (P,), affine (P, 3, 4), params (P, 3), owner (P,), ..."""

    kind: np.ndarray
    affine: np.ndarray
    params: np.ndarray
    owner: np.ndarray
    reflectivity: np.ndarray
    rgb: np.ndarray
    texture: np.ndarray


AXES_IDENTITY = np.eye(3)
AXES_Y_ALONG_Z = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # cylinder axis = parent y


def frame_from_yaw(x: float, y: float, z: float, yaw: float) -> np.ndarray:
    """(3, 4) velodyne -> local frame with origin (x, y, z) and x axis at ``yaw`` (about velodyne z)."""
    c, s = math.cos(yaw), math.sin(yaw)
    rot_t = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])
    return np.concatenate([rot_t, (-rot_t @ np.array([x, y, z]))[:, None]], axis=1)


def primitive_extent(kind: int, params: np.ndarray) -> np.ndarray:
    """Half extents of a primitive's local bounding box. Shapes: params (3,) -> (3,)."""
    if kind == CYLINDER:
        return np.array([params[0], params[0], params[1]])
    return np.asarray(params, dtype=np.float64)


def wrap(angle: np.ndarray) -> np.ndarray:
    """Angles (rad) wrapped to [-pi, pi). Shapes: (...) -> (...)."""
    return (angle + np.pi) % (2.0 * np.pi) - np.pi
