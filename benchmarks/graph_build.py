"""How fast is a frame's graph + targets, next to a plain reimplementation of the original's approach?

Per frame, single thread, CPU milliseconds of each stage: FOV crop (velodyne scan -> camera-frame points in
image_2's view, with their colours), keypoint downsampling, each level's edges, labels (training targets;
training graphs only) and the whole frame. ``pgnn`` is this package (numba); ``baseline`` redoes the
original's steps with numpy + scikit-learn in the same process: its float32 camera transform and strict image
bounds, a Python dict voxel pick (``random``) or numpy voxel centroids + a scikit-learn kd-tree snap
(``center``, where the original called open3d), ``NearestNeighbors(algorithm='ball_tree').radius_neighbors``
with ``np.random.choice`` for the cap, and a box-by-box points-in-box test for the labels. Times are process
CPU time (``time.process_time``), so other load on a shared machine inflates them less than wall time.

Frames: the real KITTI frames with velodyne scans in the shared kitti_sample, and a few synthetic frames
(``pgnn.data.synthetic.dataset.generate_frame``) when that generator exists. Each stage's time is the median
over ``--repeat`` runs; tables show the mean over frames.

    .venv/bin/python benchmarks/graph_build.py [--repeat 5] [--synthetic 3] [--json]

The crop stage is sensitive to the allocator: ``pgnn.data.frames.fov_mask`` builds float64 temporaries of a
few MB, which glibc serves fresh from mmap (page faults) until its mmap threshold has grown, so it is faster
in a full run (after the larger runtime graphs have raised the threshold) than when only the Car training
preset runs (figures: benchmarks/README.md, "Measurements behind the code").

``run_benchmark()`` returns ``ms_per_frame``, ``baseline_ms_per_frame`` and ``speedup`` of the Car training
graph on the real frames (whole frame: loaded points to labels), plus every row of the tables.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig  # noqa: E402
from pgnn.core.progress import track  # noqa: E402
from pgnn.data import kitti  # noqa: E402
from pgnn.data.frames import frame_from_scan, velo_to_rect_matrix  # noqa: E402
from pgnn.data.labels import labels_to_boxes, read_labels  # noqa: E402
from pgnn.graphs.radius import radius_edges  # noqa: E402
from pgnn.graphs.targets import assign_targets  # noqa: E402
from pgnn.graphs.voxel import downsample_levels  # noqa: E402

SHARED = Path(os.environ.get("PGNN_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"
REAL_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
# preset -> label method of its training targets (None: a runtime graph, no targets)
PRESETS: dict[str, str | None] = {
    "car": "Car",
    "car_runtime": None,
    "ped_cyc": "Pedestrian_and_Cyclist",
    "ped_cyc_runtime": None,
}
STAGES = ("crop", "downsample", "edges_0", "edges_1", "labels", "total")
_clock = time.process_time  # CPU time of this process: the machine is shared, wall time is not ours alone


class RawFrame(NamedTuple):
    """What a frame's loading leaves before the crop: the scan, its calibration, image and labels."""

    name: str
    scan: np.ndarray  # (N, 4) float32 velodyne x, y, z, reflectance
    calib: kitti.Calib
    image: np.ndarray  # (H, W, 3) uint8
    boxes: np.ndarray  # (M, 7)
    names: list[str]


# ----------------------------------------------------------------------------------------------------------
# frames


def real_frames(root: Path, frame_ids: Sequence[str]) -> list[RawFrame]:
    frames = []
    for fid in frame_ids:
        paths = kitti.frame_paths(root, fid)
        labels = read_labels(paths.label)
        frames.append(
            RawFrame(
                name=fid,
                scan=kitti.read_velodyne(paths.points),
                calib=kitti.read_calib(paths.calib),
                image=kitti.read_image(paths.image),
                boxes=labels_to_boxes(labels),
                names=[lb.type for lb in labels],
            )
        )
    return frames


