"""Per-vertex training targets: a class label, an encoded box and a validity flag for every vertex.

The original's ``assign_classaware_*_label_to_points`` (``dataset/kitti_dataset.py``), one label method per
model:

| method                  | class ids                                                                    |
|-------------------------|------------------------------------------------------------------------------|
| Car                     | 0 Background, 1 Car horizontal, 2 Car vertical, 3 DontCare                   |
| Pedestrian_and_Cyclist  | 0 Background, 1-2 Pedestrian h/v, 3-4 Cyclist h/v, 5 DontCare                |
| yaw                     | 0 Background, 1-2 Car h/v, 3-4 Pedestrian h/v, 5-6 Cyclist h/v, 7 DontCare   |
| Car_heading (pgnn's)    | 0 Background, 1-4 Car at yaw 0, pi/2, pi, -pi/2, 5 DontCare                  |

Rules, per label in file order (so later boxes win overlaps):

* A label of one of the method's object classes claims the vertices inside its box (enlarged by
  ``expend_factor``): their class is the object's horizontal id when its yaw, folded into [-pi/4, 3pi/4], is
  below pi/4, else its vertical id; their box target is the label's box with that folded yaw; they are valid.
  The original's methods thus fold the heading modulo pi (a car and its reverse get the same target).
  ``Car_heading`` keeps it: the yaw is wrapped into [-3pi/4, 5pi/4) and the id is that of the nearest of
  the four yaw centres 0, pi/2, pi, -pi/2 (``pgnn.encoding.YAW_CENTRES``).
* A ``DontCare`` label changes nothing: its region stays background.
* Any other label (Van, Truck, Misc, Tram, Person_sitting, or a class of another method) claims its vertices
  as the DontCare class with no valid box.

Vertices in no box are Background with no valid box. Box targets of invalid vertices are zero. Boxes are
closed here (``pgnn.core.boxes.points_in_boxes_index``: a vertex exactly on a face is inside) where the
original's
test was strict; that decides nothing on real data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pgnn.core.boxes import expand_boxes, points_in_boxes_index
from pgnn.graphs.encoding import DEFAULT_ENCODING, get_encoding

# label method -> the name of each class id (object classes hold two ids: horizontal, vertical)
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "Car": ("Background", "Car", "Car", "DontCare"),
    "Pedestrian_and_Cyclist": ("Background", "Pedestrian", "Pedestrian", "Cyclist", "Cyclist", "DontCare"),
    "yaw": (
        "Background",
        "Car",
        "Car",
        "Pedestrian",
        "Pedestrian",
        "Cyclist",
        "Cyclist",
        "DontCare",
    ),
    "Car_heading": ("Background", "Car", "Car", "Car", "Car", "DontCare"),
}


def method_class_names(method: str) -> tuple[str, ...]:
    """The name of each class id of label method ``method``."""
    if method not in CLASS_NAMES:
        raise ValueError(f"unknown label method {method!r}; expected one of {sorted(CLASS_NAMES)}")
    return CLASS_NAMES[method]


def num_classes(method: str) -> int:
    """Number of classes (logits) of label method ``method``: 4, 6 or 8."""
    return len(method_class_names(method))


def object_classes(method: str) -> tuple[str, ...]:
    """The object classes a model of ``method`` detects, e.g. ("Pedestrian", "Cyclist")."""
    names = method_class_names(method)
    return tuple(dict.fromkeys(n for n in names if n not in ("Background", "DontCare")))


def dontcare_id(method: str) -> int:
    """The id of the DontCare class (the last one)."""
    return num_classes(method) - 1


def fold_yaw(yaw: float) -> float:
    """The yaw moved by multiples of pi into [-pi/4, 3pi/4] (as the original's two while loops do)."""
    while yaw < -0.25 * np.pi:
        yaw += np.pi
    while yaw > 0.75 * np.pi:
        yaw -= np.pi
    return yaw


def yaw_bins(method: str) -> int:
    """Yaw ids per object class of ``method``: 2 (original: heading mod pi) or 4 (``Car_heading``)."""
    names = method_class_names(method)
    return names.count(object_classes(method)[0])


def fold_heading(yaw: float) -> float:
    """The yaw moved by multiples of 2 pi into [-3pi/4, 5pi/4) (the four-bin methods keep the heading)."""
    return float((yaw + 0.75 * np.pi) % (2.0 * np.pi) - 0.75 * np.pi)


def target_yaw(yaw: float, method: str) -> float:
    """The yaw a label of ``method`` is encoded with: :func:`fold_yaw`, or :func:`fold_heading` for 4 bins."""
    return fold_heading(yaw) if yaw_bins(method) == 4 else fold_yaw(yaw)


def yaw_bin(yaw: float, method: str) -> int:
    """Offset of a label's yaw id from its class's first id: 0/1 (horizontal/vertical), 0-3 for four bins."""
    if yaw_bins(method) == 4:
        return int(np.floor((fold_heading(yaw) + 0.25 * np.pi) / (0.5 * np.pi))) % 4
    return 0 if fold_yaw(yaw) < 0.25 * np.pi else 1


def label_classes(names: Sequence[str], yaws: np.ndarray, method: str) -> np.ndarray:
    """The class id each label assigns to its vertices; -1 for DontCare labels (they assign nothing).

    Shapes: names (M,), yaws (M,) -> (M,) int64.
    """
    ids = method_class_names(method)
    first_id = {name: ids.index(name) for name in object_classes(method)}
    out = np.empty(len(names), np.int64)
    for k, (name, yaw) in enumerate(zip(names, yaws, strict=True)):
        if name == "DontCare":
            out[k] = -1
        elif name in first_id:
            out[k] = first_id[name] + yaw_bin(float(yaw), method)
        else:
            out[k] = dontcare_id(method)
    return out


def assign_targets(
    vertex_xyz: np.ndarray,
    boxes: np.ndarray,
    class_names: Sequence[str],
    method: str,
    expend_factor: tuple[float, float, float] = (1.0, 1.0, 1.0),
    encoding: str = DEFAULT_ENCODING,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Class labels, encoded box targets and validity of every vertex (see the module docstring).

    ``expend_factor`` enlarges each box for the assignment only, in the original's order (height, width,
    length); the target box keeps the label's size.

    Shapes:
        vertex_xyz: (N, 3) vertices of the last graph level (camera frame)
        boxes: (M, 7) label boxes [x, y, z, l, h, w, ry]; class_names: (M,) their KITTI types
        return: cls_labels (N,) int64, box_targets (N, 7) float32, valid (N,) bool
    """
    xyz = np.asarray(vertex_xyz, dtype=np.float64).reshape(-1, 3)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    if len(class_names) != boxes.shape[0]:
        got = len(class_names)
        raise ValueError(f"expected a class name per box, got {got} names for {boxes.shape[0]} boxes")
    names = method_class_names(method)
    encode = get_encoding(encoding)[0]
    n = xyz.shape[0]
    cls_labels = np.zeros(n, np.int64)
    box_targets = np.zeros((n, 7), np.float32)
    valid = np.zeros(n, bool)
    label_ids = label_classes(class_names, boxes[:, 6], method)  # (M,)
    folded = boxes.copy()  # (M, 7) target boxes: the label's, yaw folded
    folded[:, 6] = [target_yaw(float(y), method) for y in boxes[:, 6]]
    keep = np.nonzero(label_ids >= 0)[0]  # DontCare labels touch nothing
    if n == 0 or keep.size == 0:
        return cls_labels, box_targets, valid
    fh, fw, fl = (float(v) for v in expend_factor)
    region = expand_boxes(boxes[keep], (fl, fh, fw))
    which = points_in_boxes_index(xyz, region)  # (N,) index into keep, -1 none
    inside = which >= 0
    owner = keep[which[inside]]  # (K,) label row of each claimed vertex
    cls_labels[inside] = label_ids[owner]
    is_object = label_ids[owner] != dontcare_id(method)  # (K,)
    rows = np.nonzero(inside)[0][is_object]  # (V,) vertices with a valid box
    if rows.size:
        box_targets[rows] = encode(folded[owner[is_object]], xyz[rows], cls_labels[rows], names)
        valid[rows] = True
    return cls_labels, box_targets, valid
