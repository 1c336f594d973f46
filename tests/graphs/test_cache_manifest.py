"""pgnn/graphs/cache.py: a graph folder whose manifest.json is valid JSON of the wrong shape is named in one
DataError (it used to be a TypeError or KeyError, or a shard read from outside the folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgnn.core.errors import DataError
from pgnn.graphs.cache import GraphCache


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ([], "top level: Input should be a valid dictionary"),
        ({"kind": "graphs"}, "shards: Field required"),
        ({"shards": {"file": "shard-0000.npz"}}, "shards: Input should be a valid list"),
        (
            {"shards": [{"file": "../x.npz", "frames": ["000000"]}]},
            "shards[0].file: Value error, expected a file",
        ),
        (
            {"shards": [{"file": "shard-0000.npz", "frames": "000000"}]},
            "shards[0].frames: Input should be a valid",
        ),
    ],
)
def test_a_graph_cache_manifest_of_the_wrong_shape_is_named(
    tmp_path: Path, manifest: object, problem: str
) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError) as info:
        GraphCache(tmp_path)
    assert info.value.path == str(tmp_path / "manifest.json")
    assert info.value.message.startswith(
        "expected a graph cache folder's manifest, got JSON of the wrong shape"
    )
    assert problem in info.value.message
