"""``pgnn eval GT_LABEL_DIR PRED_DIR --json OUT.json``: official KITTI AP of a folder of result files.

Prints a table (R40 and R11, easy / moderate / hard) and writes the flat results
``{"<class>/<metric>/<difficulty>/<R40|R11>": AP %}`` as JSON; ``--curves DIR`` adds one CSV per class and
metric with the 41-point interpolated precision curves (for ``dvc plots``). Every evaluated frame needs a
result file (an empty one when nothing was detected): a missing one is an error listing how many are missing,
unless ``--allow-missing`` counts such frames as having no detections (with a warning saying how many).

Warnings on stderr, one line per class, when a class has 40 or fewer ground-truth boxes at a difficulty: its
recall then moves in steps of 1/n, so AP R40 counts how many of its 40 recall points are reached (perfect
detections score (n - 1) / 40) rather than measuring precision.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pgnn.core.errors import DataError
from pgnn.core.ids import parse_frame_ids
from pgnn.core.io import write_json_atomic
from pgnn.core.outputs import (
    FORCE_HELP,
    OutputPath,
    check_output_file,
    check_output_folder,
    json_object_with_keys,
    replace_folder,
)
from pgnn.data.kitti import read_split
from pgnn.eval.kitti import (
    CLASSES,
    METRICS,
    ap_from_curves,
    curves_from_arrays,
    ground_truth_counts,
    load_dirs,
)
from pgnn.eval.report import few_ground_truth_warnings, format_table, write_curves


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("gt_dir", help="folder of KITTI label files (label_2)")
    parser.add_argument("pred_dir", help="folder of KITTI result files (16 fields a line, 16th the score)")
    parser.add_argument(
        "--ids",
        help="frames to evaluate: an ImageSets file, or comma-separated ids (0,1 or 000000,000001); "
        "default: every label file",
    )
    parser.add_argument("--classes", nargs="+", default=list(CLASSES), choices=CLASSES, help="default: all")
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS, help="default: all")
    parser.add_argument(
        "--json", dest="json_out", action=OutputPath, help="write the flat AP results here (atomically)"
    )
    parser.add_argument(
        "--curves", action=OutputPath, help="folder for the PR-curve CSVs (<class>_<metric>.csv)"
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="count a frame without a result file as no detections (default: an error)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def missing_results(
    gt_dir: str | Path, pred_dir: str | Path, ids: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The frames to evaluate (``ids``, default every label file) and those without a result file."""
    gt_dir, pred_dir = Path(gt_dir), Path(pred_dir)
    frames = list(ids) if ids is not None else sorted(p.stem for p in gt_dir.glob("*.txt"))
    if not pred_dir.is_dir():
        return frames, []  # load_dirs says so
    return frames, [f for f in frames if not (pred_dir / f"{f}.txt").is_file()]


def check_results_present(gt_dir: str | Path, pred_dir: str | Path, ids: Sequence[str] | None) -> None:
    """Raise DataError when a frame to evaluate (``ids``, default every label file) has no result file in
    ``pred_dir``: the message says how many are missing and names the first few ids."""
    frames, missing = missing_results(gt_dir, pred_dir, ids)
    if missing:
        first = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataError(
            pred_dir,
            f"expected a result file for each of the {len(frames)} frames, "
            f"{len(missing)} missing ({first}); --allow-missing counts them as no detections",
        )


def parse_eval_ids(spec: str | None) -> list[str] | None:
    """``--ids``: an ImageSets file, or comma-separated frame ids (zero-padded to 6 digits)."""
    if spec is None:
        return None
    if Path(spec).is_file():
        return read_split(spec)
    try:
        return parse_frame_ids(spec)
    except ValueError:
        raise DataError(
            spec, "expected an ImageSets file or comma-separated frame ids, got neither"
        ) from None


def warn(message: str) -> None:
    print(f"pgnn eval: warning: {message}", file=sys.stderr)


CURVES_MAKER = "pgnn eval --curves"
"""The marker's ``made_by`` of a ``--curves`` folder."""
_RESULT_KEY = re.compile(r"[^/]+/[^/]+/(easy|moderate|hard)/R(40|11)")


def is_eval_results(path: Path) -> bool:
    """Whether ``path`` holds the flat AP results ``pgnn eval --json`` writes (then it may be replaced)."""
    return json_object_with_keys(path, lambda keys: bool(keys) and all(map(_RESULT_KEY.fullmatch, keys)))


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse ``--json`` / ``--curves`` onto an input (a label file, the result folder) or onto files pgnn
    did not write (without ``--force``), before any work."""
    inputs = [args.gt_dir, args.pred_dir, *([args.ids] if args.ids and Path(args.ids).is_file() else [])]
    if args.json_out:
        check_output_file(args.json_out, force=args.force, inputs=inputs, ours=is_eval_results)
    if args.curves:
        check_output_folder(args.curves, CURVES_MAKER, force=args.force, inputs=inputs)


def run(args: argparse.Namespace) -> int:
    check_outputs(args)
    ids = parse_eval_ids(args.ids)
    if args.allow_missing:
        frames, missing = missing_results(args.gt_dir, args.pred_dir, ids)
        if missing:
            warn(
                f"{len(missing)} of {len(frames)} frames have no result file in {args.pred_dir}; "
                "counted as no detections"
            )
    else:
        check_results_present(args.gt_dir, args.pred_dir, ids)
    gt, dt = load_dirs(args.gt_dir, args.pred_dir, ids)
    for line in few_ground_truth_warnings(ground_truth_counts(gt, args.classes)):
        warn(line)
    curves = curves_from_arrays(gt, dt, args.classes, args.metrics)
    results = ap_from_curves(curves)
    print(f"{gt.num_frames} frames, {len(dt.score)} detections")
    print(format_table(results), end="")
    if args.json_out:
        check_outputs(args)  # again: after every read
        write_json_atomic(args.json_out, results)
    if args.curves:
        inputs = [args.gt_dir, args.pred_dir]
        with replace_folder(args.curves, CURVES_MAKER, force=args.force, inputs=inputs) as tmp:
            write_curves(curves, tmp)
    return 0
