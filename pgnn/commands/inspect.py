"""``pgnn inspect ROOT FRAME_ID [--json]``: a frame's point counts and its objects.

JSON keys: ``frame_id``, ``points`` (rows of the raw scan), ``points_in_fov`` (rows image_2 sees),
``image_size`` [W, H], ``objects``: one {"type", "difficulty" (easy / moderate / hard / none),
"points_inside" (field-of-view points inside the label box, ``pgnn.core.boxes.points_in_boxes``), "box"
[x, y, z, l, h, w, ry]} a label line, in file order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pgnn.core.boxes import points_in_boxes
from pgnn.core.ids import frame_id_arg
from pgnn.data.frames import load_frame
from pgnn.data.kitti import frame_paths, read_scan
from pgnn.data.labels import difficulty, difficulty_name, labels_to_boxes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="KITTI root (holds training/)")
    parser.add_argument("frame_id", type=frame_id_arg, help="frame id: 7 or 000007 (zero-padded to 6 digits)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: a short table)")
    parser.add_argument("--painted", action="store_true", help="read painted_lidar/ instead of velodyne/")
    parser.add_argument("--subset", default="training", help="folder under ROOT (training or testing)")


def inspect_frame(
    root: str | Path, frame_id: str, painted: bool = False, subset: str = "training"
) -> dict[str, Any]:
    """The summary ``pgnn inspect`` prints."""
    raw_rows = len(read_scan(frame_paths(root, frame_id, subset), painted))
    frame = load_frame(root, frame_id, painted=painted, subset=subset)
    inside = points_in_boxes(frame.points_rect, labels_to_boxes(frame.labels))  # (N, M)
    counts = inside.sum(axis=0)  # (M,)
    objects = [
        {
            "type": label.type,
            "difficulty": difficulty_name(difficulty(label)),
            "points_inside": int(counts[i]),
            "box": [label.x, label.y, label.z, label.l, label.h, label.w, label.ry],
        }
        for i, label in enumerate(frame.labels)
    ]
    return {
        "frame_id": frame_id,
        "points": raw_rows,
        "points_in_fov": int(frame.points_rect.shape[0]),
        "image_size": list(frame.image_size),
        "objects": objects,
    }


def run(args: argparse.Namespace) -> int:
    summary = inspect_frame(args.root, args.frame_id, painted=args.painted, subset=args.subset)
    if args.json:
        print(json.dumps(summary))
        return 0
    width, height = summary["image_size"]
    print(
        f"frame {summary['frame_id']}: {summary['points']} points, {summary['points_in_fov']} in the "
        f"{width}x{height} image's view, {len(summary['objects'])} objects"
    )
    for obj in summary["objects"]:
        print(f"  {obj['type']:<15} {obj['difficulty']:<9} {obj['points_inside']:>6} points")
    return 0
