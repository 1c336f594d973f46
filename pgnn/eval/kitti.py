"""The official KITTI object-detection evaluation: 2D (bbox), orientation (AOS), bird's-eye (BEV) and 3D AP.

A faithful reimplementation of the KITTI object devkit's ``cpp/evaluate_object.cpp`` (the 3D benchmark
version, 41 recall samples), rule for rule:

- Classes and overlaps: Car needs IoU > 0.7, Pedestrian and Cyclist > 0.5, for bbox, BEV and 3D alike.
- Difficulties (easy, moderate, hard): a ground truth counts when occlusion <= 0 / 1 / 2, truncation
  <= 0.15 / 0.3 / 0.5 and 2D height > 40 / 25 / 25 px (the 3D devkit ignores ``height <= MIN_HEIGHT``; the
  older 2D-only devkit had ``<``); others of the class are ignored (a detection matched to them is neither
  TP nor FP). Van is ignored for Car and
  Person_sitting for Pedestrian. A detection whose 2D box is lower than 40 / 25 / 25 px is ignored, whatever
  its type (it may still absorb a ground truth, as in the devkit).
- No camera (a LiDAR-only dataset, ``pgnn convert``): a box whose 2D box is ``-1 -1 -1 -1`` has no image, so
  the height rule does not apply to it; when no ground truth has a 2D box, only BEV and 3D AP are computed.
- DontCare: an unmatched detection covering a DontCare box by more than the class overlap (intersection
  over the detection's area) is not a false positive. Only for bbox/AOS: the devkit measures BEV/3D overlap
  with the DontCare label's placeholder 3D fields (-1000 m away, negative size), which never overlap.
- Thresholds: pass 1 matches each ground truth to its highest-scoring candidate and collects the true-positive
  scores; ``getThresholds`` picks at most 41 of them, one per recall step of 1/40.
- Pass 2, per threshold: each ground truth takes the candidate of largest overlap; precision = TP / (TP + FP),
  AOS = sum over TPs of (1 + cos(alpha_gt - alpha_dt)) / 2 / (TP + FP) (bbox only, and only when no detection
  has alpha = -10, the devkit's "no orientation" value). Both are interpolated as max over higher recall.
- AP: R40 = mean of the 41-point curve at indices 1..40 (recall 1/40 .. 1); R11 = mean at indices 0, 4, .., 40
  (recall 0, 0.1, .., 1). With n < 41 ground-truth boxes, perfect detections reach R40 = (n - 1) / 40.
- BEV: rotated-rectangle IoU of (x, z, l, w, ry) on the ground plane; 3D: BEV intersection x height overlap
  over union volume. Detections use the same label fields as the ground truth.

Deviations, all on inputs the devkit does not define: a class without detections scores 0 (the devkit skips
it); a threshold with TP + FP = 0 gives precision 0 (the devkit divides by zero); boxes with a non-positive
l, w (BEV) or h (3D) never overlap (the devkit hands them to boost::geometry as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import pgnn.eval.matching as matching
from pgnn.core.errors import DataError
from pgnn.core.progress import track
from pgnn.data.labels import Label, read_labels

CLASSES: tuple[str, ...] = ("Car", "Pedestrian", "Cyclist")
METRICS: tuple[str, ...] = ("bbox", "aos", "bev", "3d")
DIFFICULTIES: tuple[str, ...] = ("easy", "moderate", "hard")
MIN_OVERLAP: dict[str, float] = {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5}
NEIGHBOUR_CLASS: dict[str, str] = {"Car": "Van", "Pedestrian": "Person_sitting"}
MIN_HEIGHT: tuple[float, ...] = (40.0, 25.0, 25.0)
MAX_OCCLUSION: tuple[int, ...] = (0, 1, 2)
MAX_TRUNCATION: tuple[float, ...] = (0.15, 0.3, 0.5)
N_SAMPLE_PTS = 41
INVALID_ALPHA = -10.0

OverlapFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class FrameLabels:
    """The labels of many frames as flat arrays; frame ``f`` owns rows ``offsets[f]:offsets[f + 1]``.

    Shapes: offsets (F + 1,) int64; type (N,) str, lower case; truncated, alpha, score (N,) float64;
    occluded (N,) int64; bbox (N, 4) float64 (left, top, right, bottom); boxes (N, 7) float64
    [x, y, z, l, h, w, ry] in the rectified camera frame.
    """

    offsets: np.ndarray
    type: np.ndarray
    truncated: np.ndarray
    occluded: np.ndarray
    alpha: np.ndarray
    bbox: np.ndarray
    boxes: np.ndarray
    score: np.ndarray

    @property
    def num_frames(self) -> int:
        return len(self.offsets) - 1


def labels_to_arrays(frames: Sequence[Sequence[Label]], require_score: bool = False) -> FrameLabels:
    """Flatten per-frame label lists into a :class:`FrameLabels` (ground truth gets NaN scores).

    ``require_score``: every label must carry a score (detections); ValueError otherwise.
    """
    counts = np.array([len(f) for f in frames], dtype=np.int64)
    offsets = np.zeros(len(frames) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = [label for frame in frames for label in frame]
    rows = [
        (lab.truncated, lab.occluded, lab.alpha, *lab.bbox, lab.x, lab.y, lab.z, lab.l, lab.h, lab.w, lab.ry)
        for lab in flat
    ]
    numbers = np.array(rows, dtype=np.float64).reshape(len(flat), 14)
    score = np.array([np.nan if lab.score is None else lab.score for lab in flat], dtype=np.float64)
    if require_score and np.any(np.isnan(score)):
        k = int(np.flatnonzero(np.isnan(score))[0])
        f = int(np.searchsorted(offsets, k, side="right") - 1)
        raise ValueError(f"detection {k - offsets[f]} of frame {f} ({flat[k].type}) has no score")
    return FrameLabels(
        offsets=offsets,
        type=np.array([lab.type.lower() for lab in flat], dtype=str) if flat else np.zeros(0, dtype=str),
        truncated=numbers[:, 0].copy(),
        occluded=numbers[:, 1].astype(np.int64),
        alpha=numbers[:, 2].copy(),
        bbox=numbers[:, 3:7].copy(),
        boxes=numbers[:, 7:14].copy(),  # x, y, z, l, h, w, ry
        score=score,
    )


# ----------------------------------------------------------------------------------------------- ignore rules


def no_image_box(bbox: np.ndarray) -> np.ndarray:
    """Rows whose 2D box is ``-1 -1 -1 -1``: boxes of a frame without a camera. Shapes: (N, 4) -> (N,)."""
    return np.all(np.asarray(bbox) == -1.0, axis=1)


def ignored_ground_truth(gt: FrameLabels, cls: str, difficulty: int) -> np.ndarray:
    """``cleanData`` for ground truth: 0 counted, 1 ignored (neighbour class, or outside the difficulty),
    -1 any other type.

    Shapes: returns (N_gt,) int8.
    """
    valid = gt.type == cls.lower()
    neighbour = gt.type == NEIGHBOUR_CLASS[cls].lower() if cls in NEIGHBOUR_CLASS else np.zeros_like(valid)
    height = gt.bbox[:, 3] - gt.bbox[:, 1]  # (N,)
    outside = (
        (gt.occluded > MAX_OCCLUSION[difficulty])
        | (gt.truncated > MAX_TRUNCATION[difficulty])
        | ((height <= MIN_HEIGHT[difficulty]) & ~no_image_box(gt.bbox))
    )
    out = np.full(len(valid), -1, dtype=np.int8)
    out[neighbour | (valid & outside)] = 1
    out[valid & ~outside] = 0
    return out


def ground_truth_counts(gt: FrameLabels, classes: Sequence[str] = CLASSES) -> dict[str, tuple[int, ...]]:
    """The ground-truth boxes that count (neither ignored nor another type) per class, one number per
    difficulty (easy, moderate, hard): the recall denominators of the AP."""
    return {
        cls: tuple(
            int(np.count_nonzero(ignored_ground_truth(gt, cls, d) == 0)) for d in range(len(DIFFICULTIES))
        )
        for cls in classes
    }


def ignored_detections(dt: FrameLabels, cls: str, difficulty: int) -> np.ndarray:
    """``cleanData`` for detections: 0 of the class, 1 too low (any type), -1 other types.

    Shapes: returns (N_dt,) int8.
    """
    out = np.full(len(dt.type), -1, dtype=np.int8)
    out[dt.type == cls.lower()] = 0
    # The devkit truncates |top - bottom| to an int first; for heights >= 0 that gives the same "< min".
    out[(np.abs(dt.bbox[:, 1] - dt.bbox[:, 3]) < MIN_HEIGHT[difficulty]) & ~no_image_box(dt.bbox)] = 1
    return out


# ------------------------------------------------------------------------------------------------- overlaps


def pair_offsets(gt: FrameLabels, dt: FrameLabels) -> np.ndarray:
    """Start of each frame's (detection x ground truth) block in the flat overlap arrays. Shapes: (F + 1,)."""
    pairs = np.diff(gt.offsets) * np.diff(dt.offsets)
    out = np.zeros(gt.num_frames + 1, dtype=np.int64)
    np.cumsum(pairs, out=out[1:])
    return out


