"""pgnn/core/shards.py: a manifest.json that is valid JSON of the wrong shape is corrupt: the builder rebuilds
the folder, a reader names the file (GraphCache: tests/graphs/test_cache_manifest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgnn.core.errors import DataError
from pgnn.core.shards import MANIFEST, ShardTask, build_shards, read_manifest, require_manifest

WRONG_SHAPES = {
    "list": [],
    "string": "manifest",
    "null": None,
    "no_shards": {"kind": "toy"},
    "shards_not_a_list": {"shards": 5},
    "entry_not_an_object": {"shards": ["shard-0000.txt"]},
    "file_not_a_string": {"shards": [{"file": 3, "frames": ["000000"]}]},
    "file_outside": {"shards": [{"file": "../outside.txt", "frames": ["000000"]}]},
    "file_a_path": {"shards": [{"file": "sub/shard-0000.txt", "frames": ["000000"]}]},
    "frames_not_strings": {"shards": [{"file": "shard-0000.txt", "frames": [0]}]},
    "key_not_a_string": {"shards": [{"file": "shard-0000.txt", "frames": ["000000"], "key": 1}]},
}


def _build(task: ShardTask, path: Path) -> None:
    path.write_text(",".join(task.frames))


def _tasks() -> list[ShardTask]:
    return [
        ShardTask("shard-0000.txt", ("000000", "000001"), "k0"),
        ShardTask("shard-0001.txt", ("000002",), "k1"),
    ]


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_manifest_of_the_wrong_shape_is_rebuilt(tmp_path: Path, shape: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps(WRONG_SHAPES[shape]))
    (tmp_path / "outside.txt").write_text("the user's")
    assert read_manifest(out) is None
    with pytest.raises(DataError) as info:
        require_manifest(out, "a toy folder's manifest")
    assert info.value.path == str(out / MANIFEST)
    assert info.value.message.startswith("expected a toy folder's manifest, got JSON of the wrong shape (")
    manifest = build_shards(out, _tasks(), _build, kind="toy", params={}, code="c", log=None)
    assert [e["file"] for e in manifest["shards"]] == ["shard-0000.txt", "shard-0001.txt"]
    assert read_manifest(out) == manifest and (out / "shard-0001.txt").read_text() == "000002"
    assert (tmp_path / "outside.txt").read_text() == "the user's"


def test_a_good_manifest_is_read_and_its_shards_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = build_shards(out, _tasks(), _build, kind="toy", params={"a": 1}, code="c", log=None)
    stamp = (out / "shard-0000.txt").stat().st_mtime_ns
    assert require_manifest(out, "x") == first == read_manifest(out)
    assert build_shards(out, _tasks(), _build, kind="toy", params={"a": 1}, code="c", log=None) == first
    assert (out / "shard-0000.txt").stat().st_mtime_ns == stamp  # current: not rebuilt


def test_missing_and_unparsable_manifests_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"manifest.json: expected a toy manifest, got no such file"):
        require_manifest(tmp_path, "a toy manifest")
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(DataError, match=r"manifest.json: expected a toy manifest, got invalid JSON \("):
        require_manifest(tmp_path, "a toy manifest")
    (tmp_path / MANIFEST).write_text(json.dumps({"shards": [{"file": "a.npz"}]}))
    with pytest.raises(DataError, match=r"wrong shape \(shards\[0\]\.frames: Field required\)"):
        require_manifest(tmp_path, "a toy manifest")
