"""Inputs that used to pass silently and now raise a DataError naming the file (pgnn.data's reader rules).

Some tests read frames of ../shared/data/kitti_sample (KITTI, CC BY-NC-SA 3.0: non-commercial use only).
"""

from __future__ import annotations

import json
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
from pgnn.data.prepare import PreparedFrames, prepared_label_types


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


GOOD_CAR = "Car {trunc} {occ} -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59"
DONT_CARE = "DontCare -1 -1 -10 503.89 169.71 590.61 190.13 -1 -1 -1 -1000 -1000 -1000 -10"


@pytest.mark.parametrize(
    ("trunc", "occ", "message"),
    [
        ("1.50", "0", "expected a truncation in 0..1, got '1.50'"),
        ("-0.10", "0", "expected a truncation in 0..1, got '-0.10'"),
        ("-1", "0", "expected a truncation in 0..1, got '-1'"),  # -1 (unknown) only on DontCare lines
        ("0.00", "4", "expected an occlusion state 0, 1, 2 or 3, got '4'"),
        ("0.00", "-1", "expected an occlusion state 0, 1, 2 or 3, got '-1'"),
    ],
)
def test_label_truncation_and_occlusion_keep_the_devkit_ranges(
    tmp_path: Path, trunc: str, occ: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The devkit's readme: truncation 0 (none) .. 1, occlusion 0, 1, 2, 3 (3: unknown); a truncation of 1.5
    used to be read, and changed the object's difficulty, without a word."""
    gt = tmp_path / "gt"
    gt.mkdir()
    path = gt / "000000.txt"
    good = GOOD_CAR.format(trunc="0.00", occ="0")
    path.write_text("\n".join([good, DONT_CARE, GOOD_CAR.format(trunc=trunc, occ=occ)]) + "\n")
    with pytest.raises(DataError) as info:
        read_labels(path)
    assert (info.value.path, info.value.line, info.value.message) == (str(path), 3, message)
    (tmp_path / "pred").mkdir()
    (tmp_path / "pred" / "000000.txt").write_text("")
    before = path.read_bytes()
    assert cli_main(["eval", str(gt), str(tmp_path / "pred")]) == 1
    assert capsys.readouterr().err.splitlines() == [f"pgnn eval: error: {path}:3: {message}"]
    assert path.read_bytes() == before


def test_the_edges_of_the_label_ranges_and_unknown_values_where_kitti_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "000000.txt"
    lines = [GOOD_CAR.format(trunc=t, occ=o) for t, o in (("0.00", "0"), ("1.00", "3"), ("0.5", "2"))]
    path.write_text("\n".join([*lines, DONT_CARE]) + "\n")
    assert [(lab.truncated, lab.occluded) for lab in read_labels(path)] == [
        (0, 0),
        (1, 3),
        (0.5, 2),
        (-1, -1),
    ]
    result = GOOD_CAR.format(trunc="-1", occ="-1") + " 0.93"  # result files write -1 -1 (pgnn's own too)
    path.write_text(result + "\n")
    assert read_labels(path, allow_score=True)[0].truncated == -1.0


@pytest.mark.parametrize("split", ["../x", "/etc/passwd", "sub/x", ".x"])
def test_a_split_name_is_not_read_from_outside_imagesets(tmp_path: Path, split: str) -> None:
    root = tmp_path / "kitti"
    (root / "ImageSets").mkdir(parents=True)
    (root / "x.txt").write_text("000000\n")  # what ImageSets/../x.txt would read
    with pytest.raises(DataError) as info:
        kitti.frame_ids(root, split)
    assert info.value.path == str(root / "ImageSets")
    rule = "a split file name inside ImageSets/ (letters, digits, _ . -; no leading dot)"
    assert info.value.message == f"expected {rule}, got {split!r}"


@pytest.mark.parametrize(
    "manifest", [[], {"shards": 3}, {"shards": [{"file": "../p.parquet", "frames": []}]}]
)
def test_a_prepared_manifest_of_the_wrong_shape_is_named(tmp_path: Path, manifest: object) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"manifest.json: expected a prepared split folder with a manifest"):
        PreparedFrames(tmp_path)
    with pytest.raises(DataError, match=r"manifest.json: expected a prepared split folder with a manifest"):
        prepared_label_types(tmp_path)
