"""Synthetic KITTI generator speed on one core, and what the frames hold.

    .venv/bin/python benchmarks/synth_speed.py [--frames 10] [--seed 0] [--json]

``run_benchmark(frames, seed)`` returns the figures as a dict (``ms_per_frame``, ``frames_per_s``, ...).

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
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from pgnn.data.frames import fov_mask  # noqa: E402
from pgnn.data.synthetic.config import CLASSES, SynthConfig  # noqa: E402
from pgnn.data.synthetic.dataset import frame_rng, generate_dataset, generate_frame, write_frame  # noqa: E402
from pgnn.data.synthetic.image import render_image  # noqa: E402
from pgnn.data.synthetic.labels import make_labels  # noqa: E402
from pgnn.data.synthetic.lidar import simulate_scan  # noqa: E402
from pgnn.data.synthetic.painted import paint_points  # noqa: E402
from pgnn.data.synthetic.scene import sample_scene  # noqa: E402

STAGES = ("scene", "scan", "labels", "image", "paint", "write")


def time_stages(index: int, seed: int, config: SynthConfig, out_dir: str) -> dict[str, float]:
    """Seconds per stage of one frame, running the stages as ``generate_frame`` does."""
    seconds: dict[str, float] = {}
    rng = frame_rng(seed, index)
    t = time.perf_counter()
    scene = sample_scene(rng, config)
    seconds["scene"] = time.perf_counter() - t
    t = time.perf_counter()
    scan = simulate_scan(scene, config, rng)
    seconds["scan"] = time.perf_counter() - t
    t = time.perf_counter()
    make_labels(scene, scan, config)
    fov = fov_mask(scan.points[:, :3], scene.calib, config.image_width, config.image_height)
    seconds["labels"] = time.perf_counter() - t
    t = time.perf_counter()
    render_image(scene, config, rng)
    seconds["image"] = time.perf_counter() - t
    t = time.perf_counter()
    paint_points(scan.points[fov], scan.owner[fov], scene.kinds, config.paint_concentration, rng)
    seconds["paint"] = time.perf_counter() - t
    frame = generate_frame(index, seed, config)
    t = time.perf_counter()
    write_frame(out_dir, frame, config.png_compress_level)
    seconds["write"] = time.perf_counter() - t
    return seconds


def run_benchmark(frames: int = 10, seed: int = 0) -> dict[str, Any]:
    """Generate ``frames`` frames of ``seed`` and time each stage (one thread).

    Returns ``rows`` (per frame: points, fov_points, objects and labels per class, ms per stage),
    ``frames_per_s`` / ``ms_per_frame`` (generate_frame in memory), ``frames_per_s_with_files`` /
    ``ms_per_frame_with_files`` (generate_dataset), and ``mean_ms`` per stage.
    """
    if frames < 1:
        raise ValueError(f"expected frames >= 1, got {frames}")
    config = SynthConfig()
    generate_frame(0, seed, config)  # compile / load numba's cache
    totals: dict[str, float] = collections.defaultdict(float)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(frames):
            frame = generate_frame(index, seed, config)
            seconds = time_stages(index, seed, config, tmp)
            for stage, value in seconds.items():
                totals[stage] += value
            kinds = collections.Counter(o.kind for o in frame.objects)
            types = collections.Counter(label.type for label in frame.labels)
            rows.append(
                {
                    "frame": index,
                    "points": len(frame.points_velo),
                    "fov_points": int(frame.fov.sum()),
                    "objects": {k: kinds[k] for k in CLASSES},
                    "labels": {k: types[k] for k in (*CLASSES, "DontCare")},
                    "ms": {s: seconds[s] * 1e3 for s in STAGES},
                }
            )
        start = time.perf_counter()
        for index in range(frames):
            generate_frame(index, seed, config)
        in_memory = time.perf_counter() - start
        start = time.perf_counter()
        generate_dataset(tmp, frames, seed, config=config)
        with_files = time.perf_counter() - start
    return {
        "frames": frames,
        "seed": seed,
        "threads": 1,
        "rows": rows,
        "mean_ms": {s: totals[s] / frames * 1e3 for s in STAGES},
        "frames_per_s": frames / in_memory,
        "ms_per_frame": in_memory / frames * 1e3,
        "frames_per_s_with_files": frames / with_files,
        "ms_per_frame_with_files": with_files / frames * 1e3,
    }


def format_table(result: dict[str, Any]) -> str:
    rows = result["rows"]
    n = result["frames"]
    lines = [f"synthetic KITTI, seed {result['seed']}, {n} frames, 1 thread"]
    header = f"{'frame':>6} {'points':>7} {'fov':>6} {'objects C/V/P/Cy':>17} {'labels C/V/P/Cy/DC':>19}"
    lines.append(header + "".join(f" {s + ' ms':>9}" for s in STAGES))
    for r in rows:
        obj = "/".join(str(v) for v in r["objects"].values())
        lab = "/".join(str(v) for v in r["labels"].values())
        line = f"{r['frame']:>6} {r['points']:>7} {r['fov_points']:>6} {obj:>17} {lab:>19}"
        lines.append(line + "".join(f" {r['ms'][s]:>9.0f}" for s in STAGES))
    points = [r["points"] for r in rows]
    fov = [r["fov_points"] for r in rows]
    lines += [
        "",
        f"points per scan     mean {np.mean(points):,.0f}  min {min(points):,}  max {max(points):,}",
        f"points in view      mean {np.mean(fov):,.0f}  min {min(fov):,}  max {max(fov):,}",
        "objects per frame   "
        + "  ".join(f"{k} {sum(r['objects'][k] for r in rows) / n:.1f}" for k in CLASSES),
        "labels per frame    "
        + "  ".join(f"{k} {sum(r['labels'][k] for r in rows) / n:.1f}" for k in (*CLASSES, "DontCare")),
        "mean ms per stage   " + "  ".join(f"{s} {result['mean_ms'][s]:.0f}" for s in STAGES),
        f"generate_frame      {result['frames_per_s']:.2f} frames/s  "
        f"({result['ms_per_frame']:.0f} ms a frame)",
        f"generate_dataset    {result['frames_per_s_with_files']:.2f} frames/s  "
        f"({result['ms_per_frame_with_files']:.0f} ms a frame, files included)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run_benchmark(args.frames, args.seed)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
