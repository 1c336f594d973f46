"""The graph cache: many frames' graph records per ``.npz`` shard, read back one frame at a time.

A *record* is one frame's dict of arrays (reference naming, see ``pgnn.graph``): ``features``,
``vertex_coord_i``, ``keypoint_indices_i``, ``edges_i`` and, for training, ``cls_labels``, ``box_targets``,
``valid_box``. A shard stores each key's arrays concatenated over its frames along axis 0, with
``<key>.offsets`` (F + 1,) int64 marking the frames; indices stay frame-local, so a frame's slice is its
record. Shards are written with stable bytes (:mod:`pgnn.npzstore`) and read memory-mapped: reading one
frame back costs well under a millisecond plus the copy.

Why npz and not parquet here: parquet widens uint16/int8 and its nested lists cost a decode on every read;
measured figures are in the README ("Graph cache layout").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pgnn.errors import DataError
from pgnn.npzstore import open_npz_memmap, save_npz
from pgnn.shards import read_manifest

FRAME_ID = "frame_id"


def pack_records(records: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-frame records into shard arrays with ``.offsets``."""
    if not records:
        raise ValueError("a shard needs at least one record")
    keys = sorted(k for k in records[0] if k != FRAME_ID)
    for r in records:
        if sorted(k for k in r if k != FRAME_ID) != keys:
            raise ValueError(f"records disagree on keys: {sorted(r)} vs {keys}")
    out: dict[str, np.ndarray] = {FRAME_ID: np.array([str(r[FRAME_ID]) for r in records])}
    for k in keys:
        arrays = [np.asarray(r[k]) for r in records]
        out[k] = np.concatenate(arrays, axis=0)
        out[f"{k}.offsets"] = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
    return out


def write_graph_shard(path: str | Path, records: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Write records as one shard, atomically and byte-stably."""
    save_npz(path, pack_records(records))


class GraphShardFile:
    """One shard, opened lazily (so instances pickle cheaply into DataLoader workers)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._arrays: dict[str, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "_arrays": None}

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            arrays = open_npz_memmap(self.path)
            if FRAME_ID not in arrays:
                raise DataError(self.path, "expected a pgnn graph shard (no 'frame_id' array)")
            self._arrays = arrays
        return self._arrays

    @property
    def frame_ids(self) -> list[str]:
        return [str(x) for x in self.arrays[FRAME_ID]]

    def __len__(self) -> int:
        return len(self.arrays[FRAME_ID])

    def record(self, i: int) -> dict[str, np.ndarray]:
        """Frame ``i`` of this shard as a fresh dict of (copied, writable) arrays."""
        a = self.arrays
        out: dict[str, np.ndarray] = {FRAME_ID: np.asarray(str(a[FRAME_ID][i]))}
        for k, v in a.items():
            if k == FRAME_ID or k.endswith(".offsets"):
                continue
            off = a[f"{k}.offsets"]
            out[k] = np.array(v[off[i] : off[i + 1]])
        return out


class GraphCache:
    """All frames of a graph split folder (``manifest.json`` + shards) as a sequence of records.

    ``len(cache)`` frames; ``cache[i]`` is frame i's record dict; ``cache.frame_ids`` in order.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        if manifest is None:
            raise DataError(self.folder / "manifest.json", "expected a graph cache folder with a manifest")
        self.manifest = manifest
        self.shards = [GraphShardFile(self.folder / e["file"]) for e in manifest["shards"]]
        self._index: list[tuple[int, int]] = []
        self.frame_ids: list[str] = []
        for s, entry in enumerate(manifest["shards"]):
            for j, fid in enumerate(entry["frames"]):
                self._index.append((s, j))
                self.frame_ids.append(fid)

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        s, j = self._index[i]
        return self.shards[s].record(j)
