"""Stage ``evaluate``: official KITTI AP of the val predictions -> metrics/ap.json (the headline: the DVC
metric), metrics/eval.json (the full table) and PR curves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pgnn.config.params import EvalConfig, ResolvedReader
from pgnn.core.io import write_json_atomic, write_text_atomic
from pgnn.data.labels import read_labels
from pgnn.data.prepare import read_prepared_dir
from pgnn.eval.kitti import ap_from_curves, pr_curves
from pgnn.eval.report import format_table, headline_ap, write_curves
from pgnn.pipeline.stages import Layout


def evaluate_step(
    cfg: EvalConfig,
    prepared_dir: Path,
    pred_dir: Path,
    metrics_path: Path,
    curves_dir: Path,
    default_classes: tuple[str, ...] = ("Car", "Pedestrian", "Cyclist"),
    headline_path: Path | None = None,
) -> dict:
    """Official KITTI AP of the prediction folder against the labels of the prepared split: the full table
    to ``metrics_path``, the headline (:func:`headline_ap`) to ``headline_path``, PR curves to ``curves_dir``.

    ``cfg.classes`` None reports ``default_classes`` (the stage's resolved params always name them).
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
    if headline_path is not None:
        # in the order shown (3D first), not sorted: DVC's tables keep the file's key order
        write_text_atomic(headline_path, json.dumps(headline_ap(results), indent=2) + "\n")
    if curves_dir.exists():
        shutil.rmtree(curves_dir)
    write_curves(curves, curves_dir)
    return results


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    evaluate_step(
        params.section("eval", EvalConfig),
        layout.path("prepared", "val"),
        layout.path("predictions", "val"),
        layout.path("eval_metrics"),
        layout.path("curves"),
        headline_path=layout.path("ap"),
    )
