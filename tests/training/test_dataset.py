"""Tests of pgnn.training.dataset (training records rebuilt on the fly) and its wiring into training.

Real KITTI frames (the ``kitti_sample`` fixture, 000000-000002) go through ``pgnn.data.prepare`` once per
module;
every record is built with the ``car`` training graph. The wiring tests at the end (params -> recipe, the
record source and run key of ``pgnn.pipeline.steps``, the ``gt_db`` step) sit here because this module is
what they
switch on.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.config.augment import ORIGINAL_CAR_AUGMENT, AugmentConfig
from pgnn.config.graphs import TargetsConfig
from pgnn.config.gt_sampling import GtSampleConfig
from pgnn.config.params import Params
from pgnn.config.training import TrainConfig
from pgnn.core.boxes import expand_boxes, points_in_boxes
from pgnn.core.errors import DataError
from pgnn.core.shards import run_plan
from pgnn.data.frames import Frame
from pgnn.data.gt_db import GtDatabase, build_gt_db, read_gt_db
from pgnn.data.labels import labels_to_boxes
from pgnn.data.prepare import PreparedFrames, prepare_plan, read_prepared_dir
from pgnn.graphs.records import graph_record
from pgnn.pipeline.steps.gt_db import gt_db_step
from pgnn.recipe.presets import PRESETS, apply_preset
from pgnn.training.batches import RecordDataset
from pgnn.training.dataset import (
    AugmentedRecords,
    augment_rng,
    augmented_record,
    point_columns,
)
from pgnn.training.schedule import micro_batch_plan
from pgnn.training.source import train_augments, train_records, train_run_key

FRAMES = ("000000", "000001", "000002")
RECIPE = PRESETS["car_T3"]
GRAPH = RECIPE.graph
TARGETS = RECIPE.targets
PAINTED_TARGETS = TargetsConfig(label_method="Car", input_features="is")


@pytest.fixture(scope="module")
def prepared(kitti_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "train"
    run_plan(prepare_plan(kitti_sample, FRAMES, out, frames_per_shard=2), workers=1, log=None)
    return out


@pytest.fixture(scope="module")
def frames(prepared: Path) -> list[Frame]:
    return read_prepared_dir(prepared)


@pytest.fixture(scope="module")
def gt_db(frames: list[Frame]) -> GtDatabase:
    return GtDatabase.from_table(build_gt_db(frames))


def assert_same_record(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def assert_record_layout(record: dict[str, np.ndarray], like: dict[str, np.ndarray]) -> None:
    """Same keys, dtypes and ranks as ``like``, and internally consistent row counts."""
    assert sorted(record) == sorted(like)
    for k in like:
        assert record[k].dtype == like[k].dtype, k
        assert record[k].ndim == like[k].ndim, k
        assert record[k].shape[1:] == like[k].shape[1:], k
    last = len(GRAPH.levels)
    assert record["features"].shape[0] == record["vertex_coord_0"].shape[0]
    n_out = record[f"vertex_coord_{last}"].shape[0]
    assert record["cls_labels"].shape == (n_out,) and record["valid_box"].shape == (n_out,)
    assert record["box_targets"].shape == (n_out, 7)


# ----------------------------------------------------------------------------------------------------------
# Records


def test_without_augmentation_the_record_is_the_cached_one(prepared: Path, frames: list[Frame]) -> None:
    src = AugmentedRecords(prepared, GRAPH, TARGETS, seed=3)
    assert not src.augments and len(src) == len(FRAMES)
    for i in (0, 2):
        src.set_epoch(5)  # no augmentation: the epoch changes nothing
        assert_same_record(src[i], graph_record(frames[i], GRAPH, TARGETS, 3))


def test_augmented_records_are_a_function_of_seed_epoch_and_frame(
    prepared: Path, frames: list[Frame]
) -> None:
    src = AugmentedRecords(prepared, GRAPH, TARGETS, ORIGINAL_CAR_AUGMENT, seed=7)
    assert src.augments
    e0 = src.record(1, 0)
    assert_same_record(e0, src.record(1, 0))
    src.set_epoch(0)
    assert_same_record(e0, src[1])
    # a fresh source (another process, a resumed run) builds the same sample
    fresh = AugmentedRecords(prepared, GRAPH, TARGETS, ORIGINAL_CAR_AUGMENT, seed=7)
    fresh.set_epoch(0)
    assert_same_record(e0, fresh[1])
    # another epoch, another seed: another sample of the same frame
    e1 = src.record(1, 1)
    assert e1["vertex_coord_0"].shape != e0["vertex_coord_0"].shape or not np.array_equal(
        e1["vertex_coord_0"], e0["vertex_coord_0"]
    )
    other_seed = AugmentedRecords(prepared, GRAPH, TARGETS, ORIGINAL_CAR_AUGMENT, seed=8).record(1, 0)
    assert not np.array_equal(other_seed["vertex_coord_1"], e0["vertex_coord_1"])
    assert_record_layout(e0, graph_record(frames[1], GRAPH, TARGETS, 0))
    assert str(e0["frame_id"]) == FRAMES[1]


def test_augmentation_moves_the_points_and_the_targets_follow(frames: list[Frame]) -> None:
    """Flip every scene: the points are the mirror image, and the vertices labelled Car, mirrored back, lie in
    the frame's own Car boxes (the boxes moved with the points)."""
    flip = AugmentConfig(steps=({"method": "random_flip_all", "flip_prob": 1.0},))
    frame = frames[1]
    plain = augmented_record(frame, GRAPH, TARGETS, AugmentConfig(), np.random.default_rng(0))
    flipped = augmented_record(frame, GRAPH, TARGETS, flip, np.random.default_rng(0))
    mirror = np.array([-1, 1, 1], np.float32)
    np.testing.assert_array_equal(flipped["vertex_coord_0"], plain["vertex_coord_0"] * mirror)
    cars = labels_to_boxes([lb for lb in frame.labels if lb.type == "Car"]).reshape(-1, 7)
    last = flipped[f"vertex_coord_{len(GRAPH.levels)}"]
    labelled = last[flipped["valid_box"]] * mirror  # (V, 3) back in the frame's own coordinates
    assert labelled.shape[0] >= 3
    assert points_in_boxes(labelled, expand_boxes(cars, (1.001, 1.001, 1.001))).any(axis=1).all()


