"""Augmentation ops on the points alone and on the whole scene (the original's ``models/preprocess.py``).

The ops' contract and the registry: :mod:`pgnn.data.augment`; the scene they act on: :mod:`pgnn.data.points`.
The per-object and background ops: :mod:`pgnn.data.augment_box_ops`. Their keyword arguments' defaults are
in their config models (:mod:`pgnn.config.augment`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pgnn.config.augment import Distribution, Probability, Std, Stds
from pgnn.data.points import PointSet, Scene, cared_rows, check_scene, rotation_y, wrap_angle

__all__ = [
    "draw",
    "random_drop",
    "random_flip_all",
    "random_global_drop",
    "random_jitter",
    "random_rotation_all",
    "random_scale_all",
    "random_transition",
    "random_voxel_downsample",
    "random_voxel_pick",
]

# ----------------------------------------------------------------------------------------------------------
# Helpers


def draw(rng: np.random.Generator, distribution: str, std: float | Sequence[float]) -> Any:
    """One sample of N(0, std^2) or U(-std, std) (elementwise for a sequence of stds)."""
    scale = np.asarray(std, dtype=np.float64)
    if distribution == "normal":
        out = rng.normal(0.0, scale)
    else:
        out = rng.uniform(-scale, scale)
    return float(out) if scale.ndim == 0 else out


def random_voxel_pick(xyz: np.ndarray, voxel: float, rng: np.random.Generator) -> np.ndarray:
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
    xyz_std: Stds,
) -> Scene:
    """Add independent N(0, xyz_std^2) noise to every point's x, y, z; boxes unchanged."""
    boxes, names = check_scene(points, boxes, names)
    noise = rng.normal(0.0, np.asarray(xyz_std, np.float64), size=(len(points), 3))  # (N, 3)
    return points.with_xyz(points.xyz + noise), boxes, names


def random_drop(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    drop_prob: Probability | tuple[Probability, ...],
    tier_prob: tuple[Probability, ...] | None,
) -> Scene:
    """Drop each point independently with probability ``drop_prob``.

    A tuple ``drop_prob`` first picks one of its values (with probabilities ``tier_prob``, uniform if None).
    If every point would go, all are kept (the original's rule).
    """
    boxes, names = check_scene(points, boxes, names)
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
    drop_std: Std,
) -> Scene:
    """:func:`random_drop` with a per-scene drop probability ``|N(0, drop_std^2)|``."""
    drop_prob = abs(float(rng.normal(0.0, drop_std)))
    return random_drop(points, boxes, names, rng, drop_prob=drop_prob, tier_prob=None)


def random_voxel_downsample(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    voxel_std: Std,
    min_voxel: Std,
    max_voxel: Std,
) -> Scene:
    """Keep one random point per voxel, voxel size ``min(|N(0, voxel_std^2)|, max_voxel)``.

    Sizes below ``min_voxel`` leave the cloud unchanged. The grid has a random offset U(0, voxel)^3 and the
    kept points stay in their input order.
    """
    boxes, names = check_scene(points, boxes, names)
    voxel = min(abs(float(rng.normal(0.0, voxel_std))), max_voxel)
    if voxel < min_voxel or len(points) == 0:
        return points, boxes, names
    return points.select(random_voxel_pick(points.xyz, voxel, rng)), boxes, names


# ----------------------------------------------------------------------------------------------------------
# Whole-scene ops


def random_rotation_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    distribution: Distribution,
    yaw_std: Std,
) -> Scene:
    """Rotate the whole scene about the vertical axis through the origin by ``delta ~ N(0, yaw_std^2)``.

    Points ``xyz @ R.T``; box centres likewise; ``ry += delta`` (wrapped).
    """
    boxes, names = check_scene(points, boxes, names)
    delta = draw(rng, distribution, yaw_std)
    rot = rotation_y(delta)  # (3, 3)
    xyz = points.xyz.astype(np.float64) @ rot.T  # (N, 3)
    cared = cared_rows(names)
    boxes[cared, :3] = boxes[cared, :3] @ rot.T
    boxes[cared, 6] = wrap_angle(boxes[cared, 6] + delta)
    return points.with_xyz(xyz), boxes, names


def random_flip_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    flip_prob: Probability,
) -> Scene:
    """With probability ``flip_prob`` mirror the scene left-right: ``x -> -x``, ``ry -> pi - ry``, wrapped."""
    boxes, names = check_scene(points, boxes, names)
    if not rng.uniform() < flip_prob:
        return points, boxes, names
    xyz = points.xyz.copy()
    xyz[:, 0] = -xyz[:, 0]
    cared = cared_rows(names)
    boxes[cared, 0] = -boxes[cared, 0]
    boxes[cared, 6] = wrap_angle(np.pi - boxes[cared, 6])
    return points.with_xyz(xyz), boxes, names


def random_scale_all(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    distribution: Distribution,
    scale_std: Std,
) -> Scene:
    """Scale the scene about the origin by ``1 + N(0, scale_std^2)``: points, box centres and l, h, w."""
    boxes, names = check_scene(points, boxes, names)
    scale = 1.0 + draw(rng, distribution, scale_std)
    cared = cared_rows(names)
    boxes[cared, :6] *= scale
    return points.with_xyz(points.xyz.astype(np.float64) * scale), boxes, names


def random_transition(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    xyz_std: Stds,
) -> Scene:
    """Translate the whole scene by one offset ``~ N(0, diag(xyz_std)^2)``."""
    boxes, names = check_scene(points, boxes, names)
    delta = rng.normal(0.0, np.asarray(xyz_std, np.float64))  # (3,)
    cared = cared_rows(names)
    boxes[cared, :3] += delta
    return points.with_xyz(points.xyz.astype(np.float64) + delta), boxes, names
