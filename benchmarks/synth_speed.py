"""Synthetic KITTI generator speed on one core, and what the frames hold.

    .venv/bin/python benchmarks/synth_speed.py [--frames 10] [--seed 0]

Prints a table per frame (points, points in the camera's view, objects and labels per class, milliseconds per
stage) and the totals: frames per second for generating in memory and for generating + writing the five
files. The first frame is generated once before timing, so numba's compile (or cache load) is not counted.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from pgnn.data import synthetic as synth  # noqa: E402
from pgnn.data.kitti import fov_mask  # noqa: E402

STAGES = ("scene", "scan", "labels", "image", "paint", "write")


def time_stages(index: int, seed: int, config: synth.SynthConfig, out_dir: str) -> dict[str, float]:
    """Seconds per stage of one frame, running the stages as ``generate_frame`` does."""
    seconds: dict[str, float] = {}
    rng = synth.frame_rng(seed, index)
    t = time.perf_counter()
    scene = synth.sample_scene(rng, config)
    seconds["scene"] = time.perf_counter() - t
    t = time.perf_counter()
    scan = synth.simulate_scan(scene, config, rng)
    seconds["scan"] = time.perf_counter() - t
    t = time.perf_counter()
    synth.make_labels(scene, scan, config)
    fov = fov_mask(scan.points[:, :3], scene.calib, config.image_width, config.image_height)
    seconds["labels"] = time.perf_counter() - t
    t = time.perf_counter()
    synth.render_image(scene, config, rng)
    seconds["image"] = time.perf_counter() - t
    t = time.perf_counter()
    synth.paint_points(scan.points[fov], scan.owner[fov], scene.kinds, config.paint_concentration, rng)
    seconds["paint"] = time.perf_counter() - t
    frame = synth.generate_frame(index, seed, config)
    t = time.perf_counter()
    synth.write_frame(out_dir, frame, config.png_compress_level)
    seconds["write"] = time.perf_counter() - t
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = synth.SynthConfig()
    synth.generate_frame(0, args.seed, config)  # compile / load numba's cache

    print(f"synthetic KITTI, seed {args.seed}, {args.frames} frames, 1 thread")
    header = f"{'frame':>6} {'points':>7} {'fov':>6} {'objects C/V/P/Cy':>17} {'labels C/V/P/Cy/DC':>19}"
    header += "".join(f" {s + ' ms':>9}" for s in STAGES)
    print(header)
    totals: dict[str, float] = collections.defaultdict(float)
    points, fov_points = [], []
    objects: collections.Counter[str] = collections.Counter()
    labels: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.frames):
            frame = synth.generate_frame(index, args.seed, config)
            seconds = time_stages(index, args.seed, config, tmp)
            for stage, value in seconds.items():
                totals[stage] += value
            kinds = collections.Counter(o.kind for o in frame.objects)
            types = collections.Counter(label.type for label in frame.labels)
            objects.update(kinds)
            labels.update(types)
            points.append(len(frame.points_velo))
            fov_points.append(int(frame.fov.sum()))
            obj = "/".join(str(kinds[k]) for k in synth.CLASSES)
            lab = "/".join(str(types[k]) for k in (*synth.CLASSES, "DontCare"))
            row = f"{index:>6} {points[-1]:>7} {fov_points[-1]:>6} {obj:>17} {lab:>19}"
            row += "".join(f" {seconds[s] * 1e3:>9.0f}" for s in STAGES)
            print(row)

        start = time.perf_counter()
        for index in range(args.frames):
            synth.generate_frame(index, args.seed, config)
        in_memory = time.perf_counter() - start
        start = time.perf_counter()
        synth.generate_dataset(tmp, args.frames, args.seed, config=config)
        with_files = time.perf_counter() - start

    n = args.frames
    print()
    print(f"points per scan     mean {np.mean(points):,.0f}  min {min(points):,}  max {max(points):,}")
    fov_text = f"mean {np.mean(fov_points):,.0f}  min {min(fov_points):,}  max {max(fov_points):,}"
    print(f"points in view      {fov_text}")
    print("objects per frame   " + "  ".join(f"{k} {objects[k] / n:.1f}" for k in synth.CLASSES))
    types = (*synth.CLASSES, "DontCare")
    print("labels per frame    " + "  ".join(f"{k} {labels[k] / n:.1f}" for k in types))
    print("mean ms per stage   " + "  ".join(f"{s} {totals[s] / n * 1e3:.0f}" for s in STAGES))
    print(f"generate_frame      {n / in_memory:.2f} frames/s  ({in_memory / n * 1e3:.0f} ms a frame)")
    per_frame = with_files / n * 1e3
    print(f"generate_dataset    {n / with_files:.2f} frames/s  ({per_frame:.0f} ms a frame, files included)")


if __name__ == "__main__":
    main()
