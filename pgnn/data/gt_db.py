"""Ground-truth sampling ("GT paste"): a database of object point crops, and pasting crops into scenes.

The original Point-GNN's ``models/crop_aug.py`` (``save_cropped_boxes`` / ``CropAugSampler`` /
``parser_without_collision``) as a parquet table and pure, seeded functions.

The database
============
One row per labelled object (not DontCare) with **more than** ``min_points`` points inside its box scaled by
``box_scale`` about its centre (the original's 1.1 and 10). Columns:

============== ==================================== ===================================================
column         type                                 meaning
============== ==================================== ===================================================
frame_id       string                               source frame
object_index   int32                                row of the object in the frame's label list
name           string                               class
difficulty     int8                                 KITTI difficulty 0/1/2, -1 none
box            fixed_size_list<float64>[7]          ``[x, y, z, l, h, w, ry]`` as labelled
num_points     int32                                points in the crop
xyz            list<fixed_size_list<float32>[3]>    the crop's points, **absolute** rectified-camera
                                                    coordinates of the source frame (not box-relative)
attrs          list<fixed_size_list<float32>[K]>    their attributes (intensity, r, g, b[, scores])
============== ==================================== ===================================================

Schema metadata: ``pgnn.data.gt_db.attr_names`` (JSON list of the K column names), ``pgnn.data.gt_db.box_scale``,
``pgnn.data.gt_db.min_points``, ``pgnn.data.gt_db.version``. Crops keep their absolute coordinates because a pasted
object goes back to the same range and height it was seen at: its point density and self-occlusion pattern
then fit the sensor, and the ring of ground points the scaled box caught lands on the ground.

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

import json
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from pgnn.data.augment import DONT_CARE, PointSet, point_set_from_frame, rotation_y, wrap_angle
from pgnn.core.boxes import expand_boxes, iou_bev, points_in_boxes
from pgnn.core.errors import DataError
from pgnn.core.io import atomic_path

__all__ = [
    "GT_DB_VERSION",
    "GtDatabase",
    "GtSampleConfig",
    "build_gt_db",
    "crop_objects",
    "estimate_ground_y",
    "gt_db_schema",
    "read_gt_db",
    "sample_and_paste",
    "write_gt_db",
]

GT_DB_VERSION = 1
_META_ATTR_NAMES = b"pgnn.data.gt_db.attr_names"
_META_BOX_SCALE = b"pgnn.data.gt_db.box_scale"
_META_MIN_POINTS = b"pgnn.data.gt_db.min_points"
_META_VERSION = b"pgnn.data.gt_db.version"
_COLUMNS = ("frame_id", "object_index", "name", "difficulty", "box", "num_points", "xyz", "attrs")


# ----------------------------------------------------------------------------------------------------------
# Building the database


def gt_db_schema(
    attr_names: Sequence[str], box_scale: float = 1.1, min_points: int = 10, num_attrs: int | None = None
) -> pa.Schema:
    """The schema of a ground-truth database whose crops carry ``attr_names`` (or ``num_attrs`` unnamed)."""
    k = len(attr_names) if num_attrs is None else num_attrs
    return pa.schema(
        [
            pa.field("frame_id", pa.string()),
            pa.field("object_index", pa.int32()),
            pa.field("name", pa.string()),
            pa.field("difficulty", pa.int8()),
            pa.field("box", pa.list_(pa.float64(), 7)),
            pa.field("num_points", pa.int32()),
            pa.field("xyz", pa.list_(pa.list_(pa.float32(), 3))),
            pa.field("attrs", pa.list_(pa.list_(pa.float32(), k))),
        ],
        metadata={
            _META_ATTR_NAMES: json.dumps(list(attr_names)).encode(),
            _META_BOX_SCALE: repr(float(box_scale)).encode(),
            _META_MIN_POINTS: str(int(min_points)).encode(),
            _META_VERSION: str(GT_DB_VERSION).encode(),
        },
    )


def crop_objects(
    points: PointSet, boxes: np.ndarray, names: Sequence[str], min_points: int = 10, box_scale: float = 1.1
) -> list[tuple[int, np.ndarray]]:
    """The objects worth a crop: ``(row, point indices)`` for each non-DontCare box with more than
    ``min_points`` points inside the box scaled by ``box_scale`` about its centre.

    Shapes:
        points: N points; boxes: (M, 7); return: up to M pairs, indices (n_i,) int64
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 7)
    if boxes.shape[0] == 0 or len(points) == 0:
        return []
    inside = points_in_boxes(points.xyz, expand_boxes(boxes, (box_scale,) * 3))  # (N, M)
    out = []
    for row, name in enumerate(names):
        index = np.flatnonzero(inside[:, row])
        if name != DONT_CARE and index.size > min_points:
            out.append((row, index))
    return out


