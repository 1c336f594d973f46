"""How fast is the KITTI evaluation on the full val split (3,769 frames, all classes and metrics)?

Extracts the real training labels to a temporary folder, writes synthetic result files (ground truth with
jittered boxes and random scores, plus random false positives; ``--extra-fp`` per frame), and times
reading the folders, the overlaps + matching passes, and ``evaluate_dirs`` end to end.

    .venv/bin/python benchmarks/eval_speed.py [--extra-fp 3] [--repeat 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from pgnn.data.kitti import read_split  # noqa: E402
from pgnn.data.labels import Label, read_labels, write_labels  # noqa: E402
from pgnn.eval.kitti import ap_from_curves, curves_from_arrays, evaluate_dirs, load_dirs  # noqa: E402

SHARED = Path(os.environ.get("PGNN_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"


def jittered(labels: list[Label], rng: np.random.Generator, extra_fp: int) -> list[Label]:
    """One frame's detections: most objects with noisy 2D/3D boxes and random scores, plus false positives."""
    out = []
    for lab in labels:
        if lab.type == "DontCare" or rng.random() < 0.15:
            continue
        bbox = tuple(float(v) for v in np.asarray(lab.bbox) + rng.normal(0.0, 4.0, 4))
        out.append(
            dataclasses.replace(
                lab,
                bbox=bbox,
                x=lab.x + rng.normal(0, 0.25),
                z=lab.z + rng.normal(0, 0.4),
                l=lab.l * rng.uniform(0.9, 1.1),
                ry=lab.ry + rng.normal(0, 0.2),
                score=float(rng.uniform()),
            )
        )
    for _ in range(extra_fp):
        left, top, height = rng.uniform(0, 1100), rng.uniform(120, 300), rng.uniform(15, 120)
        out.append(
            Label(
                type=str(rng.choice(["Car", "Pedestrian", "Cyclist"])),
                truncated=0.0,
                occluded=0,
                alpha=float(rng.uniform(-3, 3)),
                bbox=(left, top, left + 1.5 * height, top + height),
                h=1.5,
                w=1.6,
                l=3.9,
                x=float(rng.uniform(-15, 15)),
                y=1.7,
                z=float(rng.uniform(5, 60)),
                ry=float(rng.uniform(-3, 3)),
                score=float(rng.uniform()),
            )
        )
    return out


def run_benchmark(
    labels_tar: Path = SHARED / "kitti_labels" / "training_label_2.tar.gz",
    split: Path = SHARED / "kitti_splits" / "ImageSets" / "val.txt",
    extra_fp: int = 3,
    repeat: int = 3,
) -> dict:
    """Time the KITTI evaluation of jittered detections on every frame of ``split``; return the figures."""
    ids = read_split(split)
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pgnn-eval-bench-") as tmp:
        with tarfile.open(labels_tar) as tar:
            tar.extractall(tmp, filter="data")
        gt_dir = Path(tmp) / "label_2"
        pred_dir = Path(tmp) / "pred"
        for frame_id in ids:
            labels = read_labels(gt_dir / f"{frame_id}.txt")
            write_labels(pred_dir / f"{frame_id}.txt", jittered(labels, rng, extra_fp))

        t0 = time.perf_counter()
        gt, dt = load_dirs(gt_dir, pred_dir, ids)
        rows.append(("read folders (load_dirs)", time.perf_counter() - t0))
        t0 = time.perf_counter()
        curves = curves_from_arrays(gt, dt)
        rows.append(("curves, first call (numba cache load/compile)", time.perf_counter() - t0))
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            curves = curves_from_arrays(gt, dt)
            times.append(time.perf_counter() - t0)
        rows.append((f"curves, warm (best of {repeat})", min(times)))
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            results = evaluate_dirs(gt_dir, pred_dir, ids)
            times.append(time.perf_counter() - t0)
        rows.append((f"evaluate_dirs end to end (best of {repeat})", min(times)))
        assert results == ap_from_curves(curves)
    return {
        "frames": len(ids),
        "ground_truth": len(gt.score),
        "detections": len(dt.score),
        "curves": len(curves),
        "seconds": dict(rows),
        "car_3d_moderate": {"R40": results["Car/3d/moderate/R40"], "R11": results["Car/3d/moderate/R11"]},
    }


def format_table(result: dict) -> str:
    lines = [
        f"{result['frames']} frames, {result['ground_truth']} ground-truth labels, {result['detections']} "
        f"detections, {result['curves']} curves (classes x metrics x difficulties)",
        f"{'step':<52}{'seconds':>10}",
    ]
    lines += [f"{name:<52}{seconds:>10.3f}" for name, seconds in result["seconds"].items()]
    car = result["car_3d_moderate"]
    lines.append(f"Car/3d/moderate: R40 {car['R40']:.2f}  R11 {car['R11']:.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    labels_tar = SHARED / "kitti_labels" / "training_label_2.tar.gz"
    parser.add_argument("--labels-tar", type=Path, default=labels_tar)
    parser.add_argument("--split", type=Path, default=SHARED / "kitti_splits" / "ImageSets" / "val.txt")
    parser.add_argument("--extra-fp", type=int, default=3, help="random false positives per frame")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(format_table(run_benchmark(args.labels_tar, args.split, args.extra_fp, args.repeat)))


if __name__ == "__main__":
    main()
