"""Inputs that used to pass silently and now raise a DataError naming the file (pgnn.data's reader rules)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.commands.crop import crop_frame
from pgnn.core.errors import DataError
from pgnn.data import kitti
from pgnn.data.frames import check_points_in_view, fov_mask, load_frame
from pgnn.data.labels import read_labels


def _root(kitti_sample: Path, tmp_path: Path, frame_id: str = "000000") -> Path:
    """A one-frame KITTI root (velodyne, calib, image_2, label_2) in ``tmp_path/kitti``."""
    root = tmp_path / "kitti"
    for sub, ext in (("velodyne", "bin"), ("calib", "txt"), ("image_2", "png"), ("label_2", "txt")):
        (root / "training" / sub).mkdir(parents=True)
        shutil.copy(kitti_sample / "training" / sub / f"{frame_id}.{ext}", root / "training" / sub)
    return root


def test_empty_velodyne_file(tmp_path: Path) -> None:
    path = tmp_path / "000000.bin"
    path.write_bytes(b"")
    with pytest.raises(DataError, match=r"000000.bin: expected at least one point .* got an empty file"):
        kitti.read_velodyne(path)
    np.save(tmp_path / "p.npy", np.zeros((0, 8)))
    with pytest.raises(DataError, match=r"p.npy: expected at least one point, got an empty \(0, 8\) array"):
        kitti.read_painted(tmp_path / "p.npy")


@pytest.mark.parametrize("far", [1e30, -1e30, 1001.0])
def test_point_far_beyond_any_lidar_range(tmp_path: Path, far: float) -> None:
    points = np.ones((10, 4), dtype=np.float32)
    points[3, 0] = far
    path = tmp_path / "000000.bin"
    points.tofile(path)
    with pytest.raises(
        DataError, match=r"000000.bin: expected x, y, z within 1000 m of the sensor, point 3 \(of 10\)"
    ):
        kitti.read_velodyne(path)
    points[3, 0] = 999.0  # inside the rule
    points.tofile(path)
    assert kitti.read_velodyne(path)[3, 0] == 999.0


def test_in_view_point_at_1e30_names_the_scan(kitti_sample: Path, tmp_path: Path) -> None:
    root = _root(kitti_sample, tmp_path)
    scan = root / "training" / "velodyne" / "000000.bin"
    points = kitti.read_velodyne(scan)
    row = int(
        np.flatnonzero(
            fov_mask(points[:, :3], kitti.read_calib(root / "training/calib/000000.txt"), 1224, 370)
        )[0]
    )
    points[row, :3] *= np.float32(1e29)  # same direction, so still in view, 1e30-ish metres away
    kitti.write_velodyne(scan, points)
    with pytest.raises(DataError, match=rf"{scan}: expected x, y, z within 1000 m .* point {row} "):
        load_frame(root, "000000")


def test_negative_label_sizes(tmp_path: Path) -> None:
    path = tmp_path / "000000.txt"
    good = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59"
    bad = "Pedestrian 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 -0.60 0.80 -0.65 1.71 46.70 -1.59"
    dont_care = "DontCare -1 -1 -10 503.89 169.71 590.61 190.13 -1 -1 -1 -1000 -1000 -1000 -10"
    path.write_text("\n".join([good, dont_care, bad]) + "\n")
    with pytest.raises(
        DataError, match=r"000000.txt:3: expected sizes h, w, l >= 0, got h=1.65, w=-0.60, l=0.80"
    ):
        read_labels(path)
    path.write_text("\n".join([good, dont_care]) + "\n")  # DontCare's -1 sizes mean "no 3D box"
    assert [lab.type for lab in read_labels(path)] == ["Car", "DontCare"]


def test_empty_split_file(kitti_sample: Path, tmp_path: Path) -> None:
    root = _root(kitti_sample, tmp_path)
    split = root / "ImageSets" / "train.txt"
    split.parent.mkdir()
    split.write_text("\n\n")
    with pytest.raises(
        DataError, match=rf"{split}: expected at least one 6-digit frame id, got an empty split"
    ):
        kitti.frame_ids(root, "train")


def test_crop_refuses_an_image_that_contradicts_the_calib(
    kitti_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(kitti_sample, tmp_path)
    image = root / "training" / "image_2" / "000000.png"
    calib = root / "training" / "calib" / "000000.txt"
    Image.new("RGB", (400, 120)).save(image)  # the principal point (604, 180) lies outside it
    out = tmp_path / "out.bin"
    assert cli_main(["crop", str(root), "000000", str(out)]) == 1  # used to write 0 points
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"pgnn crop: error: {image}: expected an image whose central")
    assert f"does not match the calib {calib})" in err[0]
    assert not out.exists()


def test_no_point_in_view_names_image_and_calib(kitti_sample: Path, tmp_path: Path) -> None:
    root = _root(kitti_sample, tmp_path)
    scan = root / "training" / "velodyne" / "000000.bin"
    points = kitti.read_velodyne(scan)
    behind = points[points[:, 0] < -5]  # only the points behind the car: the camera sees none of them
    assert len(behind) > 1000
    kitti.write_velodyne(scan, behind)
    image, calib = root / "training" / "image_2" / "000000.png", root / "training" / "calib" / "000000.txt"
    expected = (
        rf"{image}: expected some of the scan's {len(behind)} points in this image's view, got none "
        rf"with calib {calib}"
    )
    with pytest.raises(DataError, match=expected):
        load_frame(root, "000000")
    with pytest.raises(DataError, match=expected):
        crop_frame(root, "000000")
    check_points_in_view(1, len(behind), image, calib)  # one point in view is enough
