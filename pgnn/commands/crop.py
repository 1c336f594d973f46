"""``pgnn crop ROOT FRAME_ID OUT.bin``: the scan rows image_2 sees, as a velodyne_reduced ``.bin``.

This is the file SECOND / OpenPCDet / mmdetection3d call ``velodyne_reduced/NNNNNN.bin``: the raw velodyne
rows (all 4 columns, original order) whose projection P2 . R0_rect . Tr_velo_to_cam . [x, y, z, 1] lands in
image_2.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from pgnn.core.ids import frame_id_arg
from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_file
from pgnn.data.frames import check_image_matches_calib, check_points_in_view, fov_mask
from pgnn.data.kitti import frame_paths, image_size, read_calib, read_velodyne, write_velodyne


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="KITTI root (holds training/)")
    parser.add_argument("frame_id", type=frame_id_arg, help="frame id: 7 or 000007 (zero-padded to 6 digits)")
    parser.add_argument("out", action=OutputPath, help=".bin file to write (float32 x, y, z, reflectance)")
    parser.add_argument("--subset", default="training", help="folder under ROOT (training or testing)")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def crop_frame(root: str | Path, frame_id: str, subset: str = "training") -> np.ndarray:
    """The field-of-view rows of a frame's velodyne scan (DataError when the image does not match the calib
    or no row is in view: see ``check_image_matches_calib``, ``check_points_in_view``).

    Shapes:
        returns (K, 4) float32, velodyne frame, in scan order.
    """
    paths = frame_paths(root, frame_id, subset)
    scan = read_velodyne(paths.points)  # (N, 4)
    width, height = image_size(paths.image)
    calib = read_calib(paths.calib)
    check_image_matches_calib(calib, width, height, paths.image, paths.calib)
    kept = scan[fov_mask(scan[:, :3], calib, width, height)]
    check_points_in_view(len(kept), len(scan), paths.image, paths.calib)
    return kept


def run(args: argparse.Namespace) -> int:
    paths = frame_paths(args.root, args.frame_id, args.subset)
    inputs = [v for v in dataclasses.astuple(paths) if isinstance(v, Path)]
    check_output_file(args.out, force=args.force, inputs=inputs)  # never onto its own scan
    points = crop_frame(args.root, args.frame_id, subset=args.subset)
    check_output_file(args.out, force=args.force, inputs=inputs)  # again: after every read
    write_velodyne(args.out, points)
    print(f"{args.out}: {len(points)} points")
    return 0
