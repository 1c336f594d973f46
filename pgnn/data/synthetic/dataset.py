"""Frames and datasets: one frame in memory (``generate_frame``, from ``frame_rng(seed, index)``), its five
files, the train / val split and the whole synthetic KITTI root (``generate_dataset``)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from PIL import Image

from pgnn.core.io import atomic_path, write_text_atomic
from pgnn.core.outputs import replace_folder
from pgnn.core.progress import track
from pgnn.data.frames import fov_mask
from pgnn.data.kitti import Calib, write_calib, write_velodyne
from pgnn.data.labels import Label, write_labels
from pgnn.data.synthetic.config import SynthConfig
from pgnn.data.synthetic.image import render_image
from pgnn.data.synthetic.labels import make_labels
from pgnn.data.synthetic.lidar import simulate_scan
from pgnn.data.synthetic.painted import paint_points
from pgnn.data.synthetic.scene import sample_scene


@dataclass(frozen=True, eq=False)
class SynthObject:
    """One object of a scene, labelled or not.

    ``box_rect`` is the exact KITTI box ``[x, y, z, l, h, w, ry]`` (rectified camera frame) the geometry was
    built in; ``label_index`` its row in the frame's labels (-1: not written, outside the image);
    ``visible_fraction`` the share of the rays meeting it that hit it first; ``num_points`` its points in the
    scan, ``num_points_fov`` those image_2 sees.
    """

    kind: str
    box_rect: np.ndarray
    label_index: int
    dontcare: bool
    visible_fraction: float
    num_points: int
    num_points_fov: int


@dataclass(frozen=True, eq=False)
class SynthFrame:
    """One generated frame, in memory.

    Shapes:
        points_velo: (N, 4) float32 x, y, z, reflectance in the velodyne frame (the .bin rows).
        point_object_id: (N,) int32 index into ``objects`` of the object each point hit, -1 for ground and
            clutter.
        fov: (N,) bool, the points image_2 sees (``painted`` holds exactly these rows, in order).
        painted: (M, 8) float64 [x, y, z, r, s_background, s_bicycle_or_rider, s_car, s_pedestrian].
        image: (H, W, 3) uint8.
    """

    index: int
    points_velo: np.ndarray
    point_object_id: np.ndarray
    fov: np.ndarray
    painted: np.ndarray
    calib: Calib
    labels: list[Label]
    image: np.ndarray
    objects: tuple[SynthObject, ...]

    @property
    def frame_id(self) -> str:
        return f"{self.index:06d}"


def frame_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of frame ``index``: independent of every other frame and of the dataset size."""
    if seed < 0 or index < 0:
        raise ValueError(f"expected seed >= 0 and index >= 0, got seed={seed}, index={index}")
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


def generate_frame(index: int, seed: int, config: SynthConfig | None = None) -> SynthFrame:
    """Generate frame ``index`` of the dataset with ``seed`` (deterministic in (index, seed, config))."""
    config = config or SynthConfig()
    rng = frame_rng(seed, index)
    scene = sample_scene(rng, config)
    scan = simulate_scan(scene, config, rng)
    labels, label_index, dontcare = make_labels(scene, scan, config)
    fov = fov_mask(scan.points[:, :3], scene.calib, config.image_width, config.image_height)
    image = render_image(scene, config, rng)
    painted = paint_points(scan.points[fov], scan.owner[fov], scene.kinds, config.paint_concentration, rng)
    n = len(scene.kinds)
    counts = np.bincount(scan.owner[scan.owner >= 0], minlength=n)
    counts_fov = np.bincount(scan.owner[fov & (scan.owner >= 0)], minlength=n)
    objects = tuple(
        SynthObject(
            kind=scene.kinds[i],
            box_rect=scene.boxes[i].copy(),
            label_index=int(label_index[i]),
            dontcare=bool(dontcare[i]),
            visible_fraction=float(scan.visible[i] / scan.expected[i]) if scan.expected[i] else 0.0,
            num_points=int(counts[i]),
            num_points_fov=int(counts_fov[i]),
        )
        for i in range(n)
    )
    return SynthFrame(
        index=index,
        points_velo=scan.points,
        point_object_id=scan.owner,
        fov=fov,
        painted=painted,
        calib=scene.calib,
        labels=labels,
        image=image,
        objects=objects,
    )


