"""The own dataset format: synthetic KITTI frames exported to it and converted back give the same prepared
points and boxes; ``pgnn convert``'s errors; the camera-less evaluation; and an end-to-end run (prepare,
graphs, a few training steps, predict, evaluate) on a converted dataset. Synthetic data only (no KITTI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import cli

from pgnn.core.shards import run_plan
from pgnn.data.kitti import frame_ids, has_camera, read_split
from pgnn.data.labels import Label, labels_to_boxes, read_labels
from pgnn.data.own_format import export_kitti_to_own
from pgnn.data.prepare import prepare_plan, read_prepared_dir
from pgnn.data.synthetic.dataset import generate_dataset
from pgnn.eval.kitti import evaluate

IDS = ("000000", "000001", "000002", "000003")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 4-frame synthetic root, its own-format export (.pcd) and the KITTI root ``pgnn convert`` makes."""
    tmp = tmp_path_factory.mktemp("own")
    generate_dataset(tmp / "synth", len(IDS), seed=3)
    splits = {s: read_split(tmp / "synth" / "ImageSets" / f"{s}.txt") for s in ("train", "val")}
    export_kitti_to_own(tmp / "synth", IDS, tmp / "own", splits, suffix=".pcd", encoding="binary_compressed")
    assert cli(["convert", str(tmp / "own"), str(tmp / "kitti")])[0] == 0
    return {"dir": tmp, "synth": tmp / "synth", "own": tmp / "own", "kitti": tmp / "kitti"}


def _prepared(root: Path, out: Path) -> dict[str, object]:
    run_plan(prepare_plan(root, list(IDS), out, frames_per_shard=4), workers=1)
    return {f.frame_id: f for f in read_prepared_dir(out)}


def test_round_trip_gives_the_same_prepared_points_and_labels(converted: dict[str, Path]) -> None:
    tmp = converted["dir"]
    assert has_camera(converted["synth"]) and not has_camera(converted["kitti"])
    assert frame_ids(converted["kitti"], "val") == read_split(converted["synth"] / "ImageSets" / "val.txt")
    before = _prepared(converted["synth"], tmp / "prepared-synth")
    after = _prepared(converted["kitti"], tmp / "prepared-kitti")
    assert sorted(before) == sorted(after) == list(IDS)
    for fid in IDS:
        a, b = before[fid], after[fid]
        assert len(a.points_rect) == len(b.points_rect) > 1000
        np.testing.assert_allclose(b.points_rect, a.points_rect, atol=2e-5)  # float32 twice
        np.testing.assert_array_equal(b.intensity, a.intensity)
        objects = [lab for lab in a.labels if lab.type != "DontCare"]
        assert objects and [lab.type for lab in b.labels] == [lab.type for lab in objects]
        np.testing.assert_allclose(labels_to_boxes(b.labels), labels_to_boxes(objects), atol=1e-9)
        assert all(lab.bbox == (-1.0, -1.0, -1.0, -1.0) and lab.truncated == 0.0 for lab in b.labels)
        assert b.image_size == (0, 0)


def test_convert_layout_and_errors(converted: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    kitti = converted["kitti"]
    assert (kitti / "frame_names.txt").read_text().splitlines()[0] == "000000 000000"
    assert sorted(p.name for p in (kitti / "training").iterdir()) == ["calib", "label_2", "velodyne"]
    own = converted["dir"] / "own-bad"
    (own / "points").mkdir(parents=True)
    (own / "labels").mkdir()
    (own / "splits").mkdir()
    (own / "points" / "scan_a.bin").write_bytes(np.zeros((3, 4), "<f4").tobytes())
    (own / "labels" / "scan_a.json").write_text(json.dumps({"objects": [{"class": "Car", "box": [1, 2, 3]}]}))
    (own / "splits" / "train.txt").write_text("scan_a\n")
    assert cli(["convert", str(own), str(converted["dir"] / "out")])[0] == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pgnn convert: error: {own / 'labels' / 'scan_a.json'}: object 0: expected box")
    assert "\n" not in err and not (converted["dir"] / "out").exists()
    (own / "labels" / "scan_a.json").write_text(json.dumps({"objects": []}))
    (own / "splits" / "train.txt").write_text("scan_b\n")
    assert cli(["convert", str(own), str(converted["dir"] / "out")])[0] == 1
    assert "train.txt:1: expected a frame of points/, got 'scan_b'" in capsys.readouterr().err


def _label(bbox: tuple[float, float, float, float], score: float | None = None) -> Label:
    return Label("Car", 0.0, 0, 0.0, bbox, 1.5, 1.6, 3.9, 2.0, 1.6, 20.0, 0.0, score)


def test_evaluation_without_a_camera_is_bev_and_3d_only() -> None:
    no_image = (-1.0, -1.0, -1.0, -1.0)
    gt = [[_label(no_image)], [_label(no_image)]]
    dt = [[_label(no_image, 0.9)], [_label(no_image, 0.8)]]
    results = evaluate(gt, dt, classes=["Car"])
    assert {k.split("/")[1] for k in results} == {"bev", "3d"}
    assert results["Car/bev/moderate/R11"] > 0.0 and results["Car/3d/easy/R11"] > 0.0  # counted, matched
    # with an image, the same boxes have 0 px 2D boxes: the devkit's height rule ignores them all
    zero = (0.0, 0.0, 0.0, 0.0)
    with_image = evaluate(
        [[_label(zero)], [_label(zero)]], [[_label(zero, 0.9)], [_label(zero, 0.8)]], ["Car"]
    )
    assert {k.split("/")[1] for k in with_image} == {"bbox", "aos", "bev", "3d"}
    assert with_image["Car/bev/moderate/R11"] == 0.0


def test_end_to_end_on_a_converted_dataset(converted: dict[str, Path]) -> None:
    """The converted root through the pipeline's stages (the one wiring every driver uses): prepare, graphs,
    train, predict and evaluate, with BEV/3D AP only (no camera)."""
    from pgnn.pipeline.runner import run_in_order, upstream
    from pgnn.pipeline.stages import Layout

    project = converted["dir"] / "project"
    project.mkdir()
    (project / "kitti").symlink_to(converted["kitti"])
    data = {"root": "kitti", "frames_per_shard": 4, "workers": 1}
    # every candidate becomes a detection: 3 steps train no confident model, the files must still be right
    train, post = {"batch_size": 1, "max_steps": 3}, {"score_threshold": 0.0}
    params = {"preset": "small", "data": data, "train": train, "postprocess": post}
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    layout = Layout(project)
    run_in_order(layout, upstream(["evaluate"], "kitti"))
    val = read_split(converted["kitti"] / "ImageSets" / "val.txt")
    pred = layout.path("predictions", "val")
    detections = [lab for fid in val for lab in read_labels(pred / f"{fid}.txt", allow_score=True)]
    assert detections and all(lab.bbox == (-1.0, -1.0, -1.0, -1.0) for lab in detections)  # no image
    results = json.loads(layout.path("eval_metrics").read_text())
    assert {k.split("/")[1] for k in results} == {"bev", "3d"}
    assert all(0.0 <= v <= 100.0 for v in results.values())
