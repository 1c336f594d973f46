"""3D box geometry: corners, points in boxes, exact rotated IoU, projection to the image.

The one box convention of pgnn
==============================
Everything downstream of the KITTI reader lives in KITTI's **rectified camera frame** (camera 0 rectified, the
frame of the labels), in metres::

                  z  (forward, the optical axis)
                 ^
                /
               /
      camera  o-----------> x  (right)
              |
              |
              v
              y  (down: gravity points to +y, "up" is -y)

A box is a float row ``[x, y, z, l, h, w, ry]`` (arrays of shape (M, 7)):

* ``(x, y, z)``: the centre of the box's **bottom** face. The box spans ``y - h .. y`` vertically.
* ``l`` (length) lies along the box's local x axis, its heading; ``h`` (height) along y; ``w`` (width) along
  the local z axis.
* ``ry``: KITTI's ``rotation_y``, a rotation about the camera y axis. A local point ``p`` maps to the camera
  frame as ``R @ p + (x, y, z)`` with ``R = [[cos ry, 0, sin ry], [0, 1, 0], [-sin ry, 0, cos ry]]``. The
  heading (local +x) is then ``(cos ry, 0, -sin ry)``: ``ry = 0`` faces +x (right), ``ry = -pi/2`` faces +z
  (away from the camera), ``ry = +pi/2`` faces -z (towards it). Seen from above, a growing ry turns the box
  clockwise.

Corners (``boxes_to_corners``) are local ``(+-l/2, {0, -h}, +-w/2)``: indices 0-3 on the bottom face
(local y = 0), 4-7 on the top face (local y = -h), both in the same order. Bird's eye view of the bottom face
(looking down from above, i.e. along +y, x to the right and z up on the page) at ``ry = 0``::

        z ^
          |     3 ---------------- 0        0: (+l/2, +w/2)    4: 0 raised to y = -h
          |     |                  |        1: (+l/2, -w/2)    5: 1 raised
          |     |     ------>      |  w     2: (-l/2, -w/2)    6: 2 raised
          |     |     heading      |        3: (-l/2, +w/2)    7: 3 raised
          |     2 ---------------- 1
          |             l
          +------------------------------> x

This is KITTI's convention and the original Point-GNN's (``nms.boxes_3d_to_corners`` uses this order).
Because boxes only rotate about y, the bird's eye footprint is a rectangle in the x-z plane, and a 3D
intersection is exactly (footprint intersection area) x (overlap of the y intervals).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "alpha_from_box",
    "boxes_bev_footprints",
    "boxes_to_corners",
    "boxes_to_image_2d",
    "expand_boxes",
    "iou_2d",
    "iou_3d",
    "iou_bev",
    "points_in_boxes",
    "points_in_boxes_index",
]

# Local corner coordinates as multiples of (l/2, h, w/2); see the diagram in the module docstring.
_CORNER_SIGNS = np.array(
    [
        [1.0, 0.0, 1.0],
        [1.0, 0.0, -1.0],
        [-1.0, 0.0, -1.0],
        [-1.0, 0.0, 1.0],
        [1.0, -1.0, 1.0],
        [1.0, -1.0, -1.0],
        [-1.0, -1.0, -1.0],
        [-1.0, -1.0, 1.0],
    ]
)  # (8, 3)

# The 12 edges of a box as pairs of corner indices: bottom ring, top ring, verticals.
BOX_EDGES = np.array(
    [[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4], [0, 4], [1, 5], [2, 6], [3, 7]]
)  # (12, 2)


def _as_boxes(boxes: np.ndarray, name: str = "boxes") -> np.ndarray:
    """``boxes`` as a C-contiguous float64 (M, 7) array, or ValueError."""
    arr = np.ascontiguousarray(boxes, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 7:
        raise ValueError(f"{name}: expected shape (M, 7) [x, y, z, l, h, w, ry], got {np.shape(boxes)}")
    return arr


def _as_points(points: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(points)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"points: expected shape (N, 3), got {np.shape(points)}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return arr


def boxes_to_corners(boxes: np.ndarray) -> np.ndarray:
    """The 8 corners of each box in the camera frame.

    Order: 0-3 bottom face (local y = 0): (+l/2, +w/2), (+l/2, -w/2), (-l/2, -w/2), (-l/2, +w/2) in local
    (x, z); 4-7 the top face (local y = -h) in the same order. See the module docstring.

    Shapes:
        boxes: (M, 7) [x, y, z, l, h, w, ry]
        return: (M, 8, 3) float64
    """
    b = _as_boxes(boxes)
    half = np.stack([b[:, 3] / 2.0, b[:, 4], b[:, 5] / 2.0], axis=1)  # (M, 3) l/2, h, w/2
    local = _CORNER_SIGNS[None, :, :] * half[:, None, :]  # (M, 8, 3)
    c = np.cos(b[:, 6])[:, None]  # (M, 1)
    s = np.sin(b[:, 6])[:, None]  # (M, 1)
    corners = np.empty_like(local)  # (M, 8, 3)
    corners[..., 0] = c * local[..., 0] + s * local[..., 2] + b[:, None, 0]
    corners[..., 1] = local[..., 1] + b[:, None, 1]
    corners[..., 2] = -s * local[..., 0] + c * local[..., 2] + b[:, None, 2]
    return corners


def expand_boxes(boxes: np.ndarray, scale_lhw: tuple[float, float, float]) -> np.ndarray:
    """Scale each box's l, h, w about its centre, as the original's ``expend_factor`` does.

    The height grows symmetrically about the box's vertical middle, so the bottom face moves down by
    ``h * (scale_h - 1) / 2``. Note the original orders its factor ``(h, w, l)``; this takes ``(l, h, w)``,
    the order of the box columns.

    Shapes:
        boxes: (M, 7)
        return: (M, 7) float64
    """
    out = _as_boxes(boxes).copy()  # (M, 7)
    sl, sh, sw = (float(v) for v in scale_lhw)
    out[:, 1] += out[:, 4] * (sh - 1.0) / 2.0
    out[:, 3] *= sl
    out[:, 4] *= sh
    out[:, 5] *= sw
    return out


# ----------------------------------------------------------------------------------------------------------
# Points in boxes
# ----------------------------------------------------------------------------------------------------------


@njit(cache=True)
def _box_frames(boxes: np.ndarray, margin: float) -> np.ndarray:
    """Per box: x, y, z, cos, sin, half l + margin, h + margin, half w + margin, bounding radius^2 (M, 9)."""
    m = boxes.shape[0]
    out = np.empty((m, 9))
    for j in range(m):
        hl = boxes[j, 3] / 2.0 + margin
        hw = boxes[j, 5] / 2.0 + margin
        out[j, 0] = boxes[j, 0]
        out[j, 1] = boxes[j, 1]
        out[j, 2] = boxes[j, 2]
        out[j, 3] = np.cos(boxes[j, 6])
        out[j, 4] = np.sin(boxes[j, 6])
        out[j, 5] = hl
        out[j, 6] = boxes[j, 4] + margin
        out[j, 7] = hw
        out[j, 8] = (hl * hl + hw * hw) * (1.0 + 1e-12) + 1e-12  # slack: corners stay inside
    return out


@njit(cache=True)
def _inside(px: float, py: float, pz: float, f: np.ndarray, j: int, margin: float) -> bool:
    dy = py - f[j, 1]
    if dy > margin or dy < -f[j, 6]:
        return False
    dx = px - f[j, 0]
    dz = pz - f[j, 2]
    if dx * dx + dz * dz > f[j, 8]:
        return False
    # Local coordinates: R^T (p - c), R^T = [[c, 0, -s], [0, 1, 0], [s, 0, c]].
    lx = f[j, 3] * dx - f[j, 4] * dz
    if lx > f[j, 5] or lx < -f[j, 5]:
        return False
    lz = f[j, 4] * dx + f[j, 3] * dz
    return lz <= f[j, 7] and lz >= -f[j, 7]


@njit(cache=True)
def _points_in_boxes_mask(points: np.ndarray, boxes: np.ndarray, margin: float) -> np.ndarray:
    f = _box_frames(boxes, margin)
    n = points.shape[0]
    m = boxes.shape[0]
    out = np.zeros((n, m), dtype=np.bool_)
    for i in range(n):
        px = np.float64(points[i, 0])
        py = np.float64(points[i, 1])
        pz = np.float64(points[i, 2])
        for j in range(m):
            if _inside(px, py, pz, f, j, margin):
                out[i, j] = True
    return out


@njit(cache=True)
def _points_in_boxes_last(points: np.ndarray, boxes: np.ndarray, margin: float) -> np.ndarray:
    f = _box_frames(boxes, margin)
    n = points.shape[0]
    m = boxes.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        px = np.float64(points[i, 0])
        py = np.float64(points[i, 1])
        pz = np.float64(points[i, 2])
        for j in range(m - 1, -1, -1):
            if _inside(px, py, pz, f, j, margin):
                out[i] = j
                break
    return out


def points_in_boxes(points: np.ndarray, boxes: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """Which points lie in which boxes (closed boxes: points on a face count as inside).

    Each point is moved into each box's local frame; it is inside when ``|x| <= l/2 + margin``,
    ``-h - margin <= y <= margin`` and ``|z| <= w/2 + margin`` there. ``margin`` (metres) grows every face
    outwards; a negative margin shrinks the box.

    Shapes:
        points: (N, 3) float32 or float64, camera frame
        boxes: (M, 7)
        return: (N, M) bool
    """
    return _points_in_boxes_mask(_as_points(points), _as_boxes(boxes), float(margin))


def points_in_boxes_index(points: np.ndarray, boxes: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """For each point, the index of the **last** box that contains it, or -1.

    Later boxes win overlaps, as in the original's target assignment (it writes each label's points in turn).

    Shapes:
        points: (N, 3)
        boxes: (M, 7)
        return: (N,) int64
    """
    return _points_in_boxes_last(_as_points(points), _as_boxes(boxes), float(margin))


# ----------------------------------------------------------------------------------------------------------
# Rotated IoU (bird's eye and 3D)
# ----------------------------------------------------------------------------------------------------------


def boxes_bev_footprints(boxes: np.ndarray) -> np.ndarray:
    """The bird's eye footprint (bottom corners 0-3, as (x, z)) of each box, in corner order.

    Corner order 0-3 runs clockwise in the (x right, z up) plane; ``iou_bev`` orients it internally.

    Shapes:
        boxes: (M, 7)
        return: (M, 4, 2) float64
    """
    return boxes_to_corners(boxes)[:, :4, :][:, :, [0, 2]]


@njit(cache=True)
def _footprint_ccw(box: np.ndarray, out: np.ndarray) -> None:
    """Footprint corners (x, z) in counter-clockwise order (corners 0, 3, 2, 1) into out (4, 2)."""
    c = np.cos(box[6])
    s = np.sin(box[6])
    hl = box[3] / 2.0
    hw = box[5] / 2.0
    # (sign of l/2, sign of w/2) for corners 0, 3, 2, 1
    sl = (1.0, -1.0, -1.0, 1.0)
    sw = (1.0, 1.0, -1.0, -1.0)
    for k in range(4):
        lx = sl[k] * hl
        lz = sw[k] * hw
        out[k, 0] = box[0] + c * lx + s * lz
        out[k, 1] = box[2] - s * lx + c * lz


@njit(cache=True)
def _polygon_area(poly: np.ndarray, n: int) -> float:
    area = 0.0
    for k in range(n):
        k2 = (k + 1) % n
        area += poly[k, 0] * poly[k2, 1] - poly[k2, 0] * poly[k, 1]
    return 0.5 * area


@njit(cache=True)
def _convex_intersection_area(pa: np.ndarray, pb: np.ndarray, buf1: np.ndarray, buf2: np.ndarray) -> float:
    """Area of the intersection of two convex CCW quadrilaterals (Sutherland-Hodgman clipping of pa by pb)."""
    n = 4
    for k in range(4):
        buf1[k, 0] = pa[k, 0]
        buf1[k, 1] = pa[k, 1]
    src = buf1
    dst = buf2
    for e in range(4):
        ax = pb[e, 0]
        az = pb[e, 1]
        ex = pb[(e + 1) % 4, 0] - ax
        ez = pb[(e + 1) % 4, 1] - az
        m = 0
        for k in range(n):
            k2 = (k + 1) % n
            px = src[k, 0]
            pz = src[k, 1]
            qx = src[k2, 0]
            qz = src[k2, 1]
            dp = ex * (pz - az) - ez * (px - ax)  # > 0: left of the edge (inside, CCW)
            dq = ex * (qz - az) - ez * (qx - ax)
            if dp >= 0.0:
                dst[m, 0] = px
                dst[m, 1] = pz
                m += 1
            if (dp >= 0.0) != (dq >= 0.0):
                t = dp / (dp - dq)
                dst[m, 0] = px + t * (qx - px)
                dst[m, 1] = pz + t * (qz - pz)
                m += 1
        n = m
        if n < 3:
            return 0.0
        tmp = src
        src = dst
        dst = tmp
    return max(_polygon_area(src, n), 0.0)


@njit(cache=True)
def _iou_matrix(a: np.ndarray, b: np.ndarray, three_d: bool) -> np.ndarray:
    ma = a.shape[0]
    mb = b.shape[0]
    out = np.zeros((ma, mb))
    pa = np.empty((4, 2))
    pb = np.empty((4, 2))
    buf1 = np.empty((16, 2))
    buf2 = np.empty((16, 2))
    rb = np.empty(mb)
    for k in range(mb):
        rb[k] = 0.5 * np.sqrt(b[k, 3] * b[k, 3] + b[k, 5] * b[k, 5])
    for i in range(ma):
        _footprint_ccw(a[i], pa)
        ra = 0.5 * np.sqrt(a[i, 3] * a[i, 3] + a[i, 5] * a[i, 5])
        area_a = a[i, 3] * a[i, 5]
        for k in range(mb):
            dx = a[i, 0] - b[k, 0]
            dz = a[i, 2] - b[k, 2]
            if dx * dx + dz * dz > (ra + rb[k]) * (ra + rb[k]):
                continue
            area_b = b[k, 3] * b[k, 5]
            if three_d:
                y_overlap = min(a[i, 1], b[k, 1]) - max(a[i, 1] - a[i, 4], b[k, 1] - b[k, 4])
                if y_overlap <= 0.0:
                    continue
                _footprint_ccw(b[k], pb)
                inter = _convex_intersection_area(pa, pb, buf1, buf2) * y_overlap
                union = area_a * a[i, 4] + area_b * b[k, 4] - inter
            else:
                _footprint_ccw(b[k], pb)
                inter = _convex_intersection_area(pa, pb, buf1, buf2)
                union = area_a + area_b - inter
            if union > 0.0 and inter > 0.0:
                out[i, k] = min(inter / union, 1.0)
    return out


def iou_bev(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact IoU of the rotated bird's eye footprints (x-z plane) of every pair of boxes.

    Pairs with zero union (degenerate boxes) get 0.

    Shapes:
        a: (M, 7), b: (K, 7)
        return: (M, K) float64
    """
    return _iou_matrix(_as_boxes(a, "a"), _as_boxes(b, "b"), False)


