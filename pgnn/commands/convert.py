"""``pgnn convert SRC DEST``: an own-format dataset (LiDAR scans, boxes in the sensor frame) -> a KITTI root.

``SRC`` holds ``points/<name>.{bin,npy,pcd,ply}``, ``labels/<name>.json``, ``splits/<split>.txt`` and
optionally ``sensor.yaml``; ``DEST`` receives ``training/{velodyne,calib,label_2}``, ``ImageSets/`` and
``frame_names.txt``, a LiDAR-only root that prepare, training, prediction and evaluation take unchanged. The
layout and what KITTI's camera fields mean without a camera: ``pgnn.data.own_format`` and docs/own-data.md.
``DEST`` is replaced whole, only when every frame converted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pgnn.core.outputs import FORCE_HELP, OutputPath, replace_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="own-format dataset (points/, labels/, splits/, sensor.yaml)")
    parser.add_argument("dest", action=OutputPath, help="KITTI root to write (replaced whole)")
    parser.add_argument(
        "--missing-intensity",
        choices=("refuse", "zeros"),
        default="refuse",
        help="a scan without intensity: refuse it, or use 0 for every point (with a warning)",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def run(args: argparse.Namespace) -> int:
    from pgnn.data.own_format import convert_own_to_kitti

    dest = Path(args.dest)
    with replace_folder(dest, "pgnn convert", force=args.force, inputs=[args.src]) as tmp:
        counts = convert_own_to_kitti(args.src, tmp, args.missing_intensity)
    splits = ", ".join(f"{name} {n}" for name, n in counts.items())
    print(f"{args.src} -> {dest}: splits {splits}")
    return 0
