"""KITTI 3D object detection files: readers, writers, frame transforms, field-of-view crop, difficulty.

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

Frames (all metres)::

    velodyne (LiDAR)  Tr_velo_to_cam   camera 0    R0_rect    rectified camera 0       P2       image_2
      x forward       ------------->  (unrect.)  --------->     x right             ------->    u right
      y left            3x4 rigid                3x3 rot.       y down                3x4       v down
      z up                                                      z forward  <- pgnn's frame

    P2 projects rectified camera 0 coordinates into camera 2's image (its 4th column holds the baseline).
    x_rect = R0_rect . Tr_velo_to_cam . [x_velo, 1]          (R0_rect, Tr padded to 4x4)
    [u', v', w] = P2 . x_rect_h ;  (u, v) = (u'/w, v'/w)    w = z_rect + P2[2, 3], camera 2's depth

The velodyne frame exists only inside this module: ``load_frame`` returns points in the rectified camera
frame, the frame the labels are in.

Boxes (labels, and every (M, 7) box array in pgnn): ``[x, y, z, l, h, w, ry]``; (x, y, z) is the centre of
the box's BOTTOM face in the rectified camera frame, so the box spans y - h .. y (y points down); l runs along
the heading, w across it; ry rotates about the camera y axis, ry = 0 heading along +x (to the right),
ry = -pi/2 heading along +z (away from the camera)::

           z (forward)                    corners: local (+-l/2, {0, -h}, +-w/2) rotated by
           ^      heading (cos ry, 0, -sin ry)      R = [[cos ry, 0, sin ry], [0, 1, 0], [-sin ry, 0, cos ry]]
           |     ^                                   then translated by (x, y, z)
           |  +--|--+
           |  |  |  | l
           |  +-----+
           |     w
           +---------> x (right)          (bird's-eye view, y into the page = down; drawn: ry = -pi/2)

Difficulty follows the official devkit (cpp/evaluate_object.cpp): a ground-truth object belongs to level d
when its 2D box height (bottom - top, px) > MIN_HEIGHT[d], occlusion <= MAX_OCCLUSION[d] and truncation <=
MAX_TRUNCATION[d], with (40, 25, 25) px, (0, 1, 2), (0.15, 0.30, 0.50) for easy, moderate, hard. (The
devkit ignores ground truth with ``height <= MIN_HEIGHT`` (evaluate_object.cpp, cleanData), so a 40.00 px
box is not easy; detections are ignored only when ``height < MIN_HEIGHT``.)

Every reader raises ``pgnn.core.errors.DataError`` naming the file (and line) and what it expected. Rules
beyond
the format: a scan has at least one point, each with finite coordinates within ``MAX_POINT_DISTANCE`` m of
the sensor; a label's h, w, l are >= 0 (DontCare lines, which write -1, excepted); a split file names at
least one frame; and a scan with points but none in image_2's view means its image or calib is not the
scan's (``check_points_in_view``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit
from PIL import Image, UnidentifiedImageError

from pgnn.core.errors import DataError
from pgnn.core.io import atomic_path, write_text_atomic

KITTI_CLASSES: tuple[str, ...] = (
    "Car",
    "Van",
    "Truck",
    "Pedestrian",
    "Person_sitting",
    "Cyclist",
    "Tram",
    "Misc",
    "DontCare",
)

# Official devkit thresholds, indexed by difficulty 0 easy, 1 moderate, 2 hard.
DIFFICULTY_NAMES: tuple[str, ...] = ("easy", "moderate", "hard")
MIN_HEIGHT: tuple[float, ...] = (40.0, 25.0, 25.0)
MAX_OCCLUSION: tuple[int, ...] = (0, 1, 2)
MAX_TRUNCATION: tuple[float, ...] = (0.15, 0.3, 0.5)

# The image_2 size of most KITTI frames (the original hard-codes it for its truncation test): the field of
# view of a scan read without its image.
DEFAULT_IMAGE_SIZE: tuple[int, int] = (1242, 375)

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
    for number, raw in enumerate(_read_text(path).splitlines(), start=1):
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
    return calib


def _format_float(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals when that reads back exactly, else with all the digits it needs."""
    text = f"{value:.{digits}f}"
    return text if float(text) == value else repr(float(value))


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
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(path, f"expected a .npy array (N, 8), could not read it: {e}") from None
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
    path = Path(path)
    _require_file(path)
    try:
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


