"""Vertex-classification metrics: per-class recall, precision and PR-AUC (average precision).

The original logs, per class c, the recall and precision of ``argmax(probs) == c`` against ``label == c`` and
the area under the precision-recall curve of ``probs[:, c]`` (``tf.metrics.auc`` with 200 thresholds). Here:

* exact functions on arrays (:func:`confusion_matrix`, :func:`recall_precision`, :func:`average_precision`),
  which agree with scikit-learn's ``recall_score`` / ``precision_score`` / ``average_precision_score``;
* a streaming accumulator (:class:`VertexMetricsAccumulator`) for training logs: a confusion matrix plus,
  per class, histograms of the scores of positive and negative vertices over ``num_bins`` equal bins of
  [0, 1]. Its PR-AUC is exactly scikit-learn's average precision of the scores rounded down to the bin
  edges, so it needs O(C * bins) memory whatever the number of vertices, and accumulators add (across steps,
  or across DDP ranks with one ``all_reduce`` of :meth:`VertexMetricsAccumulator.to_array`).

Undefined values (a class with no positives, or never predicted) are NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def confusion_matrix(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts of (true class, predicted class) pairs.

    Shapes: labels (N,) int, predictions (N,) int -> (C, C) int64, rows = true class
    """
    flat = np.asarray(labels, dtype=np.int64) * num_classes + np.asarray(predictions, dtype=np.int64)
    return np.bincount(flat, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def recall_precision(confusion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-class recall TP / (TP + FN) and precision TP / (TP + FP); NaN where the denominator is 0.

    Shapes: confusion (C, C) -> recall (C,), precision (C,)
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    tp = np.diag(confusion)
    positives = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(positives > 0, tp / positives, np.nan)
        precision = np.where(predicted > 0, tp / predicted, np.nan)
    return recall, precision


def _ap_from_sorted_counts(tp_at: np.ndarray, fp_at: np.ndarray) -> float:
    """Average precision from TP / FP counts at each distinct score, highest score first.

    AP = sum_k (R_k - R_{k-1}) P_k over the thresholds k (scikit-learn's definition, no interpolation).

    Shapes: tp_at (K,), fp_at (K,) -> scalar
    """
    tp = np.cumsum(tp_at, dtype=np.float64)
    fp = np.cumsum(fp_at, dtype=np.float64)
    total_pos = tp[-1] if tp.size else 0.0
    if total_pos == 0:
        return float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
    return float(np.sum(tp_at / total_pos * precision))


def average_precision(is_positive: np.ndarray, scores: np.ndarray) -> float:
    """PR-AUC as average precision (= scikit-learn's ``average_precision_score``).

    Shapes: is_positive (N,) bool, scores (N,) float -> scalar (NaN without positives)
    """
    is_positive = np.asarray(is_positive, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    sorted_pos = is_positive[order]
    # one threshold per distinct score: the index of each distinct value's last occurrence
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    groups = np.split(sorted_pos, boundaries)
    tp_at = np.array([g.sum() for g in groups], dtype=np.float64)
    fp_at = np.array([g.size - g.sum() for g in groups], dtype=np.float64)
    return _ap_from_sorted_counts(tp_at, fp_at)


def per_class_average_precision(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """One-vs-rest average precision of ``probs[:, c]`` for each class c.

    Shapes: labels (N,) int, probs (N, C) -> (C,)
    """
    labels = np.asarray(labels)
    return np.array([average_precision(labels == c, probs[:, c]) for c in range(probs.shape[1])])


@dataclass
class VertexMetricsAccumulator:
    """Running confusion matrix and per-class score histograms of vertex classification.

    ``pos_hist[c, b]`` / ``neg_hist[c, b]`` count vertices of / not of class c whose ``probs[:, c]`` falls in
    bin b = min(floor(p * num_bins), num_bins - 1).
    """

    confusion: np.ndarray  # (C, C) int64
    pos_hist: np.ndarray  # (C, B) int64
    neg_hist: np.ndarray  # (C, B) int64

    @classmethod
    def empty(cls, num_classes: int, num_bins: int = 1000) -> VertexMetricsAccumulator:
        """An accumulator with nothing counted."""
        return cls(
            confusion=np.zeros((num_classes, num_classes), dtype=np.int64),
            pos_hist=np.zeros((num_classes, num_bins), dtype=np.int64),
            neg_hist=np.zeros((num_classes, num_bins), dtype=np.int64),
        )

    @property
    def num_classes(self) -> int:
        return self.confusion.shape[0]

    @property
    def num_bins(self) -> int:
        return self.pos_hist.shape[1]

    def update(self, labels: np.ndarray, probs: np.ndarray) -> None:
        """Count a batch of vertices.

        Shapes: labels (N,) int, probs (N, C) class probabilities
        """
        labels = np.asarray(labels, dtype=np.int64)
        probs = np.asarray(probs, dtype=np.float64)
        if not np.isfinite(probs).all():
            raise ValueError("expected finite class probabilities, got NaN or inf")
        c, b = self.num_classes, self.num_bins
        self.confusion += confusion_matrix(labels, probs.argmax(axis=1), c)
        bins = np.clip(np.floor(probs * b).astype(np.int64), 0, b - 1)  # (N, C)
        is_pos = labels[:, None] == np.arange(c)[None, :]  # (N, C)
        flat = np.arange(c)[None, :] * b + bins  # (N, C)
        self.pos_hist += np.bincount(flat[is_pos], minlength=c * b).reshape(c, b)
        self.neg_hist += np.bincount(flat[~is_pos], minlength=c * b).reshape(c, b)

    def average_precision(self) -> np.ndarray:
        """Per-class PR-AUC of the binned scores.

        Shapes: -> (C,)
        """
        # highest bin first; empty bins add nothing (tp_at = 0) and keep the precision of the bin above
        return np.array(
            [
                _ap_from_sorted_counts(self.pos_hist[c, ::-1], self.neg_hist[c, ::-1])
                for c in range(self.num_classes)
            ]
        )

    def compute(self) -> dict[str, np.ndarray]:
        """``recall``, ``precision``, ``pr_auc``: (C,) each, NaN where undefined."""
        recall, precision = recall_precision(self.confusion)
        return {"recall": recall, "precision": precision, "pr_auc": self.average_precision()}

    def to_array(self) -> np.ndarray:
        """All counts in one flat int64 array (for a sum across processes).

        Shapes: -> (C*C + 2*C*B,)
        """
        return np.concatenate([self.confusion.ravel(), self.pos_hist.ravel(), self.neg_hist.ravel()])

    @classmethod
    def from_array(cls, flat: np.ndarray, num_classes: int, num_bins: int) -> VertexMetricsAccumulator:
        """The inverse of :meth:`to_array`."""
        c, b = num_classes, num_bins
        flat = np.asarray(flat, dtype=np.int64)
        size = c * c + 2 * c * b
        if flat.shape != (size,):
            raise ValueError(f"expected {size} counts for {c} classes x {b} bins, got shape {flat.shape}")
        return cls(
            confusion=flat[: c * c].reshape(c, c).copy(),
            pos_hist=flat[c * c : c * c + c * b].reshape(c, b).copy(),
            neg_hist=flat[c * c + c * b :].reshape(c, b).copy(),
        )
