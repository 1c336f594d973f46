"""Tests of pgnn.data.kitti, labels, frames and pgnn inspect / crop; real KITTI files where they matter."""

from __future__ import annotations

import json
import math
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pgnn.cli import main as cli_main
from pgnn.core.errors import DataError
from pgnn.data import kitti
from pgnn.data.frames import (
    check_image_matches_calib,
    fov_mask,
    fov_mask_numpy,
    load_frame,
    points_rect_to_image,
    points_rect_to_velo,
    points_velo_to_rect,
)
from pgnn.data.kitti import Calib
from pgnn.data.labels import (
    KITTI_CLASSES,
    Label,
    difficulty,
    difficulty_name,
    format_label,
    labels_to_boxes,
    parse_labels,
    read_labels,
    write_labels,
)

SAMPLE_IDS = ("000000", "000001", "000002", "000003", "000004", "000005", "000008", "000114", "000134")


def _make_label(
    top: float = 100.0, bottom: float = 150.0, occluded: int = 0, truncated: float = 0.0, kind: str = "Car"
) -> Label:
    return Label(
        type=kind,
        truncated=truncated,
        occluded=occluded,
        alpha=0.0,
        bbox=(10.0, top, 60.0, bottom),
        h=1.5,
        w=1.6,
        l=3.9,
        x=1.0,
        y=1.7,
        z=20.0,
        ry=0.3,
    )


def _copy_frame(kitti_sample: Path, dest_root: Path, frame_id: str, kinds: tuple[str, ...]) -> Path:
    """Copy some of a sample frame's files into ``dest_root/training`` (tests never touch shared data)."""
    ext = {"velodyne": "bin", "calib": "txt", "label_2": "txt", "image_2": "png", "painted_lidar": "npy"}
    for kind in kinds:
        (dest_root / "training" / kind).mkdir(parents=True, exist_ok=True)
        name = f"{frame_id}.{ext[kind]}"
        shutil.copyfile(kitti_sample / "training" / kind / name, dest_root / "training" / kind / name)
    return dest_root


# ----------------------------------------------------------------------------------------------------------
# field-of-view crop


def test_fov_crop_reproduces_velodyne_reduced_byte_for_byte(kitti_sample: Path) -> None:
    paths = kitti.frame_paths(kitti_sample, "000000")
    scan = kitti.read_velodyne(paths.points)  # (N, 4)
    width, height = kitti.image_size(paths.image)
    assert (width, height) == (1224, 370)
    mask = fov_mask(scan[:, :3], kitti.read_calib(paths.calib), width, height)
    expected = (kitti_sample / "training" / "velodyne_reduced" / "000000.bin").read_bytes()
    assert mask.sum() == len(expected) // 16 == 20285
    assert scan[mask].astype("<f4").tobytes() == expected


