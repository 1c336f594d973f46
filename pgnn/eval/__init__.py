"""Evaluation: the official KITTI object-detection AP (2D, AOS, BEV, 3D; R40 and R11)."""

from pgnn.eval.kitti import (
    CLASSES,
    DIFFICULTIES,
    METRICS,
    ap_from_curves,
    curves_from_arrays,
    evaluate,
    evaluate_dirs,
    labels_to_arrays,
    load_dirs,
    pr_curves,
    recall_points,
)
from pgnn.eval.report import format_table, write_curves

__all__ = [
    "CLASSES",
    "DIFFICULTIES",
    "METRICS",
    "ap_from_curves",
    "curves_from_arrays",
    "evaluate",
    "evaluate_dirs",
    "format_table",
    "labels_to_arrays",
    "load_dirs",
    "pr_curves",
    "recall_points",
    "write_curves",
]
