"""Box encodings: a box as regression targets relative to the vertex that predicts it, and back.

The six encodings of the original's ``models/box_encoding.py``, as encode/decode pairs that are exact
inverses (``ENCODINGS``, under the original's ``box_encoding_method`` names). The default,
``classaware_all_class_box_encoding`` (used by every published config), encodes a box
``[x, y, z, l, h, w, yaw]`` seen from vertex ``p`` with its class's median size, the anchor ``(L, H, W)``::

    e = [(x - px) / L, (y - py) / H, (z - pz) / W,
         log(l / L), log(h / H), log(w / W), (yaw - yaw0) / (pi / 4)]

where ``yaw0`` is 0 for the class's horizontal id and pi/2 for its vertical id. The others:

===========================================  ================================================================
name                                         encoding
===========================================  ================================================================
direct_encoding                              the box itself
center_box_encoding                          the centre relative to the vertex, the rest unchanged
voxelnet_box_encoding                        as the default with the anchors ``VOXELNET_SIZE`` (Car, and one
                                             for Pedestrian and Cyclist), and yaw / (pi/2) on every row
classaware_voxelnet_box_encoding             the default with the anchors ``CLASSAWARE_VOXELNET_SIZE``
classaware_all_class_box_encoding            the default, anchors ``MEDIAN_OBJECT_SIZE``
classaware_all_class_box_canonical_encoding  the default with the centre offset rotated into the box's frame
===========================================  ================================================================

The four anchor-scaled ones are one encoding with a table of anchors and a yaw rule; the centre one is the
same with no anchors.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

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
    class_names: Sequence[str], sizes: Mapping[str, tuple[float, float, float]]
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


def _direct(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """The box itself, both ways (``direct_encoding``). Shapes: (N, 7), (N, 3), (N,) -> (N, 7)."""
    b, _, _, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    return b.astype(dtype)


# ----------------------------------------------------------------------------------------------------------
# anchor-scaled: one implementation, parametrised by the anchor sizes and the yaw rule


@dataclass(frozen=True)
class _Scaled:
    """Centre offset / anchor, log(size / anchor), and yaw / (pi/4) about the class's yaw offset
    (``classaware_yaw``) or yaw / (pi/2) on every row (voxelnet); rows of classes without an anchor in
    ``sizes`` only get the centre offset."""

    sizes: Mapping[str, tuple[float, float, float]]
    classaware_yaw: bool

    def encode(
        self, boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
    ) -> np.ndarray:
        """Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7)."""
        b, p, c, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
        size, yaw0, encoded = class_table(class_names, self.sizes)
        s = size[c]  # (N, 3)
        m = encoded[c]  # (N,)
        out = b.copy()  # (N, 7)
        out[:, :3] = b[:, :3] - p
        out[m, :3] /= s[m]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[m, 3:6] = np.log(b[m, 3:6] / s[m])
        if self.classaware_yaw:
            out[m, 6] = (b[m, 6] - yaw0[c[m]]) / _QUARTER_PI
        else:
            out[:, 6] = b[:, 6] / _HALF_PI
        return out.astype(dtype)

    def decode(
        self, encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
    ) -> np.ndarray:
        """Inverse of ``encode``; e.g. for a Car of the default (3.88, 1.5, 1.63): x = px + e0 * 3.88, ...,
        l = exp(e3) * 3.88, ..., yaw = e6 * pi/4 (+ pi/2 for the vertical id). Shapes as there."""
        e, p, c, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
        size, yaw0, enc = class_table(class_names, self.sizes)
        s = size[c]
        m = enc[c]
        out = e.copy()
        out[m, :3] = e[m, :3] * s[m]
        out[:, :3] += p
        out[m, 3:6] = np.exp(e[m, 3:6]) * s[m]
        if self.classaware_yaw:
            out[m, 6] = e[m, 6] * _QUARTER_PI + yaw0[c[m]]
        else:
            out[:, 6] = e[:, 6] * _HALF_PI
        return out.astype(dtype)


def _scaled(
    sizes: Mapping[str, tuple[float, float, float]], classaware_yaw: bool
) -> tuple[EncodeFn, EncodeFn]:
    """(encode, decode) of the anchor-scaled encoding with these anchors and yaw rule."""
    scaled = _Scaled(sizes, classaware_yaw)
    return scaled.encode, scaled.decode


# ----------------------------------------------------------------------------------------------------------
# canonical: the centre offset expressed in the box's own (yaw-rotated) frame


def _canonical_anchors(
    class_ids: np.ndarray, class_names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which rows are encoded and, for those, their median size, yaw offset and the anchor lengths across
    (the rotated x offset's) and along (the rotated z offset's): a vertical id's length lies across.

    Shapes: class_ids (N,) -> encoded (N,) bool, size (K, 3), yaw0 (K,), across (K,), along (K,).
    """
    size, yaw0, encoded = class_table(class_names, MEDIAN_OBJECT_SIZE)
    m = encoded[class_ids]
    s = size[class_ids][m]  # (K, 3) l, h, w
    y0 = yaw0[class_ids[m]]  # (K,)
    vertical = np.isclose(np.abs(y0), _HALF_PI)  # (K,)
    return m, s, y0, np.where(vertical, s[:, 2], s[:, 0]), np.where(vertical, s[:, 0], s[:, 2])


