"""KITTI 3D object detection files: calib, scan, painted scan, image and split readers and writers; paths.

Data license: the KITTI Vision Benchmark Suite data (scans, images, calibrations, labels) is (c) Geiger,
Lenz, Stiller and Urtasun (KIT / TTIC), published under Creative Commons Attribution-NonCommercial-ShareAlike
3.0 (CC BY-NC-SA 3.0, https://creativecommons.org/licenses/by-nc-sa/3.0/): non-commercial use only, attribute
KITTI (Geiger et al., "Are we ready for Autonomous Driving?", CVPR 2012), share derivatives of the data alike.
This code reads the files; it ships none of them.

Folder layout (a "KITTI root")::

    ROOT/ImageSets/{train,val,trainval,test}.txt  one 6-digit frame id a line
    ROOT/training/velodyne/NNNNNN.bin             float32 x, y, z, reflectance; velodyne frame; 360 deg scan
    ROOT/training/velodyne_reduced/NNNNNN.bin     the rows image_2 sees (read when velodyne/ lacks the frame)
    ROOT/training/painted_lidar/NNNNNN.npy        float64 (N, 8) [x, y, z, r, s_background,
                                                  s_bicycle_or_rider, s_car, s_pedestrian], velodyne frame
    ROOT/training/calib/NNNNNN.txt                P0..P3, R0_rect, Tr_velo_to_cam, Tr_imu_to_velo
    ROOT/training/image_2/NNNNNN.png              left colour camera
    ROOT/training/label_2/NNNNNN.txt              15 fields an object (result files: a 16th, the score)
    ROOT/testing/...                              the same without label_2 (the ``test`` split)

Label files are read and written by ``pgnn.data.labels``; frames (transforms, field-of-view crop,
``load_frame``) are ``pgnn.data.frames``.

Every reader raises ``pgnn.core.errors.DataError`` naming the file (and line) and what it expected. Rules
beyond the format: a scan has at least one point, each with finite coordinates within
``MAX_POINT_DISTANCE`` m of the sensor; a split file names at least one frame (the label and view rules:
``pgnn.data.labels``, ``pgnn.data.frames``). Text files are ASCII and at most
``pgnn.core.bounded.MAX_TEXT_BYTES``; a calib or label file ends its last line with a newline, as KITTI's
do (one without was cut off, perhaps inside its last number); a ``.npy`` header is checked against the
file's size before the array is read (``pgnn.core.bounded.read_npy``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from pgnn.config.types import SPLIT_NAME, SPLIT_NAME_RULE
from pgnn.core.bounded import read_npy, read_text
from pgnn.core.errors import DataError, excerpt
from pgnn.core.io import atomic_path, write_text_atomic

# PointPainting score columns of painted_lidar rows (after x, y, z, reflectance).
PAINTED_CLASSES: tuple[str, ...] = ("background", "bicycle_or_rider", "car", "pedestrian")

_FRAME_ID = re.compile(r"^\d{6}$")
_CALIB_SIZES: dict[str, int] = {
    "P0": 12,
    "P1": 12,
    "P2": 12,
    "P3": 12,
    "R0_rect": 9,
    "Tr_velo_to_cam": 12,
    "Tr_imu_to_velo": 12,
}
_CALIB_REQUIRED: tuple[str, ...] = ("P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam")
# Key spellings of the KITTI tracking benchmark's calib files.
_CALIB_ALIASES: dict[str, str] = {
    "R_rect": "R0_rect",
    "Tr_velo_cam": "Tr_velo_to_cam",
    "Tr_imu_velo": "Tr_imu_to_velo",
}
_ROTATION_TOL = 1e-3

# Farther than any LiDAR measures (the HDL-64E of KITTI: 120 m; KITTI's scans stay within 80 m): a point
# beyond
# it is a corrupted value (1e30 ...) that would overflow voxel indices downstream, not a measurement.
MAX_POINT_DISTANCE = 1000.0


# ----------------------------------------------------------------------------------------------------
# calib


@dataclass(frozen=True, eq=False)
class Calib:
    """One frame's calibration (KITTI object format), float64.

    Shapes:
        P0, P1, P2, P3: (3, 4) projection of rectified camera 0 coordinates into camera 0..3's image.
        R0_rect: (3, 3) rotation camera 0 -> rectified camera 0.
        Tr_velo_to_cam: (3, 4) rigid velodyne -> camera 0.
        Tr_imu_to_velo: (3, 4) rigid IMU -> velodyne, or None when the file has no such line.
    """

    P0: np.ndarray
    P1: np.ndarray
    P2: np.ndarray
    P3: np.ndarray
    R0_rect: np.ndarray
    Tr_velo_to_cam: np.ndarray
    Tr_imu_to_velo: np.ndarray | None = None


def _is_rotation(m: np.ndarray) -> bool:
    return bool(np.allclose(m @ m.T, np.eye(3), atol=_ROTATION_TOL) and np.linalg.det(m) > 0)


def read_calib(path: str | Path) -> Calib:
    """Read a KITTI calib file (``KEY: v1 v2 ...`` a line; blank lines allowed).

    Required: P0..P3 (12 numbers), R0_rect (9), Tr_velo_to_cam (12); Tr_imu_to_velo (12) is optional. The
    KITTI tracking spellings ``R_rect``, ``Tr_velo_cam``, ``Tr_imu_velo`` (colon optional) are accepted;
    other keys are ignored. R0_rect and the rotation part of Tr_velo_to_cam must be rotations (R R^T = I
    within 1e-3), and P2's focal lengths positive.
    """
    path = Path(path)
    values: dict[str, np.ndarray] = {}
    lines: dict[str, int] = {}
    text = _read_text(path)
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        key = _CALIB_ALIASES.get(fields[0].rstrip(":"), fields[0].rstrip(":"))
        if key not in _CALIB_SIZES:
            continue
        if key in values:
            first = lines[key]
            raise DataError(path, f"expected one '{key}:' line, got a second (first on line {first})", number)
        numbers = _parse_floats(fields[1:], path, number, what=f"after '{fields[0]}'")
        if numbers.size != _CALIB_SIZES[key]:
            expected = _CALIB_SIZES[key]
            raise DataError(path, f"expected {expected} numbers after '{key}:', got {numbers.size}", number)
        values[key] = numbers
        lines[key] = number
    missing = [k for k in _CALIB_REQUIRED if k not in values]
    if missing:
        names = ", ".join(k + ":" for k in missing)
        raise DataError(path, f"expected lines {names} (KITTI object calib), found none")
    calib = Calib(
        P0=values["P0"].reshape(3, 4),
        P1=values["P1"].reshape(3, 4),
        P2=values["P2"].reshape(3, 4),
        P3=values["P3"].reshape(3, 4),
        R0_rect=values["R0_rect"].reshape(3, 3),
        Tr_velo_to_cam=values["Tr_velo_to_cam"].reshape(3, 4),
        Tr_imu_to_velo=values["Tr_imu_to_velo"].reshape(3, 4) if "Tr_imu_to_velo" in values else None,
    )
    if not _is_rotation(calib.R0_rect):
        raise DataError(path, "expected R0_rect to be a rotation matrix (R R^T = I, det 1)", lines["R0_rect"])
    if not _is_rotation(calib.Tr_velo_to_cam[:, :3]):
        raise DataError(path, "expected Tr_velo_to_cam[:, :3] to be a rotation", lines["Tr_velo_to_cam"])
    if not (calib.P2[0, 0] > 0 and calib.P2[1, 1] > 0):
        focal = f"{calib.P2[0, 0]}, {calib.P2[1, 1]}"
        raise DataError(path, f"expected positive focal lengths in P2, got {focal}", lines["P2"])
    check_complete(text, path)
    return calib


def _format_calib_number(value: float) -> str:
    text = f"{value:.12e}"  # KITTI's own layout, e.g. 7.070493000000e+02
    return text if float(text) == value else f"{value:.16e}"


def write_calib(path: str | Path, calib: Calib) -> None:
    """Write ``calib`` in the KITTI object text format, atomically (KITTI files read back byte for byte)."""
    rows: list[tuple[str, np.ndarray | None]] = [
        ("P0", calib.P0),
        ("P1", calib.P1),
        ("P2", calib.P2),
        ("P3", calib.P3),
        ("R0_rect", calib.R0_rect),
        ("Tr_velo_to_cam", calib.Tr_velo_to_cam),
        ("Tr_imu_to_velo", calib.Tr_imu_to_velo),
    ]
    lines = []
    for key, matrix in rows:
        if matrix is None:
            continue
        flat = np.asarray(matrix, dtype=np.float64).reshape(-1)
        if flat.size != _CALIB_SIZES[key]:
            raise ValueError(f"calib {key}: expected {_CALIB_SIZES[key]} numbers, got {flat.size}")
        lines.append(f"{key}: " + " ".join(_format_calib_number(float(v)) for v in flat))
    write_text_atomic(path, "\n".join(lines) + "\n\n")


# ----------------------------------------------------------------------------------------------------
# point clouds and images


def read_velodyne(path: str | Path) -> np.ndarray:
    """Read a velodyne ``.bin`` (float32 little-endian x, y, z, reflectance; 16 bytes a point).

    Shapes:
        returns (N, 4) float32, velodyne frame.
    """
    path = Path(path)
    _require_file(path)
    size = path.stat().st_size
    if size % 16:
        raise DataError(path, f"expected a multiple of 16 bytes (N x 4 float32), got {size} bytes")
    if size == 0:
        raise DataError(path, "expected at least one point (16 bytes a point), got an empty file")
    points = np.fromfile(path, dtype="<f4").reshape(-1, 4).astype(np.float32, copy=False)  # (N, 4)
    _check_finite(points, path)
    return points


def write_velodyne(path: str | Path, points: np.ndarray) -> None:
    """Write (N, 4) points as a velodyne ``.bin`` (float32 little-endian), atomically."""
    points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 4:
        raise ValueError(f"expected (N, 4) points, got shape {points.shape}")
    with atomic_path(path) as tmp:
        np.ascontiguousarray(points, dtype="<f4").tofile(tmp)


def read_painted(path: str | Path) -> np.ndarray:
    """Read a PointPainting ``.npy`` (``np.load``, no pickles).

    Rows are ``[x, y, z, r, s_background, s_bicycle_or_rider, s_car, s_pedestrian]``; the scores must lie in
    [0, 1] (within 1e-6).

    Shapes:
        returns (N, 8) float64, velodyne frame.
    """
    path = Path(path)
    _require_file(path)
    array = read_npy(path, "a .npy array (N, 8)")
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.shape[1] != 8:
        shape = getattr(array, "shape", type(array).__name__)
        raise DataError(path, f"expected a painted array of shape (N, 8), got {shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise DataError(path, f"expected a float array, got dtype {array.dtype}")
    array = array.astype(np.float64, copy=False)  # (N, 8)
    if len(array) == 0:
        raise DataError(path, "expected at least one point, got an empty (0, 8) array")
    _check_finite(array, path)
    scores = array[:, 4:]  # (N, 4)
    if scores.size and (scores.min() < -1e-6 or scores.max() > 1 + 1e-6):
        bad = int(np.flatnonzero(((scores < -1e-6) | (scores > 1 + 1e-6)).any(axis=1))[0])
        raise DataError(path, f"expected scores (columns 4-7) in [0, 1], row {bad}: {scores[bad].tolist()}")
    return array


def read_image(path: str | Path) -> np.ndarray:
    """Read an 8-bit image as RGB.

    Shapes:
        returns (H, W, 3) uint8.
    """
    from pgnn.data.png import decode_rgb8  # numba: imported on first use

    path = Path(path)
    _require_file(path)
    try:
        pixels = decode_rgb8(path.read_bytes(), Image.MAX_IMAGE_PIXELS)  # KITTI's PNGs, faster than Pillow
        if pixels is not None:
            return pixels
        with Image.open(path) as image:
            if image.mode not in ("RGB", "RGBA", "L", "P"):
                raise DataError(path, f"expected an 8-bit RGB image, got PIL mode {image.mode}")
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(path, f"expected an image file, could not decode it: {e}") from None


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image, read from its header (no pixels decoded)."""
    path = Path(path)
    _require_file(path)
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(path, f"expected an image file, could not read its header: {e}") from None
    return int(width), int(height)


