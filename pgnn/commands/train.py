"""``pgnn train --params P.yaml``: train the recipe of a params file, alone or under ``torchrun``.

It needs nothing but the params file and the KITTI root it names: the prepared frames, the ground-truth
database and the cached graphs that the recipe reads are built (or reused) first, with the same functions
and paths as the DVC stages (:mod:`pgnn.pipeline.standalone`). A rerun with the same params resumes the
newest checkpoint of that run.

One writer at a time: the command holds the project's lock (``<project root>/.pgnn/lock``, taken by
``pgnn.pipeline.runner.driver_session``) from start to end, so a second ``pgnn train`` on the same project
is refused at once naming the first one's pid (under ``torchrun`` rank 0 holds it for all ranks).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params",
        type=Path,
        default=Path("params.yaml"),
        help="params.yaml (its folder is the project root)",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="override train.max_steps")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=None, help="override train.device"
    )


def run(args: argparse.Namespace) -> int:
    from pgnn.config.params import load_params
    from pgnn.pipeline.standalone import train_project

    load_params(args.params)  # a bad params file is named before anything is written
    path = train_project(args.params, max_steps=args.max_steps, device=args.device)
    print(f"model: {path}")
    return 0