def test_crop_command_writes_velodyne_reduced_bytes(kitti_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "000000.bin"
    assert cli_main(["crop", str(kitti_sample), "000000", str(out)]) == 0
    assert out.read_bytes() == (kitti_sample / "training" / "velodyne_reduced" / "000000.bin").read_bytes()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("frame_id", ["000008", "000134"])
def test_fov_crop_keeps_every_row_of_reduced_scans(kitti_sample: Path, frame_id: str) -> None:
    paths = kitti.frame_paths(kitti_sample, frame_id)
    assert paths.points.parent.name == "velodyne_reduced"  # no full scan for these frames
    scan = kitti.read_velodyne(paths.points)
    mask = fov_mask(scan[:, :3], kitti.read_calib(paths.calib), *kitti.image_size(paths.image))
    assert mask.all() and len(scan) > 15000


def test_fov_mask_boundaries_on_synthetic_calib() -> None:
    calib = _simple_calib()  # f = 10 px, principal point (50, 25): u = 10 x / z + 50, v = 10 y / z + 25
    xyz_rect = np.array(
        [
            [0.0, 0.0, 10.0],  # centre: in
            [0.0, 0.0, -10.0],  # behind: out
            [0.0, 0.0, 0.0],  # w = 0: out
            [-50.0, 0.0, 10.0],  # u = 0: in
            [50.0, 0.0, 10.0],  # u = W: out
            [0.0, -25.0, 10.0],  # v = 0: in
            [0.0, 25.0, 10.0],  # v = H: out
            [-50.1, 0.0, 10.0],  # u < 0: out
        ]
    )
    uv, depth = points_rect_to_image(xyz_rect, calib)
    assert np.allclose(uv[[0, 3, 4, 5, 6]], [[50, 25], [0, 25], [100, 25], [50, 0], [50, 50]])
    assert depth.tolist() == [10, -10, 0, 10, 10, 10, 10, 10]
    xyz_velo = points_rect_to_velo(xyz_rect, calib)
    assert np.allclose(xyz_velo[0], [10, 0, 0])  # velodyne x forward
    mask = fov_mask(xyz_velo, calib, 100, 50)
    assert mask.tolist() == [True, False, False, True, False, True, False, False]


def _simple_calib() -> Calib:
    k = np.array([[10.0, 0.0, 50.0, 0.0], [0.0, 10.0, 25.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    tr = np.array([[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    return Calib(P0=k, P1=k, P2=k, P3=k, R0_rect=np.eye(3), Tr_velo_to_cam=tr)


# ----------------------------------------------------------------------------------------------------------
# transforms


def test_velo_rect_velo_round_trip(kitti_sample: Path) -> None:
    calib = kitti.read_calib(kitti_sample / "training" / "calib" / "000114.txt")
    scan = kitti.read_velodyne(kitti.frame_paths(kitti_sample, "000114").points)[:, :3]
    rect = points_velo_to_rect(scan, calib)
    assert rect.dtype == np.float64 and rect.shape == scan.shape
    back = points_rect_to_velo(rect, calib)
    assert np.abs(back - scan).max() < 1e-9
    # axes: rect x ~ -velo y, rect y ~ -velo z, rect z ~ velo x (within the sensors' mounting offsets)
    probe = points_velo_to_rect(np.array([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0]]), calib)
    origin = points_velo_to_rect(np.zeros((1, 3)), calib)[0]
    assert np.allclose(probe - origin, [[0, 0, 10], [-10, 0, 0], [0, -10, 0]], atol=0.2)


def test_projected_3d_box_matches_its_2d_box(kitti_sample: Path) -> None:
    """A fully visible car's 3D box corners project onto its labelled 2D box (P2 and box convention)."""
    calib = kitti.read_calib(kitti_sample / "training" / "calib" / "000114.txt")
    car = read_labels(kitti_sample / "training" / "label_2" / "000114.txt")[0]
    assert (car.type, car.truncated, car.occluded) == ("Car", 0.0, 0)
    signs = np.array([[sx, sy, sz] for sx in (1, -1) for sy in (0, -1) for sz in (1, -1)], dtype=np.float64)
    local = signs * [car.l / 2, car.h, car.w / 2]  # (8, 3)
    c, s = math.cos(car.ry), math.sin(car.ry)
    rot = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    corners = local @ rot.T + [car.x, car.y, car.z]
    uv, depth = points_rect_to_image(corners, calib)
    assert (depth > 0).all()
    projected = [uv[:, 0].min(), uv[:, 1].min(), uv[:, 0].max(), uv[:, 1].max()]
    assert np.allclose(projected, car.bbox, atol=4.0), (projected, car.bbox)


# ----------------------------------------------------------------------------------------------------------
# labels and difficulty


def _independent_counts(texts: dict[str, str]) -> tuple[Counter, Counter]:
    """Class and difficulty counts by plain string splitting (not the module's code)."""
    classes: Counter = Counter()
    levels: Counter = Counter()
    for text in texts.values():
        for line in text.split("\n"):
            if not line.strip():
                continue
            f = line.split(" ")
            classes[f[0]] += 1
            if f[0] == "DontCare":
                levels["none"] += 1
                continue
            height, occ, trunc = float(f[7]) - float(f[5]), int(f[2]), float(f[1])
            if height > 40 and occ <= 0 and trunc <= 0.15:
                levels["easy"] += 1
            elif height > 25 and occ <= 1 and trunc <= 0.3:
                levels["moderate"] += 1
            elif height > 25 and occ <= 2 and trunc <= 0.5:
                levels["hard"] += 1
            else:
                levels["none"] += 1
    return classes, levels


def test_all_7481_training_label_files_parse(shared_data: Path) -> None:
    texts: dict[str, str] = {}
    with tarfile.open(shared_data / "kitti_labels" / "training_label_2.tar.gz") as tar:
        for member in tar:
            if member.isfile():
                texts[member.name] = tar.extractfile(member).read().decode("ascii")
    assert len(texts) == 7481
    assert sorted(texts)[0] == "label_2/000000.txt" and sorted(texts)[-1] == "label_2/007480.txt"

    classes: Counter = Counter()
    levels: Counter = Counter()
    table: Counter = Counter()
    for name, text in texts.items():
        for label in parse_labels(text, name):
            level = difficulty_name(difficulty(label))
            classes[label.type] += 1
            levels[level] += 1
            table[label.type, level] += 1
    expected_classes, expected_levels = _independent_counts(texts)

    print("\nper class:", dict(classes.most_common()))
    print("per difficulty:", {k: levels[k] for k in ("easy", "moderate", "hard", "none")})
    for kind in KITTI_CLASSES:
        print(f"  {kind:<15}", {k: table[kind, k] for k in ("easy", "moderate", "hard", "none")})

    assert classes == expected_classes
    assert levels == expected_levels
    assert sum(classes.values()) == 51865
    # the well-known KITTI training-set totals
    known = {
        "Car": 28742,
        "DontCare": 11295,
        "Pedestrian": 4487,
        "Van": 2914,
        "Cyclist": 1627,
        "Truck": 1094,
        "Misc": 973,
        "Tram": 511,
        "Person_sitting": 222,
    }
    assert classes == Counter(known)
    # and the difficulty split this module computes (a regression guard; "none" includes the 11295 DontCare)
    assert (levels["easy"], levels["moderate"], levels["hard"], levels["none"]) == (9995, 13372, 7977, 20521)
    assert [table["Car", k] for k in ("easy", "moderate", "hard", "none")] == [5968, 9738, 6004, 7032]


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        (_make_label(top=100.0, bottom=140.01, occluded=0, truncated=0.15), 0),  # just over 40 px, bounds met
        (_make_label(top=100.0, bottom=140.0, occluded=0, truncated=0.0), 1),  # 40.00 px: not easy (devkit)
        (_make_label(occluded=1), 1),
        (_make_label(truncated=0.1500001), 1),
        (_make_label(top=100.0, bottom=125.01, occluded=1, truncated=0.3), 1),  # every moderate bound exactly
        (_make_label(truncated=0.3000001), 2),
        (_make_label(occluded=2), 2),
        (_make_label(top=100.0, bottom=125.01, occluded=2, truncated=0.5), 2),  # every hard bound exactly
        (_make_label(top=100.0, bottom=125.0), -1),  # 25.00 px: ignored by the devkit
        (_make_label(truncated=0.5000001), -1),
        (_make_label(occluded=3), -1),
        (_make_label(kind="DontCare", occluded=-1, truncated=-1.0), -1),
    ],
)
def test_difficulty_at_the_devkit_boundaries(label: Label, expected: int) -> None:
    assert difficulty(label) == expected
    assert difficulty_name(expected) == {0: "easy", 1: "moderate", 2: "hard", -1: "none"}[expected]


def test_labels_round_trip_and_format(kitti_sample: Path, tmp_path: Path) -> None:
    for frame_id in SAMPLE_IDS:
        path = kitti_sample / "training" / "label_2" / f"{frame_id}.txt"
        labels = read_labels(path)
        write_labels(tmp_path / f"{frame_id}.txt", labels)
        assert read_labels(tmp_path / f"{frame_id}.txt") == labels
        for line, label in zip(path.read_text().splitlines(), labels, strict=True):
            if label.type != "DontCare":  # KITTI writes DontCare's -1 without decimals
                assert format_label(label) == line.strip()
    boxes = labels_to_boxes(read_labels(kitti_sample / "training" / "label_2" / "000114.txt"))
    assert boxes.shape == (14, 7) and boxes.dtype == np.float64
    assert boxes[0].tolist() == [0.35, 1.73, 17.14, 3.38, 1.36, 1.69, -1.57]  # x y z l h w ry
    assert labels_to_boxes([]).shape == (0, 7)


def test_result_files_carry_scores(tmp_path: Path) -> None:
    det = Label(
        type="Car",
        truncated=-1.0,
        occluded=-1,
        alpha=0.123456,
        bbox=(1.5, 2.0, 30.25, 40.0),
        h=1.5,
        w=1.6,
        l=3.9,
        x=1.0,
        y=1.7,
        z=20.0,
        ry=-1.2345678,
        score=0.87654321,
    )
    path = tmp_path / "000001.txt"
    write_labels(path, [det])
    assert read_labels(path, allow_score=True) == [det]  # exact round trip
    with pytest.raises(DataError, match=r"000001.txt:1: expected 15 fields"):
        read_labels(path)
    assert read_labels(path, allow_score=True)[0].score == pytest.approx(0.87654321)


def test_read_split_real_imagesets(shared_data: Path) -> None:
    sets = shared_data / "kitti_splits" / "ImageSets"
    assert not (sets / "train.txt").read_bytes().endswith(b"\n")
    train, val = kitti.read_split(sets / "train.txt"), kitti.read_split(sets / "val.txt")
    assert (len(train), len(val)) == (3712, 3769)
    assert not set(train) & set(val)
    assert train[0] == "000000" and val[-1] == "007480"


# ----------------------------------------------------------------------------------------------------------
# frames


def test_load_frame_real(kitti_sample: Path) -> None:
    frame = load_frame(kitti_sample, "000114")
    n = len(frame.points_rect)
    assert n == 19463
    assert frame.points_rect.dtype == frame.intensity.dtype == frame.rgb.dtype == np.float32
    assert frame.points_rect.shape == (n, 3) and frame.intensity.shape == (n,) and frame.rgb.shape == (n, 3)
    assert frame.scores is None and frame.image_size == (1242, 375)
    assert 0.0 <= frame.rgb.min() and frame.rgb.max() <= 1.0 and frame.rgb.std() > 0.05
    assert (frame.points_rect[:, 2] > 0).all()
    assert [lb.type for lb in frame.labels].count("Car") == 8
    # the rgb of a point is the pixel it projects to
    image = kitti.read_image(kitti_sample / "training" / "image_2" / "000114.png")
    uv, _ = points_rect_to_image(frame.points_rect[:5].astype(np.float64), frame.calib)
    pixels = image[np.floor(uv[:, 1]).astype(int), np.floor(uv[:, 0]).astype(int)] / 255.0
    assert np.allclose(frame.rgb[:5], pixels, atol=1e-6)


def test_load_frame_reads_velodyne_reduced_when_no_full_scan(kitti_sample: Path) -> None:
    frame = load_frame(kitti_sample, "000008")
    size = (kitti_sample / "training" / "velodyne_reduced" / "000008.bin").stat().st_size
    assert len(frame.points_rect) == size // 16


@pytest.mark.parametrize("frame_id", ["000000", "000001", "000002", "000003", "000004", "000005"])
def test_painted_frames_load_with_scores(kitti_sample: Path, frame_id: str) -> None:
    painted = load_frame(kitti_sample, frame_id, painted=True)
    plain = load_frame(kitti_sample, frame_id)
    n = len(painted.points_rect)
    assert n > 15000
    assert painted.scores is not None
    assert painted.scores.shape == (n, 4) and painted.scores.dtype == np.float32
    assert painted.scores.min() >= 0.0 and painted.scores.max() <= 1.0
    # painted rows are rows of the real scan: every painted FOV point is a velodyne FOV point
    plain_rows = {row.tobytes() for row in plain.points_rect}
    assert all(row.tobytes() in plain_rows for row in painted.points_rect)
    assert n <= len(plain.points_rect)


def test_frame_ids_checks_files(kitti_sample: Path, tmp_path: Path) -> None:
    (tmp_path / "training").symlink_to(kitti_sample / "training")
    (tmp_path / "ImageSets").mkdir()
    (tmp_path / "ImageSets" / "val.txt").write_text("000000\n000008\n000134")
    assert kitti.frame_ids(tmp_path, "val") == ["000000", "000008", "000134"]
    with pytest.raises(DataError, match=r"val.txt:2: expected the files of frame 000008, missing .*painted"):
        kitti.frame_ids(tmp_path, "val", painted=True)
    (tmp_path / "ImageSets" / "bad.txt").write_text("000000\n000114\n000999\n")
    with pytest.raises(DataError, match=r"bad.txt:3: expected the files of frame 000999, missing training/"):
        kitti.frame_ids(tmp_path, "bad")


def test_test_frames_have_no_labels(kitti_sample: Path, tmp_path: Path) -> None:
    root = _copy_frame(kitti_sample, tmp_path, "000000", ("velodyne", "calib", "image_2"))
    frame = load_frame(root, "000000")
    assert frame.labels == [] and len(frame.points_rect) == 20285


def test_inspect_command_json(kitti_sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["inspect", str(kitti_sample), "000000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["points"] == 115384 and out["points_in_fov"] == 20285
    assert [(o["type"], o["difficulty"], o["points_inside"]) for o in out["objects"]] == [
        ("Pedestrian", "easy", 376)
    ]
    assert cli_main(["inspect", str(kitti_sample), "000114", "--json"]) == 0
    objects = json.loads(capsys.readouterr().out)["objects"]
    assert len(objects) == 14 and objects[-1] == {
        **objects[-1],
        "type": "DontCare",
        "difficulty": "none",
        "points_inside": 0,
    }
    assert objects[0]["points_inside"] > 100


def test_calib_round_trips_byte_for_byte(kitti_sample: Path, tmp_path: Path) -> None:
    for frame_id in SAMPLE_IDS:
        source = kitti_sample / "training" / "calib" / f"{frame_id}.txt"
        calib = kitti.read_calib(source)
        assert calib.P2.shape == (3, 4) and calib.R0_rect.shape == (3, 3) and calib.Tr_imu_to_velo is not None
        kitti.write_calib(tmp_path / f"{frame_id}.txt", calib)
        assert (tmp_path / f"{frame_id}.txt").read_bytes() == source.read_bytes()


def test_velodyne_write_read_round_trip(tmp_path: Path) -> None:
    points = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
    kitti.write_velodyne(tmp_path / "a.bin", points)
    assert (tmp_path / "a.bin").stat().st_size == 1600
    assert np.array_equal(kitti.read_velodyne(tmp_path / "a.bin"), points)


# ----------------------------------------------------------------------------------------------------------
# bad input: one DataError per case, naming the file (and line) and what was expected


def test_bin_size_not_multiple_of_16(tmp_path: Path) -> None:
    path = tmp_path / "000000.bin"
    path.write_bytes(b"\0" * 20)
    with pytest.raises(DataError, match=r"000000.bin: expected a multiple of 16 bytes .* got 20 bytes"):
        kitti.read_velodyne(path)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_points(tmp_path: Path, bad: float) -> None:
    points = np.ones((10, 4), dtype=np.float32)
    points[7, 1] = bad
    path = tmp_path / "000000.bin"
    points.tofile(path)
    with pytest.raises(DataError, match=r"000000.bin: expected finite values, point 7 \(of 10\)"):
        kitti.read_velodyne(path)


def _calib_lines(kitti_sample: Path) -> list[str]:
    return (kitti_sample / "training" / "calib" / "000000.txt").read_text().splitlines()


def test_calib_p2_with_11_numbers(kitti_sample: Path, tmp_path: Path) -> None:
    lines = _calib_lines(kitti_sample)
    assert lines[2].startswith("P2:")
    lines[2] = " ".join(lines[2].split()[:-1])
    (tmp_path / "c.txt").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"c.txt:3: expected 12 numbers after 'P2:', got 11"):
        kitti.read_calib(tmp_path / "c.txt")


def test_calib_missing_entry(kitti_sample: Path, tmp_path: Path) -> None:
    lines = [ln for ln in _calib_lines(kitti_sample) if not ln.startswith("Tr_velo_to_cam")]
    (tmp_path / "c.txt").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"c.txt: expected lines Tr_velo_to_cam:"):
        kitti.read_calib(tmp_path / "c.txt")


def test_calib_non_number(kitti_sample: Path, tmp_path: Path) -> None:
    lines = _calib_lines(kitti_sample)
    lines[4] = lines[4].replace("9.999128000000e-01", "O.9999", 1)
    (tmp_path / "c.txt").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"c.txt:5: expected numbers after 'R0_rect:', got 'O.9999'"):
        kitti.read_calib(tmp_path / "c.txt")


def test_calib_not_a_rotation(kitti_sample: Path, tmp_path: Path) -> None:
    lines = _calib_lines(kitti_sample)
    lines[4] = "R0_rect: 2 0 0 0 1 0 0 0 1"
    (tmp_path / "c.txt").write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"c.txt:5: expected R0_rect to be a rotation"):
        kitti.read_calib(tmp_path / "c.txt")


LABEL_LINE = "Car 0.00 0 -1.59 589.01 187.21 668.42 253.27 1.36 1.69 3.38 0.35 1.73 17.14 -1.57"


def test_label_wrong_field_count(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_text(LABEL_LINE + "\n" + LABEL_LINE.rsplit(" ", 1)[0] + "\n")
    with pytest.raises(DataError, match=r"l.txt:2: expected 15 fields, got 14"):
        read_labels(path)


def test_label_unknown_class(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_text(LABEL_LINE.replace("Car", "Bus") + "\n")
    with pytest.raises(DataError, match=r"l.txt:1: expected a class in Car, Van, .*, got 'Bus'"):
        read_labels(path)


def test_split_id_without_files(kitti_sample: Path, tmp_path: Path) -> None:
    root = _copy_frame(kitti_sample, tmp_path, "000000", ("velodyne", "calib", "image_2"))
    (root / "ImageSets").mkdir()
    (root / "ImageSets" / "train.txt").write_text("000000\n000001")
    with pytest.raises(
        DataError,
        match=r"ImageSets/train.txt:2: expected the files of frame 000001, missing "
        r"training/velodyne/000001.bin, training/calib/000001.txt",
    ):
        kitti.frame_ids(root, "train")


def test_split_malformed_id(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("000000\n12345\n")
    with pytest.raises(DataError, match=r"s.txt:2: expected a 6-digit frame id, got '12345'"):
        kitti.read_split(tmp_path / "s.txt")


def test_image_smaller_than_calib_implies(kitti_sample: Path, tmp_path: Path) -> None:
    root = _copy_frame(kitti_sample, tmp_path, "000000", ("velodyne", "calib", "label_2"))
    (root / "training" / "image_2").mkdir()
    Image.new("RGB", (612, 185)).save(root / "training" / "image_2" / "000000.png")  # half size
    expected = (
        r"image_2/000000.png: expected an image whose central half holds P2's principal point "
        r"\(604.1, 180.5\) px, got a 612x185 image"
    )
    with pytest.raises(DataError, match=expected):
        load_frame(root, "000000")


def test_image_rotated_against_calib(kitti_sample: Path) -> None:
    calib = kitti.read_calib(kitti_sample / "training" / "calib" / "000000.txt")
    check_image_matches_calib(calib, 1224, 370, "x.png")  # the real size passes
    with pytest.raises(DataError, match=r"x.png: .* got a 370x1224 image"):
        check_image_matches_calib(calib, 370, 1224, "x.png")


def test_painted_array_not_n_by_8(tmp_path: Path) -> None:
    np.save(tmp_path / "p.npy", np.zeros((5, 7)))
    with pytest.raises(DataError, match=r"p.npy: expected a painted array of shape \(N, 8\), got \(5, 7\)"):
        kitti.read_painted(tmp_path / "p.npy")


def test_painted_scores_out_of_range(tmp_path: Path) -> None:
    array = np.zeros((5, 8))
    array[3, 6] = 1.5
    np.save(tmp_path / "p.npy", array)
    with pytest.raises(DataError, match=r"p.npy: expected scores \(columns 4-7\) in \[0, 1\], row 3"):
        kitti.read_painted(tmp_path / "p.npy")


def test_painted_pickle_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "p.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"p.npy: expected a .npy array"):
        kitti.read_painted(tmp_path / "p.npy")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nothere.txt: expected a file, found none"):
        kitti.read_calib(tmp_path / "nothere.txt")


def test_numba_fov_mask_equals_the_numpy_matmul(kitti_sample: Path) -> None:
    rng = np.random.default_rng(0)
    for frame_id in ("000000", "000004", "000114"):
        calib = kitti.read_calib(kitti_sample / "training" / "calib" / f"{frame_id}.txt")
        width, height = kitti.image_size(kitti_sample / "training" / "image_2" / f"{frame_id}.png")
        points = kitti.read_velodyne(kitti_sample / "training" / "velodyne" / f"{frame_id}.bin")[:, :3]
        noise = rng.uniform(-80, 80, size=(200_000, 3)).astype(np.float32)
        for xyz in (points, noise):
            fast = fov_mask(xyz, calib, width, height)
            assert np.array_equal(fast, fov_mask_numpy(xyz, calib, width, height))
        assert 15_000 < fov_mask(points, calib, width, height).sum() < 25_000