def check_image_matches_calib(
    calib: Calib, width: int, height: int, image_path: str | Path, calib_path: str | Path | None = None
) -> None:
    """Raise DataError unless P2's principal point lies in the central half of a ``width`` x ``height`` image.

    The rule: W/4 <= cx <= 3W/4 and H/4 <= cy <= 3H/4 with (cx, cy) = (P2[0, 2], P2[1, 2]). A real camera's
    optical axis is near the image centre (KITTI's within 2 % of it); an image that fails this is not the one
    this calib describes: cropped, resized or rotated, another camera's, or smaller than the calib implies.
    """
    cx, cy = float(calib.P2[0, 2]), float(calib.P2[1, 2])
    if not (width / 4 <= cx <= 3 * width / 4 and height / 4 <= cy <= 3 * height / 4):
        raise DataError(
            image_path,
            f"expected an image whose central half holds P2's principal point ({cx:.1f}, {cy:.1f}) px, got a "
            f"{width}x{height} image (the image does not match the calib"
            + (f" {calib_path})" if calib_path is not None else ")"),
        )


def check_points_in_view(num_in_view: int, num_points: int, view: str | Path, calib_path: str | Path) -> None:
    """Raise DataError when a scan has points but none lands in image_2's view.

    The rule: a LiDAR scan always sees part of what its camera sees, so keeping 0 of N > 0 points means the
    image size (``view``: the image file, or a description of the assumed size) or the calib is not the
    scan's. A real KITTI frame keeps about 20 000 of 120 000 points.
    """
    if num_points > 0 and num_in_view == 0:
        raise DataError(
            view,
            f"expected some of the scan's {num_points} points in this image's view, got none with calib "
            f"{calib_path} (the image or the calib is not this scan's)",
        )


# ----------------------------------------------------------------------------------------------------
# splits and labels


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
            raise DataError(path, f"expected a 6-digit frame id, got {frame_id!r}", number)
        if frame_id in seen:
            first = seen[frame_id]
            raise DataError(path, f"expected each frame id once, {frame_id} is also on line {first}", number)
        seen[frame_id] = number
        ids.append(frame_id)
    if not ids:
        raise DataError(path, "expected at least one 6-digit frame id, got an empty split")
    return ids


@dataclass(frozen=True)
class Label:
    """One KITTI object line (camera 2's image for the 2D box, the rectified camera 0 frame for the 3D box).

    ``bbox`` is (left, top, right, bottom) px; (x, y, z) is the bottom-face centre; h, w, l in metres; ry the
    rotation about the camera y axis; ``score`` only for result (detection) files.
    """

    type: str
    truncated: float
    occluded: int
    alpha: float
    bbox: tuple[float, float, float, float]
    h: float
    w: float
    l: float
    x: float
    y: float
    z: float
    ry: float
    score: float | None = None


def _parse_label_line(fields: Sequence[str], path: Path, number: int, allow_score: bool) -> Label:
    expected = "15 or 16 (with score)" if allow_score else "15"
    if len(fields) != 15 and not (allow_score and len(fields) == 16):
        hint = " (a 16th, the score, only in result files)" if len(fields) == 16 else ""
        raise DataError(path, f"expected {expected} fields, got {len(fields)}{hint}", number)
    kind = fields[0]
    if kind not in KITTI_CLASSES:
        raise DataError(path, f"expected a class in {', '.join(KITTI_CLASSES)}, got {kind!r}", number)
    values = _parse_floats(fields[1:], path, number, what="after the class name")
    if kind != "DontCare" and (values[7:10] < 0).any():  # DontCare lines write -1 for "no 3D box"
        sizes = ", ".join(f"{n}={f}" for n, f in zip("hwl", fields[8:11], strict=True))
        raise DataError(path, f"expected sizes h, w, l >= 0, got {sizes}", number)
    occluded = values[1]
    if occluded != int(occluded):
        raise DataError(path, f"expected an integer occlusion state, got {fields[2]!r}", number)
    return Label(
        type=kind,
        truncated=float(values[0]),
        occluded=int(occluded),
        alpha=float(values[2]),
        bbox=(float(values[3]), float(values[4]), float(values[5]), float(values[6])),
        h=float(values[7]),
        w=float(values[8]),
        l=float(values[9]),
        x=float(values[10]),
        y=float(values[11]),
        z=float(values[12]),
        ry=float(values[13]),
        score=float(values[14]) if len(values) == 15 else None,
    )


def parse_labels(text: str, path: str | Path, allow_score: bool = False) -> list[Label]:
    """Parse the text of a label (or, with ``allow_score``, result) file; ``path`` only names it in errors."""
    path = Path(path)
    labels = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if fields:
            labels.append(_parse_label_line(fields, path, number, allow_score))
    return labels


