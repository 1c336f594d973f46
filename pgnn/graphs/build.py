"""Point-GNN's multi-level graphs: voxel downsampling and radius neighbourhoods.

A graph config lists levels. Level ``i`` connects ``vertex_coord_i`` (sources) to ``vertex_coord_{i+1}``
(destinations, a subset of the sources picked by voxel downsampling at ``base_voxel_size * graph_scale``):

```
vertex_coord_0  (N0, 3)  all points                  edges_0 (E0, 2): [src row in vc_0, dst row in vc_1]
vertex_coord_1  (N1, 3)  = vc_0[keypoint_indices_0]  edges_1 (E1, 2): [src row in vc_1, dst row in vc_2]
vertex_coord_2  (N2, 3)  = vc_1[keypoint_indices_1]  ...
```

A level whose scale equals the previous level's scale (every published config) does not downsample again: its
vertices are a copy of the previous ones and its ``keypoint_indices`` is ``arange`` (exactly as the original).
An edge joins every source within ``radius`` (3D Euclidean, inclusive, float64) of a destination, the
destination itself included; ``num_neighbors > 0`` keeps a uniformly random subset of that size where a
destination has more.

Downsampling methods (both pick original points, never synthesise new ones):

* ``random`` (training): one uniformly random point of each occupied voxel of the previous level's
  vertices. The grid starts at the minimum of the input points, shifted by a random fraction of a voxel
  when ``add_rnd3d``.
* ``center`` (runtime): the float64 centroid of each occupied voxel of the input points, snapped to its
  nearest vertex of the previous level. Without ``add_rnd3d`` the grid starts at ``min(points) - voxel / 2``
  and the cell is ``floor((p - origin) / voxel)``, as in open3d's ``voxel_down_sample`` that the original
  called. The snap reproduces the original's scikit-learn kd-tree, ties included (a two-point voxel's
  centroid is equidistant from both points). Two centroids may snap to the same point; such duplicate
  keypoints are kept, as in the original.

The radius search is a numba "row grid" (below); on the reference frames it gives exactly the original's
edge sets and keypoints (tests/graphs/test_build.py).

Shapes: see :func:`build_graph`. Vertex rows are float32, index arrays int32.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pgnn.config.graphs import GraphConfig
from pgnn.core.errors import DataError

# ----------------------------------------------------------------------------------------------------------
# numba kernels: voxel grouping (an open-addressing hash of integer cell keys), a seeded random stream


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
def _bounds(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-axis (min, max) of (N >= 1, 3) points (numpy's axis-0 reductions are ~25x slower on (N, 3))."""
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
def _cell_keys(points: np.ndarray, origin: np.ndarray, cell: float) -> tuple[np.ndarray, np.ndarray]:
    """Linear key of each point's cell ``floor((p - origin) / cell)``, for origin <= min(points).

    Shapes: points (N, 3) float64, origin (3,) -> keys (N,) int64 = cx + dx * (cy + dy * cz), dims (3,) int64.
    """
    n = points.shape[0]
    cells = np.empty((n, 3), np.int64)
    dims = np.ones(3, np.int64)
    for i in range(n):
        for a in range(3):
            c = np.int64(math.floor((points[i, a] - origin[a]) / cell))
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
    origin, upper = _bounds(points)
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
# A replica of scikit-learn's KDTree (leaf_size 30, Euclidean) for the snap's nearest-point queries. The
# original snapped with that tree, and exact ties (every two-point voxel's centroid) go to whichever point its
# depth-first search meets first, which depends on the tree's layout: its node split (libstdc++'s
# std::nth_element under sklearn's index-stable comparator), its node boxes and its visiting order. This copy
# reproduces all three, so the snapped keypoints are the original's, at a fraction of the cost. Tests compare
# idx_array and query results with scikit-learn's own tree.


_SKLEARN_LEAF_SIZE = 30  # NearestNeighbors' default, which the original used


@njit(cache=True, inline="always")
def _kd_less(data: np.ndarray, dim: np.int64, a: np.int64, b: np.int64) -> bool:
    va = data[a, dim]
    vb = data[b, dim]
    return a < b if va == vb else va < vb


