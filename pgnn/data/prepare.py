"""The ``prepare`` step: per split, camera field-of-view points with their features and parsed labels.

Each shard is one parquet file: a row per FOV point (columns ``frame`` (index of the frame in the shard),
``x, y, z`` (rectified camera frame, float32), ``intensity``, ``r, g, b`` and, for painted frames,
``s_background, s_bicycle_or_rider, s_car, s_pedestrian``), and in the schema metadata the frames' ids,
labels, calibs and image sizes. Decoding the image and cropping the field of view happen once here, not
every time a graph param changes. A shard carries checksums of its pages and metadata, checked on every read
(:mod:`pgnn.core.parquet`): a corrupted shard is an error naming it.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pgnn.core.errors import DataError
from pgnn.core.io import sha256_files
from pgnn.core.parquet import read_parquet, read_parquet_metadata, write_parquet
from pgnn.core.shards import ShardPlan, ShardTask, chunk_ids, code_version, read_manifest, stable_hash
from pgnn.data.frames import Frame, load_frame, warm_up
from pgnn.data.kitti import Calib, frame_paths, has_camera
from pgnn.data.labels import Label
from pgnn.data.sensor import load_lidar_frame

SCORE_COLUMNS = ("s_background", "s_bicycle_or_rider", "s_car", "s_pedestrian")
_META_KEY = b"pgnn.frames"
_WHAT = "pgnn prepared shard (parquet)"


def _calib_to_json(calib: Calib) -> dict[str, Any]:
    return {
        f.name: (None if getattr(calib, f.name) is None else np.asarray(getattr(calib, f.name)).tolist())
        for f in dataclasses.fields(calib)
    }


def _calib_from_json(d: dict[str, Any]) -> Calib:
    return Calib(**{k: (None if v is None else np.asarray(v, dtype=np.float64)) for k, v in d.items()})


_LABEL_FIELDS = tuple(f.name for f in dataclasses.fields(Label))


def _label_dict(label: Label) -> dict[str, Any]:
    """``dataclasses.asdict(label)`` without its deep copies (a label holds only scalars and a tuple), a
    visible share of the prepare step (measured: benchmarks/README.md, "Measurements behind the code")."""
    return {name: getattr(label, name) for name in _LABEL_FIELDS}


def frames_to_table(frames: Sequence[Frame]) -> pa.Table:
    """Pack frames into one point table with the frames' labels and calibs in the schema metadata."""
    painted = [f.scores is not None for f in frames]
    if any(painted) and not all(painted):
        raise ValueError("a shard must be all painted or all unpainted frames")
    counts = [len(f.points_rect) for f in frames]
    cols: dict[str, np.ndarray] = {
        "frame": np.repeat(np.arange(len(frames), dtype=np.uint16), counts),
    }
    xyz = np.concatenate([f.points_rect for f in frames]).astype(np.float32) if frames else np.zeros((0, 3))
    rgb = np.concatenate([f.rgb for f in frames]).astype(np.float32) if frames else np.zeros((0, 3))
    for i, name in enumerate("xyz"):
        cols[name] = xyz[:, i].astype(np.float32)
    cols["intensity"] = np.concatenate([f.intensity for f in frames]).astype(np.float32) if frames else []
    for i, name in enumerate("rgb"):
        cols[name] = rgb[:, i].astype(np.float32)
    if frames and painted[0]:
        scores = np.concatenate([f.scores for f in frames]).astype(np.float32)  # (N, 4)
        for i, name in enumerate(SCORE_COLUMNS):
            cols[name] = scores[:, i]
    meta = [
        {
            "frame_id": f.frame_id,
            "labels": [_label_dict(lab) for lab in f.labels],
            "calib": _calib_to_json(f.calib),
            "image_size": list(f.image_size),
        }
        for f in frames
    ]
    table = pa.table({k: pa.array(v) for k, v in cols.items()})
    return table.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})


