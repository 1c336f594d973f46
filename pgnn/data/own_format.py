"""The own dataset format (LiDAR only, boxes in the sensor frame) <-> a KITTI-layout root.

The own layout::

    OWN/sensor.yaml              optional: the mount and view (pgnn.config.sensor; default KITTI's HDL-64E)
    OWN/points/<name>.<ext>      one scan per frame: .bin, .npy, .pcd or .ply (pgnn.data.pointcloud)
    OWN/labels/<name>.json       {"objects": [{"class": "Car", "box": [x, y, z, l, w, h, yaw],
                                               "difficulty": 0}, ...]}   (every frame has one; [] is fine)
    OWN/splits/<split>.txt       frame names, one a line (train.txt, val.txt, ...)

Boxes: the output frame of the sensor config (the sensor frame without an extrinsic; x forward, y left, z up,
metres), (x, y, z) the box's geometric centre, l along its heading, yaw about +z from +x. ``class`` is a
KITTI class (Car, Pedestrian, Cyclist, Van, ...). ``difficulty`` (optional, default 0) is the evaluation level
the object counts from: 0 easy, 1 moderate, 2 hard, 3 none (ignored, like KITTI's too-occluded objects).
Frame names are file stems of letters, digits, ``_ - .``.

:func:`convert_own_to_kitti` writes ``DEST/training/{velodyne,calib,label_2}``, ``DEST/ImageSets/<split>.txt``
and ``DEST/frame_names.txt`` (``<id> <name>`` a line): frames named by 6-digit ids keep them, other names
get the ids 000000, 000001, .. in name order.
The velodyne rows are the scan's points inside the sensor's view (float32, sensor frame, intensity 0..1);
the calib is synthesised from the sensor config (``pgnn.data.sensor.sensor_calib``). The root has no
``image_2/``: it is LiDAR-only (``pgnn.data.kitti.has_camera``), so prepare keeps every point and
predictions carry no 2D box. What KITTI's camera fields mean then (the devkit's columns, kept so every KITTI
tool reads the files)::

    truncated   0.00 (nothing cuts an object off: there is no image border)
    occluded    the own label's difficulty (0, 1, 2; 3 = none), so the devkit's difficulty rule
                (occluded <= 0 / 1 / 2) gives the level asked for
    alpha       from the box (pgnn.core.boxes.alpha_from_box), as KITTI writes it
    bbox        -1 -1 -1 -1: no image. The evaluation then skips the 2D height rule, and 2D / AOS AP
                (pgnn.eval.kitti.no_image_box)

:func:`export_kitti_to_own` writes a KITTI root's frames (points as ``load_frame`` crops them) in the own
format: the round trip through both gives the same prepared points and boxes (within float32 rounding).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from pgnn.config.sensor import SensorConfig, load_sensor
from pgnn.core.bounded import read_json, read_text
from pgnn.core.boxes import alpha_from_box
from pgnn.core.errors import DataError, excerpt
from pgnn.core.io import write_json_atomic, write_text_atomic
from pgnn.data.frames import load_frame
from pgnn.data.kitti import write_calib, write_velodyne
from pgnn.data.labels import KITTI_CLASSES, Label, difficulty, labels_to_boxes, write_labels
from pgnn.data.pointcloud import FORMATS, MissingIntensity, read_scan, write_point_cloud
from pgnn.data.sensor import (
    boxes_output_to_rect,
    boxes_rect_to_output,
    sensor_calib,
    sensor_to_rect,
    view_mask,
)

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
NO_BOX_2D = (-1.0, -1.0, -1.0, -1.0)


# ----------------------------------------------------------------------------------------------------
# reading the own layout


def own_frames(src: Path) -> dict[str, Path]:
    """Frame name -> its point cloud file under ``src/points`` (one file per name)."""
    folder = src / "points"
    if not folder.is_dir():
        raise DataError(folder, "expected a folder of point clouds (.bin, .npy, .pcd, .ply), found none")
    frames: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() not in FORMATS:
            continue
        if not _NAME.match(path.stem):
            raise DataError(path, "expected a frame name of letters, digits, '_', '-', '.'")
        if path.stem in frames:
            raise DataError(
                path, f"expected one point cloud per frame, {frames[path.stem].name} has that name too"
            )
        frames[path.stem] = path
    if not frames:
        raise DataError(folder, f"expected point clouds ({', '.join(FORMATS)}), found none")
    return frames


def read_own_labels(path: Path) -> list[tuple[str, np.ndarray, int]]:
    """(class, box [x, y, z, l, w, h, yaw] output frame, difficulty 0..3) of each object of a labels file."""
    if not path.is_file():
        raise DataError(path, 'expected a labels file {"objects": [...]} for this frame, found none')
    data = read_json(path, "a JSON labels file")  # bounded: size and nesting
    if not isinstance(data, dict) or not isinstance(data.get("objects"), list):
        raise DataError(path, 'expected {"objects": [...]}')
    out = []
    for i, obj in enumerate(data["objects"]):
        where = f"object {i}"
        if not isinstance(obj, dict) or set(obj) - {"class", "box", "difficulty"}:
            raise DataError(path, f'{where}: expected keys "class", "box" and optionally "difficulty"')
        cls, box, level = obj.get("class"), obj.get("box"), obj.get("difficulty", 0)
        if cls not in KITTI_CLASSES or cls == "DontCare":
            raise DataError(
                path, f"{where}: expected a class in {', '.join(KITTI_CLASSES[:-1])}, got {excerpt(cls)}"
            )
        try:
            arr = np.asarray(box, dtype=np.float64)
        except (TypeError, ValueError):
            arr = np.zeros(0)
        if arr.shape != (7,) or not np.isfinite(arr).all() or (arr[3:6] <= 0).any():
            raise DataError(
                path, f"{where}: expected box [x, y, z, l, w, h, yaw] with l, w, h > 0, got {excerpt(box)}"
            )
        if level not in (0, 1, 2, 3) or isinstance(level, bool):
            raise DataError(path, f"{where}: expected difficulty 0, 1, 2 or 3, got {excerpt(level)}")
        out.append((cls, arr, int(level)))
    return out


def read_own_split(path: Path, names: Sequence[str]) -> list[str]:
    """The frame names of a split file, each one a frame of ``points/``."""
    known = set(names)
    out: list[str] = []
    for number, raw in enumerate(read_text(path, "a split list").splitlines(), start=1):
        name = raw.strip()
        if not name:
            continue
        if name not in known:
            raise DataError(path, f"expected a frame of points/, got {excerpt(name)}", number)
        if name in out:
            raise DataError(path, f"expected each frame once, {excerpt(name)} repeats", number)
        out.append(name)
    if not out:
        raise DataError(path, "expected at least one frame name, got an empty split")
    return out


# ----------------------------------------------------------------------------------------------------
# own -> KITTI


def kitti_labels(objects: Sequence[tuple[str, np.ndarray, int]], sensor: SensorConfig) -> list[Label]:
    """Own labels as KITTI label lines of a LiDAR-only root (the fields as in the module docstring)."""
    if not objects:
        return []
    rect = boxes_output_to_rect(np.stack([box for _, box, _ in objects]), sensor)  # (M, 7)
    alpha = alpha_from_box(rect)  # (M,)
    return [
        Label(
            cls,
            0.0,
            level,
            float(a),
            NO_BOX_2D,
            float(h),
            float(w),
            float(l),
            float(x),
            float(y),
            float(z),
            float(ry),
        )
        for (cls, _, level), a, (x, y, z, l, h, w, ry) in zip(objects, alpha, rect, strict=True)
    ]


def convert_own_to_kitti(
    src: str | Path, dest: str | Path, missing_intensity: MissingIntensity = "refuse"
) -> dict[str, int]:
    """Write the KITTI-layout root of the own dataset ``src`` into the new, empty folder ``dest`` (``pgnn
    convert`` gives a temporary one that replaces its output whole: :func:`pgnn.core.outputs.replace_folder`).

    Returns the number of frames of each split.
    """
    src, dest = Path(src), Path(dest)
    sensor_path = src / "sensor.yaml"
    sensor = load_sensor(sensor_path if sensor_path.is_file() else None)
    frames = own_frames(src)
    split_files = sorted((src / "splits").glob("*.txt"))
    if not split_files:
        raise DataError(
            src / "splits", "expected split lists <split>.txt (frame names, one a line), found none"
        )
    keep = all(re.fullmatch(r"\d{6}", name) for name in frames)
    ids = {name: name if keep else f"{i:06d}" for i, name in enumerate(frames)}
    calib = sensor_calib(sensor)
    to_output = sensor.extrinsic_matrix()
    counts = {}
    training = dest / "training"
    for name, path in frames.items():
        scan, _ = read_scan(path, missing_intensity)  # (N, 4) sensor frame
        xyz_out = scan[:, :3] @ to_output[:3, :3].T + to_output[:3, 3]  # (N, 3)
        write_velodyne(training / "velodyne" / f"{ids[name]}.bin", scan[view_mask(xyz_out, sensor)])
        write_calib(training / "calib" / f"{ids[name]}.txt", calib)
        objects = read_own_labels(src / "labels" / f"{name}.json")
        write_labels(training / "label_2" / f"{ids[name]}.txt", kitti_labels(objects, sensor))
    for split_file in split_files:
        names = read_own_split(split_file, list(frames))
        write_text_atomic(dest / "ImageSets" / split_file.name, "".join(ids[n] + "\n" for n in names))
        counts[split_file.stem] = len(names)
    write_text_atomic(dest / "frame_names.txt", "".join(f"{i} {n}\n" for n, i in ids.items()))
    return counts


# ----------------------------------------------------------------------------------------------------
# KITTI -> own (the round trip's other half)


def export_kitti_to_own(
    root: str | Path,
    frame_ids: Sequence[str],
    dest: str | Path,
    splits: dict[str, Sequence[str]],
    *,
    suffix: str = ".bin",
    encoding: str = "binary",
    sensor: SensorConfig | None = None,
) -> None:
    """Write frames of a KITTI root in the own format: the points ``load_frame`` keeps (image_2's view) and
    the labels (DontCare dropped; difficulty from KITTI's, 3 for none), in ``sensor``'s output frame."""
    sensor = sensor or SensorConfig()
    dest = Path(dest)
    rect_to_sensor = np.linalg.inv(sensor_to_rect(sensor))
    for fid in frame_ids:
        frame = load_frame(root, fid)
        xyz = (
            frame.points_rect.astype(np.float64) @ rect_to_sensor[:3, :3].T + rect_to_sensor[:3, 3]
        )  # (N, 3)
        write_point_cloud(
            dest / "points" / f"{fid}{suffix}", np.column_stack([xyz, frame.intensity]), encoding
        )
        objects = [lab for lab in frame.labels if lab.type != "DontCare"]
        boxes = boxes_rect_to_output(labels_to_boxes(objects), sensor)  # (M, 7)
        items = [
            {
                "class": lab.type,
                "box": box.tolist(),
                "difficulty": difficulty(lab) if difficulty(lab) >= 0 else 3,
            }
            for lab, box in zip(objects, boxes, strict=True)
        ]
        write_json_atomic(dest / "labels" / f"{fid}.json", {"objects": items})
    for split, names in splits.items():
        write_text_atomic(dest / "splits" / f"{split}.txt", "".join(n + "\n" for n in names))
    if sensor != SensorConfig():
        write_text_atomic(dest / "sensor.yaml", yaml.safe_dump(sensor.model_dump(exclude_none=True)))