def _tagged(frame: Frame) -> Frame:
    """``frame`` with attributes that are functions of where each point is: intensity = its range in the x-z
    plane, scores = (y, range, -y, 2 range). Rotations about the vertical axis through the sensor and flips
    keep range and y, so after them each point's attributes must still match its position."""
    xyz = frame.points_rect.astype(np.float64)
    rng_xz = np.hypot(xyz[:, 0], xyz[:, 2])
    scores = np.column_stack([xyz[:, 1], rng_xz, -xyz[:, 1], 2 * rng_xz]).astype(np.float32)
    return dataclasses.replace(frame, intensity=rng_xz.astype(np.float32), scores=scores)


def test_painted_attributes_follow_their_points_through_pasting_and_augmentation(frames: list[Frame]) -> None:
    tagged = [_tagged(f) for f in frames]
    db = GtDatabase.from_table(build_gt_db(tagged))
    assert db.attr_names[4:] == (
        "score_background",
        "score_bicycle_or_rider",
        "score_car",
        "score_pedestrian",
    )
    steps = AugmentConfig(
        steps=(
            {"method": "random_rotation_all", "yaw_std": 0.4},
            {"method": "random_flip_all", "flip_prob": 0.5},
            {"method": "random_drop", "drop_prob": 0.3},
        )
    )
    paste = GtSampleConfig(
        sample_counts={"Car": 4}, snap_to_ground=False, rotation_center="origin", overlap_mode="box"
    )
    src = AugmentedRecords(tagged, GRAPH, PAINTED_TARGETS, steps, seed=1, gt_sampling=paste, gt_db=db)
    for epoch in range(2):
        src.set_epoch(epoch)
        record = src[0]
        xyz = record["vertex_coord_0"].astype(np.float64)
        feats = record["features"]  # (N0, 5): intensity, 4 scores
        assert feats.shape == (xyz.shape[0], 5)
        assert xyz.shape[0] < 0.8 * len(frames[0].points_rect)  # points were dropped
        rng_xz = np.hypot(xyz[:, 0], xyz[:, 2])
        np.testing.assert_allclose(feats[:, 0], rng_xz, atol=2e-3)
        np.testing.assert_allclose(feats[:, 1], xyz[:, 1], atol=2e-3)
        np.testing.assert_allclose(feats[:, 2], rng_xz, atol=2e-3)
        np.testing.assert_allclose(feats[:, 3], -xyz[:, 1], atol=2e-3)
        np.testing.assert_allclose(feats[:, 4], 2 * rng_xz, atol=4e-3)


