"""Painted points end to end on the real painted KITTI frames (``kitti_sample/training/painted_lidar``,
000000-000005): load with ``painted=True``, prepare, cache graphs with ``is`` features (reflectance + 4
PointPainting scores), train a tiny model through ``pgnn.pipeline.steps.train.train_and_export`` on samples
augmented on
the fly
(the painted_car_T3 recipe's original augmentation), resume it exactly, and predict with it.

The model is shrunk (one 16-wide GNN iteration) so the whole file runs in well under a minute on 2 cores.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.config.graphs import GRAPH_PRESETS
from pgnn.config.params import Params
from pgnn.core.shards import run_plan
from pgnn.data.frames import Frame
from pgnn.data.kitti import PAINTED_CLASSES
from pgnn.data.labels import read_labels
from pgnn.data.prepare import SCORE_COLUMNS, prepare_plan, read_prepared_dir
from pgnn.recipe.presets import apply_preset
from pgnn.training.dataset import AugmentedRecords

PAINTED = ("000000", "000001", "000002", "000003", "000004", "000005")
TINY_MODEL = {
    "point_mlp": [8, 16],
    "set_mlp": [16],
    "gnn_layers": [{"offset_mlp": [8, 3], "edge_mlp": [16], "update_mlp": [16]}],
    "cls_hidden": [16],
    "loc_hidden": [8],
}
TRAIN = {
    "optimizer": "adam",
    "initial_lr": 0.002,
    "batch_size": 2,
    "max_steps": 4,
    "max_epoch": None,
    "checkpoint_every": 2,
    "log_every": 2,
    "num_workers": 0,
    "device": "cpu",
}


def recipe(**train: object) -> object:
    return apply_preset(Params(preset="painted_car_T3", model=TINY_MODEL, train={**TRAIN, **train}))


@pytest.fixture(scope="module")
def pipeline(kitti_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Prepared painted frames and their cached training graphs."""
    from pgnn.pipeline.steps.graphs import graphs_step

    root = tmp_path_factory.mktemp("painted")
    prepared = root / "prepared" / "train"
    plan = prepare_plan(kitti_sample, PAINTED, prepared, painted=True, frames_per_shard=3)
    run_plan(plan, workers=1, log=None)
    graphs = root / "graphs" / "train"
    graphs_step(recipe(), "train", prepared, graphs, frames_per_shard=3, workers=1)
    return {"root": root, "prepared": prepared, "graphs": graphs}


def test_painted_frames_keep_their_scores_through_prepare(
    kitti_frame: Callable[..., Frame], pipeline: dict[str, Path]
) -> None:
    frames = read_prepared_dir(pipeline["prepared"])
    assert [f.frame_id for f in frames] == list(PAINTED)
    direct = kitti_frame("000003", painted=True)
    scores = frames[3].scores
    assert scores is not None and scores.shape == (len(direct.points_rect), len(PAINTED_CLASSES))
    np.testing.assert_array_equal(scores, direct.scores)
    np.testing.assert_array_equal(frames[3].intensity, direct.intensity)
    assert len(SCORE_COLUMNS) == len(PAINTED_CLASSES)
    # real PointPainting scores in [0, 1] that vary (the car column is not constant)
    assert scores.min() >= 0.0 and scores.max() <= 1.0 and scores[:, 2].std() > 0.01


def test_is_features_reach_the_cached_graphs(pipeline: dict[str, Path]) -> None:
    from pgnn.graphs.cache import GraphCache

    frames = {f.frame_id: f for f in read_prepared_dir(pipeline["prepared"])}
    cache = GraphCache(pipeline["graphs"])
    assert cache.frame_ids == list(PAINTED)
    for i in (0, 5):
        record = cache[i]
        frame = frames[cache.frame_ids[i]]
        want = np.column_stack([frame.intensity, frame.scores])  # (N0, 5)
        np.testing.assert_array_equal(record["features"], want)
        np.testing.assert_array_equal(record["vertex_coord_0"], frame.points_rect)


def test_augmented_painted_samples_carry_scores(pipeline: dict[str, Path]) -> None:
    r = recipe()
    src = AugmentedRecords(pipeline["prepared"], r.graph, r.targets, r.augment, seed=0)
    record = src.record(4, 1)
    feats = record["features"]  # (N0, 5)
    frame = src.frames[4]
    # rotation, flip and box shifts move points but drop none: the same attribute rows, moved
    assert not np.array_equal(record["vertex_coord_0"], frame.points_rect)
    want = np.column_stack([frame.intensity, frame.scores])
    np.testing.assert_array_equal(np.unique(feats, axis=0), np.unique(want, axis=0))
    assert feats.shape == want.shape


def _train(r: object, pipeline: dict[str, Path], name: str) -> Path:
    """The train stage's work on these samples (pgnn.pipeline.steps.train.train_and_export, with the test's
    folders): records, the loop, the exported model and the metric."""
    from pgnn.nn.checkpoint import export_model
    from pgnn.pipeline.steps.train import train_meta
    from pgnn.training.loop import train
    from pgnn.training.source import train_records

    out = pipeline["root"] / name
    records = train_records(r, pipeline["graphs"], pipeline["prepared"])
    final = train(
        records, r.model, r.train, r.loss, out / "checkpoints", live_dir=out / "live", meta=train_meta(r)
    )
    export_model(final, out / "model.pt")
    (out / "train.json").write_text((out / "live" / "metrics.json").read_text())
    return out / "model.pt"


def test_painted_training_resumes_exactly_and_predicts(
    kitti_frame: Callable[..., Frame], pipeline: dict[str, Path]
) -> None:
    from pgnn.inference.backends import load_detector
    from pgnn.inference.predict import predict_frame
    from pgnn.inference.results import write_detections

    straight = _train(recipe(), pipeline, "straight")
    _train(recipe(max_steps=2), pipeline, "resumed")  # killed after step 2 ...
    resumed = _train(recipe(), pipeline, "resumed")  # ... and run again with the full budget
    a = torch.load(straight, weights_only=True)
    b = torch.load(resumed, weights_only=True)
    assert a["step"] == b["step"] == 4
    assert a["input_features"] == "is" and a["model_config"]["input_dim"] == 5
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=0, atol=0, msg=k)
    assert (pipeline["root"] / "straight" / "train.json").exists()

    detector = load_detector(straight, "cpu")
    frame = kitti_frame("000005", painted=True)
    post = detector.card.with_postprocess(score_threshold=0.0)  # an untrained model: keep whatever it finds
    prediction = predict_frame(
        detector.network,
        detector.card,
        frame,
        GRAPH_PRESETS["car_runtime"],
        post,
        "cpu",
        np.random.default_rng(0),
    )
    detections, times = prediction.detections, prediction.times
    assert set(times) >= {"graph", "gnn", "nms"}
    assert detections.boxes.shape[1] == 7 and np.isfinite(detections.boxes).all()
    path = pipeline["root"] / "pred" / "000005.txt"
    path.parent.mkdir()
    write_detections(path, detections)
    assert len(read_labels(path, allow_score=True)) == len(detections.names)
