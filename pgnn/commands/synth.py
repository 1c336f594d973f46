"""``pgnn synth OUT_DIR --frames N --seed S [--val-fraction F]``: write a synthetic KITTI dataset.

OUT_DIR receives ``training/{velodyne,calib,label_2,image_2,painted_lidar}`` for frames 000000 .. N-1 and
``ImageSets/{train,val,trainval}.txt`` (see ``pgnn.data.synthetic``). The same arguments write the same bytes.
All or nothing, and only into an absent or empty folder or an earlier ``pgnn synth`` root (``--force``: any).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pgnn.core.outputs import FORCE_HELP, OutputPath
from pgnn.data.synthetic.dataset import generate_dataset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "out_dir", action=OutputPath, help="folder to write (a KITTI root: training/ and ImageSets/)"
    )
    parser.add_argument("--frames", type=int, required=True, help="number of frames (000000 .. N-1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="dataset seed (>= 0); frame i depends on (seed, i) only"
    )
    parser.add_argument(
        "--val-fraction", type=float, default=0.5, help="share of frames in ImageSets/val.txt"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="processes writing frames (the bytes do not depend on it)"
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def _check(args: argparse.Namespace) -> str | None:
    if args.frames < 1:
        return f"expected --frames >= 1, got {args.frames}"
    if args.seed < 0:
        return f"expected --seed >= 0, got {args.seed}"
    if not 0.0 <= args.val_fraction <= 1.0:
        return f"expected 0 <= --val-fraction <= 1, got {args.val_fraction}"
    if args.workers < 1:
        return f"expected --workers >= 1, got {args.workers}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"pgnn synth: error: {problem}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    generate_dataset(
        args.out_dir,
        args.frames,
        args.seed,
        val_fraction=args.val_fraction,
        force=args.force,
        workers=args.workers,
    )
    summary = {
        "out_dir": str(args.out_dir),
        "frames": args.frames,
        "seed": args.seed,
        "val_fraction": args.val_fraction,
        "seconds": round(time.perf_counter() - start, 2),
    }
    print(json.dumps(summary))
    return 0