def build_gt_db(
    frames: Iterable[Any],
    min_points: int = 10,
    box_scale: float = 1.1,
    classes: Collection[str] | None = None,
) -> pa.Table:
    """Crop every labelled object of ``frames`` (:class:`pgnn.data.kitti.Frame`) into a database table.

    ``classes`` limits the classes kept (None: every class but DontCare; the original's car/person/cyclist
    database excluded Van, Truck, Misc, Tram and Person_sitting). Every frame must carry the same attribute
    columns (all painted or none).
    """
    from pgnn.data.kitti import difficulty, labels_to_boxes

    cols: dict[str, list[Any]] = {c: [] for c in ("frame_id", "object_index", "name", "difficulty", "box")}
    xyz_parts: list[np.ndarray] = []
    attr_parts: list[np.ndarray] = []
    attr_names: tuple[str, ...] | None = None
    for frame in frames:
        points = point_set_from_frame(frame)
        if attr_names is None:
            attr_names = points.attr_names
        elif points.attr_names != attr_names:
            raise DataError(
                f"frame {frame.frame_id}", f"expected attribute columns {attr_names}, got {points.attr_names}"
            )
        labels = list(frame.labels)
        names = [lb.type for lb in labels]
        boxes = labels_to_boxes(labels)  # (M, 7)
        for row, index in crop_objects(points, boxes, names, min_points, box_scale):
            if classes is not None and names[row] not in classes:
                continue
            cols["frame_id"].append(frame.frame_id)
            cols["object_index"].append(row)
            cols["name"].append(names[row])
            cols["difficulty"].append(difficulty(labels[row]))
            cols["box"].append(boxes[row])
            xyz_parts.append(points.xyz[index])
            attr_parts.append(points.attrs[index])
    names_t = attr_names if attr_names is not None else ()
    return _table(cols, xyz_parts, attr_parts, names_t, box_scale, min_points)


