"""Tests for pgnn.data.gt_db and pgnn.data.gt_paste: the ground-truth database (build, parquet round trip) and
collision-free pasting."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgnn.config.gt_sampling import GtSampleConfig
from pgnn.core.boxes import expand_boxes, iou_bev, points_in_boxes
from pgnn.core.errors import DataError
from pgnn.data.frames import Frame
from pgnn.data.gt_db import GtDatabase, build_gt_db, read_gt_db, write_gt_db
from pgnn.data.gt_paste import estimate_ground_y, sample_and_paste
from pgnn.data.kitti import Calib
from pgnn.data.labels import Label, difficulty, labels_to_boxes
from pgnn.data.points import PointSet, point_set_from_frame, rotation_y

CALIB = Calib(
    P0=np.zeros((3, 4)),
    P1=np.zeros((3, 4)),
    P2=np.zeros((3, 4)),
    P3=np.zeros((3, 4)),
    R0_rect=np.eye(3),
    Tr_velo_to_cam=np.zeros((3, 4)),
)
SOURCE_GROUND = 1.6
SCENE_GROUND = 1.9


def label(
    kind: str, x: float, z: float, l: float, h: float, w: float, ry: float, y: float, occluded: int = 0
) -> Label:
    return Label(kind, 0.0, occluded, 0.0, (100.0, 100.0, 200.0, 180.0), h, w, l, x, y, z, ry)


def inside_points(rng: np.random.Generator, lb: Label, n: int) -> np.ndarray:
    """n points well inside a label's box. (n, 3)."""
    local = np.column_stack(
        [
            rng.uniform(-0.45, 0.45, n) * lb.l,
            -rng.uniform(0.1, 0.9, n) * lb.h,
            rng.uniform(-0.45, 0.45, n) * lb.w,
        ]
    )
    return local @ rotation_y(lb.ry).T + np.array([lb.x, lb.y, lb.z])


def ground_points(rng: np.random.Generator, y: float, spacing: float = 0.3) -> np.ndarray:
    """A noisy flat ground (y down: y is its height) in front of the sensor. (G, 3)."""
    gx, gz = np.meshgrid(np.arange(-20, 20, spacing), np.arange(3, 45, spacing))
    g = np.column_stack([gx.ravel(), np.full(gx.size, y), gz.ravel()])
    return g + rng.normal(0, 0.01, g.shape)


def make_frame(
    frame_id: str,
    objects: list[tuple[Label, int]],
    seed: int,
    id_offset: int,
    ground: float | None = None,
    painted: bool = False,
) -> Frame:
    """A frame whose intensity column is a unique point id (id_offset + row)."""
    rng = np.random.default_rng(seed)
    parts = [inside_points(rng, lb, n) for lb, n in objects]
    if ground is not None:
        parts.append(ground_points(rng, ground))
    xyz = np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 3), np.float32)
    n = xyz.shape[0]
    return Frame(
        frame_id=frame_id,
        points_rect=xyz,
        intensity=(id_offset + np.arange(n)).astype(np.float32),
        rgb=rng.random((n, 3)).astype(np.float32),
        scores=rng.dirichlet(np.ones(4), n).astype(np.float32) if painted else None,
        labels=[lb for lb, _ in objects],
        calib=CALIB,
        image_size=(1242, 375),
    )


def source_frames(painted: bool = False) -> list[Frame]:
    """Four frames of cars, pedestrians and cyclists on SOURCE_GROUND; point ids from 100000 * (k + 1)."""
    frames = []
    for k in range(4):
        rng = np.random.default_rng(100 + k)
        objects = [
            (
                label(
                    "Car",
                    rng.uniform(-12, 12),
                    rng.uniform(8, 35),
                    4.0,
                    1.5,
                    1.7,
                    rng.uniform(-3, 3),
                    SOURCE_GROUND,
                ),
                120,
            ),
            (
                label(
                    "Car",
                    rng.uniform(-12, 12),
                    rng.uniform(8, 35),
                    4.3,
                    1.6,
                    1.8,
                    rng.uniform(-3, 3),
                    SOURCE_GROUND,
                ),
                90,
            ),
            (
                label(
                    "Pedestrian", rng.uniform(-12, 12), rng.uniform(8, 35), 0.8, 1.8, 0.6, 0.3, SOURCE_GROUND
                ),
                40,
            ),
            (
                label("Cyclist", rng.uniform(-12, 12), rng.uniform(8, 35), 1.8, 1.7, 0.6, 1.0, SOURCE_GROUND),
                40,
            ),
            (label("DontCare", -1000, -1000, -1, -1, -1, -10, -1000), 0),
        ]
        frames.append(
            make_frame(
                f"00000{k}",
                objects,
                seed=k,
                id_offset=100000 * (k + 1),
                ground=SOURCE_GROUND,
                painted=painted,
            )
        )
    return frames