def test_pasted_objects_get_targets(frames: list[Frame], gt_db: GtDatabase) -> None:
    frame = frames[1]  # (000000 is a narrow street: few placements find their ground there)
    paste = GtSampleConfig(sample_counts={"Car": 6})
    src = AugmentedRecords([frame], GRAPH, TARGETS, seed=0, gt_sampling=paste, gt_db=gt_db)
    own = labels_to_boxes([lb for lb in frame.labels if lb.type != "DontCare"]).reshape(-1, 7)
    found = 0
    for epoch in range(3):
        record = src.record(0, epoch)
        last = record[f"vertex_coord_{len(GRAPH.levels)}"]
        car = record["valid_box"]
        outside = ~points_in_boxes(last[car], expand_boxes(own, (1.5, 1.5, 1.5))).any(axis=1)
        found += int(outside.sum())
    assert found > 0  # vertices labelled Car, with box targets, where the frame had no object


def test_point_columns_by_name_and_unnamed(frames: list[Frame]) -> None:
    from pgnn.data.points import PointSet, point_set_from_frame

    painted = _tagged(frames[0])
    points = point_set_from_frame(painted)
    i, rgb, s = point_columns(points)
    np.testing.assert_array_equal(i, painted.intensity)
    np.testing.assert_array_equal(rgb, painted.rgb)
    np.testing.assert_array_equal(s, painted.scores)
    reordered = PointSet(points.xyz, points.attrs[:, ::-1], points.attr_names[::-1])
    np.testing.assert_array_equal(point_columns(reordered)[2], painted.scores)
    _, _, none = point_columns(PointSet(points.xyz, points.attrs[:, :4]))
    assert none is None
    with pytest.raises(ValueError, match="intensity"):
        point_columns(PointSet(points.xyz, points.attrs[:, :2], ("intensity", "r")))


def test_gt_sampling_needs_a_matching_database(
    prepared: Path, gt_db: GtDatabase, frames: list[Frame]
) -> None:
    with pytest.raises(ValueError, match="gt_db"):
        AugmentedRecords(prepared, GRAPH, TARGETS, gt_sampling=GtSampleConfig())
    painted_db = GtDatabase.from_table(build_gt_db([_tagged(f) for f in frames]))
    src = AugmentedRecords(prepared, GRAPH, TARGETS, gt_sampling=GtSampleConfig(), gt_db=painted_db)
    with pytest.raises(DataError, match="attribute columns"):
        src[0]


def test_augment_rng_depends_on_each_input() -> None:
    draws = {
        (s, e, f): augment_rng(s, e, f).random()
        for s in (0, 1)
        for e in (0, 1)
        for f in ("000001", "000002", "frame-a")
    }
    assert len(set(draws.values())) == len(draws)
    assert augment_rng(0, 3, "000001").random() == augment_rng(0, 3, "000001").random()
    with pytest.raises(ValueError):
        augment_rng(0, -1, "000001")