def rotated_overlaps(
    gt: FrameLabels,
    dt: FrameLabels,
    pair_off: np.ndarray,
    gt_rows: np.ndarray,
    dt_rows: np.ndarray,
    overlap_fn: OverlapFn,
) -> np.ndarray:
    """BEV or 3D IoU for every (detection, ground truth) pair of every frame; 0 outside the selected rows.

    ``overlap_fn(dt_boxes (M, 7), gt_boxes (K, 7)) -> (M, K)`` is ``pgnn.core.boxes.iou_bev`` or ``iou_3d``.

    Shapes: gt_rows (N_gt,) bool, dt_rows (N_dt,) bool: the rows worth computing; returns (pair_off[-1],).
    """
    out = np.zeros(pair_off[-1], dtype=np.float64)
    for f in range(gt.num_frames):
        g0, g1 = gt.offsets[f], gt.offsets[f + 1]
        d0, d1 = dt.offsets[f], dt.offsets[f + 1]
        gi = np.flatnonzero(gt_rows[g0:g1])  # local rows
        di = np.flatnonzero(dt_rows[d0:d1])
        if len(gi) == 0 or len(di) == 0:
            continue
        block = out[pair_off[f] : pair_off[f + 1]].reshape(d1 - d0, g1 - g0)  # a view
        block[np.ix_(di, gi)] = overlap_fn(dt.boxes[d0 + di], gt.boxes[g0 + gi])
    return out


