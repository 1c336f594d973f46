"""Training-time data augmentation: the original Point-GNN's ``models/preprocess.py`` ops, pure and seeded.

A scene is three things that move together:

* ``points``: a :class:`PointSet`, coordinates ``xyz`` (N, 3) float32 in the rectified camera frame plus
  per-point attributes ``attrs`` (N, K) float32 (intensity, RGB, PointPainting scores: any columns). Every op
  that drops, reorders or adds points does it to ``xyz`` and ``attrs`` with one index, so a point's attributes
  can never come loose from it (the painted fork kept scores in a separate array and lost track of them).
* ``boxes``: (M, 7) float64 ``[x, y, z, l, h, w, ry]`` (pgnn's convention, see :mod:`pgnn.core.boxes`).
* ``names``: the M class names, a tuple of str.

Every op has the signature ``op(points, boxes, names, rng, **params) -> (points, boxes, names)``; it never
modifies its inputs and draws all randomness from ``rng``. Rows named ``DontCare`` are placeholders (KITTI
gives them -1000 coordinates) and every op carries them through unchanged, as the original did for all but
``random_transition``; ``dilute_background`` and ``remove_background`` drop them, as the original did.

Op names and defaults are the original's (``models/preprocess.py``). Parameters are renamed where the
original's names were misleading; :func:`from_original_configs` translates an original ``data_aug_configs``
list:

================== ================= ===========================================================
original           pgnn              meaning
================== ================= ===========================================================
``method_name``    ``distribution``  ``"normal"``: N(0, std); ``"uniform"``: U(-std, std)
``max_trails``     ``max_tries``     attempts per object before it is left where it was
``expend_factor``  ``expand_hwl``    box scale factors, in the original's order **(h, w, l)**
``appr_factor``    (dropped)         raster resolution of the original's approximate IoU; pgnn's
                                     IoU is exact (:func:`pgnn.core.boxes.iou_3d`)
================== ================= ===========================================================

An expanded box (``expand_hwl``) grows about its centre, so its bottom face drops by ``h * (f_h - 1) / 2``
(the original's ``box3d_to_normals``; :func:`pgnn.core.boxes.expand_boxes`). Rotations are about the vertical
(camera y) axis with ``R(a) = [[cos a, 0, sin a], [0, 1, 0], [-sin a, 0, cos a]]``; points map as
``xyz @ R.T`` and a box's ``ry`` grows by ``a``, which keeps points and boxes together because
``R(a) R(ry) = R(a + ry)``. Every ``ry`` an op changes is wrapped into [-pi, pi).

Changes from the original, all deliberate:

* ``random_box_shift`` checks a moved box against every other box at its current place. The original checked
  only the boxes already processed, so a later box that failed all its tries kept its old place without ever
  being checked against an earlier box that had moved onto it.
* ``shuffle`` in ``random_box_shift`` shuffles the processing order only; rows keep their order.
* Collision IoU is exact 3D IoU, not the original's 0.1 m raster approximation.
* Empty clouds and empty background sets are handled instead of crashing.

The Car configurations T0-T3 of the original train with :data:`ORIGINAL_CAR_AUGMENT`: a global rotation
with yaw ~ N(0, (pi/8)^2), a flip with p = 0.5, and a per-object shift ~ N(0, diag(3, 0, 3)^2) m with up to
100 tries.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model, model_serializer, model_validator

from pgnn.core.boxes import expand_boxes, iou_3d, points_in_boxes

__all__ = [
    "AUGMENT_OPS",
    "DONT_CARE",
    "DEFAULT_AUGMENT_LIST",
    "DEFAULT_KEEP_LIST",
    "ORIGINAL_CAR_AUGMENT",
    "AugmentConfig",
    "AugmentStep",
    "PointSet",
    "apply_augmentations",
    "dilute_background",
    "from_original_configs",
    "point_set_from_frame",
    "random_box_global_rotation",
    "random_box_rotation",
    "random_box_shift",
    "random_drop",
    "random_flip_all",
    "random_global_drop",
    "random_jitter",
    "random_rotation_all",
    "random_scale_all",
    "random_transition",
    "random_voxel_downsample",
    "remove_background",
    "rotation_y",
    "wrap_angle",
]

DONT_CARE = "DontCare"

# The classes the original's per-object ops move by default.
DEFAULT_AUGMENT_LIST: tuple[str, ...] = (
    "Car",
    "Pedestrian",
    "Cyclist",
    "Van",
    "Truck",
    "Misc",
    "Tram",
    "Person_sitting",
)
# The classes the original's background ops keep by default (no Tram, no DontCare).
DEFAULT_KEEP_LIST: tuple[str, ...] = (
    "Car",
    "Pedestrian",
    "Cyclist",
    "Van",
    "Truck",
    "Misc",
    "Person_sitting",
)

Std = Annotated[float, Field(ge=0.0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Distribution = Literal["normal", "uniform"]
Positive = Annotated[float, Field(gt=0.0)]
Scales = tuple[Positive, Positive, Positive]
Stds = tuple[Std, Std, Std]

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
    """The points of a :class:`pgnn.data.kitti.Frame` with attribute columns intensity, r, g, b[, scores].

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


