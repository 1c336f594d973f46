"""Checkpoint save/load/validation (pgnn/nn/checkpoint.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL

from pgnn.config.network import MODEL_PRESETS
from pgnn.core.errors import DataError
from pgnn.nn.checkpoint import (
    CHECKPOINT_FORMAT,
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    load_model,
    make_checkpoint,
    save_checkpoint,
)
from pgnn.nn.graph_input import graph_input_from_arrays
from pgnn.nn.model import PointGNN


def new_checkpoint(model: PointGNN, **extra) -> dict:
    return make_checkpoint(
        model,
        input_frame="rect",
        graph_preset="car_train",
        encoding="classaware_all_class_box_encoding",
        label_method="Car",
        input_features="i",
        step=1000,
        **extra,
    )


def toy_graph() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    xyz = rng.uniform(0, 2, (30, 3)).astype(np.float32)
    kp = np.arange(0, 30, 5)
    e0 = np.stack([np.arange(30), np.arange(30) // 5], 1)
    e1 = np.stack(np.meshgrid(np.arange(6), np.arange(6), indexing="xy"), -1).reshape(-1, 2)
    return {
        "input_features": rng.uniform(0, 1, (30, 1)).astype(np.float32),
        "vertex_coord_0": xyz,
        "vertex_coord_1": xyz[kp],
        "vertex_coord_2": xyz[kp],
        "keypoint_indices_0": kp,
        "keypoint_indices_1": np.arange(6),
        "edges_0": e0,
        "edges_1": e1,
    }


def test_round_trip_reproduces_the_model(tmp_path: Path) -> None:
    model = PointGNN(TINY_MODEL, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = graph_input_from_arrays(toy_graph())
    logits, boxes = model(g)
    (logits.sum() + boxes.sum()).backward()
    opt.step()
    rng_state = {
        "torch": torch.Generator().manual_seed(3).get_state(),
        "numpy": np.random.default_rng(5).bit_generator.state,
    }
    ckpt = new_checkpoint(model, optimizer=opt.state_dict(), rng=rng_state, train_config={"lr": 1e-3})
    path = tmp_path / checkpoint_name(1000)
    save_checkpoint(path, ckpt)
    assert path.name == "ckpt-00001000.pt"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind

    raw = torch.load(path, map_location="cpu", weights_only=True)  # plain containers only
    assert raw["format"] == CHECKPOINT_FORMAT and isinstance(raw["model_config"], dict)

    loaded, meta = load_model(path)
    assert not loaded.training
    assert loaded.cfg == TINY_MODEL
    assert meta["step"] == 1000 and meta["input_frame"] == "rect" and meta["train_config"] == {"lr": 1e-3}
    assert meta["rng"]["numpy"] == rng_state["numpy"]
    with torch.no_grad():
        a, b = model(g), loaded(g)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    opt2 = torch.optim.Adam(loaded.parameters(), lr=1e-3)
    opt2.load_state_dict(meta["optimizer"])
    assert opt2.state_dict()["state"][0]["step"] == 1


def test_load_checkpoint_rejects_wrong_format(tmp_path: Path) -> None:
    ckpt = new_checkpoint(PointGNN(TINY_MODEL))
    ckpt["format"] = "pgnn-checkpoint/0"
    path = tmp_path / "old.pt"
    torch.save(ckpt, path)
    with pytest.raises(DataError, match="pgnn-checkpoint/1") as err:
        load_checkpoint(path)
    assert "old.pt" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("input_frame", "velo", "input_frame"),
        ("step", -1, "step"),
        ("step", 1.5, "step"),
        ("graph_preset", None, "graph_preset"),
        ("model", {"w": 1}, "state dict"),
        ("model_config", {"num_classes": 0}, "model_config"),
    ],
)
def test_save_validates_fields(tmp_path: Path, key: str, value, message: str) -> None:
    ckpt = new_checkpoint(PointGNN(TINY_MODEL))
    ckpt[key] = value
    with pytest.raises(DataError, match=message):
        save_checkpoint(tmp_path / "x.pt", ckpt)
    assert not (tmp_path / "x.pt").exists()


def test_load_refuses_pickled_code_and_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("this must never run",))

    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"format": CHECKPOINT_FORMAT, "payload": Evil()}, f, protocol=2)
    with pytest.raises(DataError, match="weights_only"):
        load_checkpoint(evil)
    assert "never run" not in capsys.readouterr().out
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="garbage.pt"):
        load_checkpoint(garbage)
    with pytest.raises(DataError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")


def test_load_model_rejects_mismatched_parameters(tmp_path: Path) -> None:
    ckpt = new_checkpoint(PointGNN(TINY_MODEL))
    ckpt["model_config"] = MODEL_PRESETS["small"].model_dump(mode="json")
    path = tmp_path / "mismatch.pt"
    save_checkpoint(path, ckpt)
    with pytest.raises(DataError, match="model_config"):
        load_model(path)


def test_latest_checkpoint_picks_the_highest_step(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None
    for name in [
        "ckpt-00000900.pt",
        "ckpt-00010000.pt",
        "ckpt-00002000.pt",
        "ckpt-99999999.pt.bak",
        ".tmp-ckpt-00090000.pt-abc.pt",
        "notes.txt",
    ]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "ckpt-00500000.pt").mkdir()  # a folder is not a checkpoint
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-00010000.pt"
    (tmp_path / "ckpt-123456789.pt").write_bytes(b"")  # more than 8 digits still parses
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-123456789.pt"


def test_save_overwrites_atomically(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    model = PointGNN(TINY_MODEL)
    save_checkpoint(path, new_checkpoint(model))
    ckpt = new_checkpoint(model)
    ckpt["step"] = 2000
    save_checkpoint(path, ckpt)
    assert load_checkpoint(path)["step"] == 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
