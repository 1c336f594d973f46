"""Ground-truth sampling ("GT paste"): pasting crops of the database (:mod:`pgnn.data.gt_db`) into scenes.

The original Point-GNN's ``models/crop_aug.py`` (``CropAugSampler`` / ``parser_without_collision``) as pure,
seeded functions. Their settings: :class:`pgnn.config.gt_sampling.GtSampleConfig` (params.yaml's
``gt_sampling``).

Pasting
=======
:func:`sample_and_paste` draws, per class, ``sample_counts[class]`` crops without replacement (``"fill_to"``:
only as many as the scene lacks of that count) and tries each up to ``max_tries`` times:

1. turn it by ``delta ~ N(0, yaw_std^2)`` about the vertical axis through the sensor (``rotation_center=
   "origin"``, the original's rule: the object moves along a circle and keeps the side it shows to the
   sensor) or through its own box (``"box"``: a yaw jitter in place);
2. with ``snap_to_ground``, move it vertically so the box bottom sits on the ground under it: the ground
   height is the median of the ``ground_top_k`` largest y (y points down: the lowest points) of the scene's
   points inside the box's footprint scaled by ``ground_footprint_scale``, at any height. The original
   took the single largest y; the median of a few is as blind to things standing on the footprint (they
   have smaller y) and also ignores a stray point below the ground. With fewer than ``min_ground_points``
   footprint points the try fails (``require_ground``) or the crop keeps its height. A try that would move
   the object by more than ``max_ground_shift`` fails too: with its range kept, the object's own height is a
   good prior, and a larger jump means the footprint shows no ground but the top of something (a wall, a
   hedge) with the ground behind it hidden from the sensor;
3. reject it on collision (``overlap_mode``):

   * ``"box"``: its bird's-eye IoU with a scene box or an already pasted box exceeds ``max_overlap_iou``;
   * ``"point"``: more than ``max_scene_points`` scene points lie inside the pasted box above its lowest
     ``ground_clearance`` metres (ground points under the box do not count), or more than
     ``max_pasted_points_in_boxes`` crop points lie inside a scene or already pasted box;
   * ``"box_and_point"``: either;

4. on success, remove the scene points inside the pasted box scaled by the database's ``box_scale`` (the
   region the crop covers) except those inside another object's box, and add the crop's points.

DontCare rows take no part in any check. Pasted points follow the scene's points; pasted rows follow its
rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pgnn.config.gt_sampling import GtSampleConfig
from pgnn.core.boxes import expand_boxes, iou_bev, points_in_boxes
from pgnn.data.gt_db import GtDatabase
from pgnn.data.points import DONT_CARE, PointSet, rotation_y, wrap_angle

__all__ = [
    "estimate_ground_y",
    "sample_and_paste",
]


def estimate_ground_y(
    xyz: np.ndarray, box: np.ndarray, footprint_scale: float = 1.1, top_k: int = 5, min_points: int = 1
) -> float | None:
    """The ground height under a box: the median of the ``top_k`` largest y (lowest points; y is down) of
    the points inside the box's footprint scaled by ``footprint_scale``, at any height. None with fewer than
    ``min_points`` such points.

    Shapes:
        xyz: (N, 3); box: (7,)
    """
    y = xyz[_in_footprint(xyz, box, footprint_scale), 1]
    if y.size < min_points or y.size == 0:
        return None
    k = min(top_k, y.size)
    return float(np.median(np.partition(y, y.size - k)[y.size - k :]))


def _in_footprint(xyz: np.ndarray, box: np.ndarray, scale: float) -> np.ndarray:
    """Points whose (x, z) lie in the box's bird's-eye footprint scaled by ``scale``. (N,) bool."""
    if xyz.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    column = np.array([box[0], 1e6, box[2], box[3] * scale, 2e6, box[5] * scale, box[6]])  # all heights
    return points_in_boxes(xyz, column[None, :])[:, 0]


def _body(box: np.ndarray, clearance: float) -> np.ndarray:
    """The box without its lowest ``clearance`` metres (where ground points lie). (7,)."""
    body = box.copy()
    cut = min(clearance, 0.5 * box[4])
    body[1] -= cut
    body[4] -= cut
    return body


def _draw_rows(
    db: GtDatabase, names: Sequence[str], cfg: GtSampleConfig, rng: np.random.Generator
) -> np.ndarray:
    """Database rows to try, class by class in ``cfg.sample_counts`` order. (S,) int64."""
    rows = []
    for name, count in cfg.sample_counts.items():
        if cfg.count_mode == "fill_to":
            count -= sum(1 for n in names if n == name)
        pool = db.indices(name, cfg.difficulties)
        n = min(max(count, 0), pool.size)
        if n:
            rows.append(pool[rng.choice(pool.size, size=n, replace=False)])
    return np.concatenate(rows) if rows else np.zeros(0, np.int64)


def _turn(box: np.ndarray, delta: float, center: str) -> tuple[np.ndarray, np.ndarray]:
    """A box (7,) turned by ``delta`` about the vertical axis through the origin or its own centre, and the
    rotation (3, 3)."""
    rot = rotation_y(delta)
    new_box = box.copy()
    new_box[6] = wrap_angle(box[6] + delta)
    if center == "origin":
        new_box[:3] = rot @ box[:3]
    return new_box, rot


def _turn_crop(xyz: np.ndarray, box: np.ndarray, rot: np.ndarray, center: str, dy: float) -> np.ndarray:
    """Crop points (P, 3) turned as :func:`_turn` turned their box, then lifted by ``dy``. (P, 3) float64."""
    pivot = np.zeros(3) if center == "origin" else box[:3]
    out = (xyz.astype(np.float64) - pivot) @ rot.T + pivot
    out[:, 1] += dy
    return out


def _reachable(xyz: np.ndarray, box: np.ndarray, center: str, scale: float) -> np.ndarray:
    """Points that a footprint (scaled by ``scale``) of any turned placement of ``box`` can cover: an annulus
    about the origin ("origin") or a disc about the box ("box"). (N,) bool."""
    reach = 0.5 * math.hypot(box[3], box[5]) * max(scale, 1.0) + 0.01
    if center == "origin":
        return np.abs(np.hypot(xyz[:, 0], xyz[:, 2]) - math.hypot(box[0], box[2])) <= reach
    return np.hypot(xyz[:, 0] - box[0], xyz[:, 2] - box[2]) <= reach


def _try_place(
    near: np.ndarray,
    crop_xyz: np.ndarray,
    box: np.ndarray,
    solid: np.ndarray,
    cfg: GtSampleConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Up to ``cfg.max_tries`` placements of one crop; the first that passes, or None.

    Shapes:
        near: (N', 3) the scene points it can reach; crop_xyz: (P, 3); box: (7,); solid: (M', 7) boxes to
        avoid -> (new box (7,), crop points (P, 3) float64)
    """
    check_box = cfg.overlap_mode in ("box", "box_and_point")
    check_point = cfg.overlap_mode in ("point", "box_and_point")
    for _ in range(cfg.max_tries):
        if cfg.yaw_distribution == "normal":
            delta = float(rng.normal(0.0, cfg.yaw_std))
        else:
            delta = float(rng.uniform(-cfg.yaw_std, cfg.yaw_std))
        new_box, rot = _turn(box, delta, cfg.rotation_center)
        dy = 0.0
        if cfg.snap_to_ground:
            ground = estimate_ground_y(
                near, new_box, cfg.ground_footprint_scale, cfg.ground_top_k, cfg.min_ground_points
            )
            if ground is None and cfg.require_ground:
                continue
            if ground is not None:
                dy = ground - new_box[1]
                if cfg.max_ground_shift is not None and abs(dy) > cfg.max_ground_shift:
                    continue
                new_box[1] = ground
        if check_box and solid.shape[0] and iou_bev(new_box[None, :], solid).max() > cfg.max_overlap_iou:
            continue
        placed = _turn_crop(crop_xyz, box, rot, cfg.rotation_center, dy)  # (P, 3)
        if check_point:
            body = _body(new_box, cfg.ground_clearance)[None, :]
            if near.shape[0] and int(points_in_boxes(near, body).sum()) > cfg.max_scene_points:
                continue
            if solid.shape[0]:
                intruding = int(points_in_boxes(placed, solid).any(axis=1).sum())
                if intruding > cfg.max_pasted_points_in_boxes:
                    continue
        return new_box, placed
    return None


