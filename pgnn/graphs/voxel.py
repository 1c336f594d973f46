"""Voxel downsampling: the vertices of each graph level and the keypoints linking consecutive levels.

A level whose scale equals the previous level's scale (every published config) does not downsample again: its
vertices are a copy of the previous ones and its ``keypoint_indices`` is ``arange`` (exactly as the original).

Downsampling methods (both pick original points, never synthesise new ones):

* ``random`` (training): one uniformly random point of each occupied voxel of the previous level's
  vertices. The grid starts at the minimum of the input points, shifted by a random fraction of a voxel
  when ``add_rnd3d``.
* ``center`` (runtime): the float64 centroid of each occupied voxel of the input points, snapped to its
  nearest vertex of the previous level. Without ``add_rnd3d`` the grid starts at ``min(points) - voxel / 2``
  and the cell is ``floor((p - origin) / voxel)``, as in open3d's ``voxel_down_sample`` that the original
  called. The snap reproduces the original's scikit-learn kd-tree, ties included (a two-point voxel's
  centroid is equidistant from both points; :mod:`pgnn.graphs.kdtree`). Two centroids may snap to the same
  point; such duplicate keypoints are kept, as in the original.

Grid anchoring (``GraphConfig.voxel_origin``):

* ``points_min`` (the original's, every preset's): the grid starts at ``min(points)`` as above, so removing
  points anywhere (a field-of-view crop, a range cut) can shift it and change keypoints everywhere.
* ``fixed``: the cell is ``floor(p / voxel)`` (``floor((p + shift * voxel) / voxel)`` with ``add_rnd3d``),
  boundaries at multiples of the voxel size in the points' frame. ``center`` then picks, in each voxel of
  the previous level's vertices, the vertex nearest their float64 centroid, exact ties to the smallest
  (x, y, z). Each keypoint depends only on the points of its own voxel: the same object with the same
  neighbours gets the same keypoints in a crop and in the whole scan (no kd-tree, whose tie-breaking
  depends on every point; no duplicate keypoints). In every preset the previous level's vertices are the
  input points, so only the anchoring and the tie rule differ from ``points_min``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pgnn.config.graphs import GraphConfig
from pgnn.core.errors import DataError
from pgnn.graphs.kdtree import snap_to_nearest

# ----------------------------------------------------------------------------------------------------------
# numba kernels: voxel grouping (an open-addressing hash of integer cell keys)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True)
def _hash_group(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Number equal keys by order of first appearance: (group (N,) int64, number of groups)."""
    n = keys.shape[0]
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    shift = np.uint64(64 - bits)
    mask = (1 << bits) - 1
    table_keys = np.empty(1 << bits, np.int64)
    table_ids = np.full(1 << bits, -1, np.int64)
    group = np.empty(n, np.int64)
    n_groups = 0
    for i in range(n):
        k = keys[i]
        h = np.int64((np.uint64(k) * _GOLDEN) >> shift)
        while True:
            g = table_ids[h]
            if g == -1:
                table_ids[h] = n_groups
                table_keys[h] = k
                group[i] = n_groups
                n_groups += 1
                break
            if table_keys[h] == k:
                group[i] = g
                break
            h = (h + 1) & mask
    return group, n_groups