def _rotated_overlap_fns() -> tuple[OverlapFn, OverlapFn]:
    from pgnn.core.boxes import iou_3d, iou_bev

    return iou_bev, iou_3d


# --------------------------------------------------------------------------------------------------- curves


@dataclass(frozen=True)
class _Prepared:
    gt: FrameLabels
    dt: FrameLabels
    pair_off: np.ndarray
    is_dontcare: np.ndarray
    overlaps: dict[str, np.ndarray]  # "bbox" | "bev" | "3d" -> (pair_off[-1],)
    dc_overlap: np.ndarray  # (pair_off[-1],) intersection over detection area, bbox


def _prepare(
    gt: FrameLabels,
    dt: FrameLabels,
    classes: Sequence[str],
    box_metrics: Sequence[str],
    overlap_fns: tuple[OverlapFn, OverlapFn] | None,
) -> _Prepared:
    pair_off = pair_offsets(gt, dt)
    iou_image, dc_overlap = matching.image_overlaps(gt.offsets, dt.offsets, pair_off, gt.bbox, dt.bbox)
    overlaps = {"bbox": iou_image}
    if "bev" in box_metrics or "3d" in box_metrics:
        iou_bev, iou_3d = overlap_fns if overlap_fns is not None else _rotated_overlap_fns()
        names = [c.lower() for c in classes]
        names += [NEIGHBOUR_CLASS[c].lower() for c in classes if c in NEIGHBOUR_CLASS]
        gt_relevant = np.isin(gt.type, names)
        # Detections of other types matter only when too low (then they may absorb a ground truth).
        dt_relevant = np.isin(dt.type, [c.lower() for c in classes]) | (
            (np.abs(dt.bbox[:, 1] - dt.bbox[:, 3]) < max(MIN_HEIGHT)) & ~no_image_box(dt.bbox)
        )
        for metric, fn in (("bev", iou_bev), ("3d", iou_3d)):
            if metric not in box_metrics:
                continue
            dims = [3, 5] if metric == "bev" else [3, 4, 5]  # l, w (and h) must be positive
            gt_ok = gt_relevant & np.all(gt.boxes[:, dims] > 0, axis=1)
            dt_ok = dt_relevant & np.all(dt.boxes[:, dims] > 0, axis=1)
            overlaps[metric] = rotated_overlaps(gt, dt, pair_off, gt_ok, dt_ok, fn)
    return _Prepared(gt, dt, pair_off, gt.type == "dontcare", overlaps, dc_overlap)