def _hwl_to_lhw(expand_hwl: Sequence[float]) -> tuple[float, float, float]:
    """The original's (h, w, l) expansion order as :func:`pgnn.core.boxes.expand_boxes`'s (l, h, w)."""
    h, w, l = (float(v) for v in expand_hwl)
    return (l, h, w)


def _in_box(xyz: np.ndarray, box: np.ndarray, expand_hwl: Sequence[float]) -> np.ndarray:
    """Points inside one box scaled by ``expand_hwl``. Shapes: xyz (N, 3), box (7,) -> (N,) bool."""
    if xyz.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return points_in_boxes(xyz, expand_boxes(box[None, :], _hwl_to_lhw(expand_hwl)))[:, 0]


def _in_boxes_any(xyz: np.ndarray, boxes: np.ndarray, expand_hwl: Sequence[float]) -> np.ndarray:
    """Points inside any of the boxes scaled by ``expand_hwl``. Shapes: (N, 3), (M, 7) -> (N,) bool."""
    if xyz.shape[0] == 0 or boxes.shape[0] == 0:
        return np.zeros(xyz.shape[0], dtype=bool)
    return points_in_boxes(xyz, expand_boxes(boxes, _hwl_to_lhw(expand_hwl))).any(axis=1)


def _draw(rng: np.random.Generator, distribution: str, std: float | Sequence[float]) -> Any:
    """One sample of N(0, std^2) or U(-std, std) (elementwise for a sequence of stds)."""
    scale = np.asarray(std, dtype=np.float64)
    if distribution == "normal":
        out = rng.normal(0.0, scale)
    else:
        out = rng.uniform(-scale, scale)
    return float(out) if scale.ndim == 0 else out


def _scene(points: PointSet, boxes: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, Names]:
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


def _cared(names: Names) -> np.ndarray:
    """Rows that are real objects (not DontCare). (M,) bool."""
    return np.array([n != DONT_CARE for n in names], dtype=bool)


def _random_voxel_pick(xyz: np.ndarray, voxel: float, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random point per voxel of a grid randomly offset by U(0, voxel)^3.

    The original's ``downsample_by_random_voxel(..., add_rnd3d=True)``: cells ``floor((p - min + voxel * u) /
    voxel)``. Returns the picked rows, ascending. Shapes: xyz (N, 3) -> (K,) int64.
    """
    if xyz.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    offset = voxel * rng.random(3)  # (3,)
    cells = np.floor((xyz.astype(np.float64) - xyz.min(axis=0) + offset) / voxel).astype(np.int64)  # (N, 3)
    dims = cells.max(axis=0) + 1  # (3,)
    keys = cells[:, 0] + dims[0] * (cells[:, 1] + dims[1] * cells[:, 2])  # (N,) one key per voxel
    order = rng.permutation(xyz.shape[0])  # a random member of each voxel comes first
    _, first = np.unique(keys[order], return_index=True)
    return np.sort(order[first])


# ----------------------------------------------------------------------------------------------------------
# Point-only ops


def random_jitter(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    xyz_std: Stds = (0.1, 0.1, 0.1),
) -> Scene:
    """Add independent N(0, xyz_std^2) noise to every point's x, y, z; boxes unchanged."""
    boxes, names = _scene(points, boxes, names)
    noise = rng.normal(0.0, np.asarray(xyz_std, np.float64), size=(len(points), 3))  # (N, 3)
    return points.with_xyz(points.xyz + noise), boxes, names


