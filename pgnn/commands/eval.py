"""``pgnn eval GT_LABEL_DIR PRED_DIR --json OUT.json``: official KITTI AP of a folder of result files.

Prints a table (R40 and R11, easy / moderate / hard) and writes the flat results
``{"<class>/<metric>/<difficulty>/<R40|R11>": AP %}`` as JSON; ``--curves DIR`` adds one CSV per class and
metric with the 41-point interpolated precision curves (for ``dvc plots``). A frame without a result file has
no detections.
"""

from __future__ import annotations

import argparse

from pgnn.core.io import write_json_atomic
from pgnn.data.kitti import read_split
from pgnn.eval.kitti import CLASSES, METRICS, ap_from_curves, curves_from_arrays, load_dirs
from pgnn.eval.report import format_table, write_curves


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("gt_dir", help="folder of KITTI label files (label_2)")
    parser.add_argument("pred_dir", help="folder of KITTI result files (16 fields a line, 16th the score)")
    parser.add_argument("--ids", help="ImageSets file of frame ids to evaluate (default: all label files)")
    parser.add_argument("--classes", nargs="+", default=list(CLASSES), choices=CLASSES, help="default: all")
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS, help="default: all")
    parser.add_argument("--json", dest="json_out", help="write the flat AP results here (atomically)")
    parser.add_argument("--curves", help="folder for the PR-curve CSVs (<class>_<metric>.csv)")


def run(args: argparse.Namespace) -> int:
    ids = read_split(args.ids) if args.ids else None
    gt, dt = load_dirs(args.gt_dir, args.pred_dir, ids)
    curves = curves_from_arrays(gt, dt, args.classes, args.metrics)
    results = ap_from_curves(curves)
    print(f"{gt.num_frames} frames, {len(dt.score)} detections")
    print(format_table(results), end="")
    if args.json_out:
        write_json_atomic(args.json_out, results)
    if args.curves:
        write_curves(curves, args.curves)
    return 0