# ----------------------------------------------------------------------------------------------------------
# Workers


def test_pickles_small_and_loads_lazily(prepared: Path, tmp_path: Path, frames: list[Frame]) -> None:
    from pgnn.data.gt_db import write_gt_db

    db_path = tmp_path / "gt_db.parquet"
    write_gt_db(db_path, build_gt_db(frames))
    src = AugmentedRecords(
        prepared, GRAPH, TARGETS, ORIGINAL_CAR_AUGMENT, seed=2, gt_sampling=GtSampleConfig(), gt_db=db_path
    )
    before = len(pickle.dumps(src))
    first = src.record(2, 4)  # loads a shard and the database
    assert src.frames._loaded and src._db is not None  # type: ignore[union-attr]
    blob = pickle.dumps(src)
    assert len(blob) == before < 20_000
    copy = pickle.loads(blob)
    assert not copy.frames._loaded and copy._db is None
    assert_same_record(first, copy.record(2, 4))


def test_prepared_frames_bounded_cache(prepared: Path, frames: list[Frame]) -> None:
    store = PreparedFrames(prepared, max_cached_shards=1)
    assert store.frame_ids == list(FRAMES) and len(store) == 3
    for i in (0, 2, 1, 0):
        assert store[i].frame_id == FRAMES[i]
        np.testing.assert_array_equal(store[i].points_rect, frames[i].points_rect)
        assert len(store._loaded) == 1
    with pytest.raises(DataError, match="manifest"):
        PreparedFrames(prepared.parent / "missing")


