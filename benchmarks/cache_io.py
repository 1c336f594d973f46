"""Which on-disk layout should the graph cache use? Size, write time and read time of real graph records.

The records are what ``pgnn.graphs.records.graph_record`` caches (the ``car_T3`` preset's Car training graph,
inputs
and targets) for the real KITTI frames with velodyne scans in the shared kitti_sample, and for synthetic
frames (``pgnn.data.synthetic``, seed 0). Each data set is written as shards of ``--frames-per-shard``
frames (params.yaml's ``data.frames_per_shard``: 8) in each layout:

- ``npz-shard``        pgnn's cache (``pgnn.graphs.cache``): one uncompressed, byte-stable npz per shard,
each key's
                       arrays concatenated over the frames + offsets; a frame is read by memory-mapping.
- ``npz-shard/pread``  pgnn's shard file read without the memory map: one ``os.preadv`` per array slice.
- ``npz-z-shard``      the same arrays, ``np.savez_compressed`` (zlib); a frame needs the shard inflated.
- ``npz-frame-major``  one uncompressed npz per shard with a member per frame and key (``NNNN/key``), so a
                       frame's bytes are contiguous; read by memory-mapping.
- ``parquet-zstd``     one parquet file per shard, one row (and row group) per frame, one list column per
                       array (flattened; trailing shapes in the schema metadata), zstd; read per row group.
- ``npz-per-frame``    one uncompressed npz per frame (``pgnn.graphs.npzstore.save_npz``), read with
``np.load``.
- ``npz-z-per-frame``  one ``np.savez_compressed`` npz per frame.
- ``...+csr``          the same layout with each ``edges_i`` stored as CSR (:func:`compact_record`: uint16
                       sources + int32 edge counts per destination) and expanded back to (E, 2) on read.

Columns, per frame: ``KB`` on disk; ``write ms`` (atomic writes, as the pipeline does; best of repeats);
``cold ms`` one frame read by a fresh reader after the files were flushed and dropped from the page cache
(``posix_fadvise(DONTNEED)``: best effort, the disk may have its own cache); ``first ms`` the same with the
files in the page cache (a new reader: open, parse the index, read the frame); ``warm ms`` the frame again
through an open reader; ``all ms`` every frame of every shard through fresh readers, per frame;
``cold all`` the same from dropped files (a data set larger than the page cache, read once an epoch);
``stable``: two writes 2 s apart give the same bytes (DVC hashes files). Times are wall clock, single
thread (numba, OpenMP and Arrow pools set to 1), best of ``--repeat``. Every layout's records are checked
to read back equal (values and dtypes) to what was written.

    .venv/bin/python benchmarks/cache_io.py [--repeat 5] [--synthetic 8] [--frames-per-shard 8] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Protocol  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pgnn.core.io import atomic_path  # noqa: E402
from pgnn.core.progress import track  # noqa: E402
from pgnn.graphs.cache import FRAME_ID, GraphShardFile, pack_records, write_graph_shard  # noqa: E402
from pgnn.graphs.npzstore import open_npz_memmap, save_npz  # noqa: E402

SHARED = Path(os.environ.get("PGNN_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"
REAL_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
PRESET = "car_T3"
Record = dict[str, np.ndarray]


# ----------------------------------------------------------------------------------------------------------
# the records


def real_records(root: Path, frame_ids: Sequence[str], preset: str = PRESET) -> list[Record]:
    """Graph records of real KITTI frames, as the ``graphs`` stage caches them."""
    from pgnn.data.frames import load_frame
    from pgnn.graphs.records import graph_record
    from pgnn.recipe.presets import PRESETS

    recipe = PRESETS[preset]
    return [
        graph_record(load_frame(root, fid), recipe.graph, recipe.targets, recipe.graph_seed)
        for fid in frame_ids
    ]


def synthetic_records(count: int, seed: int = 0, preset: str = PRESET) -> list[Record]:
    """Graph records of synthetic frames 0 .. count-1."""
    from pgnn.data.frames import frame_from_scan
    from pgnn.data.synthetic.dataset import generate_frame
    from pgnn.graphs.records import graph_record
    from pgnn.recipe.presets import PRESETS

    recipe = PRESETS[preset]
    records = []
    for index in range(count):
        f = generate_frame(index, seed)
        frame = frame_from_scan(f.frame_id, f.points_velo, f.calib, image=f.image, labels=f.labels)
        records.append(graph_record(frame, recipe.graph, recipe.targets, recipe.graph_seed))
    return records


def _slice_record(arrays: Mapping[str, np.ndarray], i: int) -> Record:
    """Frame ``i`` of packed shard arrays (``pgnn.graphs.cache.pack_records``' layout)."""
    out: Record = {FRAME_ID: np.asarray(str(arrays[FRAME_ID][i]))}
    for k, v in arrays.items():
        if k != FRAME_ID and not k.endswith(".offsets"):
            off = arrays[f"{k}.offsets"]
            out[k] = v[off[i] : off[i + 1]]
    return out


# ----------------------------------------------------------------------------------------------------------
# the layouts: write(records of one shard, folder, shard name) -> files; open(files) -> a reader


class Reader(Protocol):
    def __len__(self) -> int: ...

    def read(self, i: int) -> Record: ...

    def read_all(self) -> list[Record]: ...


class NpzShardReader:
    """pgnn's own reader: the shard memory-mapped, a frame's slices copied out."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.shard = GraphShardFile(files[0])

    def __len__(self) -> int:
        return len(self.shard)

    def read(self, i: int) -> Record:
        return self.shard.record(i)

    def read_all(self) -> list[Record]:
        return [self.shard.record(i) for i in range(len(self))]


class NpzShardPreadReader:
    """pgnn's shard file, each of a frame's slices read with one positioned read (``os.preadv``) into a fresh
    array instead of through page faults of a memory map."""

    def __init__(self, files: Sequence[Path]) -> None:
        arrays = open_npz_memmap(files[0])  # the zip index and .npy headers; the maps are not touched
        self.frame_ids = np.array(arrays[FRAME_ID])
        self.keys = [k for k in arrays if k != FRAME_ID and not k.endswith(".offsets")]
        self.offsets = {k: np.array(arrays[f"{k}.offsets"]) for k in self.keys}
        self.layout = {k: (getattr(v, "offset", 0), v.dtype, v.shape[1:]) for k, v in arrays.items()}
        self.fd = os.open(files[0], os.O_RDONLY)

    def __del__(self) -> None:
        os.close(self.fd)

    def __len__(self) -> int:
        return len(self.frame_ids)

    def read(self, i: int) -> Record:
        out: Record = {FRAME_ID: np.asarray(str(self.frame_ids[i]))}
        for k in self.keys:
            start, stop = self.offsets[k][i], self.offsets[k][i + 1]
            base, dtype, trailing = self.layout[k]
            array = np.empty((stop - start, *trailing), dtype)
            row_bytes = array[:1].nbytes if len(array) else 0
            if array.nbytes and os.preadv(self.fd, [array], base + start * row_bytes) != array.nbytes:
                raise OSError(f"short read of {k} in frame {i}")
            out[k] = array
        return out

    def read_all(self) -> list[Record]:
        return [self.read(i) for i in range(len(self))]


class NpzCompressedShardReader:
    """``np.load`` of a compressed shard: every member is inflated whole, then the frame is sliced."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.npz = np.load(files[0], allow_pickle=False)

    def __len__(self) -> int:
        return len(self.npz[FRAME_ID])

    def _arrays(self) -> dict[str, np.ndarray]:
        return {k: self.npz[k] for k in self.npz.files}

    def read(self, i: int) -> Record:
        return _slice_record(self._arrays(), i)

    def read_all(self) -> list[Record]:
        arrays = self._arrays()
        return [_slice_record(arrays, i) for i in range(len(arrays[FRAME_ID]))]


class NpzFrameMajorReader:
    """A shard whose members are ``NNNN/key``: each frame's arrays lie together; memory-mapped."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.arrays = open_npz_memmap(files[0])
        self.frames = sorted({k.split("/", 1)[0] for k in self.arrays})

    def __len__(self) -> int:
        return len(self.frames)

    def read(self, i: int) -> Record:
        prefix = f"{self.frames[i]}/"
        out = {k[len(prefix) :]: np.array(v) for k, v in self.arrays.items() if k.startswith(prefix)}
        out[FRAME_ID] = np.asarray(str(out[FRAME_ID].reshape(-1)[0]))  # save_npz stores 0-d arrays as (1,)
        return out

    def read_all(self) -> list[Record]:
        return [self.read(i) for i in range(len(self))]


class NpzPerFrameReader:
    """One ``np.load`` per frame file, every member read."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)

    def __len__(self) -> int:
        return len(self.files)

    def read(self, i: int) -> Record:
        with np.load(self.files[i], allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
        out[FRAME_ID] = np.asarray(str(out[FRAME_ID].reshape(-1)[0]))  # save_npz stores 0-d arrays as (1,)
        return out

    def read_all(self) -> list[Record]:
        return [self.read(i) for i in range(len(self))]


_SHAPES_KEY = b"pgnn.trailing_shapes"


def parquet_table(records: Sequence[Record]) -> pa.Table:
    """One row per frame: ``frame_id`` and a list column per array (flattened, C order).

    Shapes: each (n_f, *trailing) array -> a list of n_f * prod(trailing) values; trailing shapes are kept
    in the schema metadata.
    """
    keys = sorted(k for k in records[0] if k != FRAME_ID)
    columns = {FRAME_ID: pa.array([str(r[FRAME_ID]) for r in records])}
    trailing = {}
    for k in keys:
        arrays = [np.ascontiguousarray(r[k]) for r in records]
        trailing[k] = list(arrays[0].shape[1:])
        offsets = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int32)
        values = pa.array(np.concatenate([a.reshape(-1) for a in arrays]))
        columns[k] = pa.ListArray.from_arrays(pa.array(offsets), values)
    table = pa.table(columns)
    return table.replace_schema_metadata({_SHAPES_KEY: json.dumps(trailing).encode()})


def _row_record(table: pa.Table, trailing: Mapping[str, list[int]]) -> Record:
    """The record of a one-row table."""
    out: Record = {FRAME_ID: np.asarray(table.column(FRAME_ID)[0].as_py())}
    for k, shape in trailing.items():
        (chunk,) = (c for c in table.column(k).chunks if len(c))
        out[k] = chunk.flatten().to_numpy(zero_copy_only=False).reshape(-1, *shape)
    return out


class ParquetReader:
    """A parquet shard with one row group per frame: a frame is one row group's decode."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.file = pq.ParquetFile(files[0])
        self.trailing = json.loads(self.file.schema_arrow.metadata[_SHAPES_KEY])

    def __len__(self) -> int:
        return self.file.metadata.num_rows

    def read(self, i: int) -> Record:
        return _row_record(self.file.read_row_group(i, use_threads=False), self.trailing)

    def read_all(self) -> list[Record]:
        return [self.read(i) for i in range(len(self))]  # (one read of the whole table costs a concat more)


def _write_npz_shard(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    path = folder / f"{name}.npz"
    write_graph_shard(path, records)
    return [path]


def _write_npz_frame_major(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    path = folder / f"{name}.npz"
    save_npz(path, {f"{i:04d}/{k}": v for i, r in enumerate(records) for k, v in r.items()})
    return [path]


def _write_npz_compressed_shard(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    path = folder / f"{name}.npz"
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **pack_records(records))
    return [path]


def _write_parquet(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    path = folder / f"{name}.parquet"
    with atomic_path(path, suffix=".parquet") as tmp:
        pq.write_table(
            parquet_table(records), tmp, compression="zstd", row_group_size=1, use_dictionary=False
        )
    return [path]


def _write_npz_per_frame(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    paths = [folder / f"{name}-{str(r[FRAME_ID])}.npz" for r in records]
    for path, record in zip(paths, records, strict=True):
        save_npz(path, record)
    return paths


def _write_npz_compressed_per_frame(records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    paths = [folder / f"{name}-{str(r[FRAME_ID])}.npz" for r in records]
    for path, record in zip(paths, records, strict=True):
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez_compressed(tmp, **record)
    return paths


# ----------------------------------------------------------------------------------------------------------
# a record encoding: edges as CSR (a record's edges come grouped by destination, destinations in order)


def compact_record(record: Mapping[str, np.ndarray]) -> Record:
    """``edges_i`` (E, 2) int32 -> ``edges_i.src`` (E,) uint16 (uint32 from 65,536 sources) and
    ``edges_i.count`` (N_{i+1},) int32 edges per destination. Lossless for edges grouped by destination in
    order, as ``pgnn.graphs.radius.radius_edges`` makes them.
    """
    out = dict(record)
    level = 0
    while f"edges_{level}" in record:
        edges = np.asarray(record[f"edges_{level}"])  # (E, 2)
        n_dst = len(record[f"vertex_coord_{level + 1}"])
        n_src = len(record[f"vertex_coord_{level}"])
        if np.any(np.diff(edges[:, 1]) < 0):
            raise ValueError(f"edges_{level} are not grouped by destination")
        out[f"edges_{level}.src"] = edges[:, 0].astype(np.uint16 if n_src <= 1 << 16 else np.uint32)
        out[f"edges_{level}.count"] = np.bincount(edges[:, 1], minlength=n_dst).astype(np.int32)
        del out[f"edges_{level}"]
        level += 1
    return out


def expand_record(record: Mapping[str, np.ndarray]) -> Record:
    """The inverse of :func:`compact_record`."""
    out = dict(record)
    level = 0
    while f"edges_{level}.src" in record:
        counts = np.asarray(out.pop(f"edges_{level}.count"))  # (N_{i+1},)
        src = out.pop(f"edges_{level}.src")  # (E,)
        dst = np.repeat(np.arange(len(counts), dtype=np.int32), counts)  # (E,)
        out[f"edges_{level}"] = np.stack([src.astype(np.int32), dst], axis=1)  # (E, 2)
        level += 1
    return out


@dataclass(frozen=True)
class Layout:
    write: Callable[[Sequence[Record], Path, str], list[Path]]
    open: Callable[[Sequence[Path]], Reader]
    csr: bool = False  # records go through compact_record / expand_record


class _Expanding:
    """A reader whose records are expanded from the CSR encoding."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def read(self, i: int) -> Record:
        return expand_record(self.inner.read(i))

    def read_all(self) -> list[Record]:
        return [expand_record(r) for r in self.inner.read_all()]


LAYOUTS: dict[str, Layout] = {
    "npz-shard": Layout(_write_npz_shard, NpzShardReader),
    "npz-shard/pread": Layout(_write_npz_shard, NpzShardPreadReader),
    "npz-z-shard": Layout(_write_npz_compressed_shard, NpzCompressedShardReader),
    "npz-frame-major": Layout(_write_npz_frame_major, NpzFrameMajorReader),
    "parquet-zstd": Layout(_write_parquet, ParquetReader),
    "npz-per-frame": Layout(_write_npz_per_frame, NpzPerFrameReader),
    "npz-z-per-frame": Layout(_write_npz_compressed_per_frame, NpzPerFrameReader),
    "npz-shard+csr": Layout(_write_npz_shard, NpzShardReader, csr=True),
    "parquet-zstd+csr": Layout(_write_parquet, ParquetReader, csr=True),
}


def write_layout(layout: Layout, records: Sequence[Record], folder: Path, name: str) -> list[Path]:
    return layout.write([compact_record(r) for r in records] if layout.csr else records, folder, name)


def open_layout(layout: Layout, files: Sequence[Path]) -> Reader:
    reader = layout.open(files)
    return _Expanding(reader) if layout.csr else reader


# ----------------------------------------------------------------------------------------------------------
# measuring


def drop_page_cache(paths: Sequence[Path]) -> None:
    """Flush ``paths`` and ask the kernel to drop their cached pages (no root needed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _sha(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def _records_equal(a: Record, b: Record) -> bool:
    return a.keys() == b.keys() and all(
        np.asarray(a[k]).dtype == np.asarray(b[k]).dtype and np.array_equal(a[k], b[k]) for k in a
    )


def _write_all(layout: Layout, shards: Sequence[Sequence[Record]], folder: Path) -> list[list[Path]]:
    return [write_layout(layout, records, folder, f"shard-{s:04d}") for s, records in enumerate(shards)]


def _best(times: Sequence[float], frames: int = 1) -> float:
    """Best of the repeats, in ms per frame."""
    return min(times) * 1e3 / frames


def measure_layout(
    name: str, shards: Sequence[Sequence[Record]], folder: Path, repeat: int
) -> tuple[dict[str, Any], list[list[Path]]]:
    """Write and read ``shards`` in layout ``name`` under ``folder``; the figures and the last files."""
    layout = LAYOUTS[name]
    frames = sum(len(s) for s in shards)
    write_times = []
    for r in range(repeat):
        target = folder / f"{name}-{r}"
        t0 = time.perf_counter()
        files = _write_all(layout, shards, target)
        write_times.append(time.perf_counter() - t0)
    flat = [p for group in files for p in group]
    size = sum(p.stat().st_size for p in flat)

    # one frame: the middle one of the first shard
    i = len(shards[0]) // 2
    cold, first, warm = [], [], []
    for _ in range(repeat):
        drop_page_cache(files[0])
        t0 = time.perf_counter()
        open_layout(layout, files[0]).read(i)
        cold.append(time.perf_counter() - t0)
    open_layout(layout, files[0]).read(i)  # back in the page cache
    for _ in range(repeat):
        t0 = time.perf_counter()
        reader = open_layout(layout, files[0])
        reader.read(i)
        first.append(time.perf_counter() - t0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        reader.read(i)
        warm.append(time.perf_counter() - t0)
    all_times, all_cold = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        records = [rec for group in files for rec in open_layout(layout, group).read_all()]
        all_times.append(time.perf_counter() - t0)
    for _ in range(repeat):
        drop_page_cache(flat)
        t0 = time.perf_counter()
        records = [rec for group in files for rec in open_layout(layout, group).read_all()]
        all_cold.append(time.perf_counter() - t0)

    written = [rec for s in shards for rec in s]
    if len(records) != frames or not all(_records_equal(a, b) for a, b in zip(records, written, strict=True)):
        raise AssertionError(f"layout {name} did not read back what was written")
    row = {
        "layout": name,
        "frames": frames,
        "files": len(flat),
        "kb_per_frame": size / frames / 1024,
        "write_ms": _best(write_times, frames),
        "read_one_cold_ms": _best(cold),
        "read_one_first_ms": _best(first),
        "read_one_warm_ms": _best(warm),
        "read_all_ms": _best(all_times, frames),
        "read_all_cold_ms": _best(all_cold, frames),
    }
    return row, files


def stable_bytes(
    name: str, shards: Sequence[Sequence[Record]], folder: Path, first: list[list[Path]]
) -> bool:
    """Whether a second write (made after ``first``, which was written >= 2 s ago) has the same bytes."""
    again = _write_all(LAYOUTS[name], shards, folder / f"{name}-again")
    return _sha([p for g in first for p in g]) == _sha([p for g in again for p in g])


def _single_thread_arrow() -> None:
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)


def run_benchmark(
    kitti_root: str | Path | None = None,
    frame_ids: Sequence[str] = REAL_FRAMES,
    synthetic: int = 8,
    frames_per_shard: int = 8,
    repeat: int = 5,
    layouts: Sequence[str] = tuple(LAYOUTS),
    work_dir: str | Path | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Measure every layout on the real and synthetic records.

    Returns ``rows``: one dict per (data set, layout) with ``kb_per_frame``, ``write_ms``,
    ``read_one_cold_ms``, ``read_one_first_ms``, ``read_one_warm_ms``, ``read_all_ms``, ``read_all_cold_ms``
    (ms per frame) and
    ``stable_bytes``; ``record_kb``: the mean in-memory size of a record per data set; ``notes``.
    """
    _single_thread_arrow()
    root = Path(kitti_root) if kitti_root is not None else SHARED / "kitti_sample"
    notes: list[str] = []
    datasets: dict[str, list[Record]] = {}
    if frame_ids and (root / "training" / "velodyne").is_dir():
        datasets["real"] = real_records(root, frame_ids)
    elif frame_ids:
        notes.append(f"no KITTI root at {root}: real frames skipped")
    if synthetic > 0:
        datasets["synthetic"] = synthetic_records(synthetic)
    if not datasets:
        raise ValueError("no frames to measure: give a KITTI root or synthetic > 0")
    for note in notes:
        if verbose:
            print(f"note: {note}")

    rows: list[dict[str, Any]] = []
    record_kb = {
        data: float(np.mean([sum(v.nbytes for v in r.values()) for r in recs])) / 1024
        for data, recs in datasets.items()
    }
    with tempfile.TemporaryDirectory(prefix="pgnn-cache-io-", dir=work_dir) as tmp:
        written: dict[tuple[str, str], list[list[Path]]] = {}
        start = time.monotonic()
        for data, name in track([(d, n) for d in datasets for n in layouts], "bench cache", "layout"):
            recs = datasets[data]
            shards = [recs[i : i + frames_per_shard] for i in range(0, len(recs), frames_per_shard)]
            row, files = measure_layout(name, shards, Path(tmp) / data, repeat)
            rows.append({"data": data, **row})
            written[(data, name)] = files
        time.sleep(max(0.0, 2.1 - (time.monotonic() - start)))  # zip timestamps have 2 s resolution
        for row in rows:
            data, name = row["data"], row["layout"]
            recs = datasets[data]
            shards = [recs[i : i + frames_per_shard] for i in range(0, len(recs), frames_per_shard)]
            row["stable_bytes"] = stable_bytes(name, shards, Path(tmp) / data, written[(data, name)])
            if verbose:
                print(_format_row(row), flush=True)
    return {
        "rows": rows,
        "record_kb": record_kb,
        "frames_per_shard": frames_per_shard,
        "repeat": repeat,
        "preset": PRESET,
        "threads": 1,
        "notes": notes,
    }


_COLUMNS = (
    ("kb_per_frame", "KB", ".0f"),
    ("write_ms", "write ms", ".2f"),
    ("read_one_cold_ms", "cold ms", ".2f"),
    ("read_one_first_ms", "first ms", ".2f"),
    ("read_one_warm_ms", "warm ms", ".2f"),
    ("read_all_ms", "all ms", ".2f"),
    ("read_all_cold_ms", "cold all", ".2f"),
)
_HEADER = f"{'data':<10} {'layout':<17}" + "".join(f"{t:>10}" for _, t, _ in _COLUMNS) + f"{'stable':>8}"


def _format_row(row: Mapping[str, Any]) -> str:
    cells = "".join(f"{row[key]:>10{fmt}}" for key, _, fmt in _COLUMNS)
    stable = "-" if "stable_bytes" not in row else ("yes" if row["stable_bytes"] else "no")
    return f"{row['data']:<10} {row['layout']:<17}{cells}{stable:>8}"


def format_table(result: Mapping[str, Any]) -> str:
    sizes = ", ".join(f"{data} {kb:.0f} KB" for data, kb in result["record_kb"].items())
    lines = [
        f"graph cache layouts: {result['preset']} training records ({sizes} in memory per frame), "
        f"{result['frames_per_shard']} frames per shard, 1 thread, best of {result['repeat']}; "
        "per frame: size, write, read one (cold / first touch / warm), read all (warm / cold)",
        _HEADER,
        *(_format_row(r) for r in result["rows"]),
    ]
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=SHARED / "kitti_sample", help="KITTI root (training/)")
    parser.add_argument("--synthetic", type=int, default=8, help="synthetic frames (0: none)")
    parser.add_argument("--frames-per-shard", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: the temp folder)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run_benchmark(
        args.root,
        synthetic=args.synthetic,
        frames_per_shard=args.frames_per_shard,
        repeat=args.repeat,
        work_dir=args.dir,
    )
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
