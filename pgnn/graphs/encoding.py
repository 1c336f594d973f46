"""Box encodings: a box as regression targets relative to the vertex that predicts it, and back.

The six encodings of the original's ``models/box_encoding.py``, as encode/decode pairs that are exact
inverses. ``classaware_all_class_box_encoding`` (the default, used by every published config) encodes a box
``[x, y, z, l, h, w, yaw]`` seen from vertex ``p`` with its class's median size ``(L, H, W)``::

    e = [(x - px) / L, (y - py) / H, (z - pz) / W,
         log(l / L), log(h / H), log(w / W), (yaw - yaw0) / (pi / 4)]

where ``yaw0`` is 0 for the class's horizontal id and pi/2 for its vertical id.

Class layout
------------
Every function takes ``class_names``: the name of each class id of the model, e.g. for the Car label method
``("Background", "Car", "Car", "DontCare")``. An object class holds two consecutive ids, its first for boxes
with yaw near 0 ("horizontal") and its second for yaw near pi/2 ("vertical"), as in the original's label maps
(``{'Background': 0, 'Car': 1, 'DontCare': 3}`` with vertical = 1 + 1). pgnn's ``Car_heading`` label method
gives a class four ids, a third with yaw near pi and a fourth near -pi/2 (``YAW_CENTRES``), so the heading is
kept instead of folded modulo pi; the encoding is the same formula. Rows of other ids (Background,
DontCare) are not scaled: their centre is made relative to the vertex and the rest is copied, so every
encoding stays invertible on every row.

Two deliberate departures from the original, neither used by a published config: its two ``voxelnet``
variants picked anchors by hard-coded class ids (2 = Car and 1, 3 = Pedestrian/Cyclist; 1..6 for the
class-aware one, which is the id layout of the ``yaw`` label method); here they look the anchor up by class
name, the same thing on the layouts they were written for. And the original's class-aware voxelnet encoding
zeroed the unscaled rows; here they are copied like the others.

Arrays are computed in float64; results are float32 unless an input is float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# models/box_encoding.py median_object_size_map: KITTI training-set medians (l, h, w), metres.
MEDIAN_OBJECT_SIZE: dict[str, tuple[float, float, float]] = {
    "Cyclist": (1.76, 1.75, 0.6),
    "Van": (4.98, 2.13, 1.88),
    "Tram": (14.66, 3.61, 2.6),
    "Car": (3.88, 1.5, 1.63),
    "Misc": (2.52, 1.65, 1.51),
    "Pedestrian": (0.88, 1.77, 0.65),
    "Truck": (10.81, 3.34, 2.63),
    "Person_sitting": (0.75, 1.26, 0.59),
}

# The (l, h, w) anchors of the two voxelnet-style encodings.
VOXELNET_SIZE: dict[str, tuple[float, float, float]] = {
    "Car": (3.9, 1.56, 1.6),
    "Pedestrian": (0.8, 1.73, 0.6),
    "Cyclist": (0.8, 1.73, 0.6),
}
CLASSAWARE_VOXELNET_SIZE: dict[str, tuple[float, float, float]] = {
    "Car": (3.9, 1.56, 1.6),
    "Pedestrian": (0.8, 1.73, 0.6),
    "Cyclist": (1.76, 1.73, 0.6),
}

DEFAULT_ENCODING = "classaware_all_class_box_encoding"

_QUARTER_PI = np.pi * 0.25
_HALF_PI = np.pi * 0.5

YAW_CENTRES: tuple[float, ...] = (0.0, _HALF_PI, np.pi, -_HALF_PI)
"""The yaw offset of a class's k-th id: horizontal, vertical, then (four ids) reversed, reversed vertical."""

EncodeFn = Callable[[np.ndarray, np.ndarray, np.ndarray, Sequence[str]], np.ndarray]


