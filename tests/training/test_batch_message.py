"""A batch larger than the train split is the user's to fix: one line naming ``train.batch_size`` and the
split's frame count (it used to be a ValueError traceback, "records cannot fill one step"). Synthetic frames
(pgnn.data.synthetic), no KITTI data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pgnn.config.network import MODEL_PRESETS, LossConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import ParamsError, is_user_error
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.training.loop import train

REPO = Path(__file__).resolve().parents[2]
META = {"graph_preset": "car", "encoding": "classaware_all_class_box_encoding", "label_method": "Car"}


@pytest.mark.parametrize(("batch", "accumulation"), [(4, 1), (2, 2)])
def test_train_names_the_batch_key_and_the_frame_count(tmp_path: Path, batch: int, accumulation: int) -> None:
    cfg = TrainConfig(batch_size=batch, accumulation_steps=accumulation, max_steps=5, device="cpu")
    with pytest.raises(ParamsError) as info:
        train(
            [None] * 3,
            MODEL_PRESETS["small"],
            cfg,
            LossConfig(),
            tmp_path / "run",
            meta=META | {"input_features": "i"},
        )
    assert is_user_error(info.value) and info.value.key == "train.batch_size"
    assert str(info.value) == (
        "params.yaml: train.batch_size: expected batch_size x accumulation_steps <= 3 (the train split's "
        f"training frames), got {batch} x {accumulation}"
    )
    assert not (tmp_path / "run").exists()


def test_pgnn_train_reports_a_batch_larger_than_the_split_in_one_line(tmp_path: Path) -> None:
    generate_dataset(tmp_path / "kitti", 2, 0, 0.5)  # 1 train frame, 1 val frame
    params = {"preset": "small", "data": {"root": "kitti", "workers": 1}, "train": {"batch_size": 2}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PGNN_DEBUG": "", "OMP_NUM_THREADS": "1"}
    run = [sys.executable, "-m", "pgnn.cli", "train", "--params", str(tmp_path / "params.yaml")]
    done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "pgnn train: error: params.yaml: train.batch_size: expected batch_size x accumulation_steps <= 1 "
        "(the train split's training frames), got 2 x 1"
    )
    assert not list((tmp_path / "models").rglob("ckpt-*.pt"))
