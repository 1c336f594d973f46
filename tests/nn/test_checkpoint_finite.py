"""pgnn/nn/checkpoint.py: a checkpoint whose weights are not all finite is refused, naming the file and the
first such tensor, wherever a checkpoint is read: predict (the CLI), export, resume and fine-tuning. (NaN
weights used to predict nothing, every score NaN, with exit 0.)"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from helpers import TINY_CARD, TINY_MODEL, random_checkpoint

from pgnn.cli import main as cli_main
from pgnn.config.network import LossConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import DataError
from pgnn.nn.checkpoint import (
    checkpoint_name,
    export_model,
    latest_good_checkpoint,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from pgnn.training.loop import train

META = {**TINY_CARD, "graph_preset": "car"}


def _checkpoint(step: int = 1) -> dict:
    return random_checkpoint(TINY_MODEL, graph_preset="car", step=step)


def _poisoned(path: Path, value: float, step: int = 2) -> str:
    """Write a checkpoint with one non-finite weight (torch.save: save_checkpoint refuses it); return the
    name of the first tensor that has one."""
    ckpt = _checkpoint(step)
    names = [n for n, t in ckpt["model"].items() if t.is_floating_point()]
    name = names[len(names) // 2]
    ckpt["model"][name].view(-1)[1] = value
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    path.write_bytes(buf.getvalue())
    return name


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_load_and_load_model_refuse_non_finite_weights(tmp_path: Path, value: float) -> None:
    path = tmp_path / "bad.pt"
    name = _poisoned(path, value)
    for read in (load_checkpoint, load_model):
        with pytest.raises(DataError) as info:
            read(path)
        assert info.value.path == str(path)
        assert info.value.message.startswith("expected finite weights, got 1 non-finite values (")
        assert info.value.message.endswith(f"in {name!r}")
    good = tmp_path / "good.pt"
    save_checkpoint(good, _checkpoint())
    assert load_model(good)[1]["step"] == 1


def test_save_refuses_non_finite_weights(tmp_path: Path) -> None:
    ckpt = _checkpoint()
    next(iter(ckpt["model"].values())).view(-1)[0] = float("nan")
    with pytest.raises(
        DataError, match=r"out.pt: expected finite weights, got 1 non-finite values \(1 NaN\)"
    ):
        save_checkpoint(tmp_path / "out.pt", ckpt)
    assert not (tmp_path / "out.pt").exists()


def test_export_refuses_and_writes_nothing(tmp_path: Path) -> None:
    src, dest = tmp_path / "bad.pt", tmp_path / "model.pt"
    name = _poisoned(src, float("nan"))
    with pytest.raises(DataError, match=rf"bad.pt: expected finite weights, .* in {name!r}"):
        export_model(src, dest)
    assert not dest.exists()


def test_resume_skips_a_non_finite_checkpoint_and_fine_tuning_refuses_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / checkpoint_name(1), _checkpoint(1))
    name = _poisoned(run / checkpoint_name(2), float("nan"))
    warnings: list[str] = []
    assert latest_good_checkpoint(run, warnings.append) == run / checkpoint_name(1)  # what a resume reads
    assert len(warnings) == 1 and "expected finite weights" in warnings[0] and repr(name) in warnings[0]
    assert (run / f"{checkpoint_name(2)}.corrupt").exists()  # never resumed from, never pruned as good

    init = tmp_path / "init.pt"
    _poisoned(init, float("inf"))
    cfg = TrainConfig(batch_size=1, max_steps=1, max_epoch=None, device="cpu")
    with pytest.raises(DataError, match=r"init.pt: expected finite weights"):
        train([None] * 2, TINY_MODEL, cfg, LossConfig(), tmp_path / "fine", meta=META, init_checkpoint=init)


def test_pgnn_predict_refuses_a_nan_checkpoint_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.pt"
    name = _poisoned(path, float("nan"))
    before = path.read_bytes()
    out = tmp_path / "out"
    args = ["predict", "--checkpoint", str(path), "--out", str(out), "--bin", "x.bin", "--calib", "c.txt"]
    assert cli_main(args) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"pgnn predict: error: {path}: expected finite weights, got 1 "
    )
    assert err[0].endswith(f"in {name!r}") and not out.exists() and path.read_bytes() == before