# ----------------------------------------------------------------------------------------------------
# splits and frame files


def read_split(path: str | Path) -> list[str]:
    """Read an ImageSets file: one 6-digit frame id a line (no final newline and blank lines are fine)."""
    path = Path(path)
    ids: list[str] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(_read_text(path).splitlines(), start=1):
        frame_id = raw.strip()
        if not frame_id:
            continue
        if not _FRAME_ID.match(frame_id):
            raise DataError(path, f"expected a 6-digit frame id, got {excerpt(frame_id)}", number)
        if frame_id in seen:
            first = seen[frame_id]
            raise DataError(path, f"expected each frame id once, {frame_id} is also on line {first}", number)
        seen[frame_id] = number
        ids.append(frame_id)
    if not ids:
        raise DataError(path, "expected at least one 6-digit frame id, got an empty split")
    return ids


@dataclass(frozen=True)
class FramePaths:
    """The files of one frame (``points``: velodyne/, or velodyne_reduced/ when velodyne/ lacks the frame)."""

    frame_id: str
    points: Path
    painted: Path
    calib: Path
    image: Path
    label: Path


def frame_paths(root: str | Path, frame_id: str, subset: str = "training") -> FramePaths:
    """Paths of frame ``frame_id`` under ``root/subset`` (files need not exist; a bad id is a DataError)."""
    if not _FRAME_ID.match(frame_id):
        raise DataError(root, f"expected a 6-digit frame id, got {frame_id!r}")
    base = Path(root) / subset
    points = base / "velodyne" / f"{frame_id}.bin"
    reduced = base / "velodyne_reduced" / f"{frame_id}.bin"
    if not points.is_file() and reduced.is_file():
        points = reduced
    return FramePaths(
        frame_id=frame_id,
        points=points,
        painted=base / "painted_lidar" / f"{frame_id}.npy",
        calib=base / "calib" / f"{frame_id}.txt",
        image=base / "image_2" / f"{frame_id}.png",
        label=base / "label_2" / f"{frame_id}.txt",
    )


