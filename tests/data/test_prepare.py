"""pgnn/data/prepare.py: prepared parquet shards hold exactly the loaded frames."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pgnn.core.errors import DataError
from pgnn.core.shards import run_plan
from pgnn.data.frames import load_frame
from pgnn.data.prepare import prepare_plan, read_prepared_dir, read_prepared_shard, write_prepared_shard


def _same(a, b) -> None:  # noqa: ANN001
    assert a.frame_id == b.frame_id and a.image_size == b.image_size and a.labels == b.labels
    for name in ("points_rect", "intensity", "rgb"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert (a.scores is None) == (b.scores is None)
    if a.scores is not None:
        assert np.array_equal(a.scores, b.scores)
    assert np.array_equal(a.calib.P2, b.calib.P2) and np.array_equal(a.calib.R0_rect, b.calib.R0_rect)


@pytest.mark.parametrize("painted", [False, True])
def test_real_frames_round_trip(kitti_sample: Path, tmp_path: Path, painted: bool) -> None:
    frames = [load_frame(kitti_sample, fid, painted=painted) for fid in ("000001", "000003")]
    write_prepared_shard(tmp_path / "s.parquet", frames)
    back = read_prepared_shard(tmp_path / "s.parquet")
    assert len(back) == 2
    for a, b in zip(frames, back, strict=True):
        _same(a, b)


def test_prepare_plan_builds_resumes_and_reads_back(kitti_sample: Path, tmp_path: Path) -> None:
    ids = ["000000", "000001", "000002"]
    plan = prepare_plan(kitti_sample, ids, tmp_path / "p", frames_per_shard=2)
    assert [t.frames for t in plan.tasks] == [("000000", "000001"), ("000002",)]
    manifest = run_plan(plan, log=None)
    assert [e["file"] for e in manifest["shards"]] == ["shard-0000.parquet", "shard-0001.parquet"]
    frames = read_prepared_dir(tmp_path / "p")
    assert [f.frame_id for f in frames] == ids
    _same(frames[2], load_frame(kitti_sample, "000002"))
    lines: list[str] = []
    run_plan(prepare_plan(kitti_sample, ids, tmp_path / "p", frames_per_shard=2), log=lines.append)
    assert "2 of 2 shards current, building 0" in lines[0]


def test_not_a_prepared_shard(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_text("nope")
    with pytest.raises(DataError, match="x.parquet"):
        read_prepared_shard(tmp_path / "x.parquet")


def test_shard_bytes_are_deterministic_and_a_corrupted_shard_is_an_error(
    kitti_sample: Path, tmp_path: Path, flip_page: Callable[[Path, str], None]
) -> None:
    frames = [load_frame(kitti_sample, fid) for fid in ("000001", "000003")]
    path = tmp_path / "s.parquet"
    write_prepared_shard(path, frames)
    write_prepared_shard(tmp_path / "again.parquet", frames)
    assert path.read_bytes() == (tmp_path / "again.parquet").read_bytes()
    for column in ("x", "intensity"):
        flip_page(path, column)
        with pytest.raises(DataError, match="it is corrupted: checksum mismatch") as err:
            read_prepared_shard(path)
        assert err.value.path == str(path)
        path.write_bytes((tmp_path / "again.parquet").read_bytes())
    for got, want in zip(read_prepared_shard(path), frames, strict=True):  # the clean bytes read back
        _same(got, want)