def random_drop(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    drop_prob: Probability | tuple[Probability, ...] = 0.5,
    tier_prob: tuple[Probability, ...] | None = None,
) -> Scene:
    """Drop each point independently with probability ``drop_prob``.

    A tuple ``drop_prob`` first picks one of its values (with probabilities ``tier_prob``, uniform if None).
    If every point would go, all are kept (the original's rule).
    """
    boxes, names = _scene(points, boxes, names)
    if isinstance(drop_prob, tuple | list):
        p = None if tier_prob is None else np.asarray(tier_prob, np.float64)
        drop_prob = float(rng.choice(np.asarray(drop_prob, np.float64), p=p))
    keep = rng.uniform(size=len(points)) > drop_prob  # (N,)
    if not keep.any():
        return points, boxes, names
    return points.select(keep), boxes, names


def random_global_drop(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    drop_std: Std = 0.25,
) -> Scene:
    """:func:`random_drop` with a per-scene drop probability ``|N(0, drop_std^2)|``."""
    drop_prob = abs(float(rng.normal(0.0, drop_std)))
    return random_drop(points, boxes, names, rng, drop_prob=drop_prob)


def random_voxel_downsample(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    voxel_std: Std = 0.2,
    min_voxel: Std = 0.02,
    max_voxel: Std = 0.8,
) -> Scene:
    """Keep one random point per voxel, voxel size ``min(|N(0, voxel_std^2)|, max_voxel)``.

    Sizes below ``min_voxel`` leave the cloud unchanged. The grid has a random offset U(0, voxel)^3 and the
    kept points stay in their input order.
    """
    boxes, names = _scene(points, boxes, names)
    voxel = min(abs(float(rng.normal(0.0, voxel_std))), max_voxel)
    if voxel < min_voxel or len(points) == 0:
        return points, boxes, names
    return points.select(_random_voxel_pick(points.xyz, voxel, rng)), boxes, names


# ----------------------------------------------------------------------------------------------------------
# Whole-scene ops


def random_rotation_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    distribution: Distribution = "normal",
    yaw_std: Std = 0.3,
) -> Scene:
    """Rotate the whole scene about the vertical axis through the origin by ``delta ~ N(0, yaw_std^2)``.

    Points ``xyz @ R.T``; box centres likewise; ``ry += delta`` (wrapped).
    """
    boxes, names = _scene(points, boxes, names)
    delta = _draw(rng, distribution, yaw_std)
    rot = rotation_y(delta)  # (3, 3)
    xyz = points.xyz.astype(np.float64) @ rot.T  # (N, 3)
    cared = _cared(names)
    boxes[cared, :3] = boxes[cared, :3] @ rot.T
    boxes[cared, 6] = wrap_angle(boxes[cared, 6] + delta)
    return points.with_xyz(xyz), boxes, names


def random_flip_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    flip_prob: Probability = 0.5,
) -> Scene:
    """With probability ``flip_prob`` mirror the scene left-right: ``x -> -x``, ``ry -> pi - ry``, wrapped."""
    boxes, names = _scene(points, boxes, names)
    if not rng.uniform() < flip_prob:
        return points, boxes, names
    xyz = points.xyz.copy()
    xyz[:, 0] = -xyz[:, 0]
    cared = _cared(names)
    boxes[cared, 0] = -boxes[cared, 0]
    boxes[cared, 6] = wrap_angle(np.pi - boxes[cared, 6])
    return points.with_xyz(xyz), boxes, names


def random_scale_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    distribution: Distribution = "normal",
    scale_std: Std = 0.05,
) -> Scene:
    """Scale the scene about the origin by ``1 + N(0, scale_std^2)``: points, box centres and l, h, w."""
    boxes, names = _scene(points, boxes, names)
    scale = 1.0 + _draw(rng, distribution, scale_std)
    cared = _cared(names)
    boxes[cared, :6] *= scale
    return points.with_xyz(points.xyz.astype(np.float64) * scale), boxes, names