@pytest.fixture(scope="module")
def db() -> GtDatabase:
    return GtDatabase.from_table(build_gt_db(source_frames()))


def target_scene() -> tuple[PointSet, np.ndarray, tuple[str, ...]]:
    """Three parked cars on a ground at SCENE_GROUND plus a DontCare row; point ids 0 .. N-1."""
    objects = [
        (label("Car", -4.0, 12.0, 4.0, 1.5, 1.7, 0.1, SCENE_GROUND), 150),
        (label("Car", 3.5, 18.0, 4.2, 1.5, 1.7, -1.5, SCENE_GROUND), 150),
        (label("Car", -1.0, 27.0, 4.2, 1.5, 1.7, 1.4, SCENE_GROUND), 150),
        (label("DontCare", -1000, -1000, -1, -1, -1, -10, -1000), 0),
    ]
    frame = make_frame("000100", objects, seed=7, id_offset=0, ground=SCENE_GROUND)
    return point_set_from_frame(frame), labels_to_boxes(frame.labels), tuple(lb.type for lb in frame.labels)


def ids_of(points: PointSet) -> np.ndarray:
    return points.attrs[:, 0].astype(np.int64)


# ----------------------------------------------------------------------------------------------------------
# Building the database


def test_build_min_points_classes_and_dont_care() -> None:
    objects = [
        (label("Car", 0.0, 10.0, 4.0, 1.5, 1.7, 0.0, 1.6), 50),
        (label("Pedestrian", 5.0, 10.0, 0.8, 1.8, 0.6, 0.0, 1.6), 10),  # exactly min_points: left out
        (label("Pedestrian", -5.0, 10.0, 0.8, 1.8, 0.6, 0.0, 1.6), 11),
        (label("Van", 0.0, 20.0, 5.0, 2.0, 2.0, 0.5, 1.6), 30),
        (label("DontCare", -1000, -1000, -1, -1, -1, -10, -1000), 0),
    ]
    frame = make_frame("000007", objects, seed=0, id_offset=0)
    table = build_gt_db([frame], min_points=10)
    assert table.column("name").to_pylist() == ["Car", "Pedestrian", "Van"]
    assert table.column("num_points").to_pylist() == [50, 11, 30]
    assert table.column("object_index").to_pylist() == [0, 2, 3]
    only = build_gt_db([frame], min_points=10, classes=("Car", "Pedestrian"))
    assert only.column("name").to_pylist() == ["Car", "Pedestrian"]
    assert build_gt_db([frame], min_points=40).column("name").to_pylist() == ["Car"]


def test_crops_hold_the_points_inside_the_scaled_box() -> None:
    frames = source_frames()
    table = build_gt_db(frames)
    gt = GtDatabase.from_table(table)
    by_id = {f.frame_id: f for f in frames}
    assert len(gt) == 16 and gt.classes == ("Car", "Cyclist", "Pedestrian")
    for r in range(len(gt)):
        frame = by_id[str(gt.frame_ids[r])]
        lb = frame.labels[int(gt.object_index[r])]
        assert gt.names[r] == lb.type and gt.difficulty[r] == difficulty(lb)
        assert np.allclose(gt.boxes[r], labels_to_boxes([lb])[0])
        crop = gt.crop(r)
        ids = ids_of(crop) - 100000 * (int(frame.frame_id) + 1)
        # absolute coordinates and attributes of exactly the frame points inside the 1.1x box
        assert np.array_equal(crop.xyz, frame.points_rect[ids])
        assert np.array_equal(crop.attrs[:, 1:], frame.rgb[ids])
        inside = points_in_boxes(frame.points_rect, expand_boxes(gt.boxes[r : r + 1], (1.1, 1.1, 1.1)))[:, 0]
        assert np.array_equal(np.sort(ids), np.flatnonzero(inside))
        assert crop.xyz[:, 1].max() > SOURCE_GROUND - 0.05  # the ring of ground came along


