"""Hostile scans, labels and sensor files: one line naming the file, nothing allocated that the file cannot
hold, no raw control character echoed. Each input here was misread before the bounds (an allocation
traceback without the file's name, exit 0 on 4 of 4e9 points, a terminal escape printed raw, a label cut
inside its last number read as another number, a RecursionError)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pgnn.cli import main as cli_main
from pgnn.config.sensor import load_sensor
from pgnn.core.bounded import MAX_DEPTH, MAX_TEXT_BYTES
from pgnn.core.errors import DataError
from pgnn.data import kitti
from pgnn.data.labels import read_labels
from pgnn.data.own_format import read_own_labels
from pgnn.data.pointcloud import read_point_cloud, write_point_cloud
from tests.core.test_bounded import _npy_header, billion_laughs

PCD_HEADER = (
    "VERSION 0.7\nFIELDS x y z intensity\nSIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 1\nWIDTH {n}\nHEIGHT 1\n"
    "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {data}\n"
)
LABEL = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59\n"


def _refused(path: Path, *expected: str) -> str:
    with pytest.raises(DataError) as info:
        read_point_cloud(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text, text
    assert all(e in text for e in expected), text
    return text


@pytest.mark.parametrize("reader", ["point cloud", "painted"])
def test_an_npy_declaring_10_to_the_10_rows_in_192_bytes_names_the_file(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "000000.npy"
    path.write_bytes(_npy_header((10**10, 4 if reader == "point cloud" else 8)).ljust(192, b"\0"))
    with pytest.raises(DataError) as info:
        read_point_cloud(path) if reader == "point cloud" else kitti.read_painted(path)
    assert str(info.value).startswith(f"{path}: expected a .npy array") and "its header declares" in str(
        info.value
    )


def test_an_ascii_pcd_declaring_4e9_points_and_holding_4_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "scan.pcd"
    rows = "1 2 3 0.5\n" * 4
    path.write_text(PCD_HEADER.format(n=4_000_000_000, data="ascii") + rows)
    _refused(path, "expected a PCD file of 4000000000 ascii points: its header declares")
    path.write_text(PCD_HEADER.format(n=5, data="ascii") + rows)  # small enough to read, then counted
    _refused(path, "expected a PCD file of the 5 points its header declares, it holds 4")
    path.write_text(PCD_HEADER.format(n=3, data="ascii") + rows)
    _refused(path, "expected a PCD file of the 3 points its header declares, it holds 4")
    path.write_text(PCD_HEADER.format(n=4, data="ascii") + rows)
    assert read_point_cloud(path).xyz.shape == (4, 3)


def test_binary_pcd_sizes_are_checked_before_pypcd4_allocates(tmp_path: Path) -> None:
    path = tmp_path / "scan.pcd"
    path.write_bytes(PCD_HEADER.format(n=10**9, data="binary").encode() + b"\0" * 64)
    _refused(path, "expected a PCD file of 1000000000 binary points: its header declares 16000000000 bytes")

    def compressed(n: int, sizes: tuple[int, int]) -> bytes:
        return (
            PCD_HEADER.format(n=n, data="binary_compressed").encode() + struct.pack("II", *sizes) + b"\0" * 16
        )

    path.write_bytes(compressed(2**28, (16, 2**32 - 1)))  # pypcd4 would decompress into 4 GiB
    _refused(path, "of 268435456 binary_compressed points: 4294967296 bytes, got 4294967295")
    path.write_bytes(compressed(2**20, (16, 2**24)))  # more than LZF expands 16 bytes to
    _refused(path, "its header declares 16777216 bytes of data or more, the file holds 1600 ")
    path.write_bytes(compressed(10, (10**6, 160)))
    _refused(path, "its header declares 1000000 bytes of data or more, the file holds 16 ")
    scan = np.column_stack([np.random.default_rng(0).uniform(-20, 20, (50, 3)), np.full(50, 0.5)])
    write_point_cloud(path, scan, "binary_compressed")
    assert np.allclose(read_point_cloud(path).xyz, scan[:, :3], atol=1e-5)


def test_a_ply_that_declares_more_vertices_than_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "scan.ply"
    header = b"ply\nformat ascii 1.0\nelement vertex 10000000000\nproperty float x\nproperty float y\n"
    path.write_bytes(header + b"property float z\nend_header\n1 2 3\n")
    _refused(path, "expected a PLY file holding its elements: its header declares 60000000000 bytes")


def test_ply_field_names_are_escaped_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "scan.ply"
    path.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float a\x1b[31mred\x1b]0;title\x07\n"
        b"property float b\nend_header\n1 2\n"
    )
    text = _refused(path, "a\\x1b[31mred\\x1b]0;title\\x07, b")
    assert "\x1b" not in text and "\x07" not in text


def test_a_label_file_cut_inside_its_last_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``... 46.70 -1.59`` cut to ``... 46.70 -1.5`` still has 15 fields: it was read as ry = -1.5."""
    gt, pred = tmp_path / "gt", tmp_path / "pred"
    gt.mkdir(), pred.mkdir()
    path = gt / "000000.txt"
    path.write_text(LABEL + LABEL[:-2])
    with pytest.raises(DataError) as info:
        read_labels(path)
    assert (info.value.line, info.value.message) == (
        2,
        "expected a newline at the end of the last line: the file is cut off (add one if whole)",
    )
    (pred / "000000.txt").write_text("")
    assert cli_main(["eval", str(gt), str(pred)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"pgnn eval: error: {path}:2: {info.value.message}"]
    path.write_text(LABEL * 2)
    assert len(read_labels(path)) == 2
    path.write_text("")
    assert read_labels(path) == []


def test_a_calib_file_cut_inside_its_last_number_is_refused(kitti_sample: Path, tmp_path: Path) -> None:
    text = (kitti_sample / "training" / "calib" / "000000.txt").read_text().rstrip("\n")
    path = tmp_path / "c.txt"
    path.write_text(text[:-1])  # the last number of Tr_imu_to_velo loses its last digit
    with pytest.raises(DataError, match=r"c.txt:7: expected a newline at the end of the last line"):
        kitti.read_calib(path)
    path.write_text(text + "\n")
    assert kitti.read_calib(path).Tr_imu_to_velo is not None


def test_a_split_or_label_file_past_the_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "000000.txt"
    with open(path, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)
    with pytest.raises(
        DataError,
        match=rf"000000.txt: expected a KITTI text file of at most 4096 KiB, got {MAX_TEXT_BYTES + 1} bytes",
    ):
        read_labels(path)


@pytest.mark.parametrize("deep", [MAX_DEPTH + 1, 100_000])
def test_own_labels_nested_thousands_deep_is_one_line(tmp_path: Path, deep: int) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"objects": [{"class": "Car", "box": ' + "[" * deep + "]" * deep + "}]}")
    with pytest.raises(
        DataError, match=rf"a.json: expected a JSON labels file nested at most {MAX_DEPTH} deep"
    ):
        read_own_labels(path)


def test_a_sensor_file_alias_bomb_or_deep_nesting_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "sensor.yaml"
    path.write_text(billion_laughs().replace("preset:", "mounting_height:"))
    with pytest.raises(
        DataError, match=r"sensor.yaml:5: expected at most 20000 values with aliases expanded"
    ):
        load_sensor(path)
    path.write_text("extrinsic: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(DataError, match=r"sensor.yaml:1: expected at most 64 levels of nesting"):
        load_sensor(path)
