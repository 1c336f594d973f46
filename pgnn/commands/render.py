"""``pgnn render ROOT FRAME_ID OUT.png``: a bird's-eye view of a frame's points and label boxes."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from pgnn.core.ids import frame_id_arg
from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_file
from pgnn.data.frames import load_frame
from pgnn.data.kitti import frame_paths
from pgnn.viz.render import COLOR_BY, write_bev_png


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="KITTI root (holds training/)")
    parser.add_argument("frame_id", type=frame_id_arg, help="frame id: 7 or 000007 (zero-padded to 6 digits)")
    parser.add_argument("out", action=OutputPath, help="PNG to write")
    parser.add_argument(
        "--painted",
        action="store_true",
        help="read painted_lidar/ instead of velodyne/ and colour points by painted class",
    )
    parser.add_argument(
        "--color-by",
        choices=COLOR_BY,
        default=None,
        help="point colouring (default: height; painted with --painted)",
    )
    parser.add_argument("--subset", default="training", help="folder under ROOT (training or testing)")
    parser.add_argument(
        "--x-range",
        type=float,
        nargs=2,
        default=(-40.0, 40.0),
        metavar=("MIN", "MAX"),
        help="sideways extent in metres (default -40 40)",
    )
    parser.add_argument(
        "--z-range",
        type=float,
        nargs=2,
        default=(0.0, 70.0),
        metavar=("MIN", "MAX"),
        help="forward extent in metres (default 0 70)",
    )
    parser.add_argument("--dpi", type=int, default=120, help="resolution of the PNG")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def run(args: argparse.Namespace) -> int:
    paths = frame_paths(args.root, args.frame_id, args.subset)
    inputs = [v for v in dataclasses.astuple(paths) if isinstance(v, Path)]
    check_output_file(args.out, force=args.force, inputs=inputs)
    frame = load_frame(args.root, args.frame_id, painted=args.painted, subset=args.subset)
    color_by = args.color_by or ("painted" if args.painted else "height")
    check_output_file(args.out, force=args.force, inputs=inputs)  # again: after every read
    write_bev_png(
        frame,
        args.out,
        color_by=color_by,
        x_range=tuple(args.x_range),
        z_range=tuple(args.z_range),
        dpi=args.dpi,
    )
    print(args.out)
    return 0