def write_frame(out_dir: str | Path, frame: SynthFrame, png_compress_level: int = 1) -> None:
    """Write one frame's five files under ``out_dir/training`` (each atomically)."""
    base = Path(out_dir) / "training"
    name = frame.frame_id
    write_velodyne(base / "velodyne" / f"{name}.bin", frame.points_velo)
    write_calib(base / "calib" / f"{name}.txt", frame.calib)
    write_labels(base / "label_2" / f"{name}.txt", frame.labels)
    with atomic_path(base / "image_2" / f"{name}.png", suffix=".png") as tmp:
        Image.fromarray(frame.image, mode="RGB").save(tmp, format="PNG", compress_level=png_compress_level)
    with atomic_path(base / "painted_lidar" / f"{name}.npy", suffix=".npy") as tmp, open(tmp, "wb") as f:
        np.save(f, frame.painted, allow_pickle=False)


def split_frame_ids(num_frames: int, seed: int, val_fraction: float) -> tuple[list[str], list[str]]:
    """A random train / val partition of frames 0..num_frames-1 (ids sorted; both non-empty when possible)."""
    if not 0.0 <= val_fraction <= 1.0:
        raise ValueError(f"expected 0 <= val_fraction <= 1, got {val_fraction}")
    n_val = int(round(num_frames * val_fraction))
    if num_frames >= 2 and 0.0 < val_fraction < 1.0:
        n_val = min(max(n_val, 1), num_frames - 1)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x5A17, 0x5A17, 1])).permutation(num_frames)
    val = sorted(int(i) for i in order[:n_val])
    train = sorted(int(i) for i in order[n_val:])
    return [f"{i:06d}" for i in train], [f"{i:06d}" for i in val]


def generate_dataset(
    out_dir: str | Path,
    num_frames: int,
    seed: int,
    val_fraction: float = 0.5,
    config: SynthConfig | None = None,
    *,
    force: bool = False,
    workers: int = 1,
) -> None:
    """Write a synthetic KITTI root: ``training/{velodyne,calib,label_2,image_2,painted_lidar}`` for frames
    000000 .. num_frames-1 and ``ImageSets/{train,val,trainval}.txt``. Same arguments, same bytes, for any
    ``workers`` (processes writing frames: each frame depends only on ``(seed, index)``). Progress goes to
    stderr (``pgnn.core.progress``).

    All or nothing: the root is built as a temporary sibling that replaces ``out_dir`` whole at the end
    (``pgnn.core.outputs.replace_folder``), so a full disk or a kill leaves the earlier ``out_dir``. An
    existing ``out_dir`` must be empty or an earlier ``pgnn synth`` root (its ``.pgnn-output`` marker);
    ``force`` replaces any other folder.

    Raises:
        pgnn.core.outputs.OutputError: ``out_dir`` holds files pgnn synth did not write (without ``force``).
    """
    if num_frames < 1:
        raise ValueError(f"expected num_frames >= 1, got {num_frames}")
    config = config or SynthConfig()
    train, val = split_frame_ids(num_frames, seed, val_fraction)
    if workers < 1:
        raise ValueError(f"expected workers >= 1, got {workers}")
    with replace_folder(out_dir, "pgnn synth", force=force) as root:
        write = partial(_generate_and_write, root, seed, config)
        if workers == 1 or num_frames == 1:
            for index in track(range(num_frames), "synth", "frame"):
                write(index)
        else:
            with ProcessPoolExecutor(max_workers=min(workers, num_frames)) as pool:
                # map keeps the order and re-raises a worker's exception; chunks of 4 frames per task
                done = pool.map(write, range(num_frames), chunksize=4)
                for _ in track(done, "synth", "frame", total=num_frames):
                    pass
        sets = root / "ImageSets"
        write_text_atomic(sets / "train.txt", "".join(f"{i}\n" for i in train))
        write_text_atomic(sets / "val.txt", "".join(f"{i}\n" for i in val))
        write_text_atomic(sets / "trainval.txt", "".join(f"{i:06d}\n" for i in range(num_frames)))


def _generate_and_write(root: Path, seed: int, config: SynthConfig, index: int) -> None:
    """Frame ``index`` of ``seed``, written under ``root`` (one task of :func:`generate_dataset`)."""
    write_frame(root, generate_frame(index, seed, config), config.png_compress_level)
