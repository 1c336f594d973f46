"""``pgnn view``: one interactive 3D page per frame (``DIR/<id>.html``), self-contained, opened offline.

::

    pgnn view --root ROOT ID... [--split S] [--checkpoint CKPT] [--graph] [--clusters] --out DIR

The frames are the ``ID``s (``3`` or ``000003``) and/or those of ``--split`` (a split file or a name under
``ROOT/ImageSets``, cut to ``--limit``). Each page shows the frame's field-of-view points, its label boxes
and, with ``--checkpoint``, the model's detections (class and score on hover), the graph's keypoints and
edges (``--graph``) and the candidates of each box-merge cluster (``--clusters``). See docs/view.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pgnn.core.errors import DataError
from pgnn.core.ids import frame_id_arg
from pgnn.core.outputs import FORCE_HELP, OutputPath, check_output_folder, replace_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pgnn.viz.html import MAX_EDGES, MAX_POINTS
    from pgnn.viz.render import COLOR_BY

    parser.add_argument("ids", nargs="*", type=frame_id_arg, metavar="ID", help="frame ids: 7 or 000007")
    parser.add_argument("--root", required=True, help="KITTI root (ROOT/training/{velodyne,calib,...})")
    parser.add_argument("--out", required=True, action=OutputPath, help="folder for the pages <id>.html")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument(
        "--split", default=None, help="also the frames of this split (file or ImageSets name)"
    )
    parser.add_argument("--limit", type=int, default=None, help="at most this many frames of --split")
    parser.add_argument("--subset", default="training", help="folder under ROOT (training or testing)")
    parser.add_argument("--painted", action="store_true", help="read painted_lidar/ instead of velodyne/")
    parser.add_argument("--checkpoint", default=None, help="a pgnn checkpoint (.pt): draw its detections")
    parser.add_argument(
        "--color-by",
        choices=COLOR_BY,
        default=None,
        help="point colours (default: height; painted with --painted)",
    )
    parser.add_argument(
        "--graph", action="store_true", help="draw the graph's keypoints and edges (--checkpoint)"
    )
    parser.add_argument("--clusters", action="store_true", help="draw the box-merge clusters (--checkpoint)")
    parser.add_argument("--max-points", type=int, default=MAX_POINTS, help="points drawn at most (a sample)")
    parser.add_argument(
        "--max-edges", type=int, default=MAX_EDGES, help="graph edges drawn at most (a sample)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the samples and of graph building")
    parser.add_argument(
        "--device", default="cpu", choices=("auto", "cpu", "cuda"), help="where the model runs"
    )
    parser.add_argument("--score-threshold", type=float, default=None, help="as for pgnn predict")
    parser.add_argument("--graph-preset", default=None, help="as for pgnn predict")


def _frame_ids(args: argparse.Namespace) -> list[str]:
    ids = list(args.ids)
    if args.split:
        from pgnn.data.kitti import read_split

        named = Path(args.root) / "ImageSets" / f"{args.split}.txt"
        path = Path(args.split) if Path(args.split).is_file() else named
        if not path.is_file():
            raise DataError("--split", f"expected a split file or a split name with a file {named}, got none")
        split_ids = read_split(path)
        ids += split_ids[: args.limit] if args.limit is not None else split_ids
    if not ids:
        raise DataError("pgnn view", "expected frame ids (ID... or --split S)")
    return list(dict.fromkeys(ids))  # in order, once each


def run(args: argparse.Namespace) -> int:
    if (args.graph or args.clusters) and not args.checkpoint:
        raise DataError(
            "--graph/--clusters", "expected --checkpoint (the graph and clusters are the model's)"
        )
    for name in ("max_points", "max_edges"):
        if getattr(args, name) < 1:
            raise DataError(
                f"--{name.replace('_', '-')}", f"expected a positive number, got {getattr(args, name)}"
            )
    ids = _frame_ids(args)
    explain = _explainer(args) if args.checkpoint else None
    color_by = args.color_by or ("painted" if args.painted else "height")
    inputs = [args.root, *([args.checkpoint] if args.checkpoint else [])]
    check_output_folder(args.out, "pgnn view", force=args.force, inputs=inputs)  # before any work
    with replace_folder(args.out, "pgnn view", force=args.force, inputs=inputs) as out:
        for fid in ids:
            _write_page(args, fid, explain, color_by, out)
    return 0


def _write_page(args: argparse.Namespace, fid: str, explain: Any, color_by: str, out: Path) -> None:
    """The page of frame ``fid`` in ``out``."""
    from pgnn.data.frames import load_frame
    from pgnn.viz.html import Boxes, view_figure, write_frame_html

    frame = load_frame(args.root, fid, painted=args.painted, subset=args.subset)
    if color_by == "painted" and frame.scores is None:
        raise DataError("--color-by", "expected --painted with --color-by painted")
    result = explain(frame) if explain is not None else None
    detections = None
    if result is not None:
        d = result.detections
        detections = Boxes(d.boxes, d.names, d.scores)
    fig = view_figure(
        fid,
        frame.points_rect,
        color_by=color_by,
        intensity=frame.intensity,
        painted_scores=frame.scores,
        labels=Boxes.from_labels(frame.labels),
        detections=detections,
        graph=result.graph if result is not None and args.graph else None,
        clusters=(result.candidate_keypoints, result.cluster)
        if result is not None and args.clusters
        else None,
        max_points=args.max_points,
        max_edges=args.max_edges,
        seed=args.seed,
    )
    write_frame_html(fig, out / f"{fid}.html", div_id=f"pgnn-view-{fid}")
    n = "" if detections is None else f", {len(detections.names)} detections"
    final = Path(args.out) / f"{fid}.html"  # where it is once the folder is in place (out is temporary)
    print(f"{final}: {len(frame.labels)} labels{n}", file=sys.stderr)


def _explainer(args: argparse.Namespace):  # noqa: ANN202 (Frame -> Prediction)
    """The checkpoint's model as a function of a frame, with the settings ``pgnn predict`` uses."""
    from functools import partial

    import numpy as np

    from pgnn.inference.backends import load_detector
    from pgnn.inference.predict import predict_frame
    from pgnn.inference.settings import resolve_device, runtime_graph

    device = resolve_device(args.device)
    detector = load_detector(args.checkpoint, device)
    return partial(
        predict_frame,
        detector.network,
        detector.card,
        graph_cfg=runtime_graph(detector.card, args.graph_preset),
        post_cfg=detector.card.with_postprocess(score_threshold=args.score_threshold),
        device=device,
        rng=np.random.default_rng(args.seed),
    )
