"""Register tiles of pgnn's matrix products (``python -m pgnn.nn.gemm_codegen`` writes this file).

Do not edit: change the generator. Plain Python functions; pgnn.nn.gemm compiles them with numba (SLP
vectorizer on, no fast-math). Each output element is summed from zero in the order of the sum, each product
and sum rounded once.
"""

import numpy as np

ROWS = 4
COLS = (16, 8)
ZERO = np.float32(0.0)


def product_tile_16(a, b, out, i, j):
    """``out[i:i + 4, j:j + 16] = a[i:i + 4] @ b[:, j:j + 16]``, each element
    summed from zero over k in order."""
    o0, o1, o2, o3 = out[i + 0], out[i + 1], out[i + 2], out[i + 3]
    c0_0, c0_1, c0_2, c0_3 = ZERO, ZERO, ZERO, ZERO
    c0_4, c0_5, c0_6, c0_7 = ZERO, ZERO, ZERO, ZERO
    c0_8, c0_9, c0_10, c0_11 = ZERO, ZERO, ZERO, ZERO
    c0_12, c0_13, c0_14, c0_15 = ZERO, ZERO, ZERO, ZERO
    c1_0, c1_1, c1_2, c1_3 = ZERO, ZERO, ZERO, ZERO
    c1_4, c1_5, c1_6, c1_7 = ZERO, ZERO, ZERO, ZERO
    c1_8, c1_9, c1_10, c1_11 = ZERO, ZERO, ZERO, ZERO
    c1_12, c1_13, c1_14, c1_15 = ZERO, ZERO, ZERO, ZERO
    c2_0, c2_1, c2_2, c2_3 = ZERO, ZERO, ZERO, ZERO
    c2_4, c2_5, c2_6, c2_7 = ZERO, ZERO, ZERO, ZERO
    c2_8, c2_9, c2_10, c2_11 = ZERO, ZERO, ZERO, ZERO
    c2_12, c2_13, c2_14, c2_15 = ZERO, ZERO, ZERO, ZERO
    c3_0, c3_1, c3_2, c3_3 = ZERO, ZERO, ZERO, ZERO
    c3_4, c3_5, c3_6, c3_7 = ZERO, ZERO, ZERO, ZERO
    c3_8, c3_9, c3_10, c3_11 = ZERO, ZERO, ZERO, ZERO
    c3_12, c3_13, c3_14, c3_15 = ZERO, ZERO, ZERO, ZERO
    for k in range(b.shape[0]):
        x0, x1, x2, x3 = a[i + 0, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
        y0, y1, y2, y3 = b[k, j + 0], b[k, j + 1], b[k, j + 2], b[k, j + 3]
        y4, y5, y6, y7 = b[k, j + 4], b[k, j + 5], b[k, j + 6], b[k, j + 7]
        y8, y9, y10, y11 = b[k, j + 8], b[k, j + 9], b[k, j + 10], b[k, j + 11]
        y12, y13, y14, y15 = b[k, j + 12], b[k, j + 13], b[k, j + 14], b[k, j + 15]
        c0_0, c0_1, c0_2, c0_3 = c0_0 + x0 * y0, c0_1 + x0 * y1, c0_2 + x0 * y2, c0_3 + x0 * y3
        c0_4, c0_5, c0_6, c0_7 = c0_4 + x0 * y4, c0_5 + x0 * y5, c0_6 + x0 * y6, c0_7 + x0 * y7
        c0_8, c0_9, c0_10, c0_11 = c0_8 + x0 * y8, c0_9 + x0 * y9, c0_10 + x0 * y10, c0_11 + x0 * y11
        c0_12, c0_13, c0_14, c0_15 = c0_12 + x0 * y12, c0_13 + x0 * y13, c0_14 + x0 * y14, c0_15 + x0 * y15
        c1_0, c1_1, c1_2, c1_3 = c1_0 + x1 * y0, c1_1 + x1 * y1, c1_2 + x1 * y2, c1_3 + x1 * y3
        c1_4, c1_5, c1_6, c1_7 = c1_4 + x1 * y4, c1_5 + x1 * y5, c1_6 + x1 * y6, c1_7 + x1 * y7
        c1_8, c1_9, c1_10, c1_11 = c1_8 + x1 * y8, c1_9 + x1 * y9, c1_10 + x1 * y10, c1_11 + x1 * y11
        c1_12, c1_13, c1_14, c1_15 = c1_12 + x1 * y12, c1_13 + x1 * y13, c1_14 + x1 * y14, c1_15 + x1 * y15
        c2_0, c2_1, c2_2, c2_3 = c2_0 + x2 * y0, c2_1 + x2 * y1, c2_2 + x2 * y2, c2_3 + x2 * y3
        c2_4, c2_5, c2_6, c2_7 = c2_4 + x2 * y4, c2_5 + x2 * y5, c2_6 + x2 * y6, c2_7 + x2 * y7
        c2_8, c2_9, c2_10, c2_11 = c2_8 + x2 * y8, c2_9 + x2 * y9, c2_10 + x2 * y10, c2_11 + x2 * y11
        c2_12, c2_13, c2_14, c2_15 = c2_12 + x2 * y12, c2_13 + x2 * y13, c2_14 + x2 * y14, c2_15 + x2 * y15
        c3_0, c3_1, c3_2, c3_3 = c3_0 + x3 * y0, c3_1 + x3 * y1, c3_2 + x3 * y2, c3_3 + x3 * y3
        c3_4, c3_5, c3_6, c3_7 = c3_4 + x3 * y4, c3_5 + x3 * y5, c3_6 + x3 * y6, c3_7 + x3 * y7
        c3_8, c3_9, c3_10, c3_11 = c3_8 + x3 * y8, c3_9 + x3 * y9, c3_10 + x3 * y10, c3_11 + x3 * y11
        c3_12, c3_13, c3_14, c3_15 = c3_12 + x3 * y12, c3_13 + x3 * y13, c3_14 + x3 * y14, c3_15 + x3 * y15
    o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3] = c0_0, c0_1, c0_2, c0_3
    o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7] = c0_4, c0_5, c0_6, c0_7
    o0[j + 8], o0[j + 9], o0[j + 10], o0[j + 11] = c0_8, c0_9, c0_10, c0_11
    o0[j + 12], o0[j + 13], o0[j + 14], o0[j + 15] = c0_12, c0_13, c0_14, c0_15
    o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3] = c1_0, c1_1, c1_2, c1_3
    o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7] = c1_4, c1_5, c1_6, c1_7
    o1[j + 8], o1[j + 9], o1[j + 10], o1[j + 11] = c1_8, c1_9, c1_10, c1_11
    o1[j + 12], o1[j + 13], o1[j + 14], o1[j + 15] = c1_12, c1_13, c1_14, c1_15
    o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3] = c2_0, c2_1, c2_2, c2_3
    o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7] = c2_4, c2_5, c2_6, c2_7
    o2[j + 8], o2[j + 9], o2[j + 10], o2[j + 11] = c2_8, c2_9, c2_10, c2_11
    o2[j + 12], o2[j + 13], o2[j + 14], o2[j + 15] = c2_12, c2_13, c2_14, c2_15
    o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3] = c3_0, c3_1, c3_2, c3_3
    o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7] = c3_4, c3_5, c3_6, c3_7
    o3[j + 8], o3[j + 9], o3[j + 10], o3[j + 11] = c3_8, c3_9, c3_10, c3_11
    o3[j + 12], o3[j + 13], o3[j + 14], o3[j + 15] = c3_12, c3_13, c3_14, c3_15


