"""The devkit's matching passes (``computeStatistics``, ``getThresholds``) as numba kernels over many frames.

All kernels take the labels of many frames as flat arrays: frame ``f`` owns ground-truth rows
``gt_off[f]:gt_off[f + 1]`` and detection rows ``dt_off[f]:dt_off[f + 1]``; its (detection x ground truth)
overlap block is ``overlap[pair_off[f]:pair_off[f + 1]]`` in row-major order, so the overlap of its local
detection ``j`` with its local ground truth ``i`` is ``overlap[pair_off[f] + j * n_gt_f + i]``.

Ignore codes, as in the devkit's ``cleanData``:

- ``ignored_gt``: 0 = counted ground truth of the class, 1 = ignored (neighbouring class, or the class but
  outside the difficulty), -1 = any other type (skipped entirely).
- ``ignored_dt``: 0 = detection of the class, 1 = ignored (its 2D box is lower than the difficulty's minimum
  height, whatever its type), -1 = any other type (skipped entirely).

Only detections with code 0 can be false positives; detections with code 1 can still absorb a ground truth
(neither a true positive nor a false negative then).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The devkit's "no detection assigned" marker. Pass 1 keeps the highest-scoring candidate, starting from it.
NO_DETECTION = -10000000.0


@njit(cache=True)
def true_positive_scores(
    gt_off: np.ndarray,
    dt_off: np.ndarray,
    pair_off: np.ndarray,
    overlap: np.ndarray,
    ignored_gt: np.ndarray,
    ignored_dt: np.ndarray,
    score: np.ndarray,
    min_overlap: float,
) -> np.ndarray:
    """Pass 1 (``computeStatistics`` with ``compute_fp=false``): the scores of all true positives.

    Each ground truth, in file order, takes the unassigned candidate (overlap > ``min_overlap``) with the
    highest score (the first one on ties). No score threshold applies.

    Shapes: gt_off, dt_off, pair_off (F + 1,); overlap (pair_off[-1],); ignored_gt (N_gt,) int8;
    ignored_dt, score (N_dt,); returns (n_tp,) float64 in frame and ground-truth order.
    """
    n_frames = gt_off.shape[0] - 1
    out = np.empty(ignored_gt.shape[0], dtype=np.float64)
    n_out = 0
    for f in range(n_frames):
        g0 = gt_off[f]
        d0 = dt_off[f]
        n_gt = gt_off[f + 1] - g0
        n_dt = dt_off[f + 1] - d0
        p0 = pair_off[f]
        assigned = np.zeros(n_dt, dtype=np.bool_)
        for i in range(n_gt):
            ig_gt = ignored_gt[g0 + i]
            if ig_gt == -1:
                continue
            det_idx = -1
            valid_detection = NO_DETECTION
            for j in range(n_dt):
                if ignored_dt[d0 + j] == -1 or assigned[j]:
                    continue
                if overlap[p0 + j * n_gt + i] > min_overlap and score[d0 + j] > valid_detection:
                    det_idx = j
                    valid_detection = score[d0 + j]
            if valid_detection == NO_DETECTION:
                continue
            assigned[det_idx] = True
            if ig_gt == 0 and ignored_dt[d0 + det_idx] == 0:
                out[n_out] = score[d0 + det_idx]
                n_out += 1
    return out[:n_out]


@njit(cache=True)
def score_thresholds(tp_scores: np.ndarray, n_gt: int, n_sample_pts: int) -> np.ndarray:
    """``getThresholds``: the true-positive scores closest to the recall steps 0, 1/40, 2/40, ...

    Scores are sorted in descending order; score ``i`` stands for recall (i + 1) / n_gt and is skipped when
    the next score lies closer to the current recall step. The last score is always taken.

    Shapes: tp_scores (n_tp,); returns (T,) non-increasing, T <= n_tp.
    """
    v = np.sort(tp_scores)[::-1]
    n = v.shape[0]
    out = np.empty(n, dtype=np.float64)
    n_out = 0
    current_recall = 0.0
    step = 1.0 / (n_sample_pts - 1.0)
    for i in range(n):
        l_recall = (i + 1) / n_gt
        if i < n - 1:
            r_recall = (i + 2) / n_gt
        else:
            r_recall = l_recall
        if (r_recall - current_recall) < (current_recall - l_recall) and i < n - 1:
            continue
        out[n_out] = v[i]
        n_out += 1
        current_recall += step
    return out[:n_out]


@njit(cache=True)
def _frame_statistics(
    n_gt: int,
    n_dt: int,
    g0: int,
    d0: int,
    p0: int,
    overlap: np.ndarray,
    dc_overlap: np.ndarray,
    use_dontcare: bool,
    ignored_gt: np.ndarray,
    is_dontcare: np.ndarray,
    ignored_dt: np.ndarray,
    score: np.ndarray,
    gt_alpha: np.ndarray,
    dt_alpha: np.ndarray,
    min_overlap: float,
    thresh: float,
    compute_aos: bool,
    assigned: np.ndarray,
) -> tuple[int, int, int, float]:
    """Pass 2 (``computeStatistics`` with ``compute_fp=true``) on one frame at one score threshold.

    Each ground truth takes the unassigned candidate with the largest overlap among counted detections, or
    else the first ignored (too low) candidate. Detections of the class left unassigned are false positives,
    unless they overlap a DontCare region by more than ``min_overlap`` of their own area.

    Returns (tp, fp, fn, similarity): similarity is the sum of (1 + cos(alpha_gt - alpha_dt)) / 2 over the
    true positives (the devkit's per-frame AOS sum; false positives add 0).
    """
    for j in range(n_dt):
        assigned[j] = False
    tp = 0
    fp = 0
    fn = 0
    similarity = 0.0
    for i in range(n_gt):
        ig_gt = ignored_gt[g0 + i]
        if ig_gt == -1:
            continue
        det_idx = -1
        valid_detection = NO_DETECTION
        max_overlap = 0.0
        assigned_ignored_det = False
        for j in range(n_dt):
            ig_dt = ignored_dt[d0 + j]
            if ig_dt == -1 or assigned[j] or score[d0 + j] < thresh:
                continue
            ov = overlap[p0 + j * n_gt + i]
            if ov > min_overlap and (ov > max_overlap or assigned_ignored_det) and ig_dt == 0:
                max_overlap = ov
                det_idx = j
                valid_detection = 1.0
                assigned_ignored_det = False
            elif ov > min_overlap and valid_detection == NO_DETECTION and ig_dt == 1:
                det_idx = j
                valid_detection = 1.0
                assigned_ignored_det = True
        if valid_detection == NO_DETECTION:
            if ig_gt == 0:
                fn += 1
        elif ig_gt == 1 or ignored_dt[d0 + det_idx] == 1:
            assigned[det_idx] = True
        else:
            tp += 1
            if compute_aos:
                similarity += (1.0 + np.cos(gt_alpha[g0 + i] - dt_alpha[d0 + det_idx])) / 2.0
            assigned[det_idx] = True

    for j in range(n_dt):
        if not assigned[j] and ignored_dt[d0 + j] == 0 and score[d0 + j] >= thresh:
            fp += 1
    if use_dontcare:
        n_stuff = 0
        for i in range(n_gt):
            if not is_dontcare[g0 + i]:
                continue
            for j in range(n_dt):
                if assigned[j] or ignored_dt[d0 + j] != 0 or score[d0 + j] < thresh:
                    continue
                if dc_overlap[p0 + j * n_gt + i] > min_overlap:
                    assigned[j] = True
                    n_stuff += 1
        fp -= n_stuff
    return tp, fp, fn, similarity


@njit(cache=True)
def threshold_statistics(
    gt_off: np.ndarray,
    dt_off: np.ndarray,
    pair_off: np.ndarray,
    overlap: np.ndarray,
    dc_overlap: np.ndarray,
    use_dontcare: bool,
    ignored_gt: np.ndarray,
    is_dontcare: np.ndarray,
    ignored_dt: np.ndarray,
    score: np.ndarray,
    gt_alpha: np.ndarray,
    dt_alpha: np.ndarray,
    min_overlap: float,
    thresholds: np.ndarray,
    compute_aos: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pass 2 summed over all frames for every score threshold (``eval_class``'s second loop).

    A frame's statistics depend on the threshold only through the set of its detections that pass it, so
    they are computed once per distinct set and reused for the other thresholds.

    Shapes: thresholds (T,) non-increasing; dc_overlap like overlap (detection area ratio with DontCare
    regions; read only when use_dontcare); is_dontcare (N_gt,) bool; returns tp, fp, fn (T,) int64 and
    similarity (T,) float64.
    """
    n_frames = gt_off.shape[0] - 1
    n_thr = thresholds.shape[0]
    tp = np.zeros(n_thr, dtype=np.int64)
    fp = np.zeros(n_thr, dtype=np.int64)
    fn = np.zeros(n_thr, dtype=np.int64)
    similarity = np.zeros(n_thr, dtype=np.float64)
    max_dt = 0
    for f in range(n_frames):
        max_dt = max(max_dt, dt_off[f + 1] - dt_off[f])
    assigned = np.zeros(max_dt, dtype=np.bool_)
    for f in range(n_frames):
        g0 = gt_off[f]
        d0 = dt_off[f]
        n_gt = gt_off[f + 1] - g0
        n_dt = dt_off[f + 1] - d0
        p0 = pair_off[f]
        has_content = False
        for i in range(n_gt):
            if ignored_gt[g0 + i] != -1:
                has_content = True
                break
        if not has_content:
            for j in range(n_dt):
                if ignored_dt[d0 + j] == 0:
                    has_content = True
                    break
        if not has_content:
            continue
        prev_passing = -1
        f_tp = 0
        f_fp = 0
        f_fn = 0
        f_sim = 0.0
        for t in range(n_thr):
            thresh = thresholds[t]
            passing = 0
            for j in range(n_dt):
                if ignored_dt[d0 + j] != -1 and score[d0 + j] >= thresh:
                    passing += 1
            if passing != prev_passing:
                f_tp, f_fp, f_fn, f_sim = _frame_statistics(
                    n_gt,
                    n_dt,
                    g0,
                    d0,
                    p0,
                    overlap,
                    dc_overlap,
                    use_dontcare,
                    ignored_gt,
                    is_dontcare,
                    ignored_dt,
                    score,
                    gt_alpha,
                    dt_alpha,
                    min_overlap,
                    thresh,
                    compute_aos,
                    assigned,
                )
                prev_passing = passing
            tp[t] += f_tp
            fp[t] += f_fp
            fn[t] += f_fn
            similarity[t] += f_sim
    return tp, fp, fn, similarity


@njit(cache=True)
def image_overlaps(
    gt_off: np.ndarray,
    dt_off: np.ndarray,
    pair_off: np.ndarray,
    gt_bbox: np.ndarray,
    dt_bbox: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The devkit's ``imageBoxOverlap`` for every (detection, ground truth) pair of every frame.

    Returns (iou, det_fraction): intersection over union, and intersection over the detection's area
    (the criterion used against DontCare regions). Pairs that do not overlap (width or height <= 0) are 0.

    Shapes: gt_bbox (N_gt, 4), dt_bbox (N_dt, 4) as (left, top, right, bottom); returns two (pair_off[-1],).
    """
    n_frames = gt_off.shape[0] - 1
    iou = np.zeros(pair_off[-1], dtype=np.float64)
    det_fraction = np.zeros(pair_off[-1], dtype=np.float64)
    for f in range(n_frames):
        g0 = gt_off[f]
        d0 = dt_off[f]
        n_gt = gt_off[f + 1] - g0
        n_dt = dt_off[f + 1] - d0
        p0 = pair_off[f]
        for j in range(n_dt):
            a = dt_bbox[d0 + j]
            a_area = (a[2] - a[0]) * (a[3] - a[1])
            for i in range(n_gt):
                b = gt_bbox[g0 + i]
                w = min(a[2], b[2]) - max(a[0], b[0])
                h = min(a[3], b[3]) - max(a[1], b[1])
                if w <= 0 or h <= 0:
                    continue
                inter = w * h
                b_area = (b[2] - b[0]) * (b[3] - b[1])
                iou[p0 + j * n_gt + i] = inter / (a_area + b_area - inter)
                det_fraction[p0 + j * n_gt + i] = inter / a_area
    return iou, det_fraction