def synthetic_frames(count: int) -> list[RawFrame] | None:
    """``count`` frames of the synthetic generator (seed 0), or None when pgnn has no generator."""
    if count <= 0 or importlib.util.find_spec("pgnn.data.synthetic.dataset") is None:
        return None
    from pgnn.data.synthetic import dataset as synthetic

    if not hasattr(synthetic, "generate_frame"):
        return None
    frames = []
    for index in range(count):
        f = synthetic.generate_frame(index, seed=0)
        frames.append(
            RawFrame(
                name=f"synthetic {f.frame_id}",
                scan=f.points_velo.astype(np.float32),
                calib=f.calib,
                image=f.image,
                boxes=labels_to_boxes(f.labels),
                names=[lb.type for lb in f.labels],
            )
        )
    return frames


# ----------------------------------------------------------------------------------------------------------
# the two pipelines: each returns {stage: seconds} for one pass over one frame


def _crop_pgnn(frame: RawFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    f = frame_from_scan("bench", frame.scan, frame.calib, image=frame.image)  # pgnn's own loader path
    return f.points_rect, f.intensity, f.rgb


def pgnn_pass(frame: RawFrame, cfg: GraphConfig, method: str | None, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    t = [_clock()]
    points, _, _ = _crop_pgnn(frame)
    t.append(_clock())
    coords, _ = downsample_levels(points, cfg, rng)
    t.append(_clock())
    for i, level in enumerate(cfg.levels):
        radius_edges(coords[i], coords[i + 1], level.radius, level.num_neighbors, rng)
        t.append(_clock())
    if method is not None:
        assign_targets(coords[-1], frame.boxes, frame.names, method)
    t.append(_clock())
    return _stage_times(t)


def _stage_times(t: list[float]) -> dict[str, float]:
    return {
        "crop": t[1] - t[0],
        "downsample": t[2] - t[1],
        "edges_0": t[3] - t[2],
        "edges_1": t[4] - t[3],
        "labels": t[5] - t[4],
        "total": t[5] - t[0],
    }


def _crop_original(frame: RawFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The original's get_cam_points_in_image_with_rgb: float32 transform, z > 0.1, strict image bounds."""
    c = frame.calib
    velo_to_cam = velo_to_rect_matrix(c)  # (the original added a camera-2 offset; same cost)
    xyz = frame.scan[:, :3] @ velo_to_cam[:3, :3].T.astype(np.float32) + velo_to_cam[:3, 3].astype(np.float32)
    front = xyz[:, 2] > 0.1
    xyz, attr = xyz[front], frame.scan[front, 3:]
    cam_to_image = np.hstack([c.P2[:, :3], np.zeros((3, 1))])
    img = np.hstack([xyz, np.ones((len(xyz), 1))]) @ cam_to_image.T
    img = img / img[:, [2]]
    height, width = frame.image.shape[:2]
    inside = np.logical_and.reduce([img[:, 0] > 0, img[:, 0] < width, img[:, 1] > 0, img[:, 1] < height])
    xyz, attr, img = xyz[inside], attr[inside], img[inside]
    rgb = frame.image[np.int32(img[:, 1]), np.int32(img[:, 0]), ::-1].astype(np.float32) / 255
    return xyz, attr, rgb


def _voxel_pick_original(
    points: np.ndarray, offset: np.ndarray, voxel: float, rnd: random.Random
) -> np.ndarray:
    idx = ((points - offset) // voxel).astype(np.int32)
    dim_x, dim_y, _ = np.amax(idx, axis=0) + 1
    keys = idx[:, 0] + idx[:, 1] * dim_x + idx[:, 2] * dim_y * dim_x
    voxels: dict[int, list[int]] = {}
    for pidx in range(len(points)):
        voxels.setdefault(keys[pidx], []).append(pidx)
    return np.array([rnd.choice(members) for members in voxels.values()])


def _downsample_original(points: np.ndarray, cfg: GraphConfig, rnd: random.Random) -> list[np.ndarray]:
    from sklearn.neighbors import NearestNeighbors

    coords = [points]
    offset = points.min(axis=0)
    last = 0.0
    for level in cfg.levels:
        prev = coords[-1]
        if np.isclose(last, level.graph_scale):
            coords.append(prev.copy())
            continue
        voxel = cfg.base_voxel_size * level.graph_scale
        if cfg.downsample_method == "random":
            shift = voxel * np.array([rnd.random() for _ in range(3)]) if cfg.add_rnd3d else 0.0
            coords.append(prev[_voxel_pick_original(prev, offset - shift, voxel, rnd)])
        else:  # open3d's voxel centroids (numpy here), snapped with a kd-tree
            p64 = points.astype(np.float64)
            cell = np.floor((p64 - (p64.min(axis=0) - voxel / 2)) / voxel).astype(np.int64)
            _, inverse, counts = np.unique(cell, axis=0, return_inverse=True, return_counts=True)
            inverse = inverse.reshape(-1)
            sums = np.stack([np.bincount(inverse, weights=p64[:, a]) for a in range(3)], axis=1)
            nbrs = NearestNeighbors(n_neighbors=1, algorithm="kd_tree", n_jobs=1).fit(prev)
            index = nbrs.kneighbors(sums / counts[:, None], return_distance=False)[:, 0]
            coords.append(prev[index])
        last = level.graph_scale
    return coords


def _edges_original(sources: np.ndarray, centers: np.ndarray, radius: float, cap: int) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    nbrs = NearestNeighbors(radius=radius, algorithm="ball_tree", n_jobs=1).fit(sources)
    indices = nbrs.radius_neighbors(centers, return_distance=False)
    if cap > 0:
        indices = [
            n if n.size <= cap else np.random.choice(n, cap, replace=False)  # noqa: NPY002 (as original)
            for n in indices
        ]
    src = np.concatenate(indices)
    dst = np.concatenate([i * np.ones(n.size, dtype=np.int32) for i, n in enumerate(indices)])
    return np.array([src, dst]).transpose()


def _labels_original(xyz: np.ndarray, boxes: np.ndarray, names: list[str], method: str) -> np.ndarray:
    """Box by box: corners -> face normals -> projections, as sel_xyz_in_box3d."""
    objects = {"Car": ("Car",), "Pedestrian_and_Cyclist": ("Pedestrian", "Cyclist")}[method]
    labels = np.zeros(len(xyz), np.int64)
    boxes_out = np.zeros((len(xyz), 7))
    for box, name in zip(boxes, names, strict=True):
        if name == "DontCare":
            continue
        x, y, z, l, h, w, yaw = box
        rot = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
        local = np.array(
            [
                [l / 2, 0, w / 2],
                [l / 2, 0, -w / 2],
                [-l / 2, 0, -w / 2],
                [-l / 2, 0, w / 2],
                [l / 2, -h, w / 2],
            ]
        )
        corners = local @ rot.T + [x, y, z]
        normals = np.stack([corners[0] - corners[4], corners[0] - corners[1], corners[0] - corners[3]])
        lower = np.array([normals[0] @ corners[4], normals[1] @ corners[1], normals[2] @ corners[3]])
        upper = normals @ corners[0]
        proj = xyz @ normals.T
        mask = np.logical_and.reduce(
            [proj[:, k] > lower[k] for k in range(3)] + [proj[:, k] < upper[k] for k in range(3)]
        )
        if name in objects:
            labels[mask] = 1
            boxes_out[mask] = box
        else:
            labels[mask] = 3
    return labels


def baseline_pass(frame: RawFrame, cfg: GraphConfig, method: str | None, seed: int) -> dict[str, float]:
    rnd = random.Random(seed)
    np.random.seed(seed)  # noqa: NPY002 (the original drew its caps from numpy's global generator)
    t = [_clock()]
    points, _, _ = _crop_original(frame)
    t.append(_clock())
    coords = _downsample_original(points, cfg, rnd)
    t.append(_clock())
    for i, level in enumerate(cfg.levels):
        _edges_original(coords[i], coords[i + 1], level.radius, level.num_neighbors)
        t.append(_clock())
    if method is not None:
        _labels_original(coords[-1], frame.boxes, frame.names, method)
    t.append(_clock())
    return _stage_times(t)


# ----------------------------------------------------------------------------------------------------------
# running and reporting


def time_frames(
    frames: Sequence[RawFrame], preset: str, impl: Callable[..., dict[str, float]], repeat: int
) -> dict[str, float]:
    """Mean over frames of each stage's median over ``repeat`` passes, in milliseconds."""
    cfg, method = GRAPH_PRESETS[preset], PRESETS[preset]
    per_frame = []
    for frame in frames:
        runs = [impl(frame, cfg, method, seed) for seed in range(repeat)]
        per_frame.append({s: float(np.median([r[s] for r in runs])) * 1e3 for s in STAGES})
    return {s: float(np.mean([f[s] for f in per_frame])) for s in STAGES}


def run_benchmark(
    kitti_root: str | Path | None = None,
    frame_ids: Sequence[str] = REAL_FRAMES,
    synthetic: int = 3,
    repeat: int = 5,
    presets: Sequence[str] = tuple(PRESETS),
    verbose: bool = False,
) -> dict[str, Any]:
    """Time both pipelines on the real (and synthetic) frames.

    Returns ``ms_per_frame`` / ``baseline_ms_per_frame`` / ``speedup``: the Car training graph's whole frame
    on the real frames; ``rows``: one dict per (frames, preset, implementation) with each stage's ms.
    """
    root = Path(kitti_root) if kitti_root is not None else SHARED / "kitti_sample"
    datasets: dict[str, list[RawFrame]] = {"real": real_frames(root, frame_ids)}
    notes = []
    synth = synthetic_frames(synthetic)
    if synth is not None:
        datasets["synthetic"] = synth
    elif synthetic > 0:
        notes.append("pgnn.data.synthetic.dataset.generate_frame not available: synthetic frames skipped")
        if verbose:
            print(f"note: {notes[-1]}")
    for frames in datasets.values():  # warm-up: numba's cache, BLAS, and malloc's mmap threshold settle
        for frame in frames:
            for preset in presets:
                pgnn_pass(frame, GRAPH_PRESETS[preset], PRESETS[preset], 0)
                baseline_pass(frame, GRAPH_PRESETS[preset], PRESETS[preset], 0)
    rows = []
    impls = (("pgnn", pgnn_pass), ("baseline", baseline_pass))
    runs = [(d, p, i) for d in datasets.items() for p in presets for i in impls]
    for (data_name, frames), preset, (impl_name, impl) in track(runs, "bench graph", "run"):
        stages = time_frames(frames, preset, impl, repeat)
        row = {"frames": data_name, "n_frames": len(frames), "preset": preset, "impl": impl_name}
        rows.append({**row, **stages})
        if verbose:
            print(_format_row(rows[-1]), flush=True)
    car = {r["impl"]: r["total"] for r in rows if r["frames"] == "real" and r["preset"] == "car"}
    result: dict[str, Any] = {"rows": rows, "notes": notes}
    if "pgnn" in car:
        result.update(
            ms_per_frame=car["pgnn"],
            baseline_ms_per_frame=car["baseline"],
            speedup=car["baseline"] / car["pgnn"],
        )
    return result


_HEADER = f"{'frames':<10} {'preset':<16} {'impl':<9}" + "".join(f"{s:>11}" for s in STAGES)


def _format_row(row: dict[str, Any]) -> str:
    runtime = PRESETS[row["preset"]] is None
    cells = "".join(f"{'-':>11}" if s == "labels" and runtime else f"{row[s]:>11.2f}" for s in STAGES)
    return f"{row['frames']:<10} {row['preset']:<16} {row['impl']:<9}{cells}"


def format_table(result: dict[str, Any]) -> str:
    lines = ["single-thread CPU ms per frame (median of repeats, mean over frames)", _HEADER]
    lines += [_format_row(r) for r in result["rows"]]
    lines.append("")
    for data_name in dict.fromkeys(r["frames"] for r in result["rows"]):
        for preset in dict.fromkeys(r["preset"] for r in result["rows"]):
            pair = {
                r["impl"]: r["total"]
                for r in result["rows"]
                if r["frames"] == data_name and r["preset"] == preset
            }
            if len(pair) == 2:
                lines.append(f"{data_name:<10} {preset:<16} speedup x{pair['baseline'] / pair['pgnn']:.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=SHARED / "kitti_sample", help="KITTI root (training/)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synthetic", type=int, default=3, help="synthetic frames (0: none)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run_benchmark(args.root, synthetic=args.synthetic, repeat=args.repeat, verbose=not args.json)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