def random_transition(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    xyz_std: Stds = (0.1, 0.1, 0.1),
) -> Scene:
    """Translate the whole scene by one offset ``~ N(0, diag(xyz_std)^2)``."""
    boxes, names = _scene(points, boxes, names)
    delta = rng.normal(0.0, np.asarray(xyz_std, np.float64))  # (3,)
    cared = _cared(names)
    boxes[cared, :3] += delta
    return points.with_xyz(points.xyz.astype(np.float64) + delta), boxes, names


# ----------------------------------------------------------------------------------------------------------
# Per-object ops


def random_box_rotation(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    max_overlap_num_allowed: Std = 0.1,
    max_tries: Annotated[int, Field(ge=0)] = 100,
    distribution: Distribution = "normal",
    yaw_std: Std = 0.3,
    expand_hwl: Scales = (1.0, 1.1, 1.1),
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST,
) -> Scene:
    """Turn each object in place (about the vertical axis through its bottom centre) by ``N(0, yaw_std^2)``.

    A try is accepted when the turned box (scaled by ``expand_hwl``) holds fewer than
    ``max_overlap_num_allowed`` points that were not in the object's scaled box before (default 0.1: none).
    The points in the object's scaled box turn with it. An object whose tries all fail stays as it was.
    """
    boxes, names = _scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    for i, name in enumerate(names):
        if name == DONT_CARE or name not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        for _ in range(max_tries):
            delta = _draw(rng, distribution, yaw_std)
            new_box = boxes[i].copy()
            new_box[6] = wrap_angle(new_box[6] + delta)
            more = _in_box(xyz[~own], new_box, expand_hwl)
            if more.sum() < max_overlap_num_allowed:
                centre = boxes[i, :3]
                xyz[own] = (xyz[own] - centre) @ rotation_y(delta).T + centre
                boxes[i] = new_box
                break
    return points.with_xyz(xyz), boxes, names


def random_box_global_rotation(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    max_overlap_num_allowed: Std = 0.1,
    max_tries: Annotated[int, Field(ge=0)] = 100,
    distribution: Distribution = "normal",
    yaw_std: Std = 0.3,
    expand_hwl: Scales = (1.1, 1.1, 1.1),
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST,
) -> Scene:
    """Move each object along a circle about the origin: rotate it about the vertical axis through the origin.

    A try (``delta ~ N(0, yaw_std^2)``) is accepted when the moved scaled box holds fewer than
    ``max_overlap_num_allowed`` points outside the object's scaled box; those points are then removed, and the
    points of the object's scaled box rotate with it. The object keeps its viewing angle (as seen from the
    sensor), which keeps its point pattern plausible.
    """
    boxes, names = _scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    for i, name in enumerate(names):
        if name == DONT_CARE or name not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        for _ in range(max_tries):
            delta = _draw(rng, distribution, yaw_std)
            rot = rotation_y(delta)
            new_box = boxes[i].copy()
            new_box[:3] = rot @ new_box[:3]
            new_box[6] = wrap_angle(new_box[6] + delta)
            more = _in_box(xyz, new_box, expand_hwl) & ~own  # (N,)
            if more.sum() < max_overlap_num_allowed:
                xyz[own] = xyz[own] @ rot.T
                keep = ~more
                xyz = xyz[keep]
                points = points.select(keep)
                boxes[i] = new_box
                break
    return points.with_xyz(xyz), boxes, names


