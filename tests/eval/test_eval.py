"""Tests of pgnn.eval: the official KITTI AP protocol, on hand-made cases and the 7,481 real label files."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pgnn.cli import main as cli_main
from pgnn.core.errors import DataError
from pgnn.data.kitti import read_split
from pgnn.data.labels import Label, read_labels, write_labels
from pgnn.eval.kitti import (
    CLASSES,
    DIFFICULTIES,
    ap_from_curves,
    evaluate,
    evaluate_dirs,
    ignored_ground_truth,
    labels_to_arrays,
    pr_curves,
)
from pgnn.eval.matching import score_thresholds
from pgnn.eval.report import format_table, write_curves

Frames = list[list[Label]]
BOX_METRICS = ("bbox", "bev", "3d")


# ------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def label_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 7,481 real KITTI training label files, extracted once per session."""
    out = tmp_path_factory.mktemp("kitti_labels")
    with tarfile.open(shared_data / "kitti_labels" / "training_label_2.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return out / "label_2"


@pytest.fixture(scope="module")
def all_gt(label_dir: Path) -> Frames:
    frames = [read_labels(p) for p in sorted(label_dir.glob("*.txt"))]
    assert len(frames) == 7481
    return frames


@pytest.fixture(scope="module")
def val_ids(shared_data: Path) -> list[str]:
    return read_split(shared_data / "kitti_splits" / "ImageSets" / "val.txt")


def as_detections(gt: Frames) -> Frames:
    """Ground truth as detections with score 1 (DontCare dropped; every other type kept)."""
    return [[dataclasses.replace(lab, score=1.0) for lab in frame if lab.type != "DontCare"] for frame in gt]


def gt_counts(gt: Frames) -> dict[tuple[str, int], int]:
    """Counted ground truth (the recall denominator) per class and difficulty."""
    arrays = labels_to_arrays(gt)
    return {(c, d): int(np.sum(ignored_ground_truth(arrays, c, d) == 0)) for c in CLASSES for d in range(3)}


def car(
    bbox: tuple[float, float, float, float],
    x: float,
    z: float,
    score: float | None = None,
    type: str = "Car",
    alpha: float = 0.0,
    ry: float = 0.0,
) -> Label:
    """A fully visible object: 3D box 3.9 x 1.6 x 1.5 m at (x, 1.6, z)."""
    return Label(
        type=type,
        truncated=0.0,
        occluded=0,
        alpha=alpha,
        bbox=bbox,
        h=1.5,
        w=1.6,
        l=3.9,
        x=x,
        y=1.6,
        z=z,
        ry=ry,
        score=score,
    )


def bbox_at(k: int, height: float = 60.0) -> tuple[float, float, float, float]:
    left = 20.0 + 150.0 * k
    return (left, 150.0, left + 100.0, 150.0 + height)


def r40_r11_of(precision_steps: list[float]) -> tuple[float, float]:
    """AP from the interpolated precision at recall steps 0, 1/40, ... (missing steps are 0)."""
    p = np.zeros(41)
    p[: len(precision_steps)] = precision_steps
    return p[1:].sum() / 40 * 100, p[::4].sum() / 11 * 100


# --------------------------------------------------------------------------------------- hand-made cases


def test_thresholds_follow_the_recall_steps() -> None:
    # 40 true positives of 80 ground truths: recall steps of 1/40 = 2/80 keep scores 0, 1, 3, 5, .., 39.
    scores = np.linspace(1.0, 0.01, 40)
    thresholds = score_thresholds(scores, 80, 41)
    np.testing.assert_array_equal(thresholds, scores[[0, *range(1, 40, 2)]])
    # Fewer than 41 ground truths: every true positive is a threshold.
    np.testing.assert_array_equal(score_thresholds(scores[:10], 10, 41), scores[:10])


def test_perfect_detections_with_few_boxes_reach_n_minus_1_over_40() -> None:
    gt = [[car(bbox_at(k), x=-8.0 + 4.0 * k, z=20.0) for k in range(5)] for _ in range(2)]  # 10 cars
    res = evaluate(gt, as_detections(gt), classes=("Car",))
    for metric in ("bbox", "aos", "bev", "3d"):
        for diff in DIFFICULTIES:
            assert res[f"Car/{metric}/{diff}/R40"] == pytest.approx(9 / 40 * 100, abs=1e-9)
            assert res[f"Car/{metric}/{diff}/R11"] == pytest.approx(3 / 11 * 100, abs=1e-9)


def test_every_other_box_of_80_hand_computed() -> None:
    # One car per frame, the detector finds frames 0, 2, 4, .. with falling scores and never fires wrongly:
    # recall 0.5 at precision 1. Thresholds sit at recall 1, 2, 4, 6, .., 40 of 80, i.e. curve steps 0..20.
    gt = [[car(bbox_at(0), x=0.0, z=20.0)] for _ in range(80)]
    dt = [[dataclasses.replace(f[0], score=1.0 - k / 100)] if k % 2 == 0 else [] for k, f in enumerate(gt)]
    res = evaluate(gt, dt, classes=("Car",))
    r40, r11 = r40_r11_of([1.0] * 21)
    assert (r40, r11) == (pytest.approx(50.0), pytest.approx(6 / 11 * 100))
    for metric in ("bbox", "aos", "bev", "3d"):
        assert res[f"Car/{metric}/moderate/R40"] == pytest.approx(r40, abs=1e-9)
        assert res[f"Car/{metric}/moderate/R11"] == pytest.approx(r11, abs=1e-9)


def _step_by_step_case() -> tuple[Frames, Frames]:
    """Four easy cars; five scored detections; plus objects every rule must ignore (see the test)."""
    gt = [[car(bbox_at(k), x=-9.0 + 6.0 * k, z=25.0, alpha=0.3) for k in range(4)]]
    a, b, c, d = (dataclasses.replace(g, score=None) for g in gt[0])
    dt = [
        [
            dataclasses.replace(a, score=0.9),  # TP, same heading
            car(bbox_at(5), x=40.0, z=60.0, score=0.8),  # FP
            dataclasses.replace(b, score=0.7, alpha=0.3 + math.pi / 2),  # TP, heading off by 90 deg
            dataclasses.replace(c, score=0.3, alpha=0.3 + math.pi),  # TP, heading reversed
            car(bbox_at(6), x=-40.0, z=60.0, score=0.2),  # FP below every threshold
        ]
    ]
    del d  # missed: a false negative
    return gt, dt


def test_small_case_step_by_step() -> None:
    # Pass 1: true-positive scores 0.9, 0.7, 0.3 of n_gt = 4; recall steps 1/40 apart keep all three.
    # Pass 2: threshold 0.9 -> TP 1, FP 0; 0.7 -> TP 2, FP 1 (0.8); 0.3 -> TP 3, FP 1 (0.2 is below).
    # Precision 1, 2/3, 3/4 -> interpolated 1, 3/4, 3/4. AOS: similarities 1, 1/2, 0 ->
    # 1/1, 1.5/3, 1.5/4 -> 1, 1/2, 3/8.
    gt, dt = _step_by_step_case()
    res = evaluate(gt, dt, classes=("Car",))
    ap = r40_r11_of([1.0, 0.75, 0.75])
    aos = r40_r11_of([1.0, 0.5, 0.375])
    assert ap == (pytest.approx(3.75), pytest.approx(100 / 11))
    for diff in DIFFICULTIES:
        for metric in BOX_METRICS:
            assert (res[f"Car/{metric}/{diff}/R40"], res[f"Car/{metric}/{diff}/R11"]) == pytest.approx(ap)
        assert (res[f"Car/aos/{diff}/R40"], res[f"Car/aos/{diff}/R11"]) == pytest.approx(aos)
    curves = pr_curves(gt, dt, classes=("Car",), metrics=("bbox",))
    np.testing.assert_allclose(curves["Car/bbox/easy"][:4], [1.0, 0.75, 0.75, 0.0])


def test_ignore_rules_leave_the_small_case_unchanged() -> None:
    gt, dt = _step_by_step_case()
    base = evaluate(gt, dt, classes=("Car",))
    dontcare_box = (700.0, 300.0, 800.0, 360.0)
    gt_more = [
        [
            *gt[0],
            Label(
                "DontCare", -1.0, -1, -10.0, dontcare_box, -1.0, -1.0, -1.0, -1000.0, -1000.0, -1000.0, -10.0
            ),
            car((900.0, 300.0, 1000.0, 360.0), x=12.0, z=40.0, type="Van"),
        ]
    ]
    dt_more = [
        [
            *dt[0],
            # inside the DontCare region: not a false positive
            car((710.0, 305.0, 790.0, 355.0), x=30.0, z=70.0, score=0.95),
            # on the Van: a neighbouring class, neither TP nor FP
            car((900.0, 300.0, 1000.0, 360.0), x=12.0, z=40.0, score=0.95),
            # lower than 25 px: ignored at every difficulty
            car((300.0, 400.0, 340.0, 420.0), x=-30.0, z=80.0, score=0.99),
            # other classes play no part in Car
            car(bbox_at(7), x=50.0, z=50.0, score=0.99, type="Pedestrian"),
        ]
    ]
    res = evaluate(gt_more, dt_more, classes=("Car",))
    image_keys = [k for k in base if "/bbox/" in k or "/aos/" in k]
    assert {k: res[k] for k in image_keys} == pytest.approx({k: base[k] for k in image_keys})
    # Without the DontCare label, the detection in its region is a false positive. DontCare regions only
    # count in 2D: the devkit compares BEV/3D boxes with the DontCare label's placeholder 3D fields.
    worse = evaluate([[g for g in gt_more[0] if g.type != "DontCare"]], dt_more, classes=("Car",))
    assert worse["Car/bbox/easy/R40"] < base["Car/bbox/easy/R40"]
    box_keys = [k for k in base if "/bev/" in k or "/3d/" in k]
    assert {k: res[k] for k in box_keys} == pytest.approx({k: worse[k] for k in box_keys})
    assert worse["Car/bev/easy/R40"] == pytest.approx(r40_r11_of([0.6, 0.6, 0.6])[0])  # 1/2, 2/4, 3/5


def test_minimum_height_is_exclusive_for_ground_truth() -> None:
    # The devkit ignores ground truth with height <= 40 px for easy: a 40.00 px car is moderate, not easy.
    gt = [[car(bbox_at(0, height=40.0), x=0.0, z=20.0)] for _ in range(50)]
    res = evaluate(gt, as_detections(gt), classes=("Car",), metrics=("bbox",))
    assert res["Car/bbox/easy/R40"] == 0.0
    assert res["Car/bbox/moderate/R40"] == pytest.approx(100.0)


def test_score_ties_pass_the_threshold_together() -> None:
    # All scores equal: TP, FP, TP at threshold 1 -> precision 2/3 at both thresholds (n_gt = 2).
    gt = [[car(bbox_at(0), x=0.0, z=20.0), car(bbox_at(2), x=8.0, z=20.0)]]
    dt = [
        [
            dataclasses.replace(gt[0][0], score=1.0),
            car(bbox_at(4), x=-20.0, z=50.0, score=1.0),
            dataclasses.replace(gt[0][1], score=1.0),
        ]
    ]
    res = evaluate(gt, dt, classes=("Car",), metrics=("bbox",))
    r40, r11 = r40_r11_of([2 / 3, 2 / 3])
    assert res["Car/bbox/easy/R40"] == pytest.approx(r40)
    assert res["Car/bbox/easy/R11"] == pytest.approx(r11)
    # Two detections of one car with tied scores: the first in the file is taken in pass 1, the larger overlap
    # in pass 2; the other is a false positive either way.
    dup = [
        [
            dataclasses.replace(gt[0][0], score=0.5, bbox=(22.0, 150.0, 122.0, 210.0)),
            dataclasses.replace(gt[0][0], score=0.5),
            dataclasses.replace(gt[0][1], score=0.5),
        ]
    ]
    res = evaluate(gt, dup, classes=("Car",), metrics=("bbox",))
    assert res["Car/bbox/easy/R40"] == pytest.approx(r40)


def test_invalid_alpha_drops_aos() -> None:
    gt, dt = _step_by_step_case()
    dt = [[dataclasses.replace(dt[0][0], alpha=-10.0), *dt[0][1:]]]
    res = evaluate(gt, dt, classes=("Car",))
    assert not any("/aos/" in k for k in res)
    assert res["Car/bbox/easy/R40"] == pytest.approx(3.75)


def test_no_detections_and_no_frames() -> None:
    gt, _ = _step_by_step_case()
    res = evaluate(gt, [[]])
    assert len(res) == 3 * 4 * 3 * 2
    assert set(res.values()) == {0.0}
    assert set(evaluate([], []).values()) == {0.0}


def test_bad_arguments() -> None:
    gt, dt = _step_by_step_case()
    with pytest.raises(ValueError, match="Truck"):
        evaluate(gt, dt, classes=("Truck",))
    with pytest.raises(ValueError, match="score"):
        evaluate(gt, gt)
    with pytest.raises(ValueError, match="frames"):
        evaluate(gt, [])


# ------------------------------------------------------------------------------------ the real label set


def test_perfect_detections_on_all_labels(all_gt: Frames) -> None:
    res = evaluate(all_gt, as_detections(all_gt))
    counts = gt_counts(all_gt)
    assert len(res) == 3 * 4 * 3 * 2
    for (cls, d), n in counts.items():
        assert n >= 41, (cls, d, n)  # every class and difficulty is big enough for 100
        for metric in ("bbox", "aos", "bev", "3d"):
            for sampling in ("R40", "R11"):
                assert res[f"{cls}/{metric}/{DIFFICULTIES[d]}/{sampling}"] == pytest.approx(100.0, abs=1e-9)


def test_every_other_box_dropped(all_gt: Frames) -> None:
    seen: dict[str, int] = {}
    kept_gt: Frames = []  # every other object of each type, in file order
    for frame in all_gt:
        kept_gt.append([])
        for lab in frame:
            seen[lab.type] = seen.get(lab.type, 0) + 1
            if seen[lab.type] % 2 == 1:
                kept_gt[-1].append(lab)
    res = evaluate(all_gt, as_detections(kept_gt), metrics=("bbox", "3d"))
    kept = gt_counts(kept_gt)
    for (cls, d), n in gt_counts(all_gt).items():
        recall = kept[(cls, d)] / n
        assert 0.4 < recall < 0.6
        for metric in ("bbox", "3d"):
            key = f"{cls}/{metric}/{DIFFICULTIES[d]}"
            # No false positives: precision is 1 at the T thresholds (recall steps 0 .. T - 1), then 0.
            # R40 = (T - 1) / 40 follows the recall reached; R11 counts the steps 0, 4, .., <= T - 1.
            r40, r11 = res[f"{key}/R40"], res[f"{key}/R11"]
            assert r40 == pytest.approx(100 * recall, abs=2.6)
            steps = round(r40 / 100 * 40)
            assert r40 == pytest.approx(steps / 40 * 100, abs=1e-9)
            assert r11 == pytest.approx((steps // 4 + 1) / 11 * 100, abs=1e-9)
            assert r11 > r40


def test_headings_flipped_by_pi(all_gt: Frames) -> None:
    def wrap(a: float) -> float:
        return (a + math.pi) % (2 * math.pi) - math.pi

    dt = [
        [
            dataclasses.replace(lab, score=1.0, alpha=wrap(lab.alpha + math.pi), ry=wrap(lab.ry + math.pi))
            for lab in frame
            if lab.type != "DontCare"
        ]
        for frame in all_gt
    ]
    res = evaluate(all_gt, dt)
    for key, value in res.items():
        if "/aos/" in key:
            assert value == pytest.approx(0.0, abs=1e-6)
        else:
            assert value == pytest.approx(100.0, abs=1e-9), key


def test_one_metre_sideways(all_gt: Frames) -> None:
    dt = as_detections(all_gt)
    dt = [[dataclasses.replace(lab, x=lab.x + 1.0) for lab in frame] for frame in dt]
    res = evaluate(all_gt, dt, classes=("Car", "Pedestrian"))
    for diff in DIFFICULTIES:
        assert res[f"Car/bbox/{diff}/R40"] == pytest.approx(100.0)  # the 2D box is unchanged
        # A car moved by 1 m keeps IoU <= (l - 1) / (l + 1) < 0.7 (l < 5.7 m): no match at all.
        assert res[f"Car/bev/{diff}/R40"] == 0.0
        assert res[f"Car/3d/{diff}/R40"] == 0.0
        # A pedestrian moved by 1 m rarely lands on a neighbour standing there.
        assert 0.0 < res[f"Pedestrian/bev/{diff}/R40"] < 0.1


# ------------------------------------------------------------------------------- the official devkit


def noisy_detections(gt: Frames, rng: np.random.Generator) -> Frames:
    """Detections exercising every rule: jitter, tied scores, swapped and lower-case types, low boxes,
    duplicates, detections in DontCare regions, false positives. Values rounded to 4 decimals so that a
    text round trip (the devkit reads files) keeps them exact."""
    types = ["Car", "Pedestrian", "Cyclist", "Van", "Person_sitting", "Truck", "car"]
    out = []
    for frame in gt:
        dt = []
        for lab in frame:
            if lab.type == "DontCare":
                if rng.random() < 0.5:
                    x1, y1, x2, y2 = lab.bbox
                    corners = (x1 + 1, y1 + 1, max(x2 - 1, x1 + 2), max(y2 - 1, y1 + 30))
                    box = tuple(round(v, 4) for v in corners)
                    dt.append(
                        car(
                            box,
                            x=0.0,
                            z=30.0,
                            type=types[rng.integers(3)],
                            score=round(float(rng.integers(1, 11)) / 10, 4),
                        )
                    )
                continue
            if rng.random() < 0.2:
                continue
            b = np.round(np.asarray(lab.bbox) + rng.normal(0, 3, 4), 4)
            if rng.random() < 0.15:
                b[3] = round(b[1] + rng.uniform(18, 42), 4)
            r = np.round(rng.normal(0, [0.2, 0.1, 0.3, 0.1, 0.2, 0.3]), 4)
            dt.append(
                dataclasses.replace(
                    lab,
                    type=lab.type if rng.random() > 0.2 else types[rng.integers(len(types))],
                    bbox=tuple(b),
                    x=round(lab.x + r[0], 4),
                    y=round(lab.y + r[1], 4),
                    z=round(lab.z + r[2], 4),
                    l=round(lab.l * (1 + r[3]), 4),
                    ry=round(lab.ry + r[4], 4),
                    alpha=round(lab.alpha + r[5], 4),
                    score=round(float(rng.integers(1, 21)) / 20, 4),
                )
            )
            if rng.random() < 0.1:
                dt.append(dataclasses.replace(dt[-1], x=round(dt[-1].x + 0.3, 4), score=dt[-1].score))
        for _ in range(int(rng.integers(0, 3))):
            left, top, height = (round(float(v), 4) for v in rng.uniform((0, 120, 15), (1100, 300, 120)))
            box = (left, top, round(left + 1.5 * height, 4), round(top + height, 4))
            dt.append(
                car(
                    box,
                    x=round(float(rng.uniform(-15, 15)), 4),
                    z=round(float(rng.uniform(5, 60)), 4),
                    type=types[rng.integers(3)],
                    score=round(float(rng.uniform()), 4),
                )
            )
        out.append(dt)
    return out


# The official devkit (cpp/evaluate_object.cpp, boost 1.54, precision printed with %.17g) on
# noisy_detections(first 400 val frames, default_rng(7)): R40 easy, moderate, hard, then R11 the same.
DEVKIT_REFERENCE: dict[str, tuple[float, ...]] = {
    "Car/bbox": (30.0837708193, 31.4885878913, 35.7833267365, 30.2687052103, 30.1677354557, 34.1976235084),
    "Car/aos": (29.5886272263, 30.8528274282, 35.075111707, 29.7695713121, 29.5708780668, 33.5393650975),
    "Car/bev": (2.9784268314, 5.845444439, 7.2067877816, 3.7055708916, 5.8976123767, 7.1761033931),
    "Car/3d": (0.7866889446, 1.4805194805, 1.8781512605, 1.2202222729, 1.7945690673, 2.2765469824),
    "Pedestrian/bbox": (
        19.1423840076,
        14.142041248,
        16.4690263194,
        19.4544806468,
        15.0056247296,
        17.3318196052,
    ),
    "Pedestrian/aos": (
        18.7870632034,
        13.8583890248,
        16.1320909336,
        19.0030920741,
        14.6940512749,
        16.9574291324,
    ),
    "Pedestrian/bev": (2.2960939078, 2.0200939324, 2.3209690464, 2.8910080381, 2.4935565398, 2.7952490124),
    "Pedestrian/3d": (1.3890048422, 1.4459894944, 1.4145130375, 1.4556990847, 2.0248422007, 1.4763064739),
    "Cyclist/bbox": (2.5007440476, 5.8933162648, 6.6289528141, 2.9626623377, 6.1125044729, 6.4883533219),
    "Cyclist/aos": (2.4001238117, 5.7413565004, 6.4677181213, 2.8261647642, 5.9623317464, 6.3344928344),
    "Cyclist/bev": (0.9766153537, 1.1472548991, 1.368034786, 1.3888888889, 1.5291160452, 1.6198441938),
    "Cyclist/3d": (0.2790088638, 0.4599635553, 0.4629115797, 0.3735990037, 0.9167303285, 0.9167303285),
}


def test_matches_the_official_devkit(label_dir: Path, val_ids: list[str]) -> None:
    gt = [read_labels(label_dir / f"{i}.txt") for i in val_ids[:400]]
    res = evaluate(gt, noisy_detections(gt, np.random.default_rng(7)))
    for key, expected in DEVKIT_REFERENCE.items():
        ours = [res[f"{key}/{d}/{s}"] for s in ("R40", "R11") for d in DIFFICULTIES]
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-8, err_msg=key)  # 10 decimals kept


# -------------------------------------------------------------------------------------- folders and CLI


@pytest.fixture()
def small_dirs(label_dir: Path, val_ids: list[str], tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """20 val frames: ground truth, and as predictions the ground truth with score 1, 5 files missing."""
    ids = val_ids[:20]
    gt_dir, pred_dir = tmp_path / "gt", tmp_path / "pred"
    for frame_id in ids:
        labels = read_labels(label_dir / f"{frame_id}.txt")
        write_labels(gt_dir / f"{frame_id}.txt", labels)
        if frame_id not in ids[:5]:
            write_labels(pred_dir / f"{frame_id}.txt", as_detections([labels])[0])
    return gt_dir, pred_dir, ids


def test_evaluate_dirs_missing_and_empty_files(small_dirs: tuple[Path, Path, list[str]]) -> None:
    gt_dir, pred_dir, ids = small_dirs
    res = evaluate_dirs(gt_dir, pred_dir, ids)
    gt = [read_labels(gt_dir / f"{i}.txt") for i in ids]
    dt = [[] for _ in ids[:5]] + as_detections(gt[5:])
    assert res == evaluate(gt, dt)
    assert 0.0 < res["Car/bbox/moderate/R11"] < 100.0
    for frame_id in ids[:5]:
        (pred_dir / f"{frame_id}.txt").write_text("")
    assert evaluate_dirs(gt_dir, pred_dir, ids) == res
    assert evaluate_dirs(gt_dir, pred_dir) == res  # default ids: every label file


def test_evaluate_dirs_bad_files(small_dirs: tuple[Path, Path, list[str]]) -> None:
    gt_dir, pred_dir, ids = small_dirs
    path = pred_dir / f"{ids[7]}.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], " ".join(lines[1].split()[:15]), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=rf"{ids[7]}\.txt:2: .*16"):
        evaluate_dirs(gt_dir, pred_dir, ids)
    path.write_text("Car 0 0 0 1 2 3 4 1.5 1.6 3.9 1 1.6 20 0 high\n")
    with pytest.raises(DataError, match=rf"{ids[7]}\.txt:1"):
        evaluate_dirs(gt_dir, pred_dir, ids)
    path.unlink()
    (gt_dir / f"{ids[3]}.txt").unlink()
    with pytest.raises(DataError, match=rf"{ids[3]}\.txt"):
        evaluate_dirs(gt_dir, pred_dir, ids)


def test_cli_writes_json_and_curves(
    small_dirs: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gt_dir, pred_dir, ids = small_dirs
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("\n".join(ids) + "\n")
    out_json, out_curves = tmp_path / "out" / "eval.json", tmp_path / "plots"
    argv = [
        "eval",
        str(gt_dir),
        str(pred_dir),
        "--ids",
        str(ids_file),
        "--json",
        str(out_json),
        "--curves",
        str(out_curves),
        "--classes",
        "Car",
        "Pedestrian",
        "--allow-missing",  # 5 result files are missing on purpose
    ]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads(out_json.read_text())
    assert results == evaluate_dirs(gt_dir, pred_dir, ids, classes=("Car", "Pedestrian"))
    assert f"{results['Car/3d/moderate/R40']:.2f}" in printed
    csvs = [f"{c}_{m}.csv" for c in ("Car", "Pedestrian") for m in ("bbox", "aos", "bev", "3d")]
    assert sorted(p.name for p in out_curves.iterdir()) == sorted([".pgnn-output", *csvs])  # + its marker
    with open(out_curves / "Car_3d.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["recall"]) for r in rows] == pytest.approx(np.arange(41) / 40)
    assert sum(float(r["moderate"]) for r in rows[1:]) / 40 * 100 == pytest.approx(
        results["Car/3d/moderate/R40"], abs=1e-4
    )
    assert cli_main(["eval", str(gt_dir), str(tmp_path / "nope")]) == 1  # DataError -> message, exit 1


def test_format_table_and_curve_files(tmp_path: Path) -> None:
    gt, dt = _step_by_step_case()
    curves = pr_curves(gt, dt, classes=("Car",))
    res = ap_from_curves(curves)
    table = format_table(res)
    lines = table.splitlines()
    assert "R40 moderate" in lines[0] and "R11 hard" in lines[0]
    assert [line.split()[:2] for line in lines[2:]] == [["Car", m] for m in ("bbox", "aos", "bev", "3d")]
    assert "3.75" in lines[2] and "9.09" in lines[2]
    assert "-" in format_table({"Car/bbox/easy/R40": 1.0}).splitlines()[2]
    paths = write_curves(curves, tmp_path)
    assert len(paths) == 4 and all(p.read_text().count("\n") == 42 for p in paths)