def table_to_frames(table: pa.Table, source: str | Path = "<table>") -> list[Frame]:
    """Inverse of :func:`frames_to_table`."""
    md = table.schema.metadata or {}
    if _META_KEY not in md:
        raise DataError(source, "expected a pgnn prepared shard (schema metadata 'pgnn.frames' missing)")
    meta = json.loads(md[_META_KEY])
    frame_col = table.column("frame").to_numpy()
    bounds = np.searchsorted(frame_col, np.arange(len(meta) + 1))
    xyz = np.stack([table.column(c).to_numpy() for c in "xyz"], axis=1).astype(np.float32)
    rgb = np.stack([table.column(c).to_numpy() for c in "rgb"], axis=1).astype(np.float32)
    intensity = table.column("intensity").to_numpy().astype(np.float32)
    has_scores = SCORE_COLUMNS[0] in table.column_names
    scores = (
        np.stack([table.column(c).to_numpy() for c in SCORE_COLUMNS], axis=1).astype(np.float32)
        if has_scores
        else None
    )
    frames = []
    for i, m in enumerate(meta):
        s = slice(bounds[i], bounds[i + 1])
        frames.append(
            Frame(
                frame_id=m["frame_id"],
                points_rect=xyz[s],
                intensity=intensity[s],
                rgb=rgb[s],
                scores=None if scores is None else scores[s],
                labels=[
                    Label(**{k: tuple(v) if k == "bbox" else v for k, v in lab.items()})
                    for lab in m["labels"]
                ],
                calib=_calib_from_json(m["calib"]),
                image_size=(int(m["image_size"][0]), int(m["image_size"][1])),
            )
        )
    return frames


def write_prepared_shard(path: str | Path, frames: Sequence[Frame]) -> None:
    """Write frames as one zstd parquet shard with checksums, atomically. No dictionary encoding: on float
    point columns it made the write slower and the file larger (measured: benchmarks/README.md,
    "Measurements behind the code")."""
    write_parquet(path, frames_to_table(frames), compression="zstd", use_dictionary=False)


def read_prepared_shard(path: str | Path) -> list[Frame]:
    """Read the frames of one prepared shard, its checksums verified.

    Raises:
        DataError: naming ``path``: missing, not a prepared shard, or corrupted (a checksum mismatch).
    """
    return table_to_frames(read_parquet(path, _WHAT), path)


class PreparedFrames:
    """The frames of a prepared split folder (``pgnn.data.prepare``), read shard by shard on first use.

    ``len`` and ``frame_ids`` come from the manifest alone. Loaded shards are kept (the ``max_cached_shards``
    most recently used, or all); pickling drops them, so a DataLoader worker reads its own.
    """

    def __init__(self, folder: str | Path, max_cached_shards: int | None = None) -> None:
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        if manifest is None:
            raise DataError(self.folder / "manifest.json", "expected a prepared split folder with a manifest")
        if max_cached_shards is not None and max_cached_shards < 1:
            raise ValueError(f"max_cached_shards: expected >= 1 or None, got {max_cached_shards}")
        self.max_cached_shards = max_cached_shards
        self.files: list[str] = [e["file"] for e in manifest["shards"]]
        self.frame_ids: list[str] = []
        self._index: list[tuple[int, int]] = []  # frame -> (shard, position in the shard)
        for s, entry in enumerate(manifest["shards"]):
            for j, fid in enumerate(entry["frames"]):
                self._index.append((s, j))
                self.frame_ids.append(str(fid))
        self._loaded: OrderedDict[int, list[Frame]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": OrderedDict()}

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: int) -> Frame:
        s, j = self._index[i]
        frames = self._loaded.get(s)
        if frames is None:
            path = self.folder / self.files[s]
            frames = read_prepared_shard(path)
            if j >= len(frames) or frames[j].frame_id != self.frame_ids[i]:
                want = f"frame {self.frame_ids[i]} at position {j} (the manifest's)"
                raise DataError(path, f"expected {want}, got the shard's frames changed: rerun prepare")
            self._loaded[s] = frames
            if self.max_cached_shards is not None and len(self._loaded) > self.max_cached_shards:
                self._loaded.popitem(last=False)
        else:
            self._loaded.move_to_end(s)
        return frames[j]