@njit(cache=True)
def bounds(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-axis (min, max) of (N >= 1, 3) points (numpy's axis-0 reductions are slower on (N, 3):
    benchmarks/README.md, "Measurements behind the code")."""
    lo = points[0].copy()
    hi = points[0].copy()
    for i in range(1, points.shape[0]):
        for a in range(3):
            v = points[i, a]
            if v < lo[a]:
                lo[a] = v
            elif v > hi[a]:
                hi[a] = v
    return lo, hi


@njit(cache=True)
def _cell_keys(
    points: np.ndarray, origin: np.ndarray, cell: float, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Linear key of each point's cell ``floor((p - origin) / cell) - first``, ``first`` the cell of
    min(points) (so every term is >= 0).

    Shapes: points (N, 3) float64, origin (3,), first (3,) int64 -> keys (N,) int64
    = cx + dx * (cy + dy * cz), dims (3,) int64.
    """
    n = points.shape[0]
    cells = np.empty((n, 3), np.int64)
    dims = np.ones(3, np.int64)
    for i in range(n):
        for a in range(3):
            c = np.int64(math.floor((points[i, a] - origin[a]) / cell)) - first[a]
            cells[i, a] = c
            if c + 1 > dims[a]:
                dims[a] = c + 1
    keys = np.empty(n, np.int64)
    for i in range(n):
        keys[i] = cells[i, 0] + dims[0] * (cells[i, 1] + dims[1] * cells[i, 2])
    return keys, dims


@njit(cache=True)
def _pick_in_groups(group: np.ndarray, n_groups: int, uniforms: np.ndarray) -> np.ndarray:
    """Index of one member per group: member number floor(u * count) in input order. (G,) int64."""
    n = group.shape[0]
    count = np.zeros(n_groups, np.int64)
    for i in range(n):
        count[group[i]] += 1
    target = np.empty(n_groups, np.int64)
    for g in range(n_groups):
        target[g] = min(np.int64(uniforms[g] * count[g]), count[g] - 1)
    seen = np.zeros(n_groups, np.int64)
    out = np.empty(n_groups, np.int64)
    for i in range(n):
        g = group[i]
        if seen[g] == target[g]:
            out[g] = i
        seen[g] += 1
    return out


@njit(cache=True)
def _group_means(points: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Float64 mean of each group, summed in input order (as open3d accumulates). (G, 3)."""
    sums = np.zeros((n_groups, 3), np.float64)
    count = np.zeros(n_groups, np.int64)
    for i in range(points.shape[0]):
        g = group[i]
        sums[g, 0] += points[i, 0]
        sums[g, 1] += points[i, 1]
        sums[g, 2] += points[i, 2]
        count[g] += 1
    for g in range(n_groups):
        sums[g, 0] /= count[g]
        sums[g, 1] /= count[g]
        sums[g, 2] /= count[g]
    return sums


@njit(cache=True)
def _nearest_to_means(points: np.ndarray, group: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Index of each group's member nearest the group's mean; exact ties to the smallest (x, y, z).

    Shapes: points (N, 3) float64, group (N,) int64, means (G, 3) float64 -> (G,) int64.
    """
    n_groups = means.shape[0]
    best = np.full(n_groups, -1, np.int64)
    best_d = np.empty(n_groups, np.float64)
    for i in range(points.shape[0]):
        g = group[i]
        d = 0.0
        for a in range(3):
            t = points[i, a] - means[g, a]
            d += t * t
        b = best[g]
        if b == -1 or d < best_d[g]:
            better = True
        elif d > best_d[g]:
            better = False
        else:  # an exact tie: the lexicographically smaller point, which does not depend on input order
            better = False
            for a in range(3):
                if points[i, a] != points[b, a]:
                    better = points[i, a] < points[b, a]
                    break
        if better:
            best[g] = i
            best_d[g] = d
    return best


# ----------------------------------------------------------------------------------------------------------
# Public functions


def _as_points64(points: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(points)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise DataError(name, f"expected an (N, 3) array of points, got shape {arr.shape}")
    arr64 = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.isfinite(arr64).all():
        raise DataError(name, "expected finite point coordinates, got NaN or inf")
    return arr64


def voxel_groups(points: np.ndarray, origin: np.ndarray, voxel: float) -> tuple[np.ndarray, int]:
    """The voxel ``floor((p - origin) / voxel)`` of each point, numbered by first appearance.

    Shapes: points (N, 3), origin (3,) -> group (N,) int64, and the voxel count.
    """
    points64 = np.ascontiguousarray(points, dtype=np.float64)
    if points64.shape[0] == 0:
        return np.empty(0, np.int64), 0
    origin64 = np.asarray(origin, np.float64)
    lo, hi = bounds(points64)
    first = np.floor((lo - origin64) / voxel)  # (3,) the cell of the minimum, the same division as the kernel
    cells = np.floor((hi - origin64) / voxel) - first + 1.0
    if float(np.prod(cells)) >= 2.0**62:
        raise DataError("graph input", f"expected a point extent of fewer than 2^62 voxels of {voxel} m")
    keys, _ = _cell_keys(points64, origin64, float(voxel), first.astype(np.int64))
    group, n_groups = _hash_group(keys)
    return group, int(n_groups)


def downsample_random(
    points: np.ndarray, voxel: float, origin: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One uniformly random point of each occupied voxel, voxels in order of first appearance.

    Shapes: points (N, 3), origin (3,) -> indices into points (K,) int32.
    """
    group, n_groups = voxel_groups(points, origin, voxel)
    if n_groups == 0:
        return np.empty(0, np.int32)
    return _pick_in_groups(group, n_groups, rng.random(n_groups)).astype(np.int32)


def voxel_centroids(points: np.ndarray, voxel: float, origin: np.ndarray) -> np.ndarray:
    """Float64 centroid of each occupied voxel (open3d's ``voxel_down_sample`` rule), first-appearance order.

    Shapes: points (N, 3), origin (3,) -> (K, 3) float64.
    """
    group, n_groups = voxel_groups(points, origin, voxel)
    if n_groups == 0:
        return np.empty((0, 3), np.float64)
    return _group_means(np.ascontiguousarray(points, dtype=np.float64), group, n_groups)


def nearest_to_centroids(points: np.ndarray, voxel: float, origin: np.ndarray) -> np.ndarray:
    """In each occupied voxel, the point nearest the voxel's float64 centroid (exact ties to the smallest
    (x, y, z)), voxels in order of first appearance: the ``fixed`` anchoring's ``center`` pick.

    Shapes: points (N, 3), origin (3,) -> indices into points (K,) int32.
    """
    points64 = np.ascontiguousarray(points, dtype=np.float64)
    group, n_groups = voxel_groups(points64, origin, voxel)
    if n_groups == 0:
        return np.empty(0, np.int32)
    means = _group_means(points64, group, n_groups)  # (K, 3)
    return _nearest_to_means(points64, group, means).astype(np.int32)


def downsample_levels(
    points: np.ndarray, cfg: GraphConfig, rng: np.random.Generator | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Vertices of every level and the keypoint indices linking consecutive levels.

    ``rng`` is used by the ``random`` method and by ``add_rnd3d``; ``center`` without ``add_rnd3d`` draws
    nothing.

    Shapes: points (N, 3) -> vertex coords [(N0, 3) float32, ..., (NL, 3)] and keypoint indices
    [(N1,) int32, ..., (NL,)], with vertex_coord_{i+1} = vertex_coord_i[keypoint_indices_i].
    """
    points32 = _as_points64(points, "graph input").astype(np.float32)  # vertex coordinates are float32
    points64 = points32.astype(np.float64)  # exactly the float32 values, for the voxel arithmetic
    coords: list[np.ndarray] = [points32]
    keypoints: list[np.ndarray] = []
    last_scale = 0.0
    for level in cfg.levels:
        prev = coords[-1]
        if math.isclose(level.graph_scale, last_scale, rel_tol=1e-5, abs_tol=1e-8):
            coords.append(prev.copy())
            keypoints.append(np.arange(prev.shape[0], dtype=np.int32))
            continue
        last_scale = level.graph_scale
        if prev.shape[0] == 0:
            coords.append(prev.copy())
            keypoints.append(np.empty(0, np.int32))
            continue
        voxel = cfg.base_voxel_size * level.graph_scale
        fixed = cfg.voxel_origin == "fixed"
        if cfg.add_rnd3d:
            shift = _need_rng(rng).random(3)
        elif cfg.downsample_method == "center" and not fixed:
            shift = np.full(3, 0.5)  # open3d's min(points) - voxel / 2
        else:
            shift = np.zeros(3)
        origin = (np.zeros(3) if fixed else bounds(points64)[0]) - shift * voxel  # (3,)
        if cfg.downsample_method == "random":
            index = downsample_random(prev, voxel, origin, _need_rng(rng))
        elif fixed:
            index = nearest_to_centroids(prev, voxel, origin)
        else:
            index = snap_to_nearest(prev, voxel_centroids(points64, voxel, origin))
        keypoints.append(index)
        coords.append(prev[index])
    return coords, keypoints


def _need_rng(rng: np.random.Generator | None) -> np.random.Generator:
    if rng is None:
        raise ValueError("this graph config draws random numbers: pass an rng")
    return rng
