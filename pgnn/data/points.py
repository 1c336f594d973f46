"""Scenes for augmentation and ground-truth sampling: points with their attributes, boxes and class names.

A scene is three things that move together:

* ``points``: a :class:`PointSet`, coordinates ``xyz`` (N, 3) float32 in the rectified camera frame plus
  per-point attributes ``attrs`` (N, K) float32 (intensity, RGB, PointPainting scores: any columns). Every op
  that drops, reorders or adds points does it to ``xyz`` and ``attrs`` with one index, so a point's attributes
  can never come loose from it (the painted fork kept scores in a separate array and lost track of them).
* ``boxes``: (M, 7) float64 ``[x, y, z, l, h, w, ry]`` (pgnn's convention, see :mod:`pgnn.core.boxes`).
* ``names``: the M class names, a tuple of str.

Rows named ``DontCare`` are placeholders (KITTI gives them -1000 coordinates).

Rotations are about the vertical (camera y) axis with ``R(a) = [[cos a, 0, sin a], [0, 1, 0], [-sin a, 0,
cos a]]``; points map as ``xyz @ R.T`` and a box's ``ry`` grows by ``a``, which keeps points and boxes
together because ``R(a) R(ry) = R(a + ry)``. Every ``ry`` an op changes is wrapped into [-pi, pi).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DONT_CARE",
    "PointSet",
    "cared_rows",
    "check_scene",
    "point_set_from_frame",
    "rotation_y",
    "wrap_angle",
]

DONT_CARE = "DontCare"

Names = tuple[str, ...]
Scene = tuple["PointSet", np.ndarray, Names]


# ----------------------------------------------------------------------------------------------------------
# The point set


@dataclass(frozen=True, eq=False)
class PointSet:
    """Points and their attributes, which always move as one unit.

    ``attr_names`` optionally names the attribute columns (empty: unnamed); it travels unchanged.

    Shapes:
        xyz: (N, 3) float32, rectified camera frame
        attrs: (N, K) float32
    """

    xyz: np.ndarray
    attrs: np.ndarray
    attr_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        xyz = np.ascontiguousarray(self.xyz, dtype=np.float32)
        attrs = np.ascontiguousarray(self.attrs, dtype=np.float32)
        if xyz.ndim != 2 or xyz.shape[1] != 3:
            raise ValueError(f"PointSet.xyz: expected shape (N, 3), got {np.shape(self.xyz)}")
        if attrs.ndim != 2 or attrs.shape[0] != xyz.shape[0]:
            got = np.shape(self.attrs)
            raise ValueError(f"PointSet.attrs: expected shape ({xyz.shape[0]}, K), got {got}")
        names = tuple(self.attr_names)
        if names and len(names) != attrs.shape[1]:
            raise ValueError(f"PointSet.attr_names: expected {attrs.shape[1]} names, got {len(names)}")
        object.__setattr__(self, "xyz", xyz)
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "attr_names", names)

    def __len__(self) -> int:
        return int(self.xyz.shape[0])

    def select(self, index: np.ndarray) -> PointSet:
        """The points picked by a boolean mask (N,) or an integer index array, attributes alongside."""
        return PointSet(self.xyz[index], self.attrs[index], self.attr_names)

    def with_xyz(self, xyz: np.ndarray) -> PointSet:
        """The same points (same order, same attributes) at new coordinates (N, 3)."""
        if np.shape(xyz) != self.xyz.shape:
            raise ValueError(f"with_xyz: expected shape {self.xyz.shape}, got {np.shape(xyz)}")
        return PointSet(xyz, self.attrs, self.attr_names)

    @staticmethod
    def concat(parts: Sequence[PointSet]) -> PointSet:
        """Stack point sets with the same attribute columns, in order."""
        if not parts:
            raise ValueError("PointSet.concat: expected at least one point set")
        k = parts[0].attrs.shape[1]
        names = next((p.attr_names for p in parts if p.attr_names), ())
        for p in parts:
            if p.attrs.shape[1] != k or (p.attr_names and p.attr_names != names):
                raise ValueError(
                    f"PointSet.concat: expected the same attribute columns {names or k}, got "
                    f"{p.attr_names or p.attrs.shape[1]}"
                )
        return PointSet(
            np.concatenate([p.xyz for p in parts]), np.concatenate([p.attrs for p in parts]), names
        )


def point_set_from_frame(frame: Any) -> PointSet:
    """The points of a :class:`pgnn.data.frames.Frame` with attribute columns intensity, r, g, b[, scores].

    Score columns (painted frames only) are named ``score_<class>`` after ``PAINTED_CLASSES``.

    Shapes:
        return: xyz (N, 3), attrs (N, 4) or (N, 8) float32
    """
    from pgnn.data.kitti import PAINTED_CLASSES

    columns = [np.asarray(frame.intensity, np.float32)[:, None], np.asarray(frame.rgb, np.float32)]
    names = ["intensity", "r", "g", "b"]
    if frame.scores is not None:
        columns.append(np.asarray(frame.scores, np.float32))
        names += [f"score_{c}" for c in PAINTED_CLASSES]
    return PointSet(frame.points_rect, np.concatenate(columns, axis=1), tuple(names))


# ----------------------------------------------------------------------------------------------------------
# Small geometry helpers


def wrap_angle(angle: np.ndarray | float) -> np.ndarray:
    """Angles wrapped into [-pi, pi). Shapes: any -> same."""
    return (np.asarray(angle, dtype=np.float64) + np.pi) % (2.0 * np.pi) - np.pi


def rotation_y(angle: float) -> np.ndarray:
    """The rotation about the camera y axis by ``angle`` (3, 3) (the box convention's R)."""
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def check_scene(points: PointSet, boxes: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, Names]:
    """Validated copies of boxes (M, 7) float64 and names (M,)."""
    arr = np.array(boxes, dtype=np.float64)
    if arr.size == 0:
        arr = arr.reshape(0, 7)
    if arr.ndim != 2 or arr.shape[1] != 7:
        raise ValueError(f"boxes: expected shape (M, 7) [x, y, z, l, h, w, ry], got {np.shape(boxes)}")
    names_t = tuple(str(n) for n in names)
    if len(names_t) != arr.shape[0]:
        raise ValueError(f"names: expected {arr.shape[0]} names (one per box), got {len(names_t)}")
    if not isinstance(points, PointSet):
        raise TypeError(f"points: expected a PointSet, got {type(points).__name__}")
    return arr, names_t


def cared_rows(names: Names) -> np.ndarray:
    """Rows that are real objects (not DontCare). (M,) bool."""
    return np.array([n != DONT_CARE for n in names], dtype=bool)
