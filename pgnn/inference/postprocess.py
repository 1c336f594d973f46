"""From per-keypoint class probabilities and decoded boxes to KITTI detections.

The chain, with the original Point-GNN's rules (``run.py`` and ``models/nms.py``) and its Car defaults:

1. ``select_candidates``: every (keypoint, class) pair whose class is an object class (not Background or
   DontCare) and whose probability is > ``score_threshold`` (1/4 for the 4-class Car model) becomes a
   candidate box. The vertical-yaw class folds into its class (Car yaw ~ pi/2, class 2 -> Car, class 1).
2. ``nms_boxes_3d``, in one of the four variants the original offers (``NMS_VARIANTS``). All sort the
   candidates by decreasing score and walk them greedily: each surviving box removes every later surviving
   box of the same class whose 3D IoU with it is > ``overlap_threshold`` (0.01), and so becomes the first
   member of their merge cluster (``NmsResult.owner``). The variants differ in what the survivor takes from
   the boxes it removed:

   ===========  ============================  ==========================================================
   name         original                      survivor becomes
   ===========  ============================  ==========================================================
   plain        ``nms_boxes_3d``              itself
   merge_only   ``nms_boxes_3d_merge_only``   the coordinate-wise median of itself and the removed boxes
   score_only   ``nms_boxes_3d_score_only``   itself, score += sum(score_removed x IoU(itself, removed))
   merge_score  ``nms_boxes_3d_uncertainty``  the median, score += sum(score_removed x IoU(median, removed))
   ===========  ============================  ==========================================================

   ``merge_score`` is the original's default (``run.py`` with box merge and box score on).
3. ``truncation_filter``: drop boxes whose image truncation (1 - clipped / unclipped 2D area) is > 0.4.
4. ``occlusion_rescore``: score *= 1 + occ, occ = the fraction of each box axis spanned by the candidate
   keypoints strictly inside the box, multiplied over the 3 axes (0 when no candidate keypoint is inside).
5. ``kitti_result_lines``: KITTI result lines with a real observation angle alpha.

``postprocess_frame`` chains 1-4 for one frame, and tells the detection each candidate merged into;
``PostprocessConfig`` holds the knobs.

A detection's ``score`` (what KITTI's AP ranks by) is no probability: ``(p + sum_r p_r x IoU(box, r)) x
(1 + occ)`` with the defaults, ``p`` the survivor's class probability (its ``probability``, the highest of
its cluster), ``p_r`` those of the candidates it absorbed: from just over the threshold to tens.

Differences from the original, all deliberate:

* The candidate sort is stable (ties keep input order). The original's ``np.argsort`` quicksort leaves tie
  order to numpy's implementation (it differs between numpy versions and SIMD paths). Exact ties come from
  duplicated keypoints, which give identical boxes and scores, so only which duplicate's index is reported
  can change.
* IoUs are exact rotated-rectangle geometry in float64 (the original uses shapely polygons and casts the
  intersection to float32); plain NMS does not quantise corners to 1 cm (the original's ``appr_factor``).
* With ``yaw_merge: circular`` (the ``Car_heading`` label method's, whose yaws span the whole circle) the
  merged yaw is the median of the cluster's yaw differences to the survivor's, wrapped into [-pi, pi); the
  original's methods keep its plain median (``median``).
* Scores accumulate in float64 (the original adds into the float32 probability array).
* The projection clips boxes at a near plane instead of dividing by negative depths, and a 2D box wholly
  outside the image counts as fully truncated (the original's product of two negative clipped sides could
  come out positive). Alpha is written, not 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from pgnn.config.inference import NmsName, PostprocessConfig
from pgnn.core.boxes import alpha_from_box, boxes_to_image_2d, iou_3d
from pgnn.core.io import write_text_atomic

__all__ = [
    "NMS_VARIANTS",
    "Candidates",
    "Detections",
    "NmsName",
    "NmsResult",
    "NmsVariant",
    "PostprocessConfig",
    "kitti_result_lines",
    "merge_clusters",
    "nms_boxes_3d",
    "nms_name_from_flags",
    "occlusion_ratio",
    "occlusion_rescore",
    "postprocess_frame",
    "select_candidates",
    "truncation_filter",
    "write_kitti_result",
]


# --- NMS ---


@dataclass(frozen=True)
class NmsResult:
    """The boxes NMS kept, in decreasing order of their score **before** NMS, and who took in whom.

    Shapes:
        boxes: (M', 7) float64, merged boxes for the merging variants
        scores: (M',) float64, accumulated scores for the scoring variants (can exceed 1)
        labels: (M',) int64
        index: (M',) int64, each kept box's row in the NMS input
        owner: (K,) int64, for every input row the input row of the kept box that removed it (its own row for
        a kept box): the merge clusters
    """

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    index: np.ndarray
    owner: np.ndarray


class NmsVariant(NamedTuple):
    """What a surviving box takes from the boxes it removes: their median (``merge``), their scores weighted
    by IoU (``accumulate``)."""

    merge: bool
    accumulate: bool


# The module docstring's table: name (``PostprocessConfig.nms``) -> variant.
NMS_VARIANTS: Mapping[NmsName, NmsVariant] = MappingProxyType(
    {
        "plain": NmsVariant(merge=False, accumulate=False),
        "merge_only": NmsVariant(merge=True, accumulate=False),
        "score_only": NmsVariant(merge=False, accumulate=True),
        "merge_score": NmsVariant(merge=True, accumulate=True),
    }
)


def _check_nms_input(
    boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = np.asarray(boxes, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64)
    if b.ndim != 2 or b.shape[1] != 7:
        raise ValueError(f"boxes: expected shape (K, 7), got {b.shape}")
    if s.shape != (b.shape[0],) or lab.shape != (b.shape[0],):
        raise ValueError(f"scores, labels: expected shape ({b.shape[0]},), got {s.shape} and {lab.shape}")
    return b, s, lab


def nms_boxes_3d(
    boxes: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    overlap_threshold: float = 0.01,
    *,
    variant: NmsName = "plain",
    circular_yaw: bool = False,
) -> NmsResult:
    """The original's greedy NMS with 3D IoU, per class, in one of its four variants (``NMS_VARIANTS``).

    The median of an even-sized cluster is the mean of its two middle values; yaw is treated like any other
    coordinate, unless ``circular_yaw``: a merged yaw is then the survivor's plus the median of the
    cluster's yaw differences to it, each wrapped into [-pi, pi) (the original's plain median breaks for
    clusters on both sides of +-pi). A survivor tests the IoU with its own box, before it is merged; the
    scoring variants weigh each removed score by its IoU with the survivor as merged (itself for
    ``score_only``).

    Shapes:
        boxes: (K, 7), scores: (K,), labels: (K,) int
    """
    merge, accumulate = NMS_VARIANTS[variant]
    b, s, lab = _check_nms_input(boxes, scores, labels)
    order = np.argsort(-s, kind="stable")  # (K,) decreasing score, ties in input order
    b = b[order].copy()  # (K, 7)
    s = s[order].copy()  # (K,)
    lab = lab[order]  # (K,)
    alive = np.ones(len(s), dtype=bool)  # (K,)
    owner = np.arange(len(s))  # (K,) in the walk's order
    for i in range(len(s)):
        if not alive[i]:
            continue
        later = np.flatnonzero(alive[i + 1 :]) + (i + 1)  # surviving later boxes
        later = later[lab[later] == lab[i]]
        if later.size == 0:
            continue
        removed = later[iou_3d(b[i : i + 1], b[later])[0] > overlap_threshold]  # (R,)
        if removed.size == 0:
            continue
        alive[removed] = False
        owner[removed] = i
        # Removed boxes come later in the order, so they still hold their own (unmerged) values.
        if merge:
            cluster = np.concatenate([b[removed], b[i : i + 1]], axis=0)  # (R + 1, 7)
            merged = np.median(cluster, axis=0)  # (7,)
            if circular_yaw:
                turn = (cluster[:, 6] - b[i, 6] + np.pi) % (2.0 * np.pi) - np.pi  # (R + 1,) in [-pi, pi)
                merged[6] = b[i, 6] + np.median(turn)
            b[i] = merged
        if accumulate:
            s[i] += float(np.sum(s[removed] * iou_3d(b[i : i + 1], b[removed])[0]))
    keep = np.flatnonzero(alive)
    input_owner = np.empty(len(s), dtype=np.int64)  # (K,)
    input_owner[order] = order[owner]
    return NmsResult(
        boxes=b[keep], scores=s[keep], labels=lab[keep], index=order[keep].astype(np.int64), owner=input_owner
    )


def nms_name_from_flags(box_merge: bool, box_score: bool) -> NmsName:
    """The variant ``run.py`` picks from its ``--no-box-merge`` / ``--no-box-score`` switches.

    (In ``run.py`` box score also switches the occlusion rescoring: ``PostprocessConfig.occlusion_rescore``.)
    """
    wanted = NmsVariant(merge=box_merge, accumulate=box_score)
    return next(name for name, variant in NMS_VARIANTS.items() if variant == wanted)


# --- Truncation and occlusion ---


def truncation_filter(
    boxes: np.ndarray, P: np.ndarray, image_size: tuple[float, float], max_truncation: float = 0.4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which boxes to keep given their image truncation, with their clipped 2D boxes.

    A box is dropped when ``truncation = 1 - clipped 2D area / unclipped 2D area`` is > ``max_truncation``
    (``pgnn.core.boxes.boxes_to_image_2d``). Without a camera (image_size (0, 0)) all stay, 2D boxes -1.

    Shapes:
        boxes: (M, 7) in the camera frame of ``P``; P: (3, 4); image_size: (width, height) pixels
        return: keep (M,) bool, box2d (M, 4) clipped [xmin, ymin, xmax, ymax], truncation (M,)
    """
    width, height = image_size
    if width == 0 and height == 0:  # pgnn.data.sensor.NO_CAMERA
        return np.ones(len(boxes), bool), np.full((len(boxes), 4), -1.0), np.zeros(len(boxes))
    box2d, truncation = boxes_to_image_2d(boxes, P, width, height)
    return truncation <= max_truncation, box2d, truncation


def occlusion_ratio(boxes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """How much of each box the given points span: the product over the box's 3 axes of
    (extent of the points strictly inside the box along the axis) / (box size along the axis).

    0 when no point is inside. The original feeds the keypoints of all NMS candidates (with multiplicity);
    near 1 means the detection is seen across its whole box, near 0 that it is occluded or far.

    Shapes:
        boxes: (M, 7); points: (K, 3)
        return: (M,) float64 in [0, 1]
    """
    b = np.asarray(boxes, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64)
    if b.ndim != 2 or b.shape[1] != 7 or p.ndim != 2 or p.shape[1] != 3:
        raise ValueError(f"expected boxes (M, 7) and points (K, 3), got {b.shape} and {p.shape}")
    out = np.zeros(len(b))
    if len(b) == 0 or len(p) == 0:
        return out
    c = np.cos(b[:, 6])[:, None]  # (M, 1)
    s = np.sin(b[:, 6])[:, None]  # (M, 1)
    dx = p[None, :, 0] - b[:, None, 0]  # (M, K)
    dz = p[None, :, 2] - b[:, None, 2]  # (M, K)
    local = np.stack([c * dx - s * dz, p[None, :, 1] - b[:, None, 1], s * dx + c * dz], axis=2)  # (M, K, 3)
    lo = np.stack([-b[:, 3] / 2.0, -b[:, 4], -b[:, 5] / 2.0], axis=1)  # (M, 3)
    hi = np.stack([b[:, 3] / 2.0, np.zeros(len(b)), b[:, 5] / 2.0], axis=1)  # (M, 3)
    inside = np.all((local > lo[:, None, :]) & (local < hi[:, None, :]), axis=2)  # (M, K)
    for j in np.flatnonzero(inside.any(axis=1)):
        pts = local[j, inside[j]]  # (k, 3)
        span = pts.max(axis=0) - pts.min(axis=0)  # (3,)
        out[j] = float(np.prod(span / (hi[j] - lo[j])))
    return out


def occlusion_rescore(scores: np.ndarray, boxes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``scores x (1 + occlusion_ratio(boxes, points))``, the original's box-score rescoring.

    Shapes:
        scores: (M,); boxes: (M, 7); points: (K, 3)
        return: (M,) float64
    """
    return np.asarray(scores, dtype=np.float64) * (1.0 + occlusion_ratio(boxes, points))


# --- The frame chain ---


@dataclass(frozen=True)
class Candidates:
    """The boxes that enter NMS.

    Shapes:
        boxes: (K, 7); scores: (K,); labels: (K,) folded class index
        flat_index: (K,) ``point * C + class`` into the (N, C) outputs, increasing
        point_index: (K,) the keypoint row of each candidate
    """

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    flat_index: np.ndarray
    point_index: np.ndarray


def select_candidates(probs: np.ndarray, boxes: np.ndarray, config: PostprocessConfig) -> Candidates:
    """Candidate boxes: object classes with probability > ``config.score_threshold``, classes folded.

    Shapes:
        probs: (N, C) class probabilities per keypoint
        boxes: (N, C, 7) decoded box of every class head (rows of ignored classes are not read)
        return: Candidates with K boxes, in keypoint-major order
    """
    probs = np.asarray(probs)
    boxes = np.asarray(boxes)
    n_cls = len(config.class_names)
    if probs.ndim != 2 or probs.shape[1] != n_cls:
        raise ValueError(
            f"probs: expected shape (N, {n_cls}) for classes {config.class_names}, got {probs.shape}"
        )
    if boxes.shape != (*probs.shape, 7):
        raise ValueError(f"boxes: expected shape {(*probs.shape, 7)}, got {boxes.shape}")
    is_object = np.array([name not in config.ignore_class_names for name in config.class_names])  # (C,)
    mask = is_object[None, :] & (probs > config.score_threshold)  # (N, C)
    flat = np.flatnonzero(mask)  # (K,)
    point, cls = np.divmod(flat, n_cls)  # (K,), (K,)
    fold = np.arange(n_cls)
    for src, dst in config.class_fold.items():
        fold[src] = dst
    return Candidates(
        boxes=boxes.reshape(-1, 7)[flat].astype(np.float64),
        scores=probs.reshape(-1)[flat].astype(np.float64),
        labels=fold[cls].astype(np.int64),
        flat_index=flat.astype(np.int64),
        point_index=point.astype(np.int64),
    )


@dataclass(frozen=True)
class Detections:
    """One frame's final detections.

    Shapes:
        boxes: (M, 7) float64, in the camera frame the boxes were decoded in
        labels: (M,) int64 folded class index; names: M class names
        scores: (M,) float64 (not probabilities: merging and rescoring make them grow past 1)
        probabilities: (M,) float64 in (score_threshold, 1], the class probability of each box's survivor
        boxes_2d: (M, 4) clipped image boxes [xmin, ymin, xmax, ymax]; truncation: (M,)
        alpha: (M,) observation angle
        flat_index: (M,) ``point * C + class`` of the candidate each box grew from
    """

    boxes: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]
    scores: np.ndarray
    probabilities: np.ndarray
    boxes_2d: np.ndarray
    truncation: np.ndarray
    alpha: np.ndarray
    flat_index: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def merge_clusters(owner: np.ndarray, detected: np.ndarray) -> np.ndarray:
    """The detection row each NMS input merged into: its survivor's row, -1 where that survivor is no
    detection (a box NMS kept that the truncation filter then dropped).

    Shapes:
        owner: (K,) ``NmsResult.owner``; detected: (M,) the NMS input row of each detection, in row order
        return: (K,) int64
    """
    row = np.full(len(owner), -1, dtype=np.int64)  # (K,) the detection row of each input row
    row[detected] = np.arange(len(detected))
    return row[owner]


def postprocess_frame(
    probs: np.ndarray,
    boxes: np.ndarray,
    keypoints: np.ndarray,
    P: np.ndarray,
    image_size: tuple[float, float],
    config: PostprocessConfig,
) -> tuple[Detections, Candidates, np.ndarray]:
    """Candidates -> NMS -> truncation drop -> occlusion rescoring, for one frame.

    ``keypoints`` are the coordinates the boxes were decoded around (the original's ``vertex_coord_2``, not
    offset by auto-registration); the candidates' keypoints drive the occlusion rescoring.

    Shapes:
        probs: (N, C); boxes: (N, C, 7); keypoints: (N, 3)
        P: (3, 4) projection of the boxes' camera frame into the image; image_size: (width, height)
        return: Detections with M boxes, in the NMS output order; the K candidates; cluster (K,) int64, the
        detection row each candidate merged into (``merge_clusters``)
    """
    keypoints = np.asarray(keypoints)
    if keypoints.shape != (np.shape(probs)[0], 3):
        raise ValueError(f"keypoints: expected shape ({np.shape(probs)[0]}, 3), got {keypoints.shape}")
    cand = select_candidates(probs, boxes, config)
    kept = nms_boxes_3d(
        cand.boxes,
        cand.scores,
        cand.labels,
        config.overlap_threshold,
        variant=config.nms,
        circular_yaw=config.yaw_merge == "circular",
    )
    keep, box2d, truncation = truncation_filter(kept.boxes, P, image_size, config.max_truncation)
    out_boxes = kept.boxes[keep]  # (M, 7)
    scores = kept.scores[keep]  # (M,)
    if config.occlusion_rescore:
        scores = occlusion_rescore(scores, out_boxes, keypoints[cand.point_index])
    labels = kept.labels[keep]  # (M,)
    detected = kept.index[keep]  # (M,) candidate rows
    detections = Detections(
        boxes=out_boxes,
        labels=labels,
        names=tuple(config.class_names[k] for k in labels),
        scores=scores,
        probabilities=cand.scores[detected],
        boxes_2d=box2d[keep],
        truncation=truncation[keep],
        alpha=alpha_from_box(out_boxes),
        flat_index=cand.flat_index[detected],
    )
    return detections, cand, merge_clusters(kept.owner, detected)


# --- KITTI result files ---


def kitti_result_lines(
    names: Sequence[str], boxes: np.ndarray, boxes_2d: np.ndarray, scores: np.ndarray
) -> list[str]:
    """KITTI object result lines, one per box, in the label format plus a score column.

    Columns: type, truncated (-1), occluded (-1), alpha, 2D box (xmin ymin xmax ymax), h w l, x y z, ry,
    score. Geometry is written with 2 decimals like KITTI's labels; the score with 6 significant digits.
    alpha is computed from the box (``pgnn.core.boxes.alpha_from_box``); ry is wrapped into [-pi, pi) as KITTI
    writes it (``Car_heading`` decodes yaws up to 5pi/4). The KITTI devkit ignores the truncated and occluded
    columns of results.

    Shapes:
        names: M class names; boxes: (M, 7); boxes_2d: (M, 4); scores: (M,)
    """
    b = np.array(boxes, dtype=np.float64).reshape(-1, 7)  # a copy: ry is wrapped below
    b2 = np.asarray(boxes_2d, dtype=np.float64).reshape(-1, 4)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not (len(names) == len(b) == len(b2) == len(s)):
        raise ValueError(
            f"expected equal lengths, got {len(names)} names, {len(b)} boxes, "
            f"{len(b2)} 2D boxes, {len(s)} scores"
        )
    alpha = alpha_from_box(b)  # (M,)
    b[:, 6] = (b[:, 6] + np.pi) % (2.0 * np.pi) - np.pi
    lines = []
    for name, (x, y, z, l, h, w, ry), (u0, v0, u1, v1), a, score in zip(names, b, b2, alpha, s, strict=True):
        if any(ch.isspace() for ch in name) or not name:
            raise ValueError(f"class name {name!r}: expected one non-empty word")
        lines.append(
            f"{name} -1 -1 {a:.2f} {u0:.2f} {v0:.2f} {u1:.2f} {v1:.2f} "
            f"{h:.2f} {w:.2f} {l:.2f} {x:.2f} {y:.2f} {z:.2f} {ry:.2f} {score:.6g}"
        )
    return lines


def write_kitti_result(path: str | Path, lines: Sequence[str]) -> None:
    """Write one frame's result file atomically (an empty file for no detections)."""
    write_text_atomic(path, "".join(line + "\n" for line in lines))