def test_inconsistent_attributes_rejected() -> None:
    plain, painted = source_frames()[:1], source_frames(painted=True)[1:2]
    with pytest.raises(DataError, match="attribute columns"):
        build_gt_db(plain + painted)


@pytest.mark.parametrize("painted", [False, True])
def test_parquet_round_trip(tmp_path, painted: bool) -> None:
    table = build_gt_db(source_frames(painted=painted), min_points=10, box_scale=1.1)
    path = tmp_path / "gt_db" / "db.parquet"
    write_gt_db(path, table)
    assert [p.name for p in path.parent.iterdir()] == ["db.parquet"]  # no temporary file left
    loaded, direct = read_gt_db(path), GtDatabase.from_table(table)
    for name in ("names", "frame_ids", "object_index", "difficulty", "boxes", "offsets", "xyz", "attrs"):
        assert np.array_equal(getattr(loaded, name), getattr(direct, name)), name
    expected = ("intensity", "r", "g", "b") + (
        ("score_background", "score_bicycle_or_rider", "score_car", "score_pedestrian") if painted else ()
    )
    assert loaded.attr_names == expected and loaded.attrs.shape[1] == len(expected)
    assert loaded.box_scale == 1.1 and loaded.min_points == 10
    assert {k: len(v) for k, v in loaded.by_class.items()} == {"Car": 8, "Cyclist": 4, "Pedestrian": 4}
    assert np.array_equal(loaded.indices("Car", difficulties=[0]), loaded.by_class["Car"])
    assert loaded.indices("Car", difficulties=[2]).size == 0 and loaded.indices("Tram").size == 0


def test_empty_database_round_trip(tmp_path) -> None:
    table = build_gt_db([make_frame("000001", [], seed=0, id_offset=0, ground=1.6)])
    assert table.num_rows == 0
    write_gt_db(tmp_path / "empty.parquet", table)
    empty = read_gt_db(tmp_path / "empty.parquet")
    assert len(empty) == 0 and empty.xyz.shape == (0, 3)
    points, boxes, names = target_scene()
    out, out_boxes, out_names = sample_and_paste(
        points, boxes, names, empty, GtSampleConfig(), np.random.default_rng()
    )
    assert out_names == names and len(out) == len(points)