def read_labels(path: str | Path, allow_score: bool = False) -> list[Label]:
    """Read a ``label_2`` file (15 fields a line) or, with ``allow_score``, a result file (16th: score)."""
    return parse_labels(_read_text(Path(path)), path, allow_score)


def format_label(label: Label) -> str:
    """One KITTI line for ``label``, no newline (2 decimals where exact, else all digits a float needs)."""
    dims = [label.h, label.w, label.l, label.x, label.y, label.z, label.ry]
    numbers = [label.truncated, label.alpha, *label.bbox, *dims]
    text = [_format_float(v, 2) for v in numbers]
    fields = [label.type, text[0], str(int(label.occluded)), *text[1:]]
    if label.score is not None:
        fields.append(_format_float(label.score, 4))
    return " ".join(fields)


def write_labels(path: str | Path, labels: Iterable[Label]) -> None:
    """Write labels (or detections, with scores) as a KITTI text file, atomically."""
    write_text_atomic(path, "".join(format_label(label) + "\n" for label in labels))


def labels_to_boxes(labels: Sequence[Label]) -> np.ndarray:
    """Boxes of ``labels`` in the pgnn convention.

    Shapes:
        returns (M, 7) float64 ``[x, y, z, l, h, w, ry]``, rectified camera frame.
    """
    boxes = np.array([[lb.x, lb.y, lb.z, lb.l, lb.h, lb.w, lb.ry] for lb in labels], dtype=np.float64)
    return boxes.reshape(-1, 7)


def difficulty(label: Label) -> int:
    """KITTI difficulty: 0 easy, 1 moderate, 2 hard, -1 none (too small, occluded or truncated; and DontCare).

    A label counts at the easiest level whose three devkit conditions it meets: box height (bottom - top) >
    MIN_HEIGHT, occluded <= MAX_OCCLUSION, truncated <= MAX_TRUNCATION.
    """
    if label.type == "DontCare":
        return -1
    height = label.bbox[3] - label.bbox[1]
    for level in range(3):
        if (
            height > MIN_HEIGHT[level]
            and label.occluded <= MAX_OCCLUSION[level]
            and label.truncated <= MAX_TRUNCATION[level]
        ):
            return level
    return -1


def difficulty_name(level: int) -> str:
    """ "easy" / "moderate" / "hard" for 0 / 1 / 2, "none" for -1."""
    return DIFFICULTY_NAMES[level] if 0 <= level < 3 else "none"


# ----------------------------------------------------------------------------------------------------
# frame transforms