def product_tile_8(a, b, out, i, j):
    """``out[i:i + 4, j:j + 8] = a[i:i + 4] @ b[:, j:j + 8]``, each element
    summed from zero over k in order."""
    o0, o1, o2, o3 = out[i + 0], out[i + 1], out[i + 2], out[i + 3]
    c0_0, c0_1, c0_2, c0_3 = ZERO, ZERO, ZERO, ZERO
    c0_4, c0_5, c0_6, c0_7 = ZERO, ZERO, ZERO, ZERO
    c1_0, c1_1, c1_2, c1_3 = ZERO, ZERO, ZERO, ZERO
    c1_4, c1_5, c1_6, c1_7 = ZERO, ZERO, ZERO, ZERO
    c2_0, c2_1, c2_2, c2_3 = ZERO, ZERO, ZERO, ZERO
    c2_4, c2_5, c2_6, c2_7 = ZERO, ZERO, ZERO, ZERO
    c3_0, c3_1, c3_2, c3_3 = ZERO, ZERO, ZERO, ZERO
    c3_4, c3_5, c3_6, c3_7 = ZERO, ZERO, ZERO, ZERO
    for k in range(b.shape[0]):
        x0, x1, x2, x3 = a[i + 0, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
        y0, y1, y2, y3 = b[k, j + 0], b[k, j + 1], b[k, j + 2], b[k, j + 3]
        y4, y5, y6, y7 = b[k, j + 4], b[k, j + 5], b[k, j + 6], b[k, j + 7]
        c0_0, c0_1, c0_2, c0_3 = c0_0 + x0 * y0, c0_1 + x0 * y1, c0_2 + x0 * y2, c0_3 + x0 * y3
        c0_4, c0_5, c0_6, c0_7 = c0_4 + x0 * y4, c0_5 + x0 * y5, c0_6 + x0 * y6, c0_7 + x0 * y7
        c1_0, c1_1, c1_2, c1_3 = c1_0 + x1 * y0, c1_1 + x1 * y1, c1_2 + x1 * y2, c1_3 + x1 * y3
        c1_4, c1_5, c1_6, c1_7 = c1_4 + x1 * y4, c1_5 + x1 * y5, c1_6 + x1 * y6, c1_7 + x1 * y7
        c2_0, c2_1, c2_2, c2_3 = c2_0 + x2 * y0, c2_1 + x2 * y1, c2_2 + x2 * y2, c2_3 + x2 * y3
        c2_4, c2_5, c2_6, c2_7 = c2_4 + x2 * y4, c2_5 + x2 * y5, c2_6 + x2 * y6, c2_7 + x2 * y7
        c3_0, c3_1, c3_2, c3_3 = c3_0 + x3 * y0, c3_1 + x3 * y1, c3_2 + x3 * y2, c3_3 + x3 * y3
        c3_4, c3_5, c3_6, c3_7 = c3_4 + x3 * y4, c3_5 + x3 * y5, c3_6 + x3 * y6, c3_7 + x3 * y7
    o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3] = c0_0, c0_1, c0_2, c0_3
    o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7] = c0_4, c0_5, c0_6, c0_7
    o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3] = c1_0, c1_1, c1_2, c1_3
    o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7] = c1_4, c1_5, c1_6, c1_7
    o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3] = c2_0, c2_1, c2_2, c2_3
    o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7] = c2_4, c2_5, c2_6, c2_7
    o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3] = c3_0, c3_1, c3_2, c3_3
    o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7] = c3_4, c3_5, c3_6, c3_7


