"""The graph cache: many frames' graph records per ``.npz`` shard, read back one frame at a time.

A *record* is one frame's dict of arrays (reference naming, see ``pgnn.graphs.build``): ``features``,
``vertex_coord_i``, ``keypoint_indices_i``, ``edges_i`` and, for training, ``cls_labels``, ``box_targets``,
``valid_box``. A shard stores each key's arrays concatenated over its frames along axis 0, with
``<key>.offsets`` (F + 1,) int64 marking the frames; indices stay frame-local, so a frame's slice is its
record. Shards are written with stable bytes (:mod:`pgnn.graphs.npzstore`) and read memory-mapped: reading one
frame back costs little more than the copy.

Edges, most of a record's bytes, are stored as CSR when they come grouped by destination (as
``pgnn.graphs.radius.radius_edges`` writes them): ``<edges>.src`` (uint16 when the sources fit, else uint32)
and
``<edges>.count`` (edges per destination vertex), 2.5x smaller than (E, 2) int32 and rebuilt exactly on read.

Why uncompressed npz (benchmarks/cache_io.py, figures in benchmarks/README.md "Graph cache layout"): of the
layouts tried it is the fastest to write and to read through an open shard; compressed npz is much slower to
write, parquet slower to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError
from pgnn.core.shards import require_manifest
from pgnn.graphs.npzstore import open_npz_memmap, save_npz

FRAME_ID = "frame_id"
_CSR_SRC, _CSR_COUNT = ".src", ".count"


def _dst_count_key(key: str) -> str:
    """The vertex array whose rows an edge array's destinations index: edges_i -> vertex_coord_{i+1}."""
    return f"vertex_coord_{int(key.split('_')[1]) + 1}"


def _is_grouped_edges(key: str, a: np.ndarray, record: Mapping[str, np.ndarray]) -> bool:
    if not (key.startswith("edges_") and key[6:].isdigit() and a.ndim == 2 and a.shape[1] == 2):
        return False
    dst = a[:, 1]
    return _dst_count_key(key) in record and bool(np.all(dst[1:] >= dst[:-1]))


def _edges_to_csr(a: np.ndarray, num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """(E, 2) [src, dst] grouped by dst -> (src (E,), count (num_dst,)).

    ``np.bincount(dst, minlength=num_dst)``, read off the sorted dst by binary searches (faster on a runtime
    graph's 500k edges: benchmarks/README.md, "Measurements behind the code"); bincount itself where dst
    leaves [0, num_dst).
    """
    dst = a[:, 1]
    if len(dst) and (dst[0] < 0 or dst[-1] >= num_dst):
        return a[:, 0], np.bincount(dst, minlength=num_dst)
    return a[:, 0], np.diff(np.searchsorted(dst, np.arange(num_dst + 1, dtype=dst.dtype)))


def _csr_to_edges(src: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_edges_to_csr`: (E, 2) int32."""
    dst = np.repeat(np.arange(len(count), dtype=np.int32), count)
    return np.stack([src.astype(np.int32), dst], axis=1)


def pack_records(records: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-frame records into shard arrays with ``.offsets``."""
    if not records:
        raise ValueError("a shard needs at least one record")
    keys = sorted(k for k in records[0] if k != FRAME_ID)
    for r in records:
        if sorted(k for k in r if k != FRAME_ID) != keys:
            raise ValueError(f"records disagree on keys: {sorted(r)} vs {keys}")
    out: dict[str, np.ndarray] = {FRAME_ID: np.array([str(r[FRAME_ID]) for r in records])}

    def put(name: str, arrays: list[np.ndarray]) -> None:
        out[name] = np.concatenate(arrays, axis=0)
        out[f"{name}.offsets"] = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)

    for k in keys:
        arrays = [np.asarray(r[k]) for r in records]
        if all(_is_grouped_edges(k, a, r) for a, r in zip(arrays, records, strict=True)):
            csr = [_edges_to_csr(a, len(r[_dst_count_key(k)])) for a, r in zip(arrays, records, strict=True)]
            wide = max((int(a[:, 0].max()) for a in arrays if len(a)), default=0) >= 1 << 16
            put(k + _CSR_SRC, [src.astype(np.uint32 if wide else np.uint16) for src, _ in csr])
            put(k + _CSR_COUNT, [count.astype(np.uint32) for _, count in csr])
        else:
            put(k, arrays)
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

        def part(k: str) -> np.ndarray:
            off = a[f"{k}.offsets"]
            return np.array(a[k][off[i] : off[i + 1]])

        for k in a:
            if k == FRAME_ID or k.endswith(".offsets") or k.endswith(_CSR_COUNT):
                continue
            if k.endswith(_CSR_SRC):
                name = k[: -len(_CSR_SRC)]
                out[name] = _csr_to_edges(part(k), part(name + _CSR_COUNT))
            else:
                out[k] = part(k)
        return out


class GraphCache:
    """All frames of a graph split folder (``manifest.json`` + shards) as a sequence of records.

    ``len(cache)`` frames; ``cache[i]`` is frame i's record dict; ``cache.frame_ids`` in order.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        manifest = require_manifest(self.folder, "a graph cache folder's manifest")
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