def _table(
    cols: dict[str, list[Any]],
    xyz_parts: list[np.ndarray],
    attr_parts: list[np.ndarray],
    attr_names: tuple[str, ...],
    box_scale: float,
    min_points: int,
) -> pa.Table:
    k = len(attr_names)
    schema = gt_db_schema(attr_names, box_scale, min_points)
    counts = np.array([p.shape[0] for p in xyz_parts], dtype=np.int32)  # (R,)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))  # (R + 1,)
    xyz = np.concatenate(xyz_parts).astype(np.float32) if xyz_parts else np.zeros((0, 3), np.float32)
    attrs = np.concatenate(attr_parts).astype(np.float32) if attr_parts else np.zeros((0, k), np.float32)
    boxes = np.asarray(cols["box"], np.float64).reshape(-1, 7)
    arrays = [
        pa.array(cols["frame_id"], pa.string()),
        pa.array(cols["object_index"], pa.int32()),
        pa.array(cols["name"], pa.string()),
        pa.array(cols["difficulty"], pa.int8()),
        pa.FixedSizeListArray.from_arrays(pa.array(boxes.ravel()), 7),
        pa.array(counts, pa.int32()),
        pa.ListArray.from_arrays(offsets, pa.FixedSizeListArray.from_arrays(pa.array(xyz.ravel()), 3)),
        pa.ListArray.from_arrays(offsets, pa.FixedSizeListArray.from_arrays(pa.array(attrs.ravel()), k)),
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


# ----------------------------------------------------------------------------------------------------------
# Storage


def write_gt_db(path: str | Path, table: pa.Table) -> None:
    """Write a database table as parquet (zstd), atomically."""
    with atomic_path(path, suffix=".parquet") as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_gt_db(path: str | Path) -> GtDatabase:
    """Read a database written by :func:`write_gt_db`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "expected a ground-truth database (parquet), found no file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(path, f"expected a ground-truth database (parquet), got unreadable bytes: {e}") from e
    return GtDatabase.from_table(table, source=path)


@dataclass(frozen=True, eq=False)
class GtDatabase:
    """A ground-truth database in memory, indexed by class.

    Shapes:
        names, frame_ids: (R,) str; object_index: (R,) int32; difficulty: (R,) int8; boxes: (R, 7) float64;
        offsets: (R + 1,) int64 (crop r is rows offsets[r]:offsets[r + 1] of xyz/attrs);
        xyz: (P, 3) float32, absolute source-frame coordinates; attrs: (P, K) float32
    """

    names: np.ndarray
    frame_ids: np.ndarray
    object_index: np.ndarray
    difficulty: np.ndarray
    boxes: np.ndarray
    offsets: np.ndarray
    xyz: np.ndarray
    attrs: np.ndarray
    attr_names: tuple[str, ...] = ()
    box_scale: float = 1.1
    min_points: int = 10
    by_class: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        index = {str(n): np.flatnonzero(self.names == n) for n in np.unique(self.names)}
        object.__setattr__(self, "by_class", index)

    def __len__(self) -> int:
        return int(self.names.shape[0])

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_class))

    def indices(self, name: str, difficulties: Collection[int] | None = None) -> np.ndarray:
        """Rows of class ``name`` (optionally of the given difficulties), ascending. (R_c,) int64."""
        rows = self.by_class.get(name, np.zeros(0, np.int64))
        if difficulties is not None:
            rows = rows[np.isin(self.difficulty[rows], list(difficulties))]
        return rows

    def crop(self, row: int) -> PointSet:
        """The points of crop ``row`` (absolute source-frame coordinates) with their attributes."""
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        return PointSet(self.xyz[lo:hi], self.attrs[lo:hi], self.attr_names)

    @staticmethod
    def from_table(table: pa.Table, source: str | Path = "<table>") -> GtDatabase:
        """A database from a table of :func:`gt_db_schema` (as :func:`build_gt_db` returns)."""
        missing = [c for c in _COLUMNS if c not in table.column_names]
        if missing:
            raise DataError(source, f"expected the gt_db columns {_COLUMNS}, missing {missing}")
        meta = table.schema.metadata or {}
        try:
            attr_names = tuple(json.loads(meta.get(_META_ATTR_NAMES, b"[]")))
            box_scale = float(meta.get(_META_BOX_SCALE, b"1.1"))
            min_points = int(meta.get(_META_MIN_POINTS, b"10"))
        except ValueError as e:
            raise DataError(source, f"expected gt_db schema metadata, got unreadable values: {e}") from e
        xyz_col = table.column("xyz").combine_chunks()
        attr_col = table.column("attrs").combine_chunks()
        k = attr_col.type.value_type.list_size
        if attr_names and len(attr_names) != k:
            raise DataError(source, f"expected {k} attribute names in the metadata, got {len(attr_names)}")
        counts = pc.list_value_length(xyz_col).to_numpy(zero_copy_only=False).astype(np.int64)  # (R,)
        stored = table.column("num_points").to_numpy().astype(np.int64)
        attr_counts = pc.list_value_length(attr_col).to_numpy(zero_copy_only=False).astype(np.int64)
        if not (np.array_equal(counts, stored) and np.array_equal(counts, attr_counts)):
            raise DataError(source, "expected num_points to equal the lengths of xyz and attrs, got others")
        xyz = xyz_col.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, 3)
        attrs = attr_col.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, k)
        box_col = table.column("box").combine_chunks()
        boxes = box_col.flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, 7)
        return GtDatabase(
            names=np.asarray(table.column("name").to_pylist(), dtype=str),
            frame_ids=np.asarray(table.column("frame_id").to_pylist(), dtype=str),
            object_index=table.column("object_index").to_numpy().astype(np.int32),
            difficulty=table.column("difficulty").to_numpy().astype(np.int8),
            boxes=boxes,
            offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            xyz=xyz,
            attrs=attrs,
            attr_names=attr_names,
            box_scale=box_scale,
            min_points=min_points,
        )


# ----------------------------------------------------------------------------------------------------------
# Sampling and pasting


class GtSampleConfig(BaseModel):
    """How :func:`sample_and_paste` samples and places crops (the rules in full: the module docstring).

    Defaults follow the original's worked example (``crop_aug.vis_crop_aug_sampler``: 2 cars, 10 pedestrians,
    10 cyclists, 100 tries, yaw std pi/16, box and point checks, ground snapping that needs ground). pgnn's
    own: exact bird's-eye IoU (the original rasterised a 3D IoU), a point check that ignores the ground under
    the box (the original allowed 50 points instead), a robust ground estimate, and ``max_ground_shift``.

    Fields:
        sample_counts: crops to try per class, in this order (``"fill_to"``: up to this many in the scene).
        difficulties: sample only crops of these KITTI difficulties (None: all, -1 included).
        overlap_mode, max_overlap_iou, max_scene_points, ground_clearance, max_pasted_points_in_boxes: the
            collision rules.
        max_tries, yaw_distribution, yaw_std, rotation_center: the placement tries.
        snap_to_ground, ground_footprint_scale, ground_top_k, min_ground_points, require_ground,
            max_ground_shift: the ground snap.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_counts: dict[str, NonNegativeInt] = Field(
        default_factory=lambda: {"Car": 2, "Pedestrian": 10, "Cyclist": 10}
    )
    count_mode: Literal["add", "fill_to"] = "add"
    difficulties: tuple[int, ...] | None = None
    overlap_mode: Literal["box", "point", "box_and_point"] = "box_and_point"
    max_overlap_iou: float = Field(0.0, ge=0.0, le=1.0)
    max_scene_points: int = Field(0, ge=0)
    ground_clearance: float = Field(0.2, ge=0.0)
    max_pasted_points_in_boxes: int = Field(0, ge=0)
    max_tries: int = Field(100, ge=1)
    yaw_distribution: Literal["normal", "uniform"] = "normal"
    yaw_std: float = Field(math.pi / 16, ge=0.0)
    rotation_center: Literal["origin", "box"] = "origin"
    snap_to_ground: bool = True
    ground_footprint_scale: float = Field(1.1, gt=0.0)
    ground_top_k: int = Field(5, ge=1)
    min_ground_points: int = Field(3, ge=1)
    require_ground: bool = True
    max_ground_shift: float | None = Field(0.5, ge=0.0)


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