def sample_and_paste(
    points: PointSet,
    boxes: np.ndarray,
    names: Sequence[str],
    db: GtDatabase,
    cfg: GtSampleConfig,
    rng: np.random.Generator,
) -> tuple[PointSet, np.ndarray, tuple[str, ...]]:
    """Paste database objects into a scene without collisions (see the module docstring for the rules).

    The scene's and the database's attribute columns must agree.

    Shapes:
        points: N points; boxes: (M, 7); names: M -> points N', boxes (M + S, 7) float64, names M + S
    """
    boxes = np.array(boxes, dtype=np.float64).reshape(-1, 7)
    names = tuple(str(n) for n in names)
    if len(names) != boxes.shape[0]:
        raise ValueError(f"names: expected {boxes.shape[0]} names (one per box), got {len(names)}")
    if db.attrs.shape[1] != points.attrs.shape[1] or (
        db.attr_names and points.attr_names and db.attr_names != points.attr_names
    ):
        raise ValueError(
            f"sample_and_paste: the database's attribute columns {db.attr_names or db.attrs.shape[1]} differ "
            f"from the scene's {points.attr_names or points.attrs.shape[1]}"
        )
    scene = points
    solid = boxes[np.array([n != DONT_CARE for n in names], dtype=bool)]  # (M', 7) boxes that collide
    out_boxes, out_names = [boxes], list(names)
    for row in _draw_rows(db, names, cfg, rng):
        crop, box = db.crop(int(row)), db.boxes[row]
        near = scene.xyz[_reachable(scene.xyz, box, cfg.rotation_center, cfg.ground_footprint_scale)]
        placed = _try_place(near, crop.xyz, box, solid, cfg, rng)
        if placed is None:
            continue
        new_box, crop_xyz = placed
        region = points_in_boxes(scene.xyz, expand_boxes(new_box[None, :], (db.box_scale,) * 3))[:, 0]
        if solid.shape[0]:
            region &= ~points_in_boxes(scene.xyz, solid).any(axis=1)
        scene = PointSet.concat([scene.select(~region), crop.with_xyz(crop_xyz)])
        solid = np.vstack([solid, new_box[None, :]])
        out_boxes.append(new_box[None, :])
        out_names.append(str(db.names[row]))
    return scene, np.vstack(out_boxes), tuple(out_names)
