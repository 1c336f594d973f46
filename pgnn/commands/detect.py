"""``pgnn detect``: detections on point clouds as they come from a LiDAR, no calib, no camera.

::

    pgnn detect FILE... --checkpoint CKPT [--sensor S.yaml] [--out DIR] [--kitti] [--png]

``FILE`` is a ``.bin`` (N x 4 float32), ``.npy`` (N x 3, N x 4, N x 8 painted), ``.pcd`` (ASCII, binary,
binary_compressed) or ``.ply`` (ASCII, binary) scan in the sensor frame (x forward, y left, z up, metres;
``pgnn.data.pointcloud``). ``--sensor`` describes the mount and the field of view
(``pgnn.config.sensor``; default KITTI's HDL-64E, the whole 360 degrees); the points in that view go to the
network in the frame it was trained in (``pgnn.data.sensor``).

Each input gives ``DIR/<stem>.json``::

    {"detections": [{"class": "Car", "score": 12.4, "probability": 0.93,
                     "box": [x, y, z, l, w, h, yaw]}, ...]}

with the box centre at its geometric centre in the output frame (the sensor frame unless the sensor file
sets an extrinsic) and yaw about +z from +x; ``--kitti`` adds ``DIR/<stem>.txt``, KITTI result lines in the
rectified camera frame of the synthesised calib (2D boxes -1: there is no image); ``--png`` adds
``DIR/png/<stem>_bev.png``, the points in view and the detections seen from above in the JSON's frame,
titled by the file's name (``pgnn.viz.sensor_view.sensor_bev_figure``).

``score`` is the original Point-GNN's detection score, the one KITTI's AP ranks by and the ``--kitti`` lines
carry: the class probability of the box NMS kept plus those of the overlapping candidates it merged, each
weighted by its IoU with the merged box, times 1 to 2 for how much of the box the candidates' keypoints span
(``pgnn.inference.postprocess``). It is a vote, not a probability: just over the threshold for a box one
keypoint saw, tens for a well-seen car. ``probability`` (in (threshold, 1]) is the network's class
probability of the kept box, the highest of the candidates merged into it.

The graph's voxel grid is anchored at multiples of the voxel size (``--voxel-origin fixed``), not at the
scan's minimum as in the original and ``pgnn predict`` (``points_min``): a box then depends only on the
points near it, so a crop (``--sensor`` field of view or range) and the whole scan agree on it
(``pgnn.graphs.voxel``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgnn.core.errors import DataError
from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_folder, replace_folder

if TYPE_CHECKING:
    import numpy as np

    from pgnn.config.sensor import SensorConfig

_RGB_FEATURES = ("irgb", "rgb", "0rgb")


EPILOG = (
    "score: the original Point-GNN's detection score (KITTI's AP ranks by it; --kitti writes it): the kept "
    "box's class probability plus its merged neighbours', weighted by overlap, times 1-2 for how much of the "
    "box its keypoints cover; a vote, not a probability (tens for a well-seen car). probability: the kept "
    "box's class probability, 0..1."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("files", nargs="+", metavar="FILE", help="point clouds: .bin, .npy, .pcd or .ply")
    parser.add_argument("--checkpoint", required=True, help="a pgnn checkpoint (.pt)")
    parser.add_argument("--sensor", default=None, help="sensor YAML (default: KITTI's HDL-64E, 360 degrees)")
    parser.add_argument(
        "--out", default="detections", action=OutputPath, help="folder for <stem>.json (and .txt, png/)"
    )
    parser.add_argument("--kitti", action="store_true", help="also write KITTI result lines <stem>.txt")
    parser.add_argument("--png", action="store_true", help="also write a bird's-eye picture per input")
    parser.add_argument(
        "--missing-intensity",
        choices=("refuse", "zeros"),
        default="refuse",
        help="a scan without intensity: refuse it, or use 0 for every point (with a warning)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="auto: cuda when available, else cpu",
    )
    parser.add_argument(
        "--score-threshold",
        type=float,
        default=None,
        help="candidates need a class probability above this (default 1/num_classes)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of the network's products (default: one per core; the same detections on any)",
    )
    parser.add_argument(
        "--voxel-origin",
        choices=("fixed", "points_min"),
        default="fixed",
        help="voxel grid anchor: fixed (at multiples of the voxel size: a box depends only on the points "
        "near it, whatever the crop) or points_min (the original's and pgnn predict's: at the scan's min)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of any random choice in graph building")
    parser.add_argument("--quiet", action="store_true", help="no per-file lines")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def detections_json(
    names: Sequence[str], scores: np.ndarray, probabilities: np.ndarray, boxes_out: np.ndarray
) -> dict[str, list[dict[str, Any]]]:
    """``{"detections": [{"class", "score", "probability", "box"}]}`` from names, the original's scores, the
    kept boxes' class probabilities and output-frame boxes (see the module docstring).

    Shapes:
        scores: (M,); probabilities: (M,); boxes_out: (M, 7) [x, y, z, l, w, h, yaw]
    """
    return {
        "detections": [
            {
                "class": name,
                "score": round(float(score), 6),
                "probability": round(float(prob), 6),
                "box": [round(float(v), 4) for v in box],
            }
            for name, score, prob, box in zip(names, scores, probabilities, boxes_out, strict=True)
        ]
    }


def write_picture(
    png: Path, name: str, points_rect: np.ndarray, sensor: SensorConfig, result: dict[str, list]
) -> None:
    """The bird's-eye picture of one scan's points in view and its JSON detections, in the output frame.

    Shapes:
        points_rect: (N, 3) rectified camera frame (the network's)
    """
    import numpy as np

    from pgnn.data.sensor import output_to_rect
    from pgnn.viz.sensor_view import write_sensor_bev_png

    rect_to_out = np.linalg.inv(output_to_rect(sensor))  # (4, 4)
    points = points_rect @ rect_to_out[:3, :3].T + rect_to_out[:3, 3]  # (N, 3) output frame
    dets = result["detections"]
    boxes = np.array([d["box"] for d in dets], dtype=np.float64).reshape(-1, 7)  # (M, 7)
    scores = np.array([d["score"] for d in dets], dtype=np.float64)  # (M,)
    title = f"{name}: {len(points):,} points in view; {len(dets)} detections"
    write_sensor_bev_png(png, points, boxes, [d["class"] for d in dets], scores, title)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from pgnn.config.sensor import load_sensor
    from pgnn.core.io import write_json_atomic
    from pgnn.data.pointcloud import read_scan
    from pgnn.data.sensor import boxes_rect_to_output, frame_from_sensor_scan
    from pgnn.inference.backends import load_detector
    from pgnn.inference.predict import predict_frame
    from pgnn.inference.results import write_detections
    from pgnn.inference.settings import resolve_device, set_threads

    paths = [Path(f) for f in args.files]
    stems = [p.stem for p in paths]
    for i, stem in enumerate(stems):
        if stem in stems[:i]:
            raise DataError(paths[i], f"expected inputs with different names, {stem!r} is given twice")
    inputs = [*paths, args.checkpoint, *([args.sensor] if args.sensor else [])]
    check_output_folder(args.out, "pgnn detect", force=args.force, inputs=inputs)  # before any work
    sensor = load_sensor(args.sensor)
    set_threads(args.threads)
    device = resolve_device(args.device)
    detector = load_detector(args.checkpoint, device, threads=args.threads)
    model, card = detector.network, detector.card
    if card.input_features in _RGB_FEATURES:
        raise DataError(args.checkpoint, "expected a checkpoint without colour features (no camera here)")
    graph_cfg = type(card.runtime_graph).model_validate(
        {**card.runtime_graph.model_dump(), "voxel_origin": args.voxel_origin}
    )
    post_cfg = card.with_postprocess(score_threshold=args.score_threshold)
    rng = np.random.default_rng(args.seed)
    total = 0
    with replace_folder(args.out, "pgnn detect", force=args.force, inputs=inputs) as out:
        for path in paths:
            scan, scores = read_scan(path, args.missing_intensity)  # (N, 4), (N, 4) | None
            frame = frame_from_sensor_scan(path.stem, scan, sensor, scores=scores)
            if len(frame.points_rect) == 0:
                raise DataError(
                    path, f"expected points in the field of view ({sensor.field_of_view} deg), got none"
                )
            prediction = predict_frame(model, card, frame, graph_cfg, post_cfg, device, rng)
            detections, times = prediction.detections, prediction.times
            boxes = boxes_rect_to_output(detections.boxes, sensor)  # (M, 7)
            result = detections_json(detections.names, detections.scores, detections.probabilities, boxes)
            write_json_atomic(out / f"{path.stem}.json", result)
            if args.kitti:
                write_detections(out / f"{path.stem}.txt", detections)
            if args.png:
                write_picture(
                    out / "png" / f"{path.stem}_bev.png", path.name, frame.points_rect, sensor, result
                )
            total += len(detections)
            if not args.quiet:
                ms = 1000.0 * sum(times.values())
                points = len(frame.points_rect)
                print(f"{path}: {points} points, {len(detections)} detections, {ms:.0f} ms", file=sys.stderr)
    print(f"{len(paths)} file{'s' if len(paths) != 1 else ''}, {total} detections -> {args.out}")
    return 0