def random_box_shift(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    max_overlap_num_allowed: Std = 0.1,
    max_overlap_rate: Annotated[float, Field(ge=0.0)] | None = None,
    max_tries: Annotated[int, Field(ge=0)] = 100,
    distribution: Distribution = "normal",
    xyz_std: Stds = (1.0, 0.0, 1.0),
    expand_hwl: Scales = (1.0, 1.1, 1.1),
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST,
    shuffle: bool = False,
) -> Scene:
    """Shift each object (box and the points of its scaled box) by ``~ N(0, diag(xyz_std)^2)``.

    A try is accepted when (a) the shifted scaled box (``expand_hwl``) holds fewer than
    ``max_overlap_num_allowed`` points outside the object's scaled box and (b), if ``max_overlap_rate`` is
    set, its 3D IoU with every other (non-DontCare) box at its current place is below ``max_overlap_rate``.
    Points at the destination are left in place (as in the original). An object whose tries all fail stays.
    ``shuffle`` processes the objects in a random order (rows keep their order).
    """
    boxes, names = _scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    cared = _cared(names)
    order = np.arange(len(names))
    if shuffle:
        order = rng.permutation(order)
    for i in order:
        if not cared[i] or names[i] not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        others = boxes[cared & (np.arange(len(names)) != i)]  # (M', 7)
        for _ in range(max_tries):
            delta = _draw(rng, distribution, xyz_std)  # (3,)
            new_box = boxes[i].copy()
            new_box[:3] += delta
            ok = _in_box(xyz[~own], new_box, expand_hwl).sum() < max_overlap_num_allowed
            if ok and max_overlap_rate is not None and others.shape[0]:
                ok = bool((iou_3d(new_box[None, :], others)[0] < max_overlap_rate).all())
            if ok:
                xyz[own] += delta
                boxes[i] = new_box
                break
    return points.with_xyz(xyz), boxes, names


# ----------------------------------------------------------------------------------------------------------
# Background ops


def _kept_objects(names: Names, keep_list: Sequence[str]) -> np.ndarray:
    """Rows in ``keep_list``; if none, every non-DontCare row (the original's fallback). (M,) bool."""
    kept = np.array([n in keep_list for n in names], dtype=bool)
    return kept if kept.any() else _cared(names)


def dilute_background(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    dilute_voxel_base: Annotated[float, Field(gt=0.0)] = 0.4,
    expand_hwl: Scales = (4.0, 4.0, 4.0),
    keep_list: tuple[str, ...] = DEFAULT_KEEP_LIST,
) -> Scene:
    """Thin out the background: keep every point near an object, one random point per voxel elsewhere.

    "Near" means inside an object's box scaled by ``expand_hwl``; objects are the rows named in ``keep_list``
    (all non-DontCare rows if none are), and only those rows are returned. The background is voxelised at
    ``dilute_voxel_base`` with a random grid offset. Points come back foreground first, then background.
    """
    boxes, names = _scene(points, boxes, names)
    kept = _kept_objects(names, keep_list)
    fore = _in_boxes_any(points.xyz, boxes[kept], expand_hwl)  # (N,)
    if len(points) and not fore.any():
        fore[0] = True  # the original's rule: keep a point
    back = np.flatnonzero(~fore)
    picked = back[_random_voxel_pick(points.xyz[back], dilute_voxel_base, rng)]
    index = np.concatenate([np.flatnonzero(fore), picked])
    return points.select(index), boxes[kept], tuple(n for n, k in zip(names, kept, strict=True) if k)


def remove_background(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    expand_hwl: Scales = (4.0, 4.0, 4.0),
    keep_list: tuple[str, ...] = DEFAULT_KEEP_LIST,
    num_object: int = -1,
) -> Scene:
    """Keep only the points near objects (inside their boxes scaled by ``expand_hwl``).

    Objects as in :func:`dilute_background`. With ``num_object > 0``, only the points near that many objects
    drawn with replacement are kept, yet every kept row is returned (the original's behaviour).
    """
    boxes, names = _scene(points, boxes, names)
    kept = _kept_objects(names, keep_list)
    rows = np.flatnonzero(kept)
    if num_object > 0 and rows.size:
        rows = rows[rng.choice(rows.size, num_object)]
    mask = _in_boxes_any(points.xyz, boxes[rows], expand_hwl)  # (N,)
    if len(points) and not mask.any():
        mask[0] = True
    return points.select(mask), boxes[kept], tuple(n for n, k in zip(names, kept, strict=True) if k)


# ----------------------------------------------------------------------------------------------------------
# Configuration

AUGMENT_OPS: dict[str, Callable[..., Scene]] = {
    "random_jitter": random_jitter,
    "random_drop": random_drop,
    "random_global_drop": random_global_drop,
    "random_voxel_downsample": random_voxel_downsample,
    "random_rotation_all": random_rotation_all,
    "random_flip_all": random_flip_all,
    "random_scale_all": random_scale_all,
    "random_transition": random_transition,
    "random_box_rotation": random_box_rotation,
    "random_box_global_rotation": random_box_global_rotation,
    "random_box_shift": random_box_shift,
    "dilute_background": dilute_background,
    "remove_background": remove_background,
}