def row_sum_tile_16(a, b, out, r0, r1, i, j):
    """``out[i:i + 4, j:j + 16] += a[r0:r1, i:i + 4].T @ b[r0:r1, j:j + 16]``,
    each element continuing its sum over the rows r0, r0 + 1, ... in order."""
    o0, o1, o2, o3 = out[i + 0], out[i + 1], out[i + 2], out[i + 3]
    c0_0, c0_1, c0_2, c0_3 = o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3]
    c0_4, c0_5, c0_6, c0_7 = o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7]
    c0_8, c0_9, c0_10, c0_11 = o0[j + 8], o0[j + 9], o0[j + 10], o0[j + 11]
    c0_12, c0_13, c0_14, c0_15 = o0[j + 12], o0[j + 13], o0[j + 14], o0[j + 15]
    c1_0, c1_1, c1_2, c1_3 = o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3]
    c1_4, c1_5, c1_6, c1_7 = o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7]
    c1_8, c1_9, c1_10, c1_11 = o1[j + 8], o1[j + 9], o1[j + 10], o1[j + 11]
    c1_12, c1_13, c1_14, c1_15 = o1[j + 12], o1[j + 13], o1[j + 14], o1[j + 15]
    c2_0, c2_1, c2_2, c2_3 = o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3]
    c2_4, c2_5, c2_6, c2_7 = o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7]
    c2_8, c2_9, c2_10, c2_11 = o2[j + 8], o2[j + 9], o2[j + 10], o2[j + 11]
    c2_12, c2_13, c2_14, c2_15 = o2[j + 12], o2[j + 13], o2[j + 14], o2[j + 15]
    c3_0, c3_1, c3_2, c3_3 = o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3]
    c3_4, c3_5, c3_6, c3_7 = o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7]
    c3_8, c3_9, c3_10, c3_11 = o3[j + 8], o3[j + 9], o3[j + 10], o3[j + 11]
    c3_12, c3_13, c3_14, c3_15 = o3[j + 12], o3[j + 13], o3[j + 14], o3[j + 15]
    for r in range(r0, r1):
        x0, x1, x2, x3 = a[r, i + 0], a[r, i + 1], a[r, i + 2], a[r, i + 3]
        y0, y1, y2, y3 = b[r, j + 0], b[r, j + 1], b[r, j + 2], b[r, j + 3]
        y4, y5, y6, y7 = b[r, j + 4], b[r, j + 5], b[r, j + 6], b[r, j + 7]
        y8, y9, y10, y11 = b[r, j + 8], b[r, j + 9], b[r, j + 10], b[r, j + 11]
        y12, y13, y14, y15 = b[r, j + 12], b[r, j + 13], b[r, j + 14], b[r, j + 15]
        c0_0, c0_1, c0_2, c0_3 = c0_0 + x0 * y0, c0_1 + x0 * y1, c0_2 + x0 * y2, c0_3 + x0 * y3
        c0_4, c0_5, c0_6, c0_7 = c0_4 + x0 * y4, c0_5 + x0 * y5, c0_6 + x0 * y6, c0_7 + x0 * y7
        c0_8, c0_9, c0_10, c0_11 = c0_8 + x0 * y8, c0_9 + x0 * y9, c0_10 + x0 * y10, c0_11 + x0 * y11
        c0_12, c0_13, c0_14, c0_15 = c0_12 + x0 * y12, c0_13 + x0 * y13, c0_14 + x0 * y14, c0_15 + x0 * y15
        c1_0, c1_1, c1_2, c1_3 = c1_0 + x1 * y0, c1_1 + x1 * y1, c1_2 + x1 * y2, c1_3 + x1 * y3
        c1_4, c1_5, c1_6, c1_7 = c1_4 + x1 * y4, c1_5 + x1 * y5, c1_6 + x1 * y6, c1_7 + x1 * y7
        c1_8, c1_9, c1_10, c1_11 = c1_8 + x1 * y8, c1_9 + x1 * y9, c1_10 + x1 * y10, c1_11 + x1 * y11
        c1_12, c1_13, c1_14, c1_15 = c1_12 + x1 * y12, c1_13 + x1 * y13, c1_14 + x1 * y14, c1_15 + x1 * y15
        c2_0, c2_1, c2_2, c2_3 = c2_0 + x2 * y0, c2_1 + x2 * y1, c2_2 + x2 * y2, c2_3 + x2 * y3
        c2_4, c2_5, c2_6, c2_7 = c2_4 + x2 * y4, c2_5 + x2 * y5, c2_6 + x2 * y6, c2_7 + x2 * y7
        c2_8, c2_9, c2_10, c2_11 = c2_8 + x2 * y8, c2_9 + x2 * y9, c2_10 + x2 * y10, c2_11 + x2 * y11
        c2_12, c2_13, c2_14, c2_15 = c2_12 + x2 * y12, c2_13 + x2 * y13, c2_14 + x2 * y14, c2_15 + x2 * y15
        c3_0, c3_1, c3_2, c3_3 = c3_0 + x3 * y0, c3_1 + x3 * y1, c3_2 + x3 * y2, c3_3 + x3 * y3
        c3_4, c3_5, c3_6, c3_7 = c3_4 + x3 * y4, c3_5 + x3 * y5, c3_6 + x3 * y6, c3_7 + x3 * y7
        c3_8, c3_9, c3_10, c3_11 = c3_8 + x3 * y8, c3_9 + x3 * y9, c3_10 + x3 * y10, c3_11 + x3 * y11
        c3_12, c3_13, c3_14, c3_15 = c3_12 + x3 * y12, c3_13 + x3 * y13, c3_14 + x3 * y14, c3_15 + x3 * y15
    o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3] = c0_0, c0_1, c0_2, c0_3
    o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7] = c0_4, c0_5, c0_6, c0_7
    o0[j + 8], o0[j + 9], o0[j + 10], o0[j + 11] = c0_8, c0_9, c0_10, c0_11
    o0[j + 12], o0[j + 13], o0[j + 14], o0[j + 15] = c0_12, c0_13, c0_14, c0_15
    o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3] = c1_0, c1_1, c1_2, c1_3
    o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7] = c1_4, c1_5, c1_6, c1_7
    o1[j + 8], o1[j + 9], o1[j + 10], o1[j + 11] = c1_8, c1_9, c1_10, c1_11
    o1[j + 12], o1[j + 13], o1[j + 14], o1[j + 15] = c1_12, c1_13, c1_14, c1_15
    o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3] = c2_0, c2_1, c2_2, c2_3
    o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7] = c2_4, c2_5, c2_6, c2_7
    o2[j + 8], o2[j + 9], o2[j + 10], o2[j + 11] = c2_8, c2_9, c2_10, c2_11
    o2[j + 12], o2[j + 13], o2[j + 14], o2[j + 15] = c2_12, c2_13, c2_14, c2_15
    o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3] = c3_0, c3_1, c3_2, c3_3
    o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7] = c3_4, c3_5, c3_6, c3_7
    o3[j + 8], o3[j + 9], o3[j + 10], o3[j + 11] = c3_8, c3_9, c3_10, c3_11
    o3[j + 12], o3[j + 13], o3[j + 14], o3[j + 15] = c3_12, c3_13, c3_14, c3_15