def _class_curves(
    prep: _Prepared, cls: str, difficulty: int, metric: str, compute_aos: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The interpolated precision and AOS curves (41,) of one class, difficulty and box metric."""
    ignored_gt = ignored_ground_truth(prep.gt, cls, difficulty)
    ignored_dt = ignored_detections(prep.dt, cls, difficulty)
    n_gt = int(np.count_nonzero(ignored_gt == 0))
    precision = np.zeros(N_SAMPLE_PTS, dtype=np.float64)
    aos = np.zeros(N_SAMPLE_PTS, dtype=np.float64)
    if n_gt == 0:
        return precision, aos
    min_overlap = MIN_OVERLAP[cls]
    overlap = prep.overlaps[metric]
    gt, dt = prep.gt, prep.dt
    tp_scores = matching.true_positive_scores(
        gt.offsets, dt.offsets, prep.pair_off, overlap, ignored_gt, ignored_dt, dt.score, min_overlap
    )
    # At most 41 by construction (the devkit would write past its 41-entry array otherwise).
    thresholds = matching.score_thresholds(tp_scores, n_gt, N_SAMPLE_PTS)[:N_SAMPLE_PTS]
    if len(thresholds) == 0:
        return precision, aos
    tp, fp, _fn, similarity = matching.threshold_statistics(
        gt.offsets,
        dt.offsets,
        prep.pair_off,
        overlap,
        prep.dc_overlap,
        metric == "bbox",
        ignored_gt,
        prep.is_dontcare,
        ignored_dt,
        dt.score,
        gt.alpha,
        dt.alpha,
        min_overlap,
        thresholds,
        compute_aos,
    )
    n = len(thresholds)
    denom = (tp + fp).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision[:n] = np.where(denom > 0, tp / denom, 0.0)
        aos[:n] = np.where(denom > 0, similarity / denom, 0.0)
    # Interpolation: precision at recall step i = max over steps >= i.
    precision = np.maximum.accumulate(precision[::-1])[::-1].copy()
    aos = np.maximum.accumulate(aos[::-1])[::-1].copy()
    return precision, aos


def _check(classes: Sequence[str], metrics: Sequence[str]) -> None:
    for c in classes:
        if c not in MIN_OVERLAP:
            raise ValueError(f"class {c!r} is not evaluated by KITTI; expected one of {list(MIN_OVERLAP)}")
    for m in metrics:
        if m not in METRICS:
            raise ValueError(f"metric {m!r} unknown; expected one of {list(METRICS)}")


def curves_from_arrays(
    gt: FrameLabels,
    dt: FrameLabels,
    classes: Sequence[str] = CLASSES,
    metrics: Sequence[str] = METRICS,
    overlap_fns: tuple[OverlapFn, OverlapFn] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`pr_curves` on :class:`FrameLabels` (``overlap_fns`` = (iou_bev, iou_3d), default
    pgnn.core.boxes)."""
    _check(classes, metrics)
    if gt.num_frames != dt.num_frames:
        raise ValueError(f"{gt.num_frames} ground-truth frames but {dt.num_frames} detection frames")
    if np.any(np.isnan(dt.score)):
        raise ValueError("every detection needs a score")
    boxed = gt.type != "dontcare"
    if boxed.any() and no_image_box(gt.bbox[boxed]).all():  # no camera: no 2D or AOS
        metrics = [m for m in metrics if m in ("bev", "3d")]
    box_metrics = [m for m in ("bbox", "bev", "3d") if m in metrics or (m == "bbox" and "aos" in metrics)]
    # The devkit drops AOS when any detection has alpha = -10 ("orientation not estimated").
    compute_aos = "aos" in metrics and not np.any(dt.alpha == INVALID_ALPHA)
    prep = _prepare(gt, dt, classes, box_metrics, overlap_fns)
    curves: dict[str, np.ndarray] = {}
    for cls in classes:
        for metric in box_metrics:
            for d, diff in enumerate(DIFFICULTIES):
                precision, aos = _class_curves(prep, cls, d, metric, compute_aos and metric == "bbox")
                if metric in metrics:
                    curves[f"{cls}/{metric}/{diff}"] = precision
                if metric == "bbox" and compute_aos:
                    curves[f"{cls}/aos/{diff}"] = aos
    order = [f"{c}/{m}/{d}" for c in classes for m in METRICS for d in DIFFICULTIES]
    return {k: curves[k] for k in order if k in curves}


def pr_curves(
    gt: Sequence[Sequence[Label]],
    dt: Sequence[Sequence[Label]],
    classes: Sequence[str] = CLASSES,
    metrics: Sequence[str] = METRICS,
) -> dict[str, np.ndarray]:
    """The devkit's interpolated curves: precision (AOS for ``aos``) at recall 0, 1/40, .., 1.

    ``gt[f]`` and ``dt[f]`` are the labels of frame ``f`` (detections with scores). Returns
    ``{"<class>/<metric>/<difficulty>": (41,) float64 in [0, 1]}``; AOS keys are absent when any detection has
    alpha = -10.
    """
    gt_arrays = labels_to_arrays(gt)
    return curves_from_arrays(gt_arrays, labels_to_arrays(dt, require_score=True), classes, metrics)


def recall_points() -> np.ndarray:
    """The recall of each curve sample: 0, 1/40, .., 1. Shapes: (41,)."""
    return np.arange(N_SAMPLE_PTS, dtype=np.float64) / (N_SAMPLE_PTS - 1)


def ap_from_curves(curves: dict[str, np.ndarray]) -> dict[str, float]:
    """AP in percent: ``"<key>/R40"`` averages curve samples 1..40, ``"<key>/R11"`` samples 0, 4, .., 40."""
    out: dict[str, float] = {}
    for key, p in curves.items():
        out[f"{key}/R40"] = float(sum(p[1:N_SAMPLE_PTS]) / (N_SAMPLE_PTS - 1) * 100.0)
        out[f"{key}/R11"] = float(sum(p[0:N_SAMPLE_PTS:4]) / 11.0 * 100.0)
    return out


def evaluate(
    gt: Sequence[Sequence[Label]],
    dt: Sequence[Sequence[Label]],
    classes: Sequence[str] = CLASSES,
    metrics: Sequence[str] = METRICS,
) -> dict[str, float]:
    """Official KITTI AP of detections ``dt`` against ground truth ``gt`` (one label list per frame).

    Returns flat ``{"<class>/<metric>/<difficulty>/<R40|R11>": AP in percent}``, e.g.
    ``"Car/3d/moderate/R40"``.
    """
    return ap_from_curves(pr_curves(gt, dt, classes, metrics))


# ------------------------------------------------------------------------------------------------- folders


def load_dirs(
    gt_dir: str | Path, pred_dir: str | Path, ids: Sequence[str] | None = None
) -> tuple[FrameLabels, FrameLabels]:
    """Read ``<gt_dir>/<id>.txt`` and ``<pred_dir>/<id>.txt`` for each id (default: every file in gt_dir).

    A missing prediction file means no detections; a missing ground-truth file or a malformed line in either
    raises DataError naming the file and line.
    """
    gt_dir, pred_dir = Path(gt_dir), Path(pred_dir)
    if not gt_dir.is_dir():
        raise DataError(gt_dir, "expected a folder of KITTI label files, got no such folder")
    if not pred_dir.is_dir():
        raise DataError(pred_dir, "expected a folder of KITTI result files, got no such folder")
    if ids is None:
        ids = sorted(p.stem for p in gt_dir.glob("*.txt"))
    gt, dt = [], []
    for frame_id in track(ids, "eval (reading)", "frame"):
        gt_path = gt_dir / f"{frame_id}.txt"
        if not gt_path.is_file():
            raise DataError(gt_path, "expected a ground-truth label file, got none")
        gt.append(read_labels(gt_path))
        pred_path = pred_dir / f"{frame_id}.txt"
        dt.append(read_labels(pred_path, allow_score=True) if pred_path.is_file() else [])
        if any(lab.score is None for lab in dt[-1]):
            line = _first_unscored_line(pred_path)
            raise DataError(pred_path, "expected 16 fields (the 16th the score), got 15", line=line)
    return labels_to_arrays(gt), labels_to_arrays(dt, require_score=True)


def _first_unscored_line(path: Path) -> int | None:
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        if len(raw.split()) == 15:
            return number
    return None


def evaluate_dirs(
    gt_dir: str | Path,
    pred_dir: str | Path,
    ids: Sequence[str] | None = None,
    classes: Sequence[str] = CLASSES,
    metrics: Sequence[str] = METRICS,
) -> dict[str, float]:
    """:func:`evaluate` on label folders (see :func:`load_dirs`)."""
    gt, dt = load_dirs(gt_dir, pred_dir, ids)
    return ap_from_curves(curves_from_arrays(gt, dt, classes, metrics))
