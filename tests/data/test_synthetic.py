"""Tests of the synthetic KITTI generator (pgnn/data/synthetic/) and ``pgnn synth``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pgnn import cli
from pgnn.core.boxes import boxes_to_image_2d, points_in_boxes
from pgnn.data import kitti
from pgnn.data.frames import check_image_matches_calib, load_frame, points_velo_to_rect
from pgnn.data.labels import difficulty, labels_to_boxes, read_labels
from pgnn.data.synthetic.calib import synthetic_calib
from pgnn.data.synthetic.config import CLASSES, SynthConfig
from pgnn.data.synthetic.dataset import (
    SynthFrame,
    generate_dataset,
    generate_frame,
    split_frame_ids,
    write_frame,
)
from pgnn.data.synthetic.labels import occlusion_level
from pgnn.data.synthetic.lidar import hdl64_elevations_deg, lidar_ray_directions
from pgnn.data.synthetic.primitives import BOX, CYLINDER, ELLIPSOID, Primitives
from pgnn.data.synthetic.raycast import cast_rays
from pgnn.data.synthetic.road import ground_height, sample_ground

SEED = 3
N_FRAMES = 6  # in memory; the first two are also written to disk by the CLI
W, H = 1242, 375


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synth") / "kitti"
    assert cli.main(["synth", str(root), "--frames", "2", "--seed", str(SEED)]) == 0
    return root


@pytest.fixture(scope="module")
def frames() -> list[SynthFrame]:
    return [generate_frame(i, SEED) for i in range(N_FRAMES)]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _label_object(frame: SynthFrame) -> dict[int, int]:
    """Label row -> object row, for the labels that are not DontCare."""
    return {o.label_index: j for j, o in enumerate(frame.objects) if o.label_index >= 0 and not o.dontcare}


# ----------------------------------------------------------------------------------------------------------
# layout, determinism


def test_dataset_has_kitti_layout(dataset: Path) -> None:
    for folder, ext in (("velodyne", "bin"), ("calib", "txt"), ("label_2", "txt"), ("image_2", "png"),
                        ("painted_lidar", "npy")):  # fmt: skip
        names = sorted(p.name for p in (dataset / "training" / folder).iterdir())
        assert names == [f"000000.{ext}", f"000001.{ext}"], folder
    assert sorted(p.name for p in (dataset / "ImageSets").iterdir()) == [
        "train.txt",
        "trainval.txt",
        "val.txt",
    ]
    assert kitti.frame_ids(dataset, "trainval", painted=True) == ["000000", "000001"]


def test_same_seed_writes_identical_bytes(dataset: Path, tmp_path: Path) -> None:
    generate_dataset(tmp_path / "again", 2, SEED)
    first, second = _files(dataset), _files(tmp_path / "again")
    assert len(first) == 14  # 2 frames x 5 files, 3 split files, the .pgnn-output marker
    assert first.keys() == second.keys()
    assert all(first[k] == second[k] for k in first)


def test_worker_processes_write_identical_bytes(dataset: Path, tmp_path: Path) -> None:
    generate_dataset(tmp_path / "pool", 2, SEED, workers=2)  # the synth stage's data.workers
    first, second = _files(dataset), _files(tmp_path / "pool")
    assert first.keys() == second.keys()
    assert all(first[k] == second[k] for k in first)


def test_frames_do_not_depend_on_dataset_size(dataset: Path, tmp_path: Path) -> None:
    generate_dataset(tmp_path / "one", 1, SEED, val_fraction=0.0)
    one = _files(tmp_path / "one")
    two = _files(dataset)
    frame_files = [k for k in one if k.startswith("training")]
    assert len(frame_files) == 5
    assert all(one[k] == two[k] for k in frame_files)


def test_in_memory_frame_is_what_is_written(dataset: Path, frames: list[SynthFrame]) -> None:
    for frame in frames[:2]:
        velodyne = dataset / "training" / "velodyne" / f"{frame.frame_id}.bin"
        assert velodyne.read_bytes() == frame.points_velo.astype("<f4").tobytes()
        image = kitti.read_image(dataset / "training" / "image_2" / f"{frame.frame_id}.png")
        np.testing.assert_array_equal(image, frame.image)


def test_another_seed_gives_another_frame(frames: list[SynthFrame]) -> None:
    other = generate_frame(0, SEED + 1)
    assert other.points_velo.shape != frames[0].points_velo.shape or not np.array_equal(
        other.points_velo, frames[0].points_velo
    )
    assert [lb.x for lb in other.labels] != [lb.x for lb in frames[0].labels]


def test_negative_seed_is_rejected() -> None:
    with pytest.raises(ValueError, match="seed"):
        generate_frame(0, -1)


# ----------------------------------------------------------------------------------------------------------
# points and boxes


def test_reader_finds_exactly_the_object_points_in_each_label_box(
    dataset: Path, frames: list[SynthFrame]
) -> None:
    checked_points = 0
    for frame in frames[:2]:
        loaded = load_frame(dataset, frame.frame_id)
        assert len(loaded.points_rect) == int(frame.fov.sum())
        owner_fov = frame.point_object_id[frame.fov]  # (K,) same rows, same order as the reader's
        rows = _label_object(frame)
        assert rows, "expected labelled objects"
        labels = [loaded.labels[r] for r in rows]
        inside = points_in_boxes(loaded.points_rect, labels_to_boxes(labels))  # (K, M)
        for column, obj in enumerate(rows.values()):
            np.testing.assert_array_equal(np.flatnonzero(inside[:, column]), np.flatnonzero(owner_fov == obj))
            checked_points += int(inside[:, column].sum())
    assert checked_points > 500


def test_every_object_box_holds_its_points_and_no_others_with_slack(frames: list[SynthFrame]) -> None:
    for frame in frames:
        boxes = np.stack([o.box_rect for o in frame.objects])
        rect = points_velo_to_rect(frame.points_velo[:, :3], frame.calib)
        shrunk = points_in_boxes(rect, boxes, margin=-0.005)  # (N, M)
        grown = points_in_boxes(rect, boxes, margin=0.01)  # (N, M)
        own = frame.point_object_id[:, None] == np.arange(len(boxes))[None, :]  # (N, M)
        assert not (own & ~shrunk).any(), "an object point lies within 5 mm of its box's faces or outside"
        assert not (grown & ~own).any(), "a foreign point lies inside (or within 1 cm of) an object's box"
        counts = own.sum(axis=0)
        assert [o.num_points for o in frame.objects] == counts.tolist()


def test_points_per_scan_and_in_view_are_kitti_like(frames: list[SynthFrame]) -> None:
    points = np.array([len(f.points_velo) for f in frames])
    in_view = np.array([int(f.fov.sum()) for f in frames])
    assert np.all((points >= 100_000) & (points <= 135_000)), points
    assert np.all((in_view >= 15_000) & (in_view <= 23_000)), in_view
    assert 17_000 <= in_view.mean() <= 21_000
    for frame in frames:
        assert frame.points_velo.dtype == np.float32
        r = frame.points_velo[:, 3]
        assert r.min() >= 0.0 and r.max() < 1.0
        assert np.allclose(r * 100.0, np.round(r * 100.0), atol=1e-3)  # quantised like KITTI's
        distance = np.linalg.norm(frame.points_velo[:, :3], axis=1)
        assert distance.min() > 2.0 and distance.max() <= 120.1


# ----------------------------------------------------------------------------------------------------------
# labels


def test_labels_parse_and_agree_with_their_boxes(dataset: Path) -> None:
    for frame_id in ("000000", "000001"):
        labels = read_labels(dataset / "training" / "label_2" / f"{frame_id}.txt")
        assert labels
        calib = kitti.read_calib(dataset / "training" / "calib" / f"{frame_id}.txt")
        for label in labels:
            assert label.type in (*CLASSES, "DontCare")
            left, top, right, bottom = label.bbox
            assert 0.0 <= left < right <= W - 1 and 0.0 <= top < bottom <= H - 1
            if label.type == "DontCare":
                assert (label.occluded, label.truncated, label.x, label.ry) == (-1, -1.0, -1000.0, -10.0)
                continue
            assert label.occluded in (0, 1, 2, 3)
            assert 0.0 <= label.truncated <= 1.0
            assert bottom - top >= 20.0  # smaller ones are DontCare
            expected_alpha = (label.ry - math.atan2(label.x, label.z) + math.pi) % (2 * math.pi) - math.pi
            assert abs(math.remainder(label.alpha - expected_alpha, 2 * math.pi)) <= 0.006
            box2d, truncation = boxes_to_image_2d(labels_to_boxes([label]), calib.P2, W - 1, H - 1)
            np.testing.assert_allclose(box2d[0], label.bbox, atol=0.006)
            assert abs(truncation[0] - label.truncated) <= 0.006
        ordered = [lb.type == "DontCare" for lb in labels]
        assert ordered == sorted(ordered)  # DontCare regions last, as in KITTI


def test_occlusion_truncation_and_classes_all_occur(frames: list[SynthFrame]) -> None:
    labels = [lb for f in frames for lb in f.labels]
    objects = [lb for lb in labels if lb.type != "DontCare"]
    assert {lb.occluded for lb in objects} == {0, 1, 2, 3}
    assert any(lb.truncated > 0.0 for lb in objects) and any(lb.truncated == 0.0 for lb in objects)
    assert {lb.type for lb in labels} == {*CLASSES, "DontCare"}
    levels = {difficulty(lb) for lb in objects}
    assert {0, 1, 2} <= levels


def test_occlusion_follows_visible_fraction(frames: list[SynthFrame]) -> None:
    assert [occlusion_level(v, 100) for v in (100, 80, 79, 40, 39, 10, 9, 0)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    assert occlusion_level(0, 0) == 3
    for frame in frames:
        for obj in frame.objects:
            if obj.label_index >= 0 and not obj.dontcare:
                level = frame.labels[obj.label_index].occluded
                fraction = obj.visible_fraction
                assert level == (
                    0 if fraction >= 0.8 else 1 if fraction >= 0.4 else 2 if fraction >= 0.1 else 3
                )


def test_objects_stand_on_the_ground_within_kitti_like_sizes(frames: list[SynthFrame]) -> None:
    for frame in frames:
        for obj in frame.objects:
            x, y, z, l, h, w, _ = obj.box_rect
            assert 5.0 - 1e-6 <= math.hypot(x, z) <= 80.0 + 3.0
            assert 0.8 <= y <= 2.6  # bottom about 1.65 m below the camera, give or take the slope
            assert {"Car": 3.0, "Van": 4.0, "Pedestrian": 0.45, "Cyclist": 1.45}[obj.kind] <= l <= 6.5
            assert 0.4 <= w <= 2.3 and 1.3 <= h <= 3.0


# ----------------------------------------------------------------------------------------------------------
# painted points, image, calib, splits


def test_painted_rows_are_the_points_in_view_with_scores(dataset: Path, frames: list[SynthFrame]) -> None:
    for frame in frames[:2]:
        painted = kitti.read_painted(dataset / "training" / "painted_lidar" / f"{frame.frame_id}.npy")
        np.testing.assert_array_equal(painted, frame.painted)
        np.testing.assert_array_equal(painted[:, :4], frame.points_velo[frame.fov].astype(np.float64))
        np.testing.assert_allclose(painted[:, 4:].sum(axis=1), 1.0, atol=1e-12)
        paint_index = {"Car": 2, "Van": 2, "Pedestrian": 3, "Cyclist": 1}
        expected = np.array([paint_index[o.kind] for o in frame.objects] + [0])[
            frame.point_object_id[frame.fov]
        ]
        assert np.mean(painted[:, 4:].argmax(axis=1) == expected) > 0.999
        assert len(load_frame(dataset, frame.frame_id, painted=True).points_rect) == len(painted)


def test_image_is_a_street_picture(frames: list[SynthFrame]) -> None:
    for frame in frames[:3]:
        image = frame.image.astype(np.float64)
        assert frame.image.shape == (H, W, 3) and frame.image.dtype == np.uint8
        top, bottom = image[:10].mean(axis=(0, 1)), image[-10:, 400:840].mean(axis=(0, 1))
        assert top[2] > top[0] + 15  # blue sky above (or a facade's shade: buildings are not blue)
        assert bottom.std() < 12 and bottom.mean() < 140  # grey asphalt below
        box = [
            frame.labels[o.label_index].bbox for o in frame.objects if o.label_index >= 0 and not o.dontcare
        ]
        assert box and image.std() > 20


def test_calib_is_kittis(dataset: Path) -> None:
    calib = kitti.read_calib(dataset / "training" / "calib" / "000000.txt")
    assert calib.P2[0, 0] == 721.5377 and calib.P2[0, 2] == 609.5593 and calib.P2[1, 2] == 172.854
    assert calib.P2[0, 3] == 44.85728
    check_image_matches_calib(calib, W, H, "image")


def test_split_files_partition_the_frames(dataset: Path) -> None:
    train = kitti.read_split(dataset / "ImageSets" / "train.txt")
    val = kitti.read_split(dataset / "ImageSets" / "val.txt")
    assert not set(train) & set(val) and train and val
    assert (
        sorted(train + val)
        == kitti.read_split(dataset / "ImageSets" / "trainval.txt")
        == ["000000", "000001"]
    )
    train, val = split_frame_ids(10, 0, 0.3)
    assert len(val) == 3 and sorted(train + val) == [f"{i:06d}" for i in range(10)]
    assert split_frame_ids(10, 0, 0.3) == (train, val)
    assert split_frame_ids(5, 0, 0.0)[1] == [] and split_frame_ids(5, 0, 1.0)[0] == []


# ----------------------------------------------------------------------------------------------------------
# sensor and ray caster on toy scenes


def test_hdl64_beams_and_rays() -> None:
    elevation = hdl64_elevations_deg()
    assert elevation.shape == (64,) and elevation[0] == 2.0 and abs(elevation[-1] + 24.33) < 1e-9
    assert np.all(np.diff(elevation) < 0)
    dirs = lidar_ray_directions(SynthConfig(), 0.0)
    assert dirs.shape == (64, 2250, 3)
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=-1), 1.0)


def _toy_ground() -> np.ndarray:
    ground = np.zeros(11)
    ground[0] = -1.73  # flat, 1.73 m below the sensor
    return ground


def _cast(prims: Primitives, dirs: np.ndarray, n_objects: int = 2) -> tuple[np.ndarray, ...]:
    return cast_rays(np.zeros(3), dirs[:, None, :], prims.arrays(), _toy_ground(), 100.0, n_objects)


def test_ray_caster_hits_each_primitive_at_its_surface() -> None:
    prims = Primitives()
    frame = np.concatenate([np.eye(3), -np.array([[10.0], [0.0], [0.0]])], axis=1)  # origin at x = 10
    prims.add(BOX, frame, (0.0, 0.0, 0.0), np.eye(3), (1.0, 1.0, 1.0), 0, 0.5, (1.0, 1.0, 1.0))
    frame_y = np.concatenate([np.eye(3), -np.array([[0.0], [10.0], [0.0]])], axis=1)  # origin at y = 10
    prims.add(CYLINDER, frame_y, (0.0, 0.0, 0.0), np.eye(3), (0.5, 2.0, 0.0), 1, 0.5, (1.0, 1.0, 1.0))
    frame_back = np.concatenate([np.eye(3), -np.array([[-10.0], [0.0], [0.0]])], axis=1)  # origin at x = -10
    prims.add(ELLIPSOID, frame_back, (0.0, 0.0, 0.0), np.eye(3), (2.0, 1.0, 1.0), -1, 0.5, (1.0, 1.0, 1.0))
    down = np.array([math.sqrt(0.5), 0.0, -math.sqrt(0.5)])
    dirs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], down, [0.0, -1.0, 0.1]])
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    t, hit, normal, expected = _cast(prims, dirs)
    np.testing.assert_allclose(t[:4], [9.0, 9.5, 8.0, 1.73 * math.sqrt(2.0)], atol=1e-9)
    assert hit.tolist() == [0, 1, 2, -1, -2]
    np.testing.assert_allclose(normal[:3], [[-1, 0, 0], [0, -1, 0], [1, 0, 0]], atol=1e-9)
    np.testing.assert_allclose(normal[3], [0, 0, 1], atol=1e-9)
    assert expected.tolist() == [1, 1]


def test_ray_caster_counts_hidden_objects_as_expected_not_first() -> None:
    prims = Primitives()
    for owner, x in ((0, 10.0), (1, 20.0)):
        frame = np.concatenate([np.eye(3), -np.array([[x], [0.0], [0.0]])], axis=1)
        prims.add(BOX, frame, (0.0, 0.0, 0.0), np.eye(3), (1.0, 1.0, 1.0), owner, 0.5, (1.0, 1.0, 1.0))
    t, hit, _, expected = _cast(prims, np.array([[1.0, 0.0, 0.0]]))
    assert hit.tolist() == [0] and t[0] == pytest.approx(9.0)
    assert expected.tolist() == [1, 1]


def test_ground_undulation_is_hit_on_its_surface() -> None:
    rng = np.random.default_rng(0)
    ground = sample_ground(rng, 1.73)
    dirs = lidar_ray_directions(SynthConfig(azimuth_step_deg=1.0), 0.3)
    t, hit, _, _ = cast_rays(np.zeros(3), dirs, Primitives().arrays(), ground, 120.0, 0)
    on_ground = hit == -1
    assert on_ground.sum() > 15_000  # of 23,040 rays: all but the upper lasers
    xyz = dirs.reshape(-1, 3)[on_ground] * t[on_ground, None]
    np.testing.assert_allclose(xyz[:, 2], ground_height(ground, xyz[:, 0], xyz[:, 1]), atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# config and command line


def test_config_is_validated() -> None:
    with pytest.raises(ValidationError):
        SynthConfig(cars=(5, 3))
    with pytest.raises(ValidationError):
        SynthConfig(unknown=1)  # type: ignore[call-arg]


def test_empty_scene_still_makes_a_valid_frame(tmp_path: Path) -> None:
    config = SynthConfig(cars=(0, 0), vans=(0, 0), pedestrians=(0, 0), cyclists=(0, 0),
                               distant_vehicles=(0, 0))  # fmt: skip
    frame = generate_frame(0, 0, config)
    assert frame.labels == [] and frame.objects == () and np.all(frame.point_object_id == -1)
    assert np.mean(frame.painted[:, 4:].argmax(axis=1) == 0) > 0.999
    write_frame(tmp_path, frame)
    loaded = load_frame(tmp_path, "000000", painted=True)
    assert loaded.labels == [] and len(loaded.points_rect) == int(frame.fov.sum())


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["synth", str(tmp_path / "x"), "--frames", "0"]) == 2
    assert "--frames" in capsys.readouterr().err
    assert cli.main(["synth", str(tmp_path / "x"), "--frames", "1", "--val-fraction", "2"]) == 2
    assert not (tmp_path / "x").exists()


def test_jittered_calib_keeps_boxes_exact(tmp_path: Path) -> None:
    frame = generate_frame(1, SEED, SynthConfig(calib_jitter_deg=0.5))
    assert not np.allclose(
        frame.calib.Tr_velo_to_cam, synthetic_calib(np.random.default_rng(0), 0.0).Tr_velo_to_cam
    )
    write_frame(tmp_path, frame)
    loaded = load_frame(tmp_path, frame.frame_id)  # read_calib checks the rotations
    rows = _label_object(frame)
    inside = points_in_boxes(loaded.points_rect, labels_to_boxes([loaded.labels[r] for r in rows]))
    owner_fov = frame.point_object_id[frame.fov]
    for column, obj in enumerate(rows.values()):
        np.testing.assert_array_equal(np.flatnonzero(inside[:, column]), np.flatnonzero(owner_fov == obj))
