"""Per-object and background augmentation ops (the original's ``models/preprocess.py``).

The ops' contract and the registry: :mod:`pgnn.data.augment`; the point and whole-scene ops:
:mod:`pgnn.data.augment_ops`; their keyword arguments' defaults: :mod:`pgnn.config.augment`.

An expanded box (``expand_hwl``) grows about its centre, so its bottom face drops by ``h * (f_h - 1) / 2``
(the original's ``box3d_to_normals``; :func:`pgnn.core.boxes.expand_boxes`).

Changes from the original, all deliberate:

* ``random_box_shift`` checks a moved box against every other box at its current place. The original checked
  only the boxes already processed, so a later box that failed all its tries kept its old place without ever
  being checked against an earlier box that had moved onto it.
* ``shuffle`` in ``random_box_shift`` shuffles the processing order only; rows keep their order.
* Collision IoU is exact 3D IoU, not the original's 0.1 m raster approximation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pgnn.config.augment import Distribution, NonNegative, Positive, Scales, Std, Stds, Tries
from pgnn.core.boxes import expand_boxes, iou_3d, points_in_boxes
from pgnn.data.augment_ops import draw, random_voxel_pick
from pgnn.data.points import (
    DONT_CARE,
    Names,
    PointSet,
    Scene,
    cared_rows,
    check_scene,
    rotation_y,
    wrap_angle,
)

__all__ = [
    "dilute_background",
    "random_box_global_rotation",
    "random_box_rotation",
    "random_box_shift",
    "remove_background",
]

# ----------------------------------------------------------------------------------------------------------
# Helpers


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


# ----------------------------------------------------------------------------------------------------------
# Per-object ops


def random_box_rotation(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    max_overlap_num_allowed: NonNegative,
    max_tries: Tries,
    distribution: Distribution,
    yaw_std: Std,
    expand_hwl: Scales,
    augment_list: tuple[str, ...],
) -> Scene:
    """Turn each object in place (about the vertical axis through its bottom centre) by ``N(0, yaw_std^2)``.

    A try is accepted when the turned box (scaled by ``expand_hwl``) holds fewer than
    ``max_overlap_num_allowed`` points that were not in the object's scaled box before (default 0.1: none).
    The points in the object's scaled box turn with it. An object whose tries all fail stays as it was.
    """
    boxes, names = check_scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    for i, name in enumerate(names):
        if name == DONT_CARE or name not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        for _ in range(max_tries):
            delta = draw(rng, distribution, yaw_std)
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
    max_overlap_num_allowed: NonNegative,
    max_tries: Tries,
    distribution: Distribution,
    yaw_std: Std,
    expand_hwl: Scales,
    augment_list: tuple[str, ...],
) -> Scene:
    """Move each object along a circle about the origin: rotate it about the vertical axis through the origin.

    A try (``delta ~ N(0, yaw_std^2)``) is accepted when the moved scaled box holds fewer than
    ``max_overlap_num_allowed`` points outside the object's scaled box; those points are then removed, and the
    points of the object's scaled box rotate with it. The object keeps its viewing angle (as seen from the
    sensor), which keeps its point pattern plausible.
    """
    boxes, names = check_scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    for i, name in enumerate(names):
        if name == DONT_CARE or name not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        for _ in range(max_tries):
            delta = draw(rng, distribution, yaw_std)
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
    max_overlap_num_allowed: NonNegative,
    max_overlap_rate: NonNegative | None,
    max_tries: Tries,
    distribution: Distribution,
    xyz_std: Stds,
    expand_hwl: Scales,
    augment_list: tuple[str, ...],
    shuffle: bool,
) -> Scene:
    """Shift each object (box and the points of its scaled box) by ``~ N(0, diag(xyz_std)^2)``.

    A try is accepted when (a) the shifted scaled box (``expand_hwl``) holds fewer than
    ``max_overlap_num_allowed`` points outside the object's scaled box and (b), if ``max_overlap_rate`` is
    set, its 3D IoU with every other (non-DontCare) box at its current place is below ``max_overlap_rate``.
    Points at the destination are left in place (as in the original). An object whose tries all fail stays.
    ``shuffle`` processes the objects in a random order (rows keep their order).
    """
    boxes, names = check_scene(points, boxes, names)
    xyz = points.xyz.astype(np.float64)  # (N, 3)
    cared = cared_rows(names)
    order = np.arange(len(names))
    if shuffle:
        order = rng.permutation(order)
    for i in order:
        if not cared[i] or names[i] not in augment_list:
            continue
        own = _in_box(xyz, boxes[i], expand_hwl)  # (N,)
        others = boxes[cared & (np.arange(len(names)) != i)]  # (M', 7)
        for _ in range(max_tries):
            delta = draw(rng, distribution, xyz_std)  # (3,)
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
    return kept if kept.any() else cared_rows(names)


def dilute_background(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    dilute_voxel_base: Positive,
    expand_hwl: Scales,
    keep_list: tuple[str, ...],
) -> Scene:
    """Thin out the background: keep every point near an object, one random point per voxel elsewhere.

    "Near" means inside an object's box scaled by ``expand_hwl``; objects are the rows named in ``keep_list``
    (all non-DontCare rows if none are), and only those rows are returned. The background is voxelised at
    ``dilute_voxel_base`` with a random grid offset. Points come back foreground first, then background.
    """
    boxes, names = check_scene(points, boxes, names)
    kept = _kept_objects(names, keep_list)
    fore = _in_boxes_any(points.xyz, boxes[kept], expand_hwl)  # (N,)
    if len(points) and not fore.any():
        fore[0] = True  # the original's rule: keep a point
    back = np.flatnonzero(~fore)
    picked = back[random_voxel_pick(points.xyz[back], dilute_voxel_base, rng)]
    index = np.concatenate([np.flatnonzero(fore), picked])
    return points.select(index), boxes[kept], tuple(n for n, k in zip(names, kept, strict=True) if k)


def remove_background(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
    *,
    expand_hwl: Scales,
    keep_list: tuple[str, ...],
    num_object: int,
) -> Scene:
    """Keep only the points near objects (inside their boxes scaled by ``expand_hwl``).

    Objects as in :func:`dilute_background`. With ``num_object > 0``, only the points near that many objects
    drawn with replacement are kept, yet every kept row is returned (the original's behaviour).
    """
    boxes, names = check_scene(points, boxes, names)
    kept = _kept_objects(names, keep_list)
    rows = np.flatnonzero(kept)
    if num_object > 0 and rows.size:
        rows = rows[rng.choice(rows.size, num_object)]
    mask = _in_boxes_any(points.xyz, boxes[rows], expand_hwl)  # (N,)
    if len(points) and not mask.any():
        mask[0] = True
    return points.select(mask), boxes[kept], tuple(n for n, k in zip(names, kept, strict=True) if k)