def test_read_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="found no file"):
        read_gt_db(tmp_path / "missing.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="junk.parquet"):
        read_gt_db(tmp_path / "junk.parquet")
    write_gt_db(tmp_path / "other.parquet", pa.table({"name": ["Car"]}))
    with pytest.raises(DataError, match="columns .* missing"):
        read_gt_db(tmp_path / "other.parquet")
    pq.write_table(build_gt_db(source_frames()), tmp_path / "unchecked.parquet")  # not by write_gt_db
    with pytest.raises(DataError, match="expected a checksummed ground-truth database"):
        read_gt_db(tmp_path / "unchecked.parquet")


def test_gt_db_bytes_are_deterministic_and_a_corrupted_one_is_an_error(tmp_path, flip_page) -> None:
    path = tmp_path / "db.parquet"
    write_gt_db(path, build_gt_db(source_frames()))
    write_gt_db(tmp_path / "again.parquet", build_gt_db(source_frames()))
    clean = path.read_bytes()
    assert clean == (tmp_path / "again.parquet").read_bytes()
    for column in ("xyz.list.element.list.element", "box.list.element", "name"):
        flip_page(path, column)
        with pytest.raises(DataError, match="it is corrupted: checksum mismatch") as err:
            read_gt_db(path)
        assert err.value.path == str(path)
        path.write_bytes(clean)
    assert len(read_gt_db(path)) == len(build_gt_db(source_frames()))


# ----------------------------------------------------------------------------------------------------------
# Ground estimate


def test_ground_estimate_ignores_clutter_and_outliers() -> None:
    rng = np.random.default_rng(0)
    ground = ground_points(rng, 1.8)
    bush = np.column_stack([rng.uniform(-2, 2, 3000), rng.uniform(0.5, 1.7, 3000), rng.uniform(8, 12, 3000)])
    outliers = np.array([[0.0, 2.5, 10.0], [0.5, 2.6, 10.5]])  # two stray returns below the ground
    xyz = np.concatenate([ground, bush, outliers])
    box = np.array([0.0, 0.0, 10.0, 4.0, 1.5, 1.8, 0.3])
    g = estimate_ground_y(xyz, box)
    assert g is not None and abs(g - 1.8) < 0.03
    only_bush = estimate_ground_y(bush, box)
    assert only_bush is not None and only_bush < 1.7  # no ground visible: the lowest clutter
    assert estimate_ground_y(xyz, np.array([50.0, 0, 10, 4, 1.5, 1.8, 0])) is None
    assert estimate_ground_y(outliers, box, min_points=3) is None


# ----------------------------------------------------------------------------------------------------------
# Pasting


@pytest.mark.parametrize("mode", ["box", "point", "box_and_point"])
def test_paste_without_collisions_on_the_ground(db: GtDatabase, mode: str) -> None:
    points, boxes, names = target_scene()
    cfg = GtSampleConfig(overlap_mode=mode, sample_counts={"Car": 6, "Pedestrian": 4, "Cyclist": 3})
    out, out_boxes, out_names = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(3))
    m = len(names)
    assert out_names[:m] == names and np.array_equal(out_boxes[:m], boxes)
    pasted = out_boxes[m:]
    assert len(pasted) >= 5
    assert set(out_names[m:]) <= {"Car", "Pedestrian", "Cyclist"}
    solid = out_boxes[[i for i, n in enumerate(out_names) if n != "DontCare"]]
    ids = ids_of(out)
    scene_point = ids < 100000
    if mode in ("box", "box_and_point"):
        iou = iou_bev(pasted, solid)  # (S, M')
        for s in range(len(pasted)):
            iou[s, m - 1 + s] = 0.0  # itself
        assert iou.max() == 0.0
    if mode in ("point", "box_and_point"):
        body = pasted.copy()
        body[:, 1] -= 0.2
        body[:, 4] -= 0.2
        assert not points_in_boxes(out.xyz[scene_point], body).any()
    # pasted points come from the database, once each, with their attributes
    pasted_ids = ids[~scene_point]
    assert len(np.unique(pasted_ids)) == pasted_ids.size
    lookup = {int(i): k for k, i in enumerate(ids_of(PointSet(db.xyz, db.attrs)))}
    rows = np.array([lookup[int(i)] for i in pasted_ids])  # KeyError: a point not from the database
    assert np.array_equal(out.attrs[~scene_point], db.attrs[rows])
    if mode != "box":
        # and enter no box but their own
        assert not points_in_boxes(out.xyz[~scene_point], boxes[:3]).any()
        assert points_in_boxes(out.xyz[~scene_point], pasted).sum(axis=1).max() <= 1
    # every pasted object sits on the target's ground, its crop's ground ring too
    assert np.allclose(pasted[:, 1], SCENE_GROUND, atol=0.03)
    for box in pasted:
        own = points_in_boxes(out.xyz[~scene_point], expand_boxes(box[None], (1.1, 1.1, 1.1)))[:, 0]
        assert abs(out.xyz[~scene_point][own, 1].max() - SCENE_GROUND) < 0.05
    # the scene's points under a pasted object were replaced (only other objects' points remain there)
    region = points_in_boxes(out.xyz[scene_point], expand_boxes(pasted, (1.1, 1.1, 1.1))).any(axis=1)
    assert not (region & ~points_in_boxes(out.xyz[scene_point], boxes[:3]).any(axis=1)).any()


def test_paste_is_deterministic_per_seed(db: GtDatabase) -> None:
    points, boxes, names = target_scene()
    cfg = GtSampleConfig(sample_counts={"Car": 4, "Pedestrian": 2})
    a = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(5))
    b = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(5))
    c = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(6))
    assert np.array_equal(a[0].xyz, b[0].xyz) and np.array_equal(a[0].attrs, b[0].attrs)
    assert np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert a[1].shape != c[1].shape or not np.allclose(a[1], c[1])