def test_forked_dataloader_workers_build_the_same_records(prepared: Path) -> None:
    """Items asked for as (epoch, i) by the training loop, built in two forked workers, equal the records
    built here, in any order."""
    src = AugmentedRecords(prepared, GRAPH, TARGETS, ORIGINAL_CAR_AUGMENT, seed=5)
    batches = [[(0, 2), (1, 0)], [(1, 2)], [(0, 1), (3, 2)]]
    loader = torch.utils.data.DataLoader(
        RecordDataset(src),
        batch_sampler=batches,
        collate_fn=list,
        num_workers=2,
        multiprocessing_context="fork",
    )
    got = [item for batch in loader for item in batch]
    want = [(i, src.record(i, e)) for batch in batches for e, i in batch]
    assert [i for i, _ in got] == [i for i, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert_same_record(a, b)


def test_training_plan_passes_the_epoch_and_resumes_at_the_same_items() -> None:
    cfg = TrainConfig(batch_size=2, max_steps=7, max_epoch=None, seed=3)
    whole = list(micro_batch_plan(5, cfg, 0, 1, 0, 0, 0, 7, with_epoch=True))
    assert {e for b in whole for e, _ in b} == {0, 1, 2, 3}  # 2 steps an epoch
    assert [[i for _, i in b] for b in whole] == list(micro_batch_plan(5, cfg, 0, 1, 0, 0, 0, 7))
    # a run resumed after step 3 (epoch 1, position 1) asks for exactly the remaining items
    assert list(micro_batch_plan(5, cfg, 0, 1, 3, 1, 1, 7, with_epoch=True)) == whole[3:]


# ----------------------------------------------------------------------------------------------------------
# Wiring: params -> recipe -> record source, run key, gt_db step


def test_params_sections_resolve_to_augment_and_gt_sampling() -> None:
    assert apply_preset(Params(preset="car_T3")).augment == ORIGINAL_CAR_AUGMENT
    assert apply_preset(Params(preset="ped_cyc_T3")).augment == ORIGINAL_CAR_AUGMENT
    assert apply_preset(Params(preset="painted_car_T3")).gt_sampling is None
    assert apply_preset(Params(preset="car_T3", augment={"enabled": False})).augment.steps == ()
    one = [{"method": "random_flip_all", "flip_prob": 0.25}]
    replaced = apply_preset(Params(preset="car_T3", augment={"steps": one})).augment
    assert [s.model_dump() for s in replaced.steps] == one
    unset = {"enabled": None, "steps": None}
    assert apply_preset(Params(preset="car_T3", augment=unset)).augment == ORIGINAL_CAR_AUGMENT
    on = apply_preset(Params(preset="car_T3", gt_sampling={"enabled": True, "sample_counts": {"Car": 5}}))
    assert on.gt_sampling == GtSampleConfig(sample_counts={"Car": 5})
    off = {"enabled": False, "max_tries": 3}
    assert apply_preset(Params(preset="car_T3", gt_sampling=off)).gt_sampling is None
    with pytest.raises(ValueError):
        apply_preset(Params(preset="car_T3", gt_sampling={"enabled": False, "max_tris": 3}))
    with pytest.raises(ValueError, match="unknown keys"):
        apply_preset(Params(preset="car_T3", augment={"step": one}))
    with pytest.raises(ValueError, match="unknown augmentation method"):
        apply_preset(Params(preset="car_T3", augment={"steps": [{"method": "random_spin"}]}))


def test_train_records_and_run_key_follow_the_augmentation(prepared: Path, tmp_path: Path) -> None:
    from pgnn.pipeline.steps.graphs import graphs_step

    graphs = tmp_path / "graphs"
    plain = apply_preset(Params(preset="car_T3", augment={"enabled": False}, train={"resample_graph": False}))
    graphs_step(plain, "train", prepared, graphs, frames_per_shard=2, workers=1)
    augmented = apply_preset(Params(preset="car_T3"))
    resampled = apply_preset(Params(preset="car_T3", augment={"enabled": False}))
    assert not train_augments(plain) and train_augments(augmented) and train_augments(resampled)
    from pgnn.graphs.cache import GraphCache

    cached = train_records(plain, graphs, prepared)
    assert isinstance(cached.source, GraphCache) and not cached.rebuilds
    records = train_records(augmented, graphs, prepared)
    assert isinstance(records.source, AugmentedRecords) and records.source.seed == augmented.train.seed
    assert records.rebuilds and train_records(resampled, graphs, prepared).rebuilds
    # KITTI 000000 holds only a Pedestrian: the Car recipe's class filter leaves it out
    assert records.indices == [1, 2] and cached.indices == [1, 2]
    everything = apply_preset(Params(preset="car_T3", train={"class_filter": False}))
    assert train_records(everything, graphs, prepared).indices == [0, 1, 2]
    with pytest.raises(ValueError, match="prepared_dir"):
        train_records(augmented, graphs)
    meta = {"input_frame": "rect"}
    two_steps = apply_preset(Params(preset="car_T3", augment={"steps": ORIGINAL_CAR_AUGMENT.steps[:2]}))
    pasting = apply_preset(Params(preset="car_T3", gt_sampling={"enabled": True}))
    keys = {
        train_run_key(r, graphs, meta, prepared) for r in (plain, augmented, two_steps, pasting, resampled)
    }
    assert len(keys) == 5
    assert train_run_key(augmented, graphs, meta, prepared) == train_run_key(
        apply_preset(Params(preset="car_T3")), graphs, meta, prepared
    )


def test_gt_db_step_writes_the_database_of_the_split(
    prepared: Path, frames: list[Frame], tmp_path: Path
) -> None:
    out = tmp_path / "gt_db" / "gt_db.parquet"
    counts = gt_db_step(prepared, out)
    db = read_gt_db(out)
    assert counts["Car"] > 0 and sum(counts.values()) == len(db)
    assert set(db.frame_ids) <= set(FRAMES)
    want = GtDatabase.from_table(build_gt_db(frames))
    np.testing.assert_array_equal(db.boxes, want.boxes)
    np.testing.assert_array_equal(db.xyz, want.xyz)
    assert not list(out.parent.glob(".tmp*"))  # written atomically, nothing left behind