def read_scan(paths: FramePaths, painted: bool = False) -> np.ndarray:
    """The raw rows of a frame: velodyne (N, 4) float32, or with ``painted`` the painted (N, 8) float64."""
    return read_painted(paths.painted) if painted else read_velodyne(paths.points)


def has_camera(root: str | Path, subset: str = "training") -> bool:
    """Whether ``root/subset`` has an ``image_2/`` folder; a root without one is LiDAR-only
    (``pgnn convert``): its frames keep every point and have no 2D boxes."""
    return (Path(root) / subset / "image_2").is_dir()


def frame_ids(root: str | Path, split: str, painted: bool = False) -> list[str]:
    """The ids of ``ROOT/ImageSets/<split>.txt``, each checked to have its files.

    A frame needs its points (velodyne/ or velodyne_reduced/; painted_lidar/ with ``painted``), calib/ and
    image_2/ files (no image in a LiDAR-only root: :func:`has_camera`), under ``testing/`` for the split
    named ``test`` and ``training/`` otherwise. ``split`` is a plain file name
    (:data:`pgnn.config.types.SPLIT_NAME`): ``../x`` is not read from outside ImageSets.
    """
    if not SPLIT_NAME.fullmatch(split):
        raise DataError(Path(root) / "ImageSets", f"expected {SPLIT_NAME_RULE}, got {split!r}")
    split_path = Path(root) / "ImageSets" / f"{split}.txt"
    subset = "testing" if split == "test" else "training"
    ids = read_split(split_path)
    line_of = _line_numbers(split_path)
    camera = has_camera(root, subset)
    for frame_id in ids:
        paths = frame_paths(root, frame_id, subset)
        needed = [paths.painted if painted else paths.points, paths.calib] + [paths.image] * camera
        missing = [str(p.relative_to(root)) for p in needed if not p.is_file()]
        if missing:
            message = f"expected the files of frame {frame_id}, missing {', '.join(missing)}"
            raise DataError(split_path, message, line_of[frame_id])
    return ids


