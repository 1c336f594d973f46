"""Stage ``evaluate``: official KITTI AP of the val predictions -> metrics/eval.json and PR curves."""

from __future__ import annotations

import shutil
from pathlib import Path

from pgnn.config.params import EvalConfig, Params
from pgnn.config.presets import resolve
from pgnn.core.io import write_json_atomic
from pgnn.data.labels import read_labels
from pgnn.data.prepare import read_prepared_dir
from pgnn.eval.kitti import ap_from_curves, pr_curves
from pgnn.eval.report import format_table, write_curves
from pgnn.graphs.targets import object_classes
from pgnn.pipeline.stages import Layout


def evaluate_step(
    cfg: EvalConfig,
    prepared_dir: Path,
    pred_dir: Path,
    metrics_path: Path,
    curves_dir: Path,
    default_classes: tuple[str, ...] = ("Car", "Pedestrian", "Cyclist"),
) -> dict:
    """Official KITTI AP of the prediction folder against the labels of the prepared split.

    ``cfg.classes`` None reports ``default_classes`` (the stage passes the classes the preset detects).
    """
    frames = read_prepared_dir(prepared_dir)
    gt = [f.labels for f in frames]
    dt = []
    for f in frames:
        path = pred_dir / f"{f.frame_id}.txt"
        dt.append(read_labels(path, allow_score=True) if path.exists() else [])
    curves = pr_curves(gt, dt, cfg.classes or default_classes)
    results = ap_from_curves(curves)
    print(format_table(results))
    write_json_atomic(metrics_path, results)
    if curves_dir.exists():
        shutil.rmtree(curves_dir)
    write_curves(curves, curves_dir)
    return results


def run(params: Params, layout: Layout, item: str | None) -> None:
    evaluate_step(
        params.eval,
        layout.prepared("val"),
        layout.predictions("val"),
        layout.eval_metrics,
        layout.curves,
        default_classes=object_classes(resolve(params).targets.label_method),
    )