@cache
def _params_model(method: str) -> type[BaseModel]:
    """A strict pydantic model of an op's keyword parameters, built from its signature and defaults."""
    fn = AUGMENT_OPS[method]
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            fields[p.name] = (hints[p.name], p.default)
    return create_model(f"{method}_params", __config__=ConfigDict(extra="forbid", frozen=True), **fields)


class AugmentStep(BaseModel):
    """One op: written (and dumped) flat as ``{"method": name, **kwargs}``.

    ``kwargs`` are checked against the op's signature (unknown names and bad values are errors) and stored
    with every default filled in, so a dumped config says exactly what ran.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_to_nested(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "kwargs" in data and set(data) <= {"method", "kwargs"}:
            method, kwargs = data.get("method"), dict(data["kwargs"])
        else:
            method = data.get("method")
            kwargs = {k: v for k, v in data.items() if k != "method"}
        if method not in AUGMENT_OPS:
            known = ", ".join(sorted(AUGMENT_OPS))
            raise ValueError(f"unknown augmentation method {method!r}; expected one of: {known}")
        params = _params_model(method).model_validate(kwargs)
        return {"method": method, "kwargs": params.model_dump()}

    @model_serializer
    def _dump_flat(self) -> dict[str, Any]:
        return {"method": self.method, **self.kwargs}


class AugmentConfig(BaseModel):
    """An ordered list of augmentation steps, applied in order (the original's ``data_aug_configs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[AugmentStep, ...] = ()


def apply_augmentations(
    points: PointSet, boxes: np.ndarray, names: Sequence[str], cfg: AugmentConfig, rng: np.random.Generator
) -> Scene:
    """Run ``cfg``'s steps in order; each draws from ``rng``.

    Shapes:
        boxes: (M, 7) -> (M', 7) float64; names: M -> M' (only the background ops drop rows)
    """
    boxes_out, names_out = _scene(points, boxes, names)
    for step in cfg.steps:
        op = AUGMENT_OPS[step.method]
        points, boxes_out, names_out = op(points, boxes_out, names_out, rng, **step.kwargs)
    return points, boxes_out, names_out


# Original kwargs renamed in pgnn, and the ones the original accepted but never read.
_ORIGINAL_RENAMES: dict[str, str] = {
    "method_name": "distribution",
    "max_trails": "max_tries",
    "expend_factor": "expand_hwl",
}
_ORIGINAL_UNUSED: dict[str, frozenset[str]] = {
    "random_rotation_all": frozenset({"expend_factor"}),
    "random_box_rotation": frozenset({"appr_factor"}),
    "random_box_global_rotation": frozenset({"appr_factor"}),
    "random_box_shift": frozenset({"appr_factor"}),
    "remove_background": frozenset({"mask_random_rotation_std", "mask_random_jitter_stds"}),
}


def from_original_configs(data_aug_configs: Sequence[dict[str, Any]]) -> AugmentConfig:
    """Translate an original train config's ``data_aug_configs`` (``method_name``/``method_kwargs`` items)."""
    steps = []
    for item in data_aug_configs:
        method = item["method_name"]
        unused = _ORIGINAL_UNUSED.get(method, frozenset())
        original = item.get("method_kwargs", {})
        kwargs = {_ORIGINAL_RENAMES.get(k, k): v for k, v in original.items() if k not in unused}
        steps.append({"method": method, **kwargs})
    return AugmentConfig(steps=tuple(steps))


# The original's car_auto_T{0,1,2,3}_train / _trainval train configs (identical "data_aug_configs"; the
# ped_cyl_auto_T3_trainval config uses the same list).
ORIGINAL_CAR_AUGMENT = AugmentConfig(
    steps=(
        {"method": "random_rotation_all", "distribution": "normal", "yaw_std": math.pi / 8},
        {"method": "random_flip_all", "flip_prob": 0.5},
        {
            "method": "random_box_shift",
            "max_overlap_num_allowed": 100,
            "max_overlap_rate": 0.01,
            "max_tries": 100,
            "distribution": "normal",
            "xyz_std": (3.0, 0.0, 3.0),
            "expand_hwl": (1.1, 1.1, 1.1),
        },
    )
)
