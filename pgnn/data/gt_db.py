"""Ground-truth sampling ("GT paste"): the database of object point crops (build, write, read).

The original Point-GNN's ``models/crop_aug.py`` (``save_cropped_boxes``) as a parquet table. Pasting crops
into scenes: :mod:`pgnn.data.gt_paste`.

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

Schema metadata: ``pgnn.gt_db.attr_names`` (JSON list of the K column names),
``pgnn.gt_db.box_scale``, ``pgnn.gt_db.min_points``, ``pgnn.gt_db.version``, and ``pgnn.metadata_crc32``: the
file carries checksums of its pages and metadata, checked on every read (:mod:`pgnn.core.parquet`), so a
corrupted database is an error naming it. Crops keep their
absolute coordinates because a pasted object goes back to the same range and height it was seen at: its point
density and self-occlusion pattern then fit the sensor, and the ring of ground points the scaled box caught
lands on the ground.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgnn.core.boxes import expand_boxes, points_in_boxes
from pgnn.core.errors import DataError
from pgnn.core.parquet import read_parquet, write_parquet
from pgnn.data.points import DONT_CARE, PointSet, point_set_from_frame

__all__ = [
    "GT_DB_VERSION",
    "GtDatabase",
    "build_gt_db",
    "crop_objects",
    "gt_db_schema",
    "read_gt_db",
    "write_gt_db",
]

GT_DB_VERSION = 1
_META_ATTR_NAMES = b"pgnn.gt_db.attr_names"
_META_BOX_SCALE = b"pgnn.gt_db.box_scale"
_META_MIN_POINTS = b"pgnn.gt_db.min_points"
_META_VERSION = b"pgnn.gt_db.version"
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
    """Crop every labelled object of ``frames`` (:class:`pgnn.data.frames.Frame`) into a database table.

    ``classes`` limits the classes kept (None: every class but DontCare; the original's car/person/cyclist
    database excluded Van, Truck, Misc, Tram and Person_sitting). Every frame must carry the same attribute
    columns (all painted or none).
    """
    from pgnn.data.labels import difficulty, labels_to_boxes

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
    """Write a database table as parquet (zstd) with checksums (:mod:`pgnn.core.parquet`), atomically."""
    write_parquet(path, table, compression="zstd")


def read_gt_db(path: str | Path) -> GtDatabase:
    """Read a database written by :func:`write_gt_db`, its checksums verified.

    Raises:
        DataError: naming ``path``: missing, not a gt_db, or corrupted (a checksum mismatch).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "expected a ground-truth database (parquet), found no file")
    return GtDatabase.from_table(read_parquet(path, "ground-truth database (parquet)"), source=path)


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
