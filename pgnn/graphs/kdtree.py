"""The ``center`` downsampling's snap: each voxel centroid to its nearest vertex, as the original snapped.

A replica of scikit-learn's KDTree (leaf_size 30, Euclidean) for the snap's nearest-point queries. The
original snapped with that tree, and exact ties (every two-point voxel's centroid) go to whichever point its
depth-first search meets first, which depends on the tree's layout: its node split (libstdc++'s
std::nth_element under sklearn's index-stable comparator), its node boxes and its visiting order. This copy
reproduces all three, so the snapped keypoints are the original's, at a fraction of the cost. Tests compare
idx_array and query results with scikit-learn's own tree.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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
