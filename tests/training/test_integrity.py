"""Integrity on load: corrupted checkpoints and graph shards are errors naming the file; a resume falls back
to the previous good checkpoint."""

from __future__ import annotations

import json
import logging
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import save_random_checkpoint
from test_loop import LOSS, META, TINY_MODEL, final_state, one_torch_thread, tiny_records, tiny_train_config

from pgnn.config.network import GNNLayerConfig, ModelConfig
from pgnn.core.errors import DataError
from pgnn.graphs.cache import GraphCache, GraphShardFile, write_graph_shard
from pgnn.nn.checkpoint import (
    latest_good_checkpoint,
    load_checkpoint,
    load_model,
)
from pgnn.training.loop import train

__all__ = ["one_torch_thread"]  # autouse fixture of test_loop: one torch thread

# Large enough that its biggest tensor (64 x 64 float32 = 16 KiB) holds 4 KiB of flipped bytes.
MODEL = ModelConfig(
    point_mlp=(64, 64),
    set_mlp=(64,),
    gnn_layers=(GNNLayerConfig(offset_mlp=(16, 3), edge_mlp=(64,), update_mlp=(64,)),),
    cls_hidden=(16,),
    loc_hidden=(16,),
)


def _member_data(path: Path, name: str | None = None) -> tuple[str, int, int]:
    """(name, offset of its bytes in the file, size) of zip member ``name`` (default: the largest)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name) if name else max(zf.infolist(), key=lambda i: i.file_size)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.filename, info.header_offset + 30 + name_len + extra_len, info.file_size


def _flip(path: Path, offset: int, count: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset : offset + count] = bytes(b ^ 0xFF for b in data[offset : offset + count])
    path.write_bytes(bytes(data))


def _checkpoint(path: Path, step: int = 1000) -> dict:
    return save_random_checkpoint(path, MODEL, graph_preset="car", step=step)


def test_flipped_bytes_inside_a_tensor_are_caught(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    original = _checkpoint(path)
    name, offset, size = _member_data(path)
    assert "/data/" in name and size >= 3 * 4096  # a tensor's storage
    _flip(path, offset + 4096, 4096)
    # torch itself does not notice (before this check, predict ran on these weights and found 0 boxes) ...
    loaded = torch.load(path, weights_only=True)
    assert any(not torch.equal(loaded["model"][k], original["model"][k]) for k in original["model"])
    # ... the CRC-32 of the record does
    expected = rf"{path}: expected an intact checkpoint .* corrupted: member '{name}' fails its CRC-32 check"
    with pytest.raises(DataError, match=expected):
        load_checkpoint(path)
    with pytest.raises(DataError, match="fails its CRC-32 check"):
        load_model(path)


def test_latest_good_checkpoint_skips_and_quarantines_bad_ones(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _checkpoint(tmp_path / f"ckpt-{step:08d}.pt", step)
    _, offset, _ = _member_data(tmp_path / "ckpt-00000003.pt")
    _flip(tmp_path / "ckpt-00000003.pt", offset + 10, 1)  # one byte
    (tmp_path / "ckpt-00000002.pt").write_bytes((tmp_path / "ckpt-00000002.pt").read_bytes()[:5000])  # cut
    warnings: list[str] = []
    assert latest_good_checkpoint(tmp_path, warnings.append) == tmp_path / "ckpt-00000001.pt"
    assert len(warnings) == 2
    assert warnings[0].startswith(f"skipping a bad checkpoint: {tmp_path / 'ckpt-00000003.pt'}: ")
    assert "moved it to ckpt-00000003.pt.corrupt" in warnings[0]
    assert str(tmp_path / "ckpt-00000002.pt") in warnings[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000001.pt",
        "ckpt-00000002.pt.corrupt",
        "ckpt-00000003.pt.corrupt",
    ]


def test_resume_falls_back_to_the_previous_good_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = tiny_records(8)
    straight = train(
        records, TINY_MODEL, tiny_train_config(max_steps=6), LOSS, tmp_path / "straight", meta=META
    )
    out = tmp_path / "resumed"
    train(records, TINY_MODEL, tiny_train_config(max_steps=4, checkpoint_every=2), LOSS, out, meta=META)
    assert sorted(p.name for p in out.glob("ckpt-*")) == ["ckpt-00000002.pt", "ckpt-00000004.pt"]
    name, offset, size = _member_data(out / "ckpt-00000004.pt")
    _flip(out / "ckpt-00000004.pt", offset + size // 2, min(4096, size // 2))
    with caplog.at_level(logging.WARNING, logger="pgnn.training.loop"):
        resumed = train(records, TINY_MODEL, tiny_train_config(max_steps=6), LOSS, out, meta=META)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(out / "ckpt-00000004.pt") in w and "falling back" in w for w in warned), warned
    assert (out / "ckpt-00000004.pt.corrupt").exists()
    a, b = final_state(straight), final_state(resumed)  # resumed at step 2: the same run as a straight one
    assert a["step"] == b["step"] == 6
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def _records(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        {
            "frame_id": np.asarray(f"{i:06d}"),
            "features": rng.random((500, 1), dtype=np.float32),
            "vertex_coord_0": rng.random((500, 3), dtype=np.float32),
        }
        for i in range(n)
    ]


def test_flipped_byte_in_a_graph_shard_names_the_shard(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0000.npz"
    write_graph_shard(shard, _records(2))
    manifest = {"kind": "graphs", "shards": [{"file": shard.name, "frames": ["000000", "000001"]}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert np.array_equal(GraphCache(tmp_path)[1]["features"], _records(2)[1]["features"])
    name, offset, size = _member_data(shard, "features.npy")
    _flip(shard, offset + size // 2, 1)
    expected = rf"{shard}: expected an intact .npz \(zip\) file, it is corrupted: member 'features.npy' fails"
    with pytest.raises(DataError, match=expected):
        GraphCache(tmp_path)[0]
    with pytest.raises(DataError, match=expected):
        _ = GraphShardFile(shard).frame_ids
