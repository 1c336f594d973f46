"""The point cloud readers (.bin, .npy, .pcd ASCII/binary/binary_compressed, .ply ASCII/binary), their
one-line errors on malformed files, the intensity policy, and the sensor config and transform."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from pgnn.config.sensor import SensorConfig, load_sensor
from pgnn.core.errors import DataError, ParamsError
from pgnn.data.pointcloud import normalise_intensity, read_point_cloud, read_scan, write_point_cloud
from pgnn.data.sensor import (
    boxes_output_to_rect,
    boxes_rect_to_output,
    frame_from_sensor_scan,
    sensor_to_rect,
)

CASES = [(".bin", "binary"), (".npy", "binary"), (".pcd", "ascii"), (".pcd", "binary")]
CASES += [(".pcd", "binary_compressed"), (".ply", "ascii"), (".ply", "binary")]


def _scan(n: int = 200, seed: int = 0) -> np.ndarray:
    """Random rows, 10 different ones repeated (so that pypcd4's LZF compresses them: it writes incompressible
    data as plain binary)."""
    rng = np.random.default_rng(seed)
    rows = np.column_stack([rng.uniform(-40, 40, (10, 3)), rng.uniform(0, 1, 10)])
    return np.tile(rows, (n // 10, 1)).astype(np.float32)


@pytest.mark.parametrize(("suffix", "encoding"), CASES)
def test_every_format_reads_back_what_was_written(tmp_path: Path, suffix: str, encoding: str) -> None:
    scan = _scan()
    path = tmp_path / f"scan{suffix}"
    write_point_cloud(path, scan, encoding)
    if suffix == ".pcd":
        assert f"DATA {encoding}" in path.read_bytes()[:400].decode("ascii", "replace")
    rows, scores = read_scan(path)
    assert scores is None
    np.testing.assert_allclose(rows, scan, atol=1e-5 if encoding == "ascii" else 0)


def test_npy_shapes_3_4_and_8(tmp_path: Path) -> None:
    scan = _scan()
    np.save(tmp_path / "a.npy", scan[:, :3])
    assert read_point_cloud(tmp_path / "a.npy").intensity is None
    painted = np.column_stack([scan, np.full((len(scan), 4), 0.25)])
    np.save(tmp_path / "p.npy", painted)
    rows, scores = read_scan(tmp_path / "p.npy")
    np.testing.assert_allclose(scores, 0.25)
    np.testing.assert_allclose(rows, scan, atol=1e-6)


def _pcd_header(fields: str, n: int, data: str = "ascii") -> str:
    k = len(fields.split())
    return (
        f"VERSION 0.7\nFIELDS {fields}\nSIZE {' '.join(['4'] * k)}\nTYPE {' '.join(['F'] * k)}\n"
        f"COUNT {' '.join(['1'] * k)}\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\n"
        f"POINTS {n}\nDATA {data}\n"
    )


MALFORMED = {
    "short.bin": (b"\x00" * 20, "expected a multiple of 16 bytes"),
    "empty.bin": (b"", "expected at least one point"),
    "shape.npy": (None, "expected an array of shape (N, 3), (N, 4) or (N, 8 painted), got (5, 5)"),
    "junk.npy": (b"not numpy", "expected a .npy array"),
    "junk.pcd": (b"hello\n", "expected a PCD file"),
    "noxyz.pcd": (_pcd_header("x y intensity", 1).encode() + b"1 2 3\n", "expected PCD fields x, y, z"),
    "cut.pcd": (_pcd_header("x y z", 3, "binary").encode() + b"\x00" * 7, "expected a PCD file"),
    "junk.ply": (b"ply\nformat nonsense 1.0\nend_header\n", "expected a PLY file"),
    "noxyz.ply": (
        b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n1\n",
        "expected PLY vertex properties x, y, z",
    ),
    "face.ply": (
        b"ply\nformat ascii 1.0\nelement face 0\nproperty float q\nend_header\n",
        "element 'vertex'",
    ),
    "nan.pcd": (_pcd_header("x y z", 1).encode() + b"nan 0 0\n", "expected finite numbers"),
    "scan.xyz": (b"1 2 3\n", "expected a point cloud file (.bin, .npy, .pcd, .ply)"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    content, expected = MALFORMED[name]
    path = tmp_path / name
    if content is None:
        np.save(path, np.zeros((5, 5), np.float32))
    else:
        path.write_bytes(content)
    with pytest.raises(DataError) as e:
        read_point_cloud(path)
    text = str(e.value)
    assert text.startswith(str(path)) and expected in text and "\n" not in text


def test_intensity_policy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    scan = _scan()
    scan[:, 3] = np.linspace(0, 255, len(scan))
    write_point_cloud(tmp_path / "b.pcd", scan)
    with caplog.at_level(logging.INFO, logger="pgnn.data.pointcloud"):
        rows, _ = read_scan(tmp_path / "b.pcd")
    assert rows[:, 3].max() == pytest.approx(1.0) and "divided by 255" in caplog.text
    scan[0, 3] = 300.0
    write_point_cloud(tmp_path / "c.ply", scan)
    with pytest.raises(DataError, match=r"expected intensity in 0..1 or 0..255, got [0-9.]+\.\.300$"):
        read_scan(tmp_path / "c.ply")
    np.save(tmp_path / "xyz.npy", scan[:, :3])
    with pytest.raises(DataError, match="--missing-intensity zeros"):
        read_scan(tmp_path / "xyz.npy")
    cloud = read_point_cloud(tmp_path / "xyz.npy")
    with caplog.at_level(logging.WARNING, logger="pgnn.data.pointcloud"):
        zeros = normalise_intensity(cloud, "xyz.npy", "zeros")
    assert not zeros.any() and "no intensity" in caplog.text


def test_sensor_config_file_and_errors(tmp_path: Path) -> None:
    assert load_sensor(None) == SensorConfig()
    path = tmp_path / "s.yaml"
    path.write_text("mounting_height: 2.0\nfield_of_view: 90\n")
    assert load_sensor(path).mounting_height == 2.0
    path.write_text("mounting_hieght: 2.0\n")
    with pytest.raises(ParamsError, match="mounting_hieght: unknown key"):
        load_sensor(path)
    path.write_text("extrinsic: [[2, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]\n")
    with pytest.raises(ParamsError, match="rotation"):
        load_sensor(path)


def test_default_mount_is_the_plain_axis_swap_and_boxes_round_trip() -> None:
    m = sensor_to_rect(SensorConfig())
    np.testing.assert_allclose(m[:3, :3], [[0, -1, 0], [0, 0, -1], [1, 0, 0]])
    # a 1 m higher mount: the same ground point lands at the same camera height
    ground = np.array([10.0, 2.0, -1.73, 1.0])
    high = np.array([10.0, 2.0, -2.73, 1.0])
    np.testing.assert_allclose(
        (m @ ground)[:3], (sensor_to_rect(SensorConfig(mounting_height=2.73)) @ high)[:3]
    )
    # a car 10 m ahead heading forward (+x): KITTI ry = -pi/2, bottom at the ground
    out = np.array([[10.0, 2.0, -1.73 + 0.75, 4.0, 1.8, 1.5, 0.0]])
    rect = boxes_output_to_rect(out, SensorConfig())
    assert rect[0, 6] == pytest.approx(-np.pi / 2) and rect[0, 1] == pytest.approx(
        1.65
    )  # KITTI camera height
    assert rect[0, 3:6].tolist() == [4.0, 1.5, 1.8]  # l, h, w
    np.testing.assert_allclose(boxes_rect_to_output(rect, SensorConfig()), out, atol=1e-12)


def test_front_cone_and_range_crop() -> None:
    scan = np.array([[10, 0, 0, 0.5], [-10, 0, 0, 0.5], [10, 9, 0, 0.5], [100, 0, 0, 0.5]], np.float64)
    assert len(frame_from_sensor_scan("a", scan, SensorConfig()).points_rect) == 4
    cone = SensorConfig(field_of_view=90.0, max_range=50.0)
    frame = frame_from_sensor_scan("a", scan, cone)
    assert len(frame.points_rect) == 2 and frame.image_size == (0, 0)  # (10, 0) and (10, 9): 42 degrees


def test_extrinsic_maps_a_tilted_sensor_to_the_level_frame() -> None:
    pitch = np.radians(10.0)  # a sensor pitched down by 10 degrees, 0.5 m above the output frame's origin
    c, s = np.cos(pitch), np.sin(pitch)
    to_output = np.array([[c, 0, s, 0.0], [0, 1, 0, 0.0], [-s, 0, c, 0.5], [0, 0, 0, 1.0]])
    level = np.array([[10.0, 1.0, -1.73, 0.5], [20.0, -3.0, 0.0, 0.5]])  # points in the output frame
    in_sensor = (np.linalg.inv(to_output) @ np.column_stack([level[:, :3], np.ones(2)]).T).T[:, :3]
    tilted = SensorConfig(extrinsic=tuple(map(tuple, to_output.tolist())))
    a = frame_from_sensor_scan("a", np.column_stack([in_sensor, level[:, 3]]), tilted)
    b = frame_from_sensor_scan("b", level, SensorConfig())
    np.testing.assert_allclose(a.points_rect, b.points_rect, atol=1e-5)
    assert not np.allclose(in_sensor, level[:, :3], atol=0.1)  # the tilt was real