def test_fill_to_counts_existing_objects(db: GtDatabase) -> None:
    points, boxes, names = target_scene()
    for target, most in ((5, 2), (3, 0), (1, 0)):
        cfg = GtSampleConfig(sample_counts={"Car": target}, count_mode="fill_to", overlap_mode="box")
        _, _, out_names = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(0))
        assert out_names.count("Car") - 3 <= most
    cfg = GtSampleConfig(sample_counts={"Car": 50}, overlap_mode="box")  # more than the database holds
    _, _, out_names = sample_and_paste(points, boxes, names, db, cfg, np.random.default_rng(0))
    assert 3 < out_names.count("Car") <= 3 + len(db.by_class["Car"])


@pytest.mark.parametrize("center", ["origin", "box"])
def test_rotation_center(center: str) -> None:
    lb = label("Car", 6.0, 20.0, 4.0, 1.5, 1.7, 0.4, SOURCE_GROUND)
    one = GtDatabase.from_table(
        build_gt_db([make_frame("000009", [(lb, 80)], seed=1, id_offset=100000, ground=SOURCE_GROUND)])
    )
    points, boxes, names = target_scene()
    far = PointSet(points.xyz[ids_of(points) >= 450], points.attrs[ids_of(points) >= 450], points.attr_names)
    cfg = GtSampleConfig(sample_counts={"Car": 1}, rotation_center=center, yaw_std=0.3, overlap_mode="box")
    out, out_boxes, _ = sample_and_paste(far, np.zeros((0, 7)), (), one, cfg, np.random.default_rng(2))
    assert out_boxes.shape == (1, 7)
    new, old = out_boxes[0], one.boxes[0]
    delta = new[6] - old[6]
    assert abs(delta) > 1e-3 and np.allclose(new[3:6], old[3:6])
    crop = out.xyz[ids_of(out) >= 100000].astype(np.float64)
    source = one.crop(0).xyz.astype(np.float64)
    if center == "box":
        assert np.allclose(new[[0, 2]], old[[0, 2]])
        pivot = old[[0, 2]]
    else:
        assert np.isclose(np.hypot(new[0], new[2]), np.hypot(old[0], old[2]))
        pivot = np.zeros(2)
    # the crop turned rigidly by the box's yaw change about the pivot
    expect = (source[:, [0, 2]] - pivot) @ rotation_y(delta)[np.ix_([0, 2], [0, 2])].T + pivot
    assert np.allclose(crop[:, [0, 2]], expect, atol=1e-4)
    assert np.allclose(crop[:, 1] - source[:, 1], SCENE_GROUND - SOURCE_GROUND, atol=0.03)


def test_require_ground(db: GtDatabase) -> None:
    nothing = PointSet(np.zeros((1, 3)) + 500.0, np.zeros((1, 4)), ("intensity", "r", "g", "b"))
    cfg = GtSampleConfig(sample_counts={"Car": 3}, overlap_mode="box")
    _, boxes, _ = sample_and_paste(nothing, np.zeros((0, 7)), (), db, cfg, np.random.default_rng(0))
    assert boxes.shape == (0, 7)  # no ground anywhere: every try fails
    free = cfg.model_copy(update={"require_ground": False})
    _, boxes, _ = sample_and_paste(nothing, np.zeros((0, 7)), (), db, free, np.random.default_rng(0))
    assert len(boxes) == 3 and np.allclose(boxes[:, 1], SOURCE_GROUND)  # kept the source height
    off = cfg.model_copy(update={"snap_to_ground": False})
    _, boxes, _ = sample_and_paste(nothing, np.zeros((0, 7)), (), db, off, np.random.default_rng(0))
    assert len(boxes) == 3


def test_attribute_mismatch_rejected(db: GtDatabase) -> None:
    points, boxes, names = target_scene()
    painted = PointSet(points.xyz, np.zeros((len(points), 8)))
    with pytest.raises(ValueError, match="attribute columns"):
        sample_and_paste(painted, boxes, names, db, GtSampleConfig(), np.random.default_rng(0))


def test_config_is_strict() -> None:
    with pytest.raises(ValueError):
        GtSampleConfig(overlap_mode="volume")
    with pytest.raises(ValueError):
        GtSampleConfig(sample_rate={"Car": 1})


# ----------------------------------------------------------------------------------------------------------
# Real KITTI frames


