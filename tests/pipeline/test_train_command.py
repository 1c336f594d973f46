"""``pgnn train --params P.yaml`` trains every preset on a small real KITTI root with nothing but the params
file and the root: it builds (or reuses) the prepared frames and graphs itself, the same functions as the DVC
stages; under ``torchrun`` too. Real frames: ../shared/data/kitti_sample (KITTI, CC BY-NC-SA 3.0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pgnn.nn.checkpoint import load_checkpoint
from pgnn.pipeline.standalone import train_project
from pgnn.recipe.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]
VELODYNE = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
PAINTED = VELODYNE[:6]


def kitti_root(dest: Path, sample: Path, ids: tuple[str, ...]) -> Path:
    """A KITTI root of links to the shared frames with ImageSets train/val = ``ids``."""
    (dest / "training").mkdir(parents=True)
    for sub in ("velodyne", "painted_lidar", "calib", "label_2", "image_2"):
        (dest / "training" / sub).symlink_to(sample / "training" / sub)
    (dest / "ImageSets").mkdir()
    for split in ("train", "val"):
        (dest / "ImageSets" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return dest


def project(tmp_path: Path, sample: Path, preset: str, **train: object) -> Path:
    painted = PRESETS[preset].targets.input_features == "is"
    kitti_root(tmp_path / "kitti", sample, PAINTED if painted else VELODYNE)
    params = {
        "preset": preset,
        "data": {"root": "kitti", "painted": painted, "frames_per_shard": 4, "workers": 1},
        "train": {"batch_size": 1, "checkpoint_every": 1, **train},
    }
    path = tmp_path / "P.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_pgnn_train_runs_every_preset_from_a_params_file(
    tmp_path: Path, kitti_sample: Path, preset: str
) -> None:
    params = project(tmp_path, kitti_sample, preset)
    model = train_project(params, max_steps=2)
    ckpt = load_checkpoint(model)
    assert ckpt["step"] == 2 and ckpt["label_method"] == PRESETS[preset].targets.label_method
    assert (tmp_path / "data" / "prepared" / "train" / "manifest.json").is_file()
    assert "postprocess" in ckpt and "runtime_graph" in ckpt  # the model card: every path predicts with these
    # a rerun with more steps resumes the same run (same checkpoint folder), it does not restart
    runs = list((tmp_path / "models" / "checkpoints").iterdir())
    train_project(params, max_steps=3)
    assert list((tmp_path / "models" / "checkpoints").iterdir()) == runs
    assert load_checkpoint(tmp_path / "models" / "model.pt")["step"] == 3


def test_pgnn_train_command_line_and_under_torchrun(tmp_path: Path, kitti_sample: Path) -> None:
    params = project(tmp_path, kitti_sample, "small", batch_size=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PGNN_TORCH_THREADS": "1"}
    cmd = [sys.executable, "-m", "pgnn.cli", "train", "--params", str(params), "--max-steps", "2"]
    one = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert one.returncode == 0, one.stderr
    single = load_checkpoint(tmp_path / "models" / "model.pt")
    (tmp_path / "models").rename(tmp_path / "models-single")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    two = subprocess.run(
        [*torchrun, "-m", "pgnn.cli", *cmd[3:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    ddp = load_checkpoint(tmp_path / "models" / "model.pt")
    assert ddp["step"] == 2
    for name, value in single["model"].items():
        assert (ddp["model"][name] - value).abs().max() < 1e-5, name