def prepared_label_types(folder: str | Path) -> dict[str, frozenset[str]]:
    """The object types labelled in each frame of a prepared split, read from the shards' schema metadata
    only (no points are loaded)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise DataError(Path(folder) / "manifest.json", "expected a prepared split folder with a manifest")
    out: dict[str, frozenset[str]] = {}
    for entry in manifest["shards"]:
        path = Path(folder) / entry["file"]
        md = read_parquet_metadata(path, _WHAT)
        if _META_KEY not in md:
            raise DataError(path, "expected a pgnn prepared shard (schema metadata 'pgnn.frames' missing)")
        for m in json.loads(md[_META_KEY]):
            out[str(m["frame_id"])] = frozenset(lab["type"] for lab in m["labels"])
    return out


def frames_with_classes(label_types: dict[str, frozenset[str]], classes: Sequence[str]) -> list[str]:
    """The frames holding at least one object of ``classes`` (the original's class splits: on KITTI's train
    split, Car gives exactly ``train_car.txt``, Pedestrian + Cyclist ``train_pedestrian_cyclist.txt``)."""
    wanted = set(classes)
    return [fid for fid, types in label_types.items() if types & wanted]


def read_prepared_dir(out_dir: str | Path) -> list[Frame]:
    """All frames of a prepared split folder, in manifest order (in memory; see :class:`PreparedFrames`)."""
    store = PreparedFrames(out_dir, max_cached_shards=1)
    return [store[i] for i in range(len(store))]


def _frame_files(root: Path, frame_id: str, painted: bool) -> list[Path]:
    p = frame_paths(root, frame_id)
    files = [p.painted if painted else p.points, p.calib] + [p.image] * has_camera(root)
    return files + ([p.label] if p.label.exists() else [])


def _build_prepared(task: ShardTask, path: Path, *, root: str, painted: bool) -> None:
    load = load_frame if has_camera(root) else load_lidar_frame  # a LiDAR-only root (pgnn convert)
    write_prepared_shard(path, [load(root, fid, painted=painted) for fid in task.frames])


def prepare_plan(
    root: str | Path,
    frame_ids: Sequence[str],
    out_dir: str | Path,
    *,
    painted: bool = False,
    frames_per_shard: int = 16,
    code_modules: Sequence[str] = ("pgnn.data.prepare",),
) -> ShardPlan:
    """The plan to crop, featurise and label ``frame_ids`` of the KITTI root into parquet shards.

    A shard's key hashes its frames' input files, the params and the code of ``code_modules`` (their import
    closure: :func:`pgnn.core.shards.code_version`; the pipeline passes its stage table's ``shard_code``).
    """
    root = Path(root)
    params = {"painted": painted, "frames_per_shard": frames_per_shard}
    files = {fid: _frame_files(root, fid, painted) for fid in frame_ids}
    with ThreadPoolExecutor(max_workers=1) as background:  # hash the inputs while code_version parses
        hashes = background.submit(sha256_files, [p for paths in files.values() for p in paths])
        code = code_version(code_modules)
        digests = iter(hashes.result())
    sha = {fid: [next(digests) for _ in paths] for fid, paths in files.items()}
    tasks = []
    for i, ids in enumerate(chunk_ids(list(frame_ids), frames_per_shard)):
        inputs = {fid: sha[fid] for fid in ids}
        key = stable_hash({"inputs": inputs, "params": params, "code": code})
        tasks.append(ShardTask(file=f"shard-{i:04d}.parquet", frames=tuple(ids), key=key))
    build = partial(_build_prepared, root=str(root), painted=painted)
    return ShardPlan(Path(out_dir), tuple(tasks), build, "prepared", params, code, partial(warm_up, painted))