def row_sum_tile_8(a, b, out, r0, r1, i, j):
    """``out[i:i + 4, j:j + 8] += a[r0:r1, i:i + 4].T @ b[r0:r1, j:j + 8]``,
    each element continuing its sum over the rows r0, r0 + 1, ... in order."""
    o0, o1, o2, o3 = out[i + 0], out[i + 1], out[i + 2], out[i + 3]
    c0_0, c0_1, c0_2, c0_3 = o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3]
    c0_4, c0_5, c0_6, c0_7 = o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7]
    c1_0, c1_1, c1_2, c1_3 = o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3]
    c1_4, c1_5, c1_6, c1_7 = o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7]
    c2_0, c2_1, c2_2, c2_3 = o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3]
    c2_4, c2_5, c2_6, c2_7 = o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7]
    c3_0, c3_1, c3_2, c3_3 = o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3]
    c3_4, c3_5, c3_6, c3_7 = o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7]
    for r in range(r0, r1):
        x0, x1, x2, x3 = a[r, i + 0], a[r, i + 1], a[r, i + 2], a[r, i + 3]
        y0, y1, y2, y3 = b[r, j + 0], b[r, j + 1], b[r, j + 2], b[r, j + 3]
        y4, y5, y6, y7 = b[r, j + 4], b[r, j + 5], b[r, j + 6], b[r, j + 7]
        c0_0, c0_1, c0_2, c0_3 = c0_0 + x0 * y0, c0_1 + x0 * y1, c0_2 + x0 * y2, c0_3 + x0 * y3
        c0_4, c0_5, c0_6, c0_7 = c0_4 + x0 * y4, c0_5 + x0 * y5, c0_6 + x0 * y6, c0_7 + x0 * y7
        c1_0, c1_1, c1_2, c1_3 = c1_0 + x1 * y0, c1_1 + x1 * y1, c1_2 + x1 * y2, c1_3 + x1 * y3
        c1_4, c1_5, c1_6, c1_7 = c1_4 + x1 * y4, c1_5 + x1 * y5, c1_6 + x1 * y6, c1_7 + x1 * y7
        c2_0, c2_1, c2_2, c2_3 = c2_0 + x2 * y0, c2_1 + x2 * y1, c2_2 + x2 * y2, c2_3 + x2 * y3
        c2_4, c2_5, c2_6, c2_7 = c2_4 + x2 * y4, c2_5 + x2 * y5, c2_6 + x2 * y6, c2_7 + x2 * y7
        c3_0, c3_1, c3_2, c3_3 = c3_0 + x3 * y0, c3_1 + x3 * y1, c3_2 + x3 * y2, c3_3 + x3 * y3
        c3_4, c3_5, c3_6, c3_7 = c3_4 + x3 * y4, c3_5 + x3 * y5, c3_6 + x3 * y6, c3_7 + x3 * y7
    o0[j + 0], o0[j + 1], o0[j + 2], o0[j + 3] = c0_0, c0_1, c0_2, c0_3
    o0[j + 4], o0[j + 5], o0[j + 6], o0[j + 7] = c0_4, c0_5, c0_6, c0_7
    o1[j + 0], o1[j + 1], o1[j + 2], o1[j + 3] = c1_0, c1_1, c1_2, c1_3
    o1[j + 4], o1[j + 5], o1[j + 6], o1[j + 7] = c1_4, c1_5, c1_6, c1_7
    o2[j + 0], o2[j + 1], o2[j + 2], o2[j + 3] = c2_0, c2_1, c2_2, c2_3
    o2[j + 4], o2[j + 5], o2[j + 6], o2[j + 7] = c2_4, c2_5, c2_6, c2_7
    o3[j + 0], o3[j + 1], o3[j + 2], o3[j + 3] = c3_0, c3_1, c3_2, c3_3
    o3[j + 4], o3[j + 5], o3[j + 6], o3[j + 7] = c3_4, c3_5, c3_6, c3_7
