"""``pgnn predict``: detect objects in KITTI frames and write KITTI result files, with a timing table.

Two ways to name the frames::

    pgnn predict --root ROOT --ids SPLIT_OR_IDS --checkpoint CKPT --out DIR [--png] [--painted] ...
    pgnn predict --bin FILE.bin --calib CALIB.txt --checkpoint CKPT --out DIR [--image PNG] [--label TXT] ...

``--ids`` is a split file, a split name under ``ROOT/ImageSets`` (``val``), or comma-separated frame ids
(``3,114`` or ``000003,000114``). ``--bin`` takes any single velodyne scan (or a PointPainting ``.npy``) with
its calib; without ``--image`` the field of view is ``--image-size`` (default 1242x375) and the points have
no colour. Each frame gives ``DIR/<id>.txt`` (KITTI's label frame; empty when nothing is detected);
``--png`` adds ``DIR/png/<id>_bev.png`` and ``DIR/png/<id>_image.png``.

All or nothing: the frames are written to a temporary folder beside ``DIR``, which replaces ``DIR`` only when
every frame succeeded; a failing frame ends the command with one error line naming it, and ``DIR`` keeps its
previous content. ``DIR`` is replaced whole (no stale results of an earlier run stay in it), so an existing
``DIR`` must be empty or an earlier ``pgnn predict`` folder (its ``.pgnn-output`` marker; ``--force``: any
folder), and never one of the inputs (``pgnn.core.outputs``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from functools import partial
from pathlib import Path

from pgnn.core.errors import DataError
from pgnn.core.ids import parse_frame_ids
from pgnn.core.outputs import (
    FORCE_HELP,
    OutputPath,
    check_output_file,
    check_output_folder,
    json_object_with_keys,
)

_RGB_FEATURES = ("irgb", "rgb", "0rgb")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a pgnn checkpoint (.pt, e.g. written by import-weights), or pgnn export's .onnx (run by ONNX "
        "Runtime) or .pt2 (a torch.export program): the backend follows the suffix",
    )
    parser.add_argument(
        "--out", required=True, action=OutputPath, help="folder for the result files NNNNNN.txt"
    )
    src = parser.add_argument_group("frames of a KITTI root")
    src.add_argument(
        "--root", help="KITTI root (ROOT/training/{velodyne,calib,image_2,label_2}, ROOT/ImageSets)"
    )
    src.add_argument(
        "--ids", help="split file, split name under ROOT/ImageSets, or comma-separated frame ids"
    )
    src.add_argument(
        "--subset",
        choices=("training", "testing"),
        default=None,
        help="folder under ROOT (default: testing for the split 'test', else training)",
    )
    src.add_argument("--painted", action="store_true", help="read painted_lidar/*.npy instead of velodyne/")
    one = parser.add_argument_group("a single scan")
    one.add_argument("--bin", help="a velodyne .bin (x, y, z, reflectance float32) or a painted .npy")
    one.add_argument("--calib", help="its KITTI calib file")
    one.add_argument("--image", default=None, help="its image_2 PNG (optional: field of view and colours)")
    one.add_argument("--label", default=None, help="its label_2 file (optional: drawn with --png)")
    one.add_argument(
        "--image-size", default=None, metavar="W,H", help="field of view without --image (default 1242,375)"
    )
    parser.add_argument("--png", action="store_true", help="also write bird's-eye and image pictures")
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
        "--graph-preset",
        default=None,
        help="runtime graph preset (default: the checkpoint's, as its runtime variant)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of the network's products (default: one per core; the same detections on any)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of any random choice in graph building")
    parser.add_argument(
        "--timings-json", default=None, action=OutputPath, help="also write the timings summary as JSON here"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-frame lines and no progress lines")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def parse_ids(spec: str, root: Path) -> tuple[list[str], str | None]:
    """Frame ids of ``--ids`` and the split name when ``spec`` named one under ``ROOT/ImageSets``.

    ``spec`` is tried as a file path, then as ``ROOT/ImageSets/<spec>.txt``, then as comma-separated ids
    (zero-padded to 6 digits: ``pgnn.core.ids.parse_frame_ids``).
    """
    from pgnn.data.kitti import read_split

    if Path(spec).is_file():
        return read_split(spec), None
    split_file = root / "ImageSets" / f"{spec}.txt"
    if split_file.is_file():
        return read_split(split_file), spec
    try:
        return parse_frame_ids(spec), None
    except ValueError:
        raise DataError(
            "--ids",
            f"expected a split file, a split name under {root / 'ImageSets'} or "
            f"comma-separated frame ids (0,1 or 000000,000001), got {spec!r}",
        ) from None


def parse_image_size(text: str | None) -> tuple[int, int] | None:
    """``"W,H"`` -> (W, H)."""
    if text is None:
        return None
    try:
        width, height = (int(v) for v in text.split(","))
    except ValueError:
        raise DataError("--image-size", f"expected W,H in pixels, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise DataError("--image-size", f"expected positive sizes, got {text!r}")
    return width, height


def _bin_source(args: argparse.Namespace, needs_rgb: bool):  # noqa: ANN202 (a FrameSource)
    from pgnn.data.frames import check_image_matches_calib, check_points_in_view, frame_from_scan
    from pgnn.data.kitti import read_calib, read_image, read_painted, read_velodyne
    from pgnn.data.labels import read_labels
    from pgnn.inference.results import FrameSource

    if not args.calib:
        raise DataError("--bin", "expected --calib CALIB.txt with --bin")
    if needs_rgb and not args.image:
        raise DataError("--bin", "this checkpoint's input features need colours: give --image")
    scan_path = Path(args.bin)
    size = parse_image_size(args.image_size)

    def load():  # noqa: ANN202
        calib = read_calib(args.calib)
        painted = scan_path.suffix == ".npy"
        scan = read_painted(scan_path) if painted else read_velodyne(scan_path)
        image = None
        if args.image:
            image = read_image(args.image)
            check_image_matches_calib(calib, image.shape[1], image.shape[0], args.image, args.calib)
        labels = read_labels(args.label) if args.label else []
        frame = frame_from_scan(
            scan_path.stem, scan, calib, image=image, image_size=size, labels=labels, painted=painted
        )
        view = args.image or f"--image-size {'x'.join(map(str, frame.image_size))}"
        check_points_in_view(len(frame.points_rect), len(scan), view, args.calib)
        return frame

    return FrameSource(scan_path.stem, load, image_path=Path(args.image) if args.image else None)


def input_paths(args: argparse.Namespace) -> list[Path]:
    """What ``pgnn predict`` reads: the output may be none of these, nor inside or above one."""
    given = [args.checkpoint, args.ids if args.ids and Path(args.ids).is_file() else None]
    given += [args.bin, args.calib, args.image, args.label]
    if args.root:
        given += [Path(args.root) / sub for sub in ("training", "testing", "ImageSets")]
    return [Path(p) for p in given if p]


def is_timings(path: Path) -> bool:
    """Whether ``path`` holds an earlier ``--timings-json`` summary (then it may be replaced)."""
    return json_object_with_keys(path, lambda keys: {"device", "frames", "per_frame"} <= keys)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from pgnn.core.io import write_json_atomic
    from pgnn.core.progress import silenced
    from pgnn.data.frames import load_frame
    from pgnn.inference.backends import load_detector
    from pgnn.inference.results import FrameSource, predict_all_or_nothing, predict_frames
    from pgnn.inference.settings import resolve_device, runtime_graph, set_threads

    if bool(args.root) == bool(args.bin):
        raise DataError("pgnn predict", "expected either --root with --ids, or --bin with --calib")
    inputs = input_paths(args)
    check_output_folder(args.out, "pgnn predict", force=args.force, inputs=inputs)  # before any work
    if args.timings_json:
        check_output_file(args.timings_json, force=args.force, inputs=inputs, ours=is_timings)
    set_threads(args.threads)
    device = resolve_device(args.device)
    detector = load_detector(args.checkpoint, device, threads=args.threads)
    graph_cfg = runtime_graph(detector.card, args.graph_preset)
    post_cfg = detector.card.with_postprocess(score_threshold=args.score_threshold)
    needs_rgb = detector.card.input_features in _RGB_FEATURES

    if args.bin:
        sources = [_bin_source(args, needs_rgb)]
    else:
        if not args.ids:
            raise DataError("--root", "expected --ids with --root")
        root = Path(args.root)
        ids, split = parse_ids(args.ids, root)
        subset = args.subset or ("testing" if split == "test" else "training")
        from pgnn.data.kitti import frame_paths

        sources = [
            FrameSource(
                fid,
                partial(load_frame, root, fid, args.painted, subset),
                image_path=frame_paths(root, fid, subset).image,
            )
            for fid in ids
        ]

    def report(frame_id: str, detections, timings: dict[str, float]) -> None:  # noqa: ANN001
        if not args.quiet:
            ms = 1000.0 * timings["total"]
            print(f"{frame_id}: {len(detections)} detections, {ms:.0f} ms", file=sys.stderr)

    predict = partial(
        predict_frames,
        detector.network,
        detector.card,
        graph_cfg=graph_cfg,
        post_cfg=post_cfg,
        device=device,
        rng=np.random.default_rng(args.seed),
        png=args.png,
        on_frame=report,
    )
    with silenced() if args.quiet else contextlib.nullcontext():
        summary = predict_all_or_nothing(
            Path(args.out),
            [s.frame_id for s in sources],
            sources.__getitem__,
            predict,
            force=args.force,
            inputs=inputs,
        )
    print(summary.table(str(device)))
    n = summary.num_frames
    print(f"{n} frame{'s' if n != 1 else ''}, {sum(summary.num_detections)} detections -> {args.out}")
    if args.timings_json:
        check_output_file(args.timings_json, force=args.force, inputs=inputs, ours=is_timings)  # again
        write_json_atomic(args.timings_json, {"device": str(device), **summary.as_dict()})
    return 0
