"""``pgnn eval`` warnings: few ground-truth boxes (AP R40 then counts recall points), missing result files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pgnn.cli import main as cli_main
from pgnn.data.labels import Label, read_labels, write_labels
from pgnn.eval.kitti import evaluate, ground_truth_counts, labels_to_arrays
from pgnn.eval.report import few_ground_truth_warnings


def _car(z: float) -> Label:
    return Label("Car", 0.0, 0, 0.0, (100.0, 100.0, 200.0, 200.0), 1.5, 1.6, 3.9, 0.0, 1.7, z, 0.0)


@pytest.mark.parametrize("n", [1, 10, 39, 40, 41, 50])
def test_perfect_detections_score_n_minus_1_over_40_below_41_boxes(n: int) -> None:
    """The fact the warning states: with n <= 40 boxes, perfect detections get R40 = (n - 1) / 40."""
    gt = [[_car(10.0 + i % 5)] for i in range(n)]
    dt = [[replace(g[0], score=0.5 + i / (2 * n))] for i, g in enumerate(gt)]
    ap = evaluate(gt, dt, classes=["Car"], metrics=["3d"])["Car/3d/easy/R40"]
    assert ap == pytest.approx(min(n - 1, 40) / 40 * 100)


def test_ground_truth_counts_and_warning_lines() -> None:
    gt = labels_to_arrays([[_car(10.0), _car(20.0)], [replace(_car(30.0), occluded=2)]])
    counts = ground_truth_counts(gt, ["Car", "Pedestrian"])
    assert counts == {"Car": (2, 2, 3), "Pedestrian": (0, 0, 0)}
    lines = few_ground_truth_warnings({**counts, "Cyclist": (41, 50, 60)})
    assert lines == [
        "Car: only 2 easy, 2 moderate, 3 hard ground-truth boxes; with 40 or fewer, AP R40 is a count over "
        "its 40 recall points (perfect detections would score 2.5 / 2.5 / 5.0)",
        "Pedestrian: only 0 easy, 0 moderate, 0 hard ground-truth boxes; with 40 or fewer, AP R40 is a count "
        "over its 40 recall points (perfect detections would score 0.0 / 0.0 / 0.0)",
    ]
    assert few_ground_truth_warnings({"Car": (41, 45, 100)}) == []
    assert "100.0 / 100.0 / 12.5" in few_ground_truth_warnings({"Car": (41, 45, 6)})[0]


def test_eval_command_warns(kitti_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = ["000000", "000001", "000002", "000003"]
    gt, pred = tmp_path / "gt", tmp_path / "pred"
    for frame_id in ids:
        write_labels(
            gt / f"{frame_id}.txt", read_labels(kitti_sample / "training" / "label_2" / f"{frame_id}.txt")
        )
    write_labels(pred / "000003.txt", [])
    assert cli_main(["eval", str(gt), str(pred), "--allow-missing", "--classes", "Car", "Pedestrian"]) == 0
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("pgnn eval: warning: ")]
    assert warnings[0] == (
        f"pgnn eval: warning: 3 of 4 frames have no result file in {pred}; counted as no detections"
    )
    assert [w.split(": ")[2] for w in warnings[1:]] == ["Car", "Pedestrian"]  # one line per class
    assert all("AP R40 is a count over its 40 recall points" in w for w in warnings[1:])
    # short ids in --ids; no missing file -> no missing-file warning
    assert cli_main(["eval", str(gt), str(pred), "--ids", "3", "--classes", "Car"]) == 0
    err = capsys.readouterr().err
    assert "no result file" not in err and "pgnn eval: warning: Car: only " in err