def test_real_frames(kitti_frame) -> None:
    frames = [kitti_frame(f) for f in ("000008", "000114", "000134")]
    table = build_gt_db(frames)
    gt = GtDatabase.from_table(table)
    expected = 0
    for f in frames:
        boxes = labels_to_boxes(f.labels)
        counts = points_in_boxes(f.points_rect, expand_boxes(boxes, (1.1, 1.1, 1.1))).sum(axis=0)
        expected += sum(1 for lb, c in zip(f.labels, counts, strict=True) if lb.type != "DontCare" and c > 10)
    assert len(gt) == expected > 10
    target = kitti_frame("000003")
    points = point_set_from_frame(target)
    boxes = labels_to_boxes(target.labels)
    names = tuple(lb.type for lb in target.labels)
    cfg = GtSampleConfig(sample_counts={"Car": 8, "Pedestrian": 4, "Cyclist": 4})
    out, out_boxes, out_names = sample_and_paste(points, boxes, names, gt, cfg, np.random.default_rng(0))
    m = len(names)
    assert len(out_names) > m
    solid = np.array([n != "DontCare" for n in out_names])
    iou = iou_bev(out_boxes[solid], out_boxes[solid])
    assert iou[~np.eye(len(iou), dtype=bool)].max() == 0.0
    # each pasted object stands on the ground that the target frame shows around it
    for box in out_boxes[m:]:
        ground = estimate_ground_y(points.xyz, box, footprint_scale=1.5)
        assert ground is not None and abs(box[1] - ground) < 0.15


def test_paste_keeps_neighbour_points() -> None:
    """A pasted object's scaled box may reach into a neighbour's box; the neighbour keeps its points."""
    source = label("Car", 4.1, 20.0, 4.0, 1.5, 1.7, 0.0, SCENE_GROUND)  # 0.1 m behind the scene's car
    one = GtDatabase.from_table(
        build_gt_db([make_frame("000010", [(source, 80)], seed=2, id_offset=100000, ground=SCENE_GROUND)])
    )
    rng = np.random.default_rng(0)
    car = np.array([0.0, SCENE_GROUND, 20.0, 4.0, 1.5, 1.7, 0.0])
    local = rng.uniform(-0.5, 0.5, (400, 3)) * np.array([4.0, 1.5, 1.7]) * 0.999 - np.array([0.0, 0.75, 0.0])
    xyz = np.concatenate([local + car[:3], ground_points(rng, SCENE_GROUND)])
    points = PointSet(xyz, np.column_stack([np.arange(len(xyz)), np.zeros((len(xyz), 3))]))
    cfg = GtSampleConfig(sample_counts={"Car": 1}, overlap_mode="box", rotation_center="box", yaw_std=0.0)
    out, out_boxes, _ = sample_and_paste(points, car[None], ("Car",), one, cfg, np.random.default_rng(0))
    assert len(out_boxes) == 2
    reach = points_in_boxes(xyz[:400], expand_boxes(out_boxes[1:], (1.1, 1.1, 1.1)))[:, 0]
    assert reach.sum() > 5  # the pasted region does reach into the neighbour
    assert set(range(400)) <= set(ids_of(out).tolist())


def test_point_mode_keeps_crops_out_of_empty_boxes() -> None:
    """A labelled box with no points in it (far, occluded) still blocks crop points in "point" mode."""
    source = label("Car", 2.0, 20.0, 4.0, 1.5, 1.7, 0.0, SCENE_GROUND)
    one = GtDatabase.from_table(
        build_gt_db([make_frame("000011", [(source, 80)], seed=3, id_offset=100000, ground=SCENE_GROUND)])
    )
    rng = np.random.default_rng(0)
    ground = ground_points(rng, SCENE_GROUND)
    points = PointSet(ground, np.column_stack([np.arange(len(ground)), np.zeros((len(ground), 3))]))
    empty_car = np.array([[0.0, SCENE_GROUND, 20.0, 4.0, 1.5, 1.7, 0.0]])  # overlaps the source's place
    cfg = GtSampleConfig(sample_counts={"Car": 1}, overlap_mode="point", rotation_center="box", yaw_std=0.0)
    _, out_boxes, _ = sample_and_paste(points, empty_car, ("Car",), one, cfg, np.random.default_rng(0))
    assert len(out_boxes) == 1
    lenient = cfg.model_copy(update={"max_pasted_points_in_boxes": 10**6})
    _, out_boxes, _ = sample_and_paste(points, empty_car, ("Car",), one, lenient, np.random.default_rng(0))
    assert len(out_boxes) == 2
