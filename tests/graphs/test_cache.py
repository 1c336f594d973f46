"""pgnn/graphs/cache.py and pgnn/graphs/npzstore.py: shard packing (CSR edges), byte-stable writes, per-frame
reads."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest

from pgnn.core.errors import DataError
from pgnn.core.shards import ShardTask, build_shards
from pgnn.graphs.cache import GraphCache, GraphShardFile, pack_records, write_graph_shard
from pgnn.graphs.npzstore import open_npz_memmap, save_npz


def _record(rng: np.random.Generator, frame_id: str, n0: int, n1: int, grouped: bool = True) -> dict:
    e = rng.integers(0, n0, size=(5 * n1, 2)).astype(np.int32)
    e[:, 1] = rng.integers(0, n1, size=5 * n1)
    if grouped:
        e = e[np.argsort(e[:, 1], kind="stable")]
    return {
        "frame_id": np.asarray(frame_id),
        "features": rng.random((n0, 1), dtype=np.float32),
        "vertex_coord_0": rng.random((n0, 3), dtype=np.float32),
        "vertex_coord_1": rng.random((n1, 3), dtype=np.float32),
        "keypoint_indices_0": rng.integers(0, n0, n1).astype(np.int32),
        "edges_0": e,
        "cls_labels": rng.integers(0, 4, n1),
        "valid_box": rng.random(n1) > 0.5,
    }


def test_records_round_trip_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    records = [_record(rng, f"{i:06d}", 50 + 7 * i, 9 + i) for i in range(4)]
    records.append(_record(rng, "000009", 0, 0))  # an empty frame
    write_graph_shard(tmp_path / "s.npz", records)
    shard = GraphShardFile(tmp_path / "s.npz")
    assert shard.frame_ids == [str(r["frame_id"]) for r in records]
    for i, ref in enumerate(records):
        got = shard.record(i)
        assert set(got) == set(ref)
        for k in ref:
            assert got[k].dtype == ref[k].dtype and np.array_equal(got[k], ref[k]), k
        got["features"][...] = -1  # records are writable copies, not views of the file
    assert shard.record(0)["features"].min() >= 0


def test_grouped_edges_are_stored_as_csr_and_ungrouped_ones_raw() -> None:
    rng = np.random.default_rng(1)
    packed = pack_records([_record(rng, "000001", 300, 40)])
    assert "edges_0.src" in packed and "edges_0" not in packed and packed["edges_0.src"].dtype == np.uint16
    assert packed["edges_0.count"].sum() == len(packed["edges_0.src"])
    raw = pack_records([_record(rng, "000001", 300, 40, grouped=False)])
    assert "edges_0" in raw and raw["edges_0"].shape[1] == 2


def test_wide_sources_use_uint32() -> None:
    rng = np.random.default_rng(2)
    rec = _record(rng, "000001", 70_000, 10)
    rec["edges_0"][-1, 0] = 69_999
    packed = pack_records([rec])
    assert packed["edges_0.src"].dtype == np.uint32


def test_shards_are_byte_stable(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    records = [_record(rng, "000001", 80, 12)]
    write_graph_shard(tmp_path / "a.npz", records)
    write_graph_shard(tmp_path / "b.npz", records)
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.npz", "b.npz")]
    assert digest[0] == digest[1]
    assert np.load(tmp_path / "a.npz")["features"].shape == (80, 1)  # plain numpy reads it too


def test_npz_memmap_keeps_0d_and_empty_arrays(tmp_path: Path) -> None:
    save_npz(tmp_path / "x.npz", {"s": np.asarray("abc"), "e": np.zeros((0, 2), np.int32), "a": np.arange(5)})
    arrays = open_npz_memmap(tmp_path / "x.npz")
    assert arrays["s"].shape == () and arrays["e"].shape == (0, 2) and list(arrays["a"]) == [0, 1, 2, 3, 4]


def test_object_arrays_and_non_npz_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", o=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match="Python objects"):
        open_npz_memmap(tmp_path / "obj.npz")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(DataError, match="bad.npz"):
        open_npz_memmap(tmp_path / "bad.npz")


def _build(task: ShardTask, path: Path) -> None:
    rng = np.random.default_rng(int(task.frames[0]))
    write_graph_shard(path, [_record(rng, f, 30, 5) for f in task.frames])


def test_cache_over_shards_skips_current_and_rebuilds_stale(tmp_path: Path) -> None:
    tasks = [ShardTask(f"shard-{i:04d}.npz", (f"{2 * i:06d}", f"{2 * i + 1:06d}"), f"k{i}") for i in range(3)]
    build_shards(tmp_path, tasks, _build, kind="graphs", params={}, code="c", log=None)
    cache = GraphCache(tmp_path)
    assert len(cache) == 6 and cache.frame_ids[3] == "000003"
    assert str(cache[3]["frame_id"]) == "000003"
    again = pickle.loads(pickle.dumps(cache))  # DataLoader workers get a copy that reopens lazily
    assert np.array_equal(again[5]["edges_0"], cache[5]["edges_0"])
    mtimes = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("shard-*")}
    (tmp_path / "shard-0001.npz").write_bytes(b"corrupt")  # a damaged shard is rebuilt, the others kept
    (tmp_path / ".tmp-shard-0002.npz-x.npz").write_bytes(b"half written")  # a killed writer's leftover
    tasks[2] = ShardTask("shard-0002.npz", tasks[2].frames, "k2-changed")  # and a changed key rebuilds
    build_shards(tmp_path, tasks, _build, kind="graphs", params={}, code="c", log=None)
    assert (tmp_path / "shard-0000.npz").stat().st_mtime_ns == mtimes["shard-0000.npz"]
    assert (tmp_path / "shard-0002.npz").stat().st_mtime_ns != mtimes["shard-0002.npz"]
    assert not list(tmp_path.glob(".tmp-*"))
    assert len(GraphCache(tmp_path)) == 6


def test_missing_manifest_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="manifest"):
        GraphCache(tmp_path)