@njit(cache=True)
def _kd_adjust_heap(
    data: np.ndarray,
    dim: np.int64,
    idx: np.ndarray,
    first: np.int64,
    hole: np.int64,
    length: np.int64,
    value: np.int64,
) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _kd_less(data, dim, idx[first + child], idx[first + child - 1]):
            child -= 1
        idx[first + hole] = idx[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        idx[first + hole] = idx[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and _kd_less(data, dim, idx[first + parent], value):
        idx[first + hole] = idx[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    idx[first + hole] = value


@njit(cache=True)
def _kd_nth_element(
    data: np.ndarray, dim: np.int64, idx: np.ndarray, first: np.int64, nth: np.int64, last: np.int64
) -> None:
    """libstdc++'s std::nth_element (introselect) on idx[first:last] ordered by (data[:, dim], index)."""
    if first == last or nth == last:
        return
    n = last - first
    lg = 0
    while (n >> (lg + 1)) > 0:
        lg += 1
    depth = 2 * lg
    while last - first > 3:
        if depth == 0:
            # heap select of the smallest (nth + 1 - first), then the nth into place
            middle = nth + 1
            length = middle - first
            if length >= 2:
                parent = (length - 2) // 2
                while True:
                    _kd_adjust_heap(data, dim, idx, first, parent, length, idx[first + parent])
                    if parent == 0:
                        break
                    parent -= 1
            for i in range(middle, last):
                if _kd_less(data, dim, idx[i], idx[first]):
                    value = idx[i]
                    idx[i] = idx[first]
                    _kd_adjust_heap(data, dim, idx, first, 0, length, value)
            tmp = idx[first]
            idx[first] = idx[nth]
            idx[nth] = tmp
            return
        depth -= 1
        # median of (first + 1, mid, last - 1) moved to first, then an unguarded partition around it
        mid = first + (last - first) // 2
        a = first + 1
        b = mid
        c = last - 1
        if _kd_less(data, dim, idx[a], idx[b]):
            if _kd_less(data, dim, idx[b], idx[c]):
                m = b
            elif _kd_less(data, dim, idx[a], idx[c]):
                m = c
            else:
                m = a
        elif _kd_less(data, dim, idx[a], idx[c]):
            m = a
        elif _kd_less(data, dim, idx[b], idx[c]):
            m = c
        else:
            m = b
        tmp = idx[first]
        idx[first] = idx[m]
        idx[m] = tmp
        pivot = idx[first]
        lo = first + 1
        hi = last
        while True:
            while _kd_less(data, dim, idx[lo], pivot):
                lo += 1
            hi -= 1
            while _kd_less(data, dim, pivot, idx[hi]):
                hi -= 1
            if not lo < hi:
                break
            tmp = idx[lo]
            idx[lo] = idx[hi]
            idx[hi] = tmp
            lo += 1
        cut = lo
        if cut <= nth:
            first = cut
        else:
            last = cut
    # insertion sort of the rest (a strict total order: the result is simply sorted)
    for i in range(first + 1, last):
        value = idx[i]
        k = i - 1
        while k >= first and _kd_less(data, dim, value, idx[k]):
            idx[k + 1] = idx[k]
            k -= 1
        idx[k + 1] = value


@njit(cache=True)
def _kd_build(data: np.ndarray, leaf_size: np.int64):  # noqa: ANN202 (a numba tuple)
    """sklearn's KDTree layout: (idx_array, node_start, node_end, is_leaf, lower (n_nodes, 3), upper)."""
    n = data.shape[0]
    n_levels = np.int64(math.log2(max(1.0, (n - 1) / leaf_size)) + 1)
    n_nodes = (1 << n_levels) - 1
    idx = np.arange(n).astype(np.int64)
    node_start = np.zeros(n_nodes, np.int64)
    node_end = np.zeros(n_nodes, np.int64)
    is_leaf = np.zeros(n_nodes, np.bool_)
    lower = np.empty((n_nodes, 3), np.float64)
    upper = np.empty((n_nodes, 3), np.float64)
    stack = np.empty((2 * n_levels + 2, 3), np.int64)
    stack[0, 0] = 0
    stack[0, 1] = 0
    stack[0, 2] = n
    top = 1
    while top > 0:
        top -= 1
        node = stack[top, 0]
        start = stack[top, 1]
        end = stack[top, 2]
        node_start[node] = start
        node_end[node] = end
        for a in range(3):
            lower[node, a] = np.inf
            upper[node, a] = -np.inf
        for i in range(start, end):
            for a in range(3):
                v = data[idx[i], a]
                lower[node, a] = min(lower[node, a], v)
                upper[node, a] = max(upper[node, a], v)
        if 2 * node + 1 >= n_nodes or end - start < 2:
            is_leaf[node] = True
            continue
        dim = 0
        best = 0.0
        for a in range(3):
            spread = upper[node, a] - lower[node, a]
            if spread > best:
                best = spread
                dim = a
        mid = (end - start) // 2
        _kd_nth_element(data, dim, idx, start, start + mid, end)
        stack[top, 0] = 2 * node + 2
        stack[top, 1] = start + mid
        stack[top, 2] = end
        stack[top + 1, 0] = 2 * node + 1
        stack[top + 1, 1] = start
        stack[top + 1, 2] = start + mid
        top += 2
    return idx, node_start, node_end, is_leaf, lower, upper


@njit(cache=True, inline="always")
def _kd_min_rdist(lower: np.ndarray, upper: np.ndarray, node: np.int64, p: np.ndarray) -> float:
    rdist = 0.0
    for a in range(3):
        d_lo = lower[node, a] - p[a]
        d_hi = p[a] - upper[node, a]
        d = (d_lo + abs(d_lo)) + (d_hi + abs(d_hi))
        rdist += (0.5 * d) * (0.5 * d)
    return rdist


@njit(cache=True)
def _kd_nearest(data, idx, node_start, node_end, is_leaf, lower, upper, queries):  # noqa: ANN001, ANN202
    """sklearn's depth-first 1-NN query on the tree of :func:`_kd_build`: the first point met at the least
    squared distance wins. Returns (K,) int32."""
    k_count = queries.shape[0]
    out = np.empty(k_count, np.int32)
    n_nodes = node_start.shape[0]
    stack_node = np.empty(64 + n_nodes, np.int64)
    stack_lb = np.empty(64 + n_nodes, np.float64)
    for q in range(k_count):
        p = queries[q]
        best = np.inf
        best_i = -1
        stack_node[0] = 0
        stack_lb[0] = _kd_min_rdist(lower, upper, 0, p)
        top = 1
        while top > 0:
            top -= 1
            node = stack_node[top]
            if stack_lb[top] > best:
                continue
            if is_leaf[node]:
                for i in range(node_start[node], node_end[node]):
                    j = idx[i]
                    d = 0.0
                    for a in range(3):
                        t = p[a] - data[j, a]
                        d += t * t
                    if d < best:
                        best = d
                        best_i = j
                continue
            c1 = 2 * node + 1
            c2 = c1 + 1
            lb1 = _kd_min_rdist(lower, upper, c1, p)
            lb2 = _kd_min_rdist(lower, upper, c2, p)
            if lb1 <= lb2:  # the first child visited goes on top
                stack_node[top] = c2
                stack_lb[top] = lb2
                stack_node[top + 1] = c1
                stack_lb[top + 1] = lb1
            else:
                stack_node[top] = c1
                stack_lb[top] = lb1
                stack_node[top + 1] = c2
                stack_lb[top + 1] = lb2
            top += 2
        out[q] = best_i
    return out


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


def _grid_origin(points64: np.ndarray, voxel: float, shift: np.ndarray) -> np.ndarray:
    """min(points) - shift * voxel, (3,) float64."""
    return _bounds(points64)[0] - shift * voxel


def voxel_groups(points: np.ndarray, origin: np.ndarray, voxel: float) -> tuple[np.ndarray, int]:
    """The voxel of each point, numbered by first appearance.

    Shapes: points (N, 3), origin (3,) with origin <= min(points) -> group (N,) int64, and the voxel count.
    """
    points64 = np.ascontiguousarray(points, dtype=np.float64)
    if points64.shape[0] == 0:
        return np.empty(0, np.int64), 0
    origin64 = np.asarray(origin, np.float64)
    cells = np.floor((_bounds(points64)[1] - origin64) / voxel) + 1.0
    if float(np.prod(cells)) >= 2.0**62:
        raise DataError("graph input", f"expected a point extent of fewer than 2^62 voxels of {voxel} m")
    keys, _ = _cell_keys(points64, origin64, float(voxel))
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


def snap_to_nearest(base: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Row of the nearest ``base`` point of each query, exactly as the original's snap.

    The original snapped with ``NearestNeighbors(n_neighbors=1, algorithm='kd_tree')``; exact ties are common
    (a two-point voxel's centroid is equidistant from both points) and go to the point that tree meets first.
    A replica of that tree (see ``_kd_build``) gives the same answers.

    Shapes: base (N, 3) with N >= 1, queries (K, 3) -> (K,) int32.
    """
    base64 = np.ascontiguousarray(base, dtype=np.float64)
    queries64 = np.ascontiguousarray(queries, dtype=np.float64).reshape(-1, 3)
    if queries64.shape[0] == 0:
        return np.empty(0, np.int32)
    if base64.shape[0] == 0:
        raise ValueError("snap_to_nearest: no base points to snap to")
    tree = _kd_build(base64, _SKLEARN_LEAF_SIZE)
    return _kd_nearest(base64, *tree, queries64)


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
        if cfg.add_rnd3d:
            shift = _need_rng(rng).random(3)
        elif cfg.downsample_method == "center":
            shift = np.full(3, 0.5)
        else:
            shift = np.zeros(3)
        origin = _grid_origin(points64, voxel, shift)
        if cfg.downsample_method == "random":
            index = downsample_random(prev, voxel, origin, _need_rng(rng))
        else:
            index = snap_to_nearest(prev, voxel_centroids(points64, voxel, origin))
        keypoints.append(index)
        coords.append(prev[index])
    return coords, keypoints


def _need_rng(rng: np.random.Generator | None) -> np.random.Generator:
    if rng is None:
        raise ValueError("this graph config draws random numbers: pass an rng")
    return rng


def build_graph(
    points: np.ndarray, cfg: GraphConfig, rng: np.random.Generator | None = None
) -> dict[str, np.ndarray]:
    """The multi-level graph of a point cloud, deterministic for a given ``rng`` state.

    Shapes: points (N, 3) -> ``vertex_coord_{i}`` (N_i, 3) float32 for i = 0..L,
    ``keypoint_indices_{i}`` (N_{i+1},) int32 and ``edges_{i}`` (E_i, 2) int32 for i = 0..L-1
    (L = number of levels; edges_i[:, 0] rows of vertex_coord_i, edges_i[:, 1] rows of vertex_coord_{i+1}).
    """
    coords, keypoints = downsample_levels(points, cfg, rng)
    graph: dict[str, np.ndarray] = {}
    for i, c in enumerate(coords):
        graph[f"vertex_coord_{i}"] = c
    for i, k in enumerate(keypoints):
        graph[f"keypoint_indices_{i}"] = k
    for i, level in enumerate(cfg.levels):
        graph[f"edges_{i}"] = radius_edges(coords[i], coords[i + 1], level.radius, level.num_neighbors, rng)
    return graph


def graph_counts(graph: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """Vertex counts per level (vertex_coord_0..L) and edge counts per level (edges_0..L-1)."""
    vertices = []
    i = 0
    while f"vertex_coord_{i}" in graph:
        vertices.append(int(graph[f"vertex_coord_{i}"].shape[0]))
        i += 1
    edges = []
    i = 0
    while f"edges_{i}" in graph:
        edges.append(int(graph[f"edges_{i}"].shape[0]))
        i += 1
    return {"vertices": vertices, "edges": edges}
