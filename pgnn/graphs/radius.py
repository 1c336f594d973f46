"""Radius neighbourhoods: the edges of a graph level.

An edge joins every source within ``radius`` (3D Euclidean, inclusive, float64) of a destination, the
destination itself included; ``num_neighbors > 0`` keeps a uniformly random subset of that size where a
destination has more.

The radius search is a numba "row grid" (below); on the reference frames it gives exactly the original's
edge sets (tests/graphs/test_build.py).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pgnn.graphs.voxel import bounds

# ----------------------------------------------------------------------------------------------------------
# numba kernels: a seeded random stream, the row grid


@njit(cache=True, inline="always")
def _splitmix64(state: np.uint64) -> tuple[np.uint64, np.uint64]:
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state, z ^ (z >> np.uint64(31))


# A "row grid" indexes a point set for radius queries: points are bucketed into square (y, z) cells and
# ordered by x inside each cell (a "row" along x). A query visits the rows whose (y, z) cell can hold a point
# within its radius and, in each, binary-searches the x interval that the radius leaves after the row's y/z
# distance: the scanned volume hugs the query ball. The x order is that of a 16-bit key, floor((x - x0) *
# scale), which is monotone in x; so searching keys for [key(qx - rx), key(qx + rx)] never misses a point
# (it may add a few within one key step, ~1 mm on KITTI), and sorting is three counting-sort passes (two
# radix bytes of the key, then the row), no comparison sort. Arrays (float64 coordinates copied in row order
# for locality): origin (3,), cell, dims (ny, nz), xscale, row_start (ny * nz + 1,), order (N,) (sorted
# position -> input row), keys (N,) int32, sx, sy, sz (N,).

_MARGIN = 1e-7  # metres: widens every pruning bound so rounding never drops a pair (the test stays exact)
_KEY_MAX = 65535


@njit(cache=True)
def _counting_sort(perm: np.ndarray, bucket: np.ndarray, n_buckets: int) -> np.ndarray:
    """Stable reorder of ``perm`` by ``bucket[perm]``; returns the new permutation."""
    start = np.zeros(n_buckets + 1, np.int64)
    for i in range(perm.shape[0]):
        start[bucket[perm[i]] + 1] += 1
    for b in range(n_buckets):
        start[b + 1] += start[b]
    out = np.empty_like(perm)
    for i in range(perm.shape[0]):
        b = bucket[perm[i]]
        out[start[b]] = perm[i]
        start[b] += 1
    return out


@njit(cache=True)
def _row_grid(points: np.ndarray, cell: float):  # noqa: ANN202 (a numba tuple)
    """Index ``points`` (N >= 1, float64) in a row grid whose (y, z) cells have side ``cell``."""
    n = points.shape[0]
    origin, upper = bounds(points)
    # keep the row table O(N) even for far-flung outliers
    while ((upper[1] - origin[1]) / cell + 1.0) * ((upper[2] - origin[2]) / cell + 1.0) > 4.0 * n + 4096.0:
        cell *= 2.0
    ny = np.int64(math.floor((upper[1] - origin[1]) / cell)) + 1
    nz = np.int64(math.floor((upper[2] - origin[2]) / cell)) + 1
    xscale = _KEY_MAX / max(upper[0] - origin[0], 1e-9)
    row = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    low = np.empty(n, np.int64)
    high = np.empty(n, np.int64)
    for i in range(n):
        cy = min(np.int64(math.floor((points[i, 1] - origin[1]) / cell)), ny - 1)
        cz = min(np.int64(math.floor((points[i, 2] - origin[2]) / cell)), nz - 1)
        row[i] = cy + ny * cz
        key[i] = min(np.int64(math.floor((points[i, 0] - origin[0]) * xscale)), _KEY_MAX)
        low[i] = key[i] & 255
        high[i] = key[i] >> 8
    perm = np.arange(n)
    perm = _counting_sort(perm, low, 256)
    perm = _counting_sort(perm, high, 256)
    perm = _counting_sort(perm, row, ny * nz)
    row_start = np.zeros(ny * nz + 1, np.int64)
    for i in range(n):
        row_start[row[i] + 1] += 1
    for r in range(ny * nz):
        row_start[r + 1] += row_start[r]
    order = perm.astype(np.int32)
    keys = np.empty(n, np.int32)
    sx = np.empty(n, np.float64)
    sy = np.empty(n, np.float64)
    sz = np.empty(n, np.float64)
    for j in range(n):
        i = perm[j]
        keys[j] = key[i]
        sx[j] = points[i, 0]
        sy[j] = points[i, 1]
        sz[j] = points[i, 2]
    dims = np.array([ny, nz], np.int64)
    return origin, cell, dims, xscale, row_start, order, keys, sx, sy, sz


@njit(cache=True, inline="always")
def _x_key(x: float, origin: float, xscale: float) -> np.int64:
    """The 16-bit x key of a coordinate, clipped to [-1, 65536] (outside: matches nothing beyond)."""
    f = math.floor((x - origin) * xscale)
    if f < 0.0:
        return np.int64(-1)
    if f > _KEY_MAX:
        return np.int64(_KEY_MAX + 1)
    return np.int64(f)


@njit(cache=True, inline="always")
def _slab_gap(q: float, lo: float, cell: float) -> float:
    """Distance from q to the slab [lo, lo + cell], shrunk by the margin, >= 0."""
    if q < lo:
        return max(lo - q - _MARGIN, 0.0)
    if q > lo + cell:
        return max(q - lo - cell - _MARGIN, 0.0)
    return 0.0


@njit(cache=True, inline="always")
def _lower_bound(keys: np.ndarray, lo: np.int64, hi: np.int64, x: np.int64) -> np.int64:
    """First position in keys[lo:hi] (sorted) with key >= x."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _upper_bound(keys: np.ndarray, lo: np.int64, hi: np.int64, x: np.int64) -> np.int64:
    """First position in keys[lo:hi] (sorted) with key > x."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _row_span(q: float, origin: float, cell: float, reach: float, n: np.int64) -> tuple[np.int64, np.int64]:
    """Cells [first, last] (clipped to [0, n)) that the interval q +- reach touches; first > last if none."""
    f0 = math.floor((q - reach - _MARGIN - origin) / cell)
    f1 = math.floor((q + reach + _MARGIN - origin) / cell)
    if f1 < 0.0 or f0 > n - 1.0:
        return np.int64(1), np.int64(0)
    return np.int64(max(f0, 0.0)), np.int64(min(f1, n - 1.0))


@njit(cache=True)
def _radius_kernel(
    origin, cell, dims, xscale, row_start, order, keys, sx, sy, sz, centers, radius, cap, seed
):  # noqa: ANN001, ANN202
    """All (source, center) pairs with (dx^2 + dy^2) + dz^2 <= radius^2 (float64), grouped by center.

    Pass 1 finds, per center and row, the sorted x interval to scan (binary searches only) and so an upper
    bound on the edge count; pass 2 scans those intervals and writes every candidate, advancing the write
    position only on a hit (no unpredictable branch). A center with more than ``cap > 0`` neighbours keeps a
    uniformly random subset of ``cap`` (partial Fisher-Yates driven by splitmix64 from ``seed``).
    Returns (E, 2) int32 [source, center].
    """
    m = centers.shape[0]
    ny = dims[0]
    nz = dims[1]
    r2 = radius * radius
    span = np.int64(math.ceil(2.0 * (radius + _MARGIN) / cell)) + 2  # rows per axis a center can touch
    lo = np.empty((m, span * span), np.int64)
    hi = np.empty((m, span * span), np.int64)
    n_rows = np.zeros(m, np.int64)
    total = 0
    for q in range(m):
        px = centers[q, 0]
        py = centers[q, 1]
        pz = centers[q, 2]
        y0, y1 = _row_span(py, origin[1], cell, radius, ny)
        z0, z1 = _row_span(pz, origin[2], cell, radius, nz)
        k = 0
        for cz in range(z0, z1 + 1):
            gz = _slab_gap(pz, origin[2] + cz * cell, cell)
            for cy in range(y0, y1 + 1):
                gy = _slab_gap(py, origin[1] + cy * cell, cell)
                rest = r2 - gy * gy - gz * gz
                if rest < 0.0:
                    continue
                rx = math.sqrt(rest) + _MARGIN
                r = cy + ny * cz
                j0 = _lower_bound(keys, row_start[r], row_start[r + 1], _x_key(px - rx, origin[0], xscale))
                j1 = _upper_bound(keys, j0, row_start[r + 1], _x_key(px + rx, origin[0], xscale))
                if j1 > j0:
                    lo[q, k] = j0
                    hi[q, k] = j1
                    k += 1
                    total += j1 - j0
        n_rows[q] = k
    out = np.empty((total, 2), np.int32)
    ptr = 0
    state = seed
    for q in range(m):
        px = centers[q, 0]
        py = centers[q, 1]
        pz = centers[q, 2]
        seg = ptr
        for k in range(n_rows[q]):
            for j in range(lo[q, k], hi[q, k]):
                ex = px - sx[j]
                ey = py - sy[j]
                ez = pz - sz[j]
                out[ptr, 0] = order[j]
                out[ptr, 1] = q
                ptr += ex * ex + ey * ey + ez * ez <= r2
        degree = ptr - seg
        if cap > 0 and degree > cap:
            for k in range(cap):  # partial Fisher-Yates: a uniformly random cap-subset
                state, bits = _splitmix64(state)
                u = np.float64(bits >> np.uint64(11)) * (1.0 / 9007199254740992.0)
                pick = seg + k + min(np.int64(u * (degree - k)), degree - k - 1)
                tmp = out[seg + k, 0]
                out[seg + k, 0] = out[pick, 0]
                out[pick, 0] = tmp
            ptr = seg + cap
    return out, ptr


# ----------------------------------------------------------------------------------------------------------
# Public functions


# (y, z) cell side of the radius search's row grid, as a fraction of the radius (measured fastest on KITTI)
_ROWS_PER_RADIUS = 1.0


def radius_edges(
    sources: np.ndarray,
    centers: np.ndarray,
    radius: float,
    num_neighbors: int = -1,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Edges from every source within ``radius`` of each center: (dx^2 + dy^2) + dz^2 <= radius^2 in float64.

    That is scikit-learn's ``radius_neighbors`` test, so the sets are the same. With ``num_neighbors > 0``,
    a center with more neighbours keeps a uniformly random subset of that size (this needs ``rng``; one seed
    is drawn from it). Edges come grouped by center, centers in order.

    Shapes: sources (N, 3), centers (M, 3) -> (E, 2) int32, [:, 0] source row, [:, 1] center row.
    """
    src64 = np.ascontiguousarray(sources, dtype=np.float64).reshape(-1, 3)
    cen64 = np.ascontiguousarray(centers, dtype=np.float64).reshape(-1, 3)
    cap = int(num_neighbors)
    seed = np.uint64(0)
    if cap > 0:
        if rng is None:
            raise ValueError("radius_edges: a neighbour cap needs an rng")
        seed = np.uint64(rng.integers(0, 2**63, dtype=np.int64))
    if src64.shape[0] == 0 or cen64.shape[0] == 0:
        return np.empty((0, 2), np.int32)
    if not (np.isfinite(src64).all() and np.isfinite(cen64).all()):
        raise ValueError("radius_edges: expected finite coordinates, got NaN or inf")
    grid = _row_grid(src64, float(radius) / _ROWS_PER_RADIUS)
    out, n_edges = _radius_kernel(*grid, cen64, float(radius), cap, seed)
    # trimmed in place when little is wasted; copied when a cap discarded much of the buffer
    return out[:n_edges] if 2 * n_edges >= out.shape[0] else out[:n_edges].copy()