def iou_3d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact 3D IoU of every pair of boxes: footprint intersection x y-overlap / union volume.

    Exact because boxes rotate only about y. Touching boxes give 0; pairs with zero union give 0.

    Shapes:
        a: (M, 7), b: (K, 7)
        return: (M, K) float64
    """
    return _iou_matrix(_as_boxes(a, "a"), _as_boxes(b, "b"), True)


def iou_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of axis-aligned image boxes ``[xmin, ymin, xmax, ymax]`` (continuous areas, no +1 pixel).

    Empty or inverted boxes have area 0; pairs with zero union get 0.

    Shapes:
        a: (M, 4), b: (K, 4)
        return: (M, K) float64
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    for name, arr in (("a", a), ("b", b)):
        if arr.ndim != 2 or arr.shape[1] != 4:
            raise ValueError(f"{name}: expected shape (M, 4) [xmin, ymin, xmax, ymax], got {arr.shape}")
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])  # (M, K)
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])  # (M, K)
    inter = np.clip(iw, 0.0, None) * np.clip(ih, 0.0, None)  # (M, K)
    area_a = np.clip(a[:, 2] - a[:, 0], 0.0, None) * np.clip(a[:, 3] - a[:, 1], 0.0, None)  # (M,)
    area_b = np.clip(b[:, 2] - b[:, 0], 0.0, None) * np.clip(b[:, 3] - b[:, 1], 0.0, None)  # (K,)
    union = area_a[:, None] + area_b[None, :] - inter  # (M, K)
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0.0)


# ----------------------------------------------------------------------------------------------------------
# Image projection and observation angle
# ----------------------------------------------------------------------------------------------------------


def boxes_to_image_2d(
    boxes: np.ndarray, P: np.ndarray, width: float, height: float, near: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """The image box of each 3D box, clipped to the image, and its truncation.

    The 8 corners are projected with ``P``; the unclipped 2D box is their extent. Parts of a box behind the
    camera are cut off first: the box is clipped by the plane depth = ``near`` (depth being the third
    homogeneous coordinate ``P[2] @ [X, 1]``) and only the corners and edge crossings in front of it are
    projected. The 2D box is then clipped to ``[0, width] x [0, height]`` (the original hard-codes
    1242 x 375), and ``truncation = 1 - clipped area / unclipped area``. A box wholly behind the plane, or one
    whose projection has no area, gets the 2D box (0, 0, 0, 0) and truncation 1.

    Shapes:
        boxes: (M, 7) camera frame of ``P``
        P: (3, 4) projection matrix (KITTI's P2 for the label frame)
        return: box2d (M, 4) [xmin, ymin, xmax, ymax] clipped, float64; truncation (M,) in [0, 1]
    """
    P = np.asarray(P, dtype=np.float64)
    if P.shape != (3, 4):
        raise ValueError(f"P: expected shape (3, 4), got {P.shape}")
    corners = boxes_to_corners(boxes)  # (M, 8, 3)
    m = corners.shape[0]
    hom = np.concatenate([corners, np.ones((m, 8, 1))], axis=2) @ P.T  # (M, 8, 3)
    depth = hom[..., 2]  # (M, 8)
    # Edge crossings of the near plane, interpolated in homogeneous image coordinates (P is affine in X).
    h0 = hom[:, BOX_EDGES[:, 0], :]  # (M, 12, 3)
    h1 = hom[:, BOX_EDGES[:, 1], :]  # (M, 12, 3)
    d0 = h0[..., 2] - near  # (M, 12)
    d1 = h1[..., 2] - near  # (M, 12)
    crosses = (d0 * d1) < 0.0  # (M, 12)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(crosses, d0 / (d0 - d1), 0.0)  # (M, 12)
    crossing = h0 + t[..., None] * (h1 - h0)  # (M, 12, 3)
    cand = np.concatenate([hom, crossing], axis=1)  # (M, 20, 3)
    valid = np.concatenate([depth >= near, crosses], axis=1)  # (M, 20)
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = cand[..., :2] / cand[..., 2:3]  # (M, 20, 2)
    uv = np.where(valid[..., None], uv, np.nan)  # (M, 20, 2)
    box2d = np.zeros((m, 4))
    truncation = np.ones(m)
    rows = np.flatnonzero(valid.any(axis=1))  # (M',) boxes with something in front of the plane
    if rows.size:
        lo = np.nanmin(uv[rows], axis=1)  # (M', 2)
        hi = np.nanmax(uv[rows], axis=1)  # (M', 2)
        size = np.array([width, height], dtype=np.float64)
        clo = np.clip(lo, 0.0, size)  # (M', 2)
        chi = np.clip(hi, 0.0, size)  # (M', 2)
        full_area = np.prod(hi - lo, axis=1)  # (M',)
        clip_area = np.prod(np.clip(chi - clo, 0.0, None), axis=1)  # (M',)
        ok = full_area > 0.0  # (M',)
        box2d[rows[ok]] = np.concatenate([clo, chi], axis=1)[ok]
        truncation[rows[ok]] = np.clip(1.0 - clip_area[ok] / full_area[ok], 0.0, 1.0)
    return box2d, truncation


def alpha_from_box(boxes: np.ndarray) -> np.ndarray:
    """KITTI's observation angle: ``alpha = ry - arctan2(x, z)``, wrapped to [-pi, pi).

    It is the box's yaw relative to the ray from the camera to the box's bottom centre.

    Shapes:
        boxes: (M, 7)
        return: (M,) float64
    """
    b = _as_boxes(boxes)
    alpha = b[:, 6] - np.arctan2(b[:, 0], b[:, 2])  # (M,)
    return (alpha + np.pi) % (2.0 * np.pi) - np.pi
