"""KITTI label and result files: ``Label``, its text format, boxes in the pgnn convention, difficulty.

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

Readers raise ``pgnn.core.errors.DataError`` naming the file and line. Rules beyond the format: a label's
h, w, l are >= 0, its truncation is in 0..1 and its occlusion one of 0, 1, 2, 3, as the devkit's readme
defines them (DontCare lines, and the lines of result files, may write -1: unknown). All 7,481 label files of
KITTI's training set keep these rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError
from pgnn.core.io import write_text_atomic
from pgnn.data.kitti import _parse_floats, _read_text, check_complete

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
OCCLUSION_STATES: tuple[int, ...] = (0, 1, 2, 3)
"""The devkit's occlusion states: fully visible, partly occluded, largely occluded, unknown."""


def _format_float(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals when that reads back exactly, else with all the digits it needs."""
    text = f"{value:.{digits}f}"
    return text if float(text) == value else repr(float(value))


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
    truncated, occluded = values[0], values[1]
    if occluded != int(occluded):
        raise DataError(path, f"expected an integer occlusion state, got {fields[2]!r}", number)
    unknown = kind == "DontCare" or allow_score  # DontCare lines and result files write -1 for "unknown"
    if not (0.0 <= truncated <= 1.0 or (unknown and truncated == -1.0)):
        expected = "0..1 (or -1, unknown)" if unknown else "0..1"
        raise DataError(path, f"expected a truncation in {expected}, got {fields[1]!r}", number)
    if occluded not in OCCLUSION_STATES and not (unknown and occluded == -1):
        expected = "0, 1, 2 or 3 (or -1, unknown)" if unknown else "0, 1, 2 or 3"
        raise DataError(path, f"expected an occlusion state {expected}, got {fields[2]!r}", number)
    return Label(
        type=kind,
        truncated=float(truncated),
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
    text = _read_text(Path(path))
    labels = parse_labels(text, path, allow_score)
    check_complete(text, path)
    return labels


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


def label_from_box(
    kind: str,
    box: np.ndarray,
    *,
    truncated: float,
    occluded: int,
    alpha: float,
    bbox: tuple[float, float, float, float],
    score: float | None = None,
) -> Label:
    """The ``Label`` of a box in the pgnn convention (``labels_to_boxes``' inverse) and its other fields.

    Shapes:
        box: (7,) ``[x, y, z, l, h, w, ry]``, rectified camera frame
    """
    x, y, z, l, h, w, ry = (float(v) for v in box)
    return Label(
        type=kind,
        truncated=truncated,
        occluded=occluded,
        alpha=alpha,
        bbox=bbox,
        h=h,
        w=w,
        l=l,
        x=x,
        y=y,
        z=z,
        ry=ry,
        score=score,
    )


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