# ----------------------------------------------------------------------------------------------------
# helpers


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(path, "expected a file, found none")


def _read_text(path: Path) -> str:
    _require_file(path)
    return read_text(path, "a KITTI text file", encoding="ascii")


def check_complete(text: str, path: str | Path) -> None:
    """Refuse a text file whose last line has no newline (KITTI's calib and label files end with one): it
    was cut off, perhaps inside its last number, which would then read as another number."""
    if text.strip() and not text.endswith(("\n", "\r")):
        message = "expected a newline at the end of the last line: the file is cut off (add one if whole)"
        raise DataError(path, message, len(text.splitlines()))


def _parse_floats(fields: Sequence[str], path: Path, line: int, what: str) -> np.ndarray:
    try:
        values = np.array([float(f) for f in fields], dtype=np.float64)
    except ValueError:
        bad = next(f for f in fields if not _is_float(f))
        raise DataError(path, f"expected numbers {what}, got {excerpt(bad)}", line) from None
    if not np.isfinite(values).all():
        bad = next(f for f in fields if not math.isfinite(float(f)))
        raise DataError(path, f"expected finite numbers {what}, got {excerpt(bad)}", line)
    return values


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_finite(array: np.ndarray, path: Path) -> None:
    """Finite values in every row, and x, y, z within ``MAX_POINT_DISTANCE`` (the row is named)."""
    # whole-array reductions first (reducing each row of 4 is slower: benchmarks/README.md, "Measurements
    # behind the code"); find the row only on failure
    if not np.isfinite(array).all():
        row = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
        message = f"expected finite values, point {row} (of {len(array)}) is {array[row].tolist()}"
        raise DataError(path, message)
    if len(array) and np.abs(array[:, :3]).max() > MAX_POINT_DISTANCE:
        row = int(np.flatnonzero((np.abs(array[:, :3]) > MAX_POINT_DISTANCE).any(axis=1))[0])
        message = (
            f"expected x, y, z within {MAX_POINT_DISTANCE:g} m of the sensor, point {row} (of {len(array)}) "
            f"is {array[row].tolist()}"
        )
        raise DataError(path, message)


def _line_numbers(split_path: Path) -> dict[str, int]:
    lines = _read_text(split_path).splitlines()
    return {raw.strip(): n for n, raw in enumerate(lines, start=1) if raw.strip()}