def _encode_canonical(
    boxes: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Median sizes, with the centre offset rotated into the box frame by theta = yaw - yaw0.

    e0 = (dx cos t - dz sin t) / L, e2 = (dx sin t + dz cos t) / W for the horizontal id; the vertical id
    divides e0 by W and e2 by L (its length lies across). e1, e3..e6 as the default encoding.

    Shapes: boxes (N, 7), vertex_xyz (N, 3), class_ids (N,) -> (N, 7).
    """
    b, p, c, dtype = _prepare(boxes, vertex_xyz, class_ids, class_names)
    m, s, yaw0, across, along = _canonical_anchors(c, class_names)
    d = b[m, :3] - p[m]  # (K, 3)
    t = b[m, 6] - yaw0
    out = b.copy()
    out[:, :3] = b[:, :3] - p
    out[m, 0] = (d[:, 0] * np.cos(t) - d[:, 2] * np.sin(t)) / across
    out[m, 1] = d[:, 1] / s[:, 1]
    out[m, 2] = (d[:, 0] * np.sin(t) + d[:, 2] * np.cos(t)) / along
    with np.errstate(divide="ignore", invalid="ignore"):
        out[m, 3:6] = np.log(b[m, 3:6] / s)
    out[m, 6] = t / _QUARTER_PI
    return out.astype(dtype)


def _decode_canonical(
    encoded: np.ndarray, vertex_xyz: np.ndarray, class_ids: np.ndarray, class_names: Sequence[str]
) -> np.ndarray:
    """Inverse of :func:`_encode_canonical`. Shapes as there."""
    e, p, c, dtype = _prepare(encoded, vertex_xyz, class_ids, class_names)
    m, s, yaw0, across, along = _canonical_anchors(c, class_names)
    t = e[m, 6] * _QUARTER_PI
    u = e[m, 0] * across
    v = e[m, 2] * along
    out = e.copy()
    out[m, 0] = u * np.cos(t) + v * np.sin(t)
    out[m, 1] = e[m, 1] * s[:, 1]
    out[m, 2] = -u * np.sin(t) + v * np.cos(t)
    out[:, :3] += p
    out[m, 3:6] = np.exp(e[m, 3:6]) * s
    out[m, 6] = t + yaw0
    return out.astype(dtype)


# ----------------------------------------------------------------------------------------------------------

# name (the original's ``box_encoding_method``) -> (encode, decode); the module docstring's table
ENCODINGS: Mapping[str, tuple[EncodeFn, EncodeFn]] = MappingProxyType(
    {
        "direct_encoding": (_direct, _direct),
        "center_box_encoding": _scaled({}, classaware_yaw=True),
        "voxelnet_box_encoding": _scaled(VOXELNET_SIZE, classaware_yaw=False),
        "classaware_voxelnet_box_encoding": _scaled(CLASSAWARE_VOXELNET_SIZE, classaware_yaw=True),
        "classaware_all_class_box_encoding": _scaled(MEDIAN_OBJECT_SIZE, classaware_yaw=True),
        "classaware_all_class_box_canonical_encoding": (_encode_canonical, _decode_canonical),
    }
)


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