def _pad4(matrix: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


def velo_to_rect_matrix(calib: Calib) -> np.ndarray:
    """(4, 4) homogeneous velodyne -> rectified camera 0: ``R0_rect . Tr_velo_to_cam`` (both padded)."""
    return _pad4(calib.R0_rect) @ _pad4(calib.Tr_velo_to_cam)


def velo_to_image_matrix(calib: Calib) -> np.ndarray:
    """(3, 4) velodyne -> image_2 homogeneous pixels: ``P2 . R0_rect . Tr_velo_to_cam``."""
    return calib.P2 @ velo_to_rect_matrix(calib)


def points_velo_to_rect(xyz: np.ndarray, calib: Calib) -> np.ndarray:
    """Velodyne frame -> rectified camera 0 frame.

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    m = velo_to_rect_matrix(calib)
    return np.asarray(xyz, dtype=np.float64) @ m[:3, :3].T + m[:3, 3]


def points_rect_to_velo(xyz: np.ndarray, calib: Calib) -> np.ndarray:
    """Rectified camera 0 frame -> velodyne frame (the exact inverse of ``points_velo_to_rect``).

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    m = np.linalg.inv(velo_to_rect_matrix(calib))
    return np.asarray(xyz, dtype=np.float64) @ m[:3, :3].T + m[:3, 3]


def points_rect_to_image(xyz: np.ndarray, calib: Calib) -> tuple[np.ndarray, np.ndarray]:
    """Project rectified-frame points into image_2 with P2.

    ``depth`` is the homogeneous w = z + P2[2, 3] (depth seen from camera 2); ``uv`` is meaningful only where
    depth > 0 (points behind the camera get mirrored or infinite pixels).

    Shapes:
        xyz: (N, 3) -> uv (N, 2) float64 pixels (u right, v down), depth (N,) float64.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    projected = xyz @ calib.P2[:, :3].T + calib.P2[:, 3]  # (N, 3)
    depth = projected[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = projected[:, :2] / depth[:, None]
    return uv, depth


def fov_mask(xyz_velo: np.ndarray, calib: Calib, width: int, height: int) -> np.ndarray:
    """Points of a velodyne scan that image_2 sees: w > 0, 0 <= u'/w < width, 0 <= v'/w < height.

    [u', v', w] = P2 . R0_rect . Tr_velo_to_cam . [x, y, z, 1] in float64; this reproduces the
    velodyne_reduced files of SECOND / OpenPCDet / mmdetection3d row for row (a numba loop, ~10x faster than
    the numpy matmul it replaces, tested to give the same rows).

    Shapes:
        xyz_velo: (N, 3) -> (N,) bool.
    """
    xyz = np.asarray(xyz_velo)
    if xyz.dtype not in (np.float32, np.float64):
        xyz = xyz.astype(np.float64)
    return _fov_kernel(xyz, velo_to_image_matrix(calib), float(width), float(height))  # views need no copy


@njit(cache=True)
def _fov_kernel(xyz: np.ndarray, m: np.ndarray, width: float, height: float) -> np.ndarray:
    n = xyz.shape[0]
    keep = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        x = np.float64(xyz[i, 0])
        y = np.float64(xyz[i, 1])
        z = np.float64(xyz[i, 2])
        w = x * m[2, 0] + y * m[2, 1] + z * m[2, 2] + m[2, 3]
        if not w > 0:
            continue
        u = (x * m[0, 0] + y * m[0, 1] + z * m[0, 2] + m[0, 3]) / w
        v = (x * m[1, 0] + y * m[1, 1] + z * m[1, 2] + m[1, 3]) / w
        keep[i] = (u >= 0) & (u < width) & (v >= 0) & (v < height)
    return keep


def fov_mask_numpy(xyz_velo: np.ndarray, calib: Calib, width: int, height: int) -> np.ndarray:
    """:func:`fov_mask` as a plain numpy matmul (the reference the tests compare the numba kernel with)."""
    xyz = np.asarray(xyz_velo, dtype=np.float64)
    xyz1 = np.hstack([xyz, np.ones((xyz.shape[0], 1))])  # (N, 4)
    projected = xyz1 @ velo_to_image_matrix(calib).T  # (N, 3)
    w = projected[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = projected[:, 0] / w
        v = projected[:, 1] / w
    return (w > 0) & (u >= 0) & (u < width) & (v >= 0) & (v < height)


def rect_to_cam2_offset(P2: np.ndarray) -> np.ndarray:
    """Where camera 2's rectified frame sits in the label frame: ``K^-1 . P2[:, 3]`` with ``K = P2[:, :3]``.

    A point's camera 2 coordinates are its label-frame coordinates plus this offset.

    The two frames differ by this translation only (P2 = K [I | t]); for KITTI's calibs it is about
    (+0.06, -0.001, +0.004) m. The original Point-GNN fed its network points in camera 2's frame.

    Shapes:
        P2: (3, 4) -> (3,) float64.
    """
    P2 = np.asarray(P2, dtype=np.float64)
    if P2.shape != (3, 4):
        raise ValueError(f"P2: expected shape (3, 4), got {P2.shape}")
    return np.linalg.solve(P2[:, :3], P2[:, 3])


def points_rect_to_cam2(xyz: np.ndarray, P2: np.ndarray) -> np.ndarray:
    """Rectified camera 0 (label) frame -> camera 2's rectified frame: ``x + K^-1 . P2[:, 3]``.

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    return np.asarray(xyz, dtype=np.float64) + rect_to_cam2_offset(P2)


def points_cam2_to_rect(xyz: np.ndarray, P2: np.ndarray) -> np.ndarray:
    """Camera 2's rectified frame -> rectified camera 0 (label) frame (inverse of ``points_rect_to_cam2``).

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    return np.asarray(xyz, dtype=np.float64) - rect_to_cam2_offset(P2)


# ----------------------------------------------------------------------------------------------------
# frames


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


@dataclass(frozen=True, eq=False)
class Frame:
    """One frame cropped to image_2's view, in the rectified camera 0 frame.

    Shapes:
        points_rect: (N, 3) float32; intensity: (N,) float32 reflectance; rgb: (N, 3) float32 in [0, 1],
        image_2's pixel under each point; scores: (N, 4) float32 PointPainting scores (``PAINTED_CLASSES``)
        or None.
    """

    frame_id: str
    points_rect: np.ndarray
    intensity: np.ndarray
    rgb: np.ndarray
    scores: np.ndarray | None
    labels: list[Label]
    calib: Calib
    image_size: tuple[int, int]


def load_frame(root: str | Path, frame_id: str, painted: bool = False, subset: str = "training") -> Frame:
    """Read one frame, crop it to image_2's field of view and move it to the rectified camera frame.

    ``painted`` reads ``painted_lidar/`` instead of ``velodyne/``. Labels are [] when the label file is absent
    (test data). The image must match the calib (``check_image_matches_calib``).
    """
    paths = frame_paths(root, frame_id, subset)
    calib = read_calib(paths.calib)
    scan = read_scan(paths, painted)  # (N, 4) or (N, 8)
    image = read_image(paths.image)  # (H, W, 3)
    check_image_matches_calib(calib, image.shape[1], image.shape[0], paths.image, paths.calib)
    labels = read_labels(paths.label) if paths.label.is_file() else []
    frame = frame_from_scan(frame_id, scan, calib, image=image, labels=labels, painted=painted)
    check_points_in_view(len(frame.points_rect), len(scan), paths.image, paths.calib)
    return frame


def frame_from_scan(
    frame_id: str,
    scan: np.ndarray,
    calib: Calib,
    *,
    image: np.ndarray | None = None,
    image_size: tuple[int, int] | None = None,
    labels: Sequence[Label] = (),
    painted: bool = False,
) -> Frame:
    """Crop a velodyne scan to image_2's field of view and move it to the rectified camera frame.

    The view is ``image``'s size, else ``image_size`` (width, height), else ``DEFAULT_IMAGE_SIZE``. Without an
    image the points' ``rgb`` is all zeros (there is no colour to sample). ``painted`` scans carry the 4
    PointPainting scores in columns 4-7.

    Shapes:
        scan: (N, 4) velodyne [x, y, z, reflectance] or (N, 8) painted rows; image: (H, W, 3) uint8
    """
    if image is not None:
        height, width = image.shape[:2]
    else:
        width, height = image_size if image_size is not None else DEFAULT_IMAGE_SIZE
    keep = fov_mask(scan[:, :3], calib, width, height)  # (N,)
    kept = scan[keep]  # (K, 4|8)
    rect = points_velo_to_rect(kept[:, :3], calib)  # (K, 3) float64
    if image is not None:
        uv, _ = points_rect_to_image(rect, calib)  # (K, 2)
        cols = np.clip(np.floor(uv[:, 0]).astype(np.int64), 0, width - 1)
        rows = np.clip(np.floor(uv[:, 1]).astype(np.int64), 0, height - 1)
        rgb = image[rows, cols].astype(np.float32) / np.float32(255.0)  # (K, 3)
    else:
        rgb = np.zeros((len(kept), 3), dtype=np.float32)
    return Frame(
        frame_id=frame_id,
        points_rect=rect.astype(np.float32),
        intensity=kept[:, 3].astype(np.float32),
        rgb=rgb,
        scores=kept[:, 4:8].astype(np.float32) if painted else None,
        labels=list(labels),
        calib=calib,
        image_size=(int(width), int(height)),
    )


def frame_ids(root: str | Path, split: str, painted: bool = False) -> list[str]:
    """The ids of ``ROOT/ImageSets/<split>.txt``, each checked to have its files.

    A frame needs its points (velodyne/ or velodyne_reduced/; painted_lidar/ with ``painted``), calib/ and
    image_2/ files, under ``testing/`` for the split named ``test`` and ``training/`` otherwise.
    """
    split_path = Path(root) / "ImageSets" / f"{split}.txt"
    subset = "testing" if split == "test" else "training"
    ids = read_split(split_path)
    line_of = _line_numbers(split_path)
    for frame_id in ids:
        paths = frame_paths(root, frame_id, subset)
        needed = [paths.painted if painted else paths.points, paths.calib, paths.image]
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
    try:
        return path.read_text(encoding="ascii")
    except UnicodeDecodeError as e:
        message = f"expected an ASCII text file, got byte {e.object[e.start]:#x} at offset {e.start}"
        raise DataError(path, message) from None


def _parse_floats(fields: Sequence[str], path: Path, line: int, what: str) -> np.ndarray:
    try:
        values = np.array([float(f) for f in fields], dtype=np.float64)
    except ValueError:
        bad = next(f for f in fields if not _is_float(f))
        raise DataError(path, f"expected numbers {what}, got {bad!r}", line) from None
    if not np.isfinite(values).all():
        bad = next(f for f in fields if not math.isfinite(float(f)))
        raise DataError(path, f"expected finite numbers {what}, got {bad!r}", line)
    return values


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_finite(array: np.ndarray, path: Path) -> None:
    """Finite values in every row, and x, y, z within ``MAX_POINT_DISTANCE`` (the row is named)."""
    # whole-array reductions first (reducing each row of 4 took 7x longer); find the row only on failure
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