def class_table(
    class_names: Sequence[str], sizes: dict[str, tuple[float, float, float]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class id: its anchor size, its yaw offset and whether it is encoded.

    A name found in ``sizes`` is encoded; its k-th id has the yaw offset ``YAW_CENTRES[k]``: its first id is
    horizontal (0), its second vertical (pi/2), a third and fourth (``Car_heading``) pi and -pi/2. A fifth id
    of the same name is an error.

    Shapes: -> size (C, 3) float64 (1 where not encoded), yaw0 (C,) float64, encoded (C,) bool.
    """
    n = len(class_names)
    size = np.ones((n, 3), np.float64)
    yaw0 = np.zeros(n, np.float64)
    encoded = np.zeros(n, bool)
    seen: dict[str, int] = {}
    for c, name in enumerate(class_names):
        if name not in sizes:
            continue
        k = seen.get(name, 0)
        if k >= len(YAW_CENTRES):
            n_max = len(YAW_CENTRES)
            raise ValueError(f"class {name!r} has more than {n_max} ids (yaw bins) in {class_names}")
        seen[name] = k + 1
        size[c] = sizes[name]
        yaw0[c] = YAW_CENTRES[k]
        encoded[c] = True
    return size, yaw0, encoded


def _prepare(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.dtype]:
    boxes = np.asarray(boxes)
    vertex_xyz = np.asarray(vertex_xyz)
    class_ids = np.asarray(class_ids).reshape(-1)
    if boxes.ndim != 2 or boxes.shape[1] != 7:
        raise ValueError(f"boxes: expected shape (N, 7), got {boxes.shape}")
    if vertex_xyz.shape != (boxes.shape[0], 3):
        raise ValueError(f"vertex_xyz: expected shape ({boxes.shape[0]}, 3), got {vertex_xyz.shape}")
    if class_ids.shape[0] != boxes.shape[0]:
        raise ValueError(f"class_ids: expected {boxes.shape[0]} ids, got {class_ids.shape[0]}")
    if class_ids.size and (class_ids.min() < 0 or class_ids.max() >= len(class_names)):
        got = f"{class_ids.min()}..{class_ids.max()}"
        raise ValueError(f"class_ids: expected ids in [0, {len(class_names)}), got {got}")
    dtype = np.result_type(boxes.dtype, vertex_xyz.dtype, np.float32)
    return boxes.astype(np.float64), vertex_xyz.astype(np.float64), class_ids.astype(np.int64), dtype


# ----------------------------------------------------------------------------------------------------------
# direct / center


def encode_direct_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """The box itself. Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7)."""
    b, _, _, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    return b.astype(dtype)


def decode_direct_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_direct_encoding`. Shapes as there."""
    e, _, _, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
    return e.astype(dtype)


def encode_center_box_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Centre relative to the vertex, the rest unchanged. Shapes: (N, 7), (N, 3), (N,) -> (N, 7)."""
    b, p, _, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    b[:, :3] -= p
    return b.astype(dtype)


def decode_center_box_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_center_box_encoding`. Shapes as there."""
    e, p, _, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
    e[:, :3] += p
    return e.astype(dtype)


# ----------------------------------------------------------------------------------------------------------
# anchor-scaled: one shared implementation, parametrised by anchor sizes and the yaw rule


def _encode_scaled(
    boxes: np.ndarray,
    vertex_xyz: np.ndarray,
    class_ids: np.ndarray,
    class_names: Sequence[str],
    sizes: dict[str, tuple[float, float, float]],
    classaware_yaw: bool,
) -> np.ndarray:
    """Centre offset / anchor, log(size / anchor), yaw / (pi/4) about the class's yaw offset (classaware) or
    yaw / (pi/2) on every row (voxelnet)."""
    b, p, c, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    size, yaw0, encoded = class_table(class_names, sizes)
    s = size[c]  # (N, 3)
    m = encoded[c]  # (N,)
    out = b.copy()  # (N, 7)
    out[:, :3] = b[:, :3] - p
    out[m, :3] /= s[m]
    with np.errstate(divide="ignore", invalid="ignore"):
        out[m, 3:6] = np.log(b[m, 3:6] / s[m])
    if classaware_yaw:
        out[m, 6] = (b[m, 6] - yaw0[c[m]]) / _QUARTER_PI
    else:
        out[:, 6] = b[:, 6] / _HALF_PI
    return out.astype(dtype)


def _decode_scaled(
    encoded: np.ndarray,
    vertex_xyz: np.ndarray,
    class_ids: np.ndarray,
    class_names: Sequence[str],
    sizes: dict[str, tuple[float, float, float]],
    classaware_yaw: bool,
) -> np.ndarray:
    e, p, c, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
    size, yaw0, enc = class_table(class_names, sizes)
    s = size[c]
    m = enc[c]
    out = e.copy()
    out[m, :3] = e[m, :3] * s[m]
    out[:, :3] += p
    out[m, 3:6] = np.exp(e[m, 3:6]) * s[m]
    if classaware_yaw:
        out[m, 6] = e[m, 6] * _QUARTER_PI + yaw0[c[m]]
    else:
        out[:, 6] = e[:, 6] * _HALF_PI
    return out.astype(dtype)


def encode_voxelnet_box_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """VoxelNet-style: Car and Pedestrian/Cyclist anchors (``VOXELNET_SIZE``), yaw / (pi/2) on every row.

    Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    return _encode_scaled(boxes, vertex_xyz, class_ids, class_names, VOXELNET_SIZE, False)


def decode_voxelnet_box_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_voxelnet_box_encoding`. Shapes as there."""
    return _decode_scaled(encoded, vertex_xyz, class_ids, class_names, VOXELNET_SIZE, False)


def encode_classaware_voxelnet_box_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Class-aware VoxelNet anchors (``CLASSAWARE_VOXELNET_SIZE``), yaw about 0 / pi/2 over pi/4.

    Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    return _encode_scaled(boxes, vertex_xyz, class_ids, class_names, CLASSAWARE_VOXELNET_SIZE, True)


def decode_classaware_voxelnet_box_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_classaware_voxelnet_box_encoding`. Shapes as there."""
    return _decode_scaled(encoded, vertex_xyz, class_ids, class_names, CLASSAWARE_VOXELNET_SIZE, True)


def encode_classaware_all_class_box_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """The default: median class sizes (``MEDIAN_OBJECT_SIZE``), yaw about 0 / pi/2 over pi/4.

    Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    return _encode_scaled(boxes, vertex_xyz, class_ids, class_names, MEDIAN_OBJECT_SIZE, True)


def decode_classaware_all_class_box_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_classaware_all_class_box_encoding`; e.g. for a Car (3.88, 1.5, 1.63):
    x = px + e0 * 3.88, ..., l = exp(e3) * 3.88, ..., yaw = e6 * pi/4 (+ pi/2 for the vertical id).

    Shapes: encoded (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    return _decode_scaled(encoded, vertex_xyz, class_ids, class_names, MEDIAN_OBJECT_SIZE, True)


# ----------------------------------------------------------------------------------------------------------
# canonical: the centre offset expressed in the box's own (yaw-rotated) frame


def encode_classaware_all_class_box_canonical_encoding(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Median sizes, with the centre offset rotated into the box frame by theta = yaw - yaw0.

    e0 = (dx cos t - dz sin t) / L, e2 = (dx sin t + dz cos t) / W for the horizontal id; the vertical id
    divides e0 by W and e2 by L (its length lies across). e1, e3..e6 as the default encoding.

    Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    b, p, c, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    size, yaw0, encoded = class_table(class_names, MEDIAN_OBJECT_SIZE)
    m = encoded[c]
    s = size[c][m]  # (K, 3) l, h, w
    vertical = np.isclose(np.abs(yaw0[c[m]]), _HALF_PI)  # (K,)
    d = b[m, :3] - p[m]  # (K, 3)
    t = b[m, 6] - yaw0[c[m]]
    across = np.where(vertical, s[:, 2], s[:, 0])  # divides the rotated x offset
    along = np.where(vertical, s[:, 0], s[:, 2])  # divides the rotated z offset
    out = b.copy()
    out[:, :3] = b[:, :3] - p
    out[m, 0] = (d[:, 0] * np.cos(t) - d[:, 2] * np.sin(t)) / across
    out[m, 1] = d[:, 1] / s[:, 1]
    out[m, 2] = (d[:, 0] * np.sin(t) + d[:, 2] * np.cos(t)) / along
    with np.errstate(divide="ignore", invalid="ignore"):
        out[m, 3:6] = np.log(b[m, 3:6] / s)
    out[m, 6] = t / _QUARTER_PI
    return out.astype(dtype)


def decode_classaware_all_class_box_canonical_encoding(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`encode_classaware_all_class_box_canonical_encoding`. Shapes as there."""
    e, p, c, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
    size, yaw0, enc = class_table(class_names, MEDIAN_OBJECT_SIZE)
    m = enc[c]
    s = size[c][m]
    vertical = np.isclose(np.abs(yaw0[c[m]]), _HALF_PI)
    across = np.where(vertical, s[:, 2], s[:, 0])
    along = np.where(vertical, s[:, 0], s[:, 2])
    t = e[m, 6] * _QUARTER_PI
    u = e[m, 0] * across
    v = e[m, 2] * along
    out = e.copy()
    out[m, 0] = u * np.cos(t) + v * np.sin(t)
    out[m, 1] = e[m, 1] * s[:, 1]
    out[m, 2] = -u * np.sin(t) + v * np.cos(t)
    out[:, :3] += p
    out[m, 3:6] = np.exp(e[m, 3:6]) * s
    out[m, 6] = t + yaw0[c[m]]
    return out.astype(dtype)


# ----------------------------------------------------------------------------------------------------------

# name (the original's ``box_encoding_method``) -> (encode, decode)
ENCODINGS: dict[str, tuple[EncodeFn, EncodeFn]] = {
    "direct_encoding": (encode_direct_encoding, decode_direct_encoding),
    "center_box_encoding": (encode_center_box_encoding, decode_center_box_encoding),
    "voxelnet_box_encoding": (encode_voxelnet_box_encoding, decode_voxelnet_box_encoding),
    "classaware_voxelnet_box_encoding": (
        encode_classaware_voxelnet_box_encoding,
        decode_classaware_voxelnet_box_encoding,
    ),
    "classaware_all_class_box_encoding": (
        encode_classaware_all_class_box_encoding,
        decode_classaware_all_class_box_encoding,
    ),
    "classaware_all_class_box_canonical_encoding": (
        encode_classaware_all_class_box_canonical_encoding,
        decode_classaware_all_class_box_canonical_encoding,
    ),
}


def get_encoding(name: str) -> tuple[EncodeFn, EncodeFn]:
    """(encode, decode) of the encoding ``name``, or ValueError naming the known ones."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown box encoding {name!r}; expected one of {sorted(ENCODINGS)}")
    return ENCODINGS[name]


def decode_all_classes(
    pred_box: np.ndarray,
    vertex_xyz: np.ndarray,
    class_names: Sequence[str],
    encoding: str = DEFAULT_ENCODING,
) -> np.ndarray:
    """Decode every class head's box at every vertex (head c decoded as class id c).

    Shapes: pred_box (N, C, 7) with C = len(class_names), vertex_xyz (N, 3) -> (N, C, 7).
    """
    pred_box = np.asarray(pred_box)
    n_classes = len(class_names)
    if pred_box.ndim != 3 or pred_box.shape[1:] != (n_classes, 7):
        raise ValueError(f"pred_box: expected shape (N, {n_classes}, 7), got {pred_box.shape}")
    n = pred_box.shape[0]
    decode = get_encoding(encoding)[1]
    ids = np.tile(np.arange(n_classes), n)  # (N * C,)
    xyz = np.repeat(np.asarray(vertex_xyz).reshape(n, 3), n_classes, axis=0)  # (N * C, 3)
    return decode(pred_box.reshape(n * n_classes, 7), xyz, ids, class_names).reshape(n, n_classes, 7)
