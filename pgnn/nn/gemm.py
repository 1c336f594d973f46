"""Matrix products whose bytes depend on neither the CPU nor the thread count, on threads that never wait.

A CPU float32 product here is pgnn's own kernel (numba, no fast-math): each output element is
``sum_k a[i, k] * b[k, j]`` accumulated from zero in the order k = 0, 1, ..., each product and each sum
rounded once (no fused multiply-add), then the bias added. IEEE arithmetic in a fixed order gives the same
bits on every x86-64 CPU and any vector width (numba compiles the loop over j for the machine it runs on; that
changes the speed, not a bit: ``tests/nn/test_gemm.py`` compiles it for other CPUs). The kernels work in
register tiles of 4 x 16 and 4 x 8 outputs (``gemm_tiles``, written by ``gemm_codegen``) that LLVM's SLP
vectorizer keeps in vector registers, 1.5-4x the speed of a row-at-a-time loop. MKL's sgemm, even in its
reproducible ``MKL_CBWR=COMPATIBLE`` mode on one thread, trained other weights on an AMD EPYC (Zen 4) than on
an Intel Xeon (benchmarks/README.md, "Threads that do not change a byte"), and its split of one product over
its threads changed the bytes with the thread count.

A product's rows are independent, so pgnn spreads a large one itself: its rows are cut into blocks, each one
kernel call, on a small pool of threads (:func:`set_product_threads`); the caller takes the first block, then
every block no pool thread has started, so on a loaded machine a descheduled pool thread costs nothing (a
libgomp team waits for its slowest thread at every barrier, thousands of times a step). The weight gradient
(a sum over the rows, in row order) runs in one call on a pool thread beside the input gradient's blocks.

CUDA, other dtypes, CPU autocast (bf16) and exports (ONNX, torch.export) use torch's own ``addmm``: on CPU
its forward bytes differ from these in the last bits (MKL's other summation order).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import numba
import numpy as np
import torch
from numba import njit, types, void
from torch import Tensor
from torch.autograd.function import FunctionCtx

from pgnn.core.cpu import set_mkl_threads
from pgnn.nn import gemm_tiles

ROW_ALIGN = 64
"""Blocks start at multiples of this many rows (a 64-byte-aligned row for any width)."""

MIN_BLOCK_FLOPS = 4_000_000
"""A block is at least this many floating-point operations (about 0.1 ms); a pool hand-off costs ~20 us."""

_POOL_LOCK = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_threads = 1


def _pool_thread_init() -> None:
    torch.set_num_threads(1)
    set_mkl_threads(1)


def set_product_threads(threads: int) -> None:
    """Run large products on ``threads`` threads (the caller and ``threads - 1`` pool threads); MKL one each.

    The bytes of every product are the same for any ``threads``.
    """
    global _pool, _pool_threads
    if threads < 1:
        raise ValueError(f"expected a positive number of threads, got {threads}")
    with _POOL_LOCK:
        if threads == _pool_threads:
            return
        if _pool is not None:
            _pool.shutdown(wait=True)
        _pool = ThreadPoolExecutor(threads - 1, "pgnn-gemm", _pool_thread_init) if threads > 1 else None
        _pool_threads = threads
    set_mkl_threads(1)


def product_threads() -> int:
    """The threads large products run on (:func:`set_product_threads`)."""
    return _pool_threads


@contextmanager
def cpu_threads(threads: int) -> Iterator[None]:
    """For the duration: large products on ``threads`` threads, torch's other kernels on one; then restored.

    torch's kernels give the same bytes on any number of threads, but a libgomp team of two waits for its
    slower thread at each of the step's thousands of parallel regions: beside one busy process a step took
    5x as long (benchmarks/README.md, "Threads that do not change a byte").
    """
    before = torch.get_num_threads(), _pool_threads
    torch.set_num_threads(1)
    set_product_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        set_product_threads(before[1])
        set_mkl_threads(1)


def _row_blocks(rows: int, row_flops: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` or fewer (start, stop) row ranges covering ``rows``, each of at least ``MIN_BLOCK_FLOPS``
    (a row costs ``row_flops``) but the last, starting at multiples of ``ROW_ALIGN``."""
    parts = max(1, min(parts, rows * row_flops // MIN_BLOCK_FLOPS, -(-rows // ROW_ALIGN)))
    step = -(-rows // parts)
    step = -(-step // ROW_ALIGN) * ROW_ALIGN
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def _run_all(tasks: list[Callable[[], None]]) -> None:
    """Run ``tasks``: the rest on the pool, the first here, then each the pool has not started, here."""
    pool = _pool
    if pool is None or len(tasks) == 1:
        for task in tasks:
            task()
        return
    futures: list[Future] = [pool.submit(task) for task in tasks[1:]]
    tasks[0]()
    waiting = [
        future for task, future in zip(tasks[1:], futures, strict=True) if not _cancel_and_run(future, task)
    ]
    for future in waiting:
        future.result()


def _cancel_and_run(future: Future, task: Callable[[], None]) -> bool:
    """Run ``task`` here when the pool has not started it (True), else leave it to the pool (False)."""
    if not future.cancel():
        return False
    task()
    return True


@contextmanager
def slp_vectorized() -> Iterator[None]:
    """LLVM's SLP vectorizer on while numba compiles (numba's default is off): it packs a tile's scalar sums
    into vector registers. It keeps every IEEE operation as written, like the loop vectorizer without
    fast-math; only the functions compiled inside get it."""
    before = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba.config.SLP_VECTORIZE = before


WIDE, NARROW = gemm_tiles.COLS
ROWS = gemm_tiles.ROWS
assert ROWS == 4, "_four_rows covers the last columns of a tile's rows"
ROW_SUM_BLOCK = 256
"""Rows of ``a`` and ``b`` per pass of the row sum over its tiles (two 256 x 300 float32 blocks: 600 KB, in a
core's L2 cache)."""

_kernel = njit(cache=True, nogil=True, boundscheck=False)
# Tiles and helpers are inlined where they are called (numba's IR inlining): there a tile's column index comes
# from a range that starts at 0, so LLVM knows it is not negative (numba wraps negative indices) and loads the
# tile's columns of a row as one vector; called, with the index an argument, the same tile ran 3-8x slower.
# (The helpers' own loops count in unsigned integers, which numba does not wrap.)
_tile = njit(inline="always", nogil=True, boundscheck=False)
_product_wide = _tile(gemm_tiles.product_tile_16)
_product_narrow = _tile(gemm_tiles.product_tile_8)
_row_sum_wide = _tile(gemm_tiles.row_sum_tile_16)
_row_sum_narrow = _tile(gemm_tiles.row_sum_tile_8)


@_tile
def _add_scaled(x: float, src: np.ndarray, dst: np.ndarray, j0: int, j1: int) -> None:
    """``dst[j0:j1] += x * src[j0:j1]``, each product and sum rounded once (unsigned indices: numba then
    does not wrap them, and the loop vectorizes)."""
    for j in range(np.uint64(j0), np.uint64(j1)):
        dst[j] += x * src[j]


@_tile
def _four_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray, i: int, j0: int, j1: int) -> None:
    """``out[i:i + 4, j0:j1] = a[i:i + 4] @ b[:, j0:j1]`` summed from zero over k in order, the four rows
    sharing each load of ``b[k]``: the columns of a tile's ``ROWS`` (= 4) rows that no tile covers."""
    r0, r1, r2, r3 = out[i], out[i + 1], out[i + 2], out[i + 3]
    for j in range(np.uint64(j0), np.uint64(j1)):
        r0[j] = r1[j] = r2[j] = r3[j] = 0.0
    for k in range(b.shape[0]):
        x0, x1, x2, x3 = a[i, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
        bk = b[k]
        for j in range(np.uint64(j0), np.uint64(j1)):
            y = bk[j]
            r0[j] += x0 * y
            r1[j] += x1 * y
            r2[j] += x2 * y
            r3[j] += x3 * y


@_kernel
def _rows_kernel(
    a: np.ndarray, b: np.ndarray, bias: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """``out[i] = (sum over k in order of a[i, k] * b[k]) + bias`` for rows ``start:stop`` (an empty
    ``bias``: none); float32 throughout, no fused multiply-add. ``ROWS`` rows at a time go through the
    register tiles (``WIDE`` columns, then one ``NARROW``; the last columns of the four rows in one loop that
    shares each load of ``b[k]``), the last rows one at a time; every element's sums are in the same order."""
    width = b.shape[1]
    wide = width - width % WIDE
    narrow = width - width % NARROW
    i = start
    while i + ROWS <= stop:
        for j in range(0, wide, WIDE):
            _product_wide(a, b, out, i, j)
        if narrow > wide:
            _product_narrow(a, b, out, i, wide)
        if width > narrow:
            _four_rows(a, b, out, i, narrow, width)
        i += ROWS
    for r in range(i, stop):
        row = out[r]
        row[:] = 0.0
        for k in range(b.shape[0]):
            _add_scaled(a[r, k], b[k], row, 0, width)
    for r in range(start, stop):
        row = out[r]
        for j in range(bias.shape[0]):
            row[j] += bias[j]


@_kernel
def _row_sum_kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a.T @ b``: ``out[c, j] = sum over rows r in order of a[r, c] * b[r, j]``, ``ROWS`` output
    rows at a time through the register tiles, over blocks of ``ROW_SUM_BLOCK`` rows (each element
    continues its sum block after block); the columns and rows no tile covers one at a time."""
    columns, width = out.shape
    wide = width - width % WIDE
    narrow = width - width % NARROW
    tiled = columns - columns % ROWS
    out[:, :] = 0.0
    for r0 in range(0, a.shape[0], ROW_SUM_BLOCK):
        r1 = min(r0 + ROW_SUM_BLOCK, a.shape[0])
        for c in range(0, tiled, ROWS):
            for j in range(0, wide, WIDE):
                _row_sum_wide(a, b, out, r0, r1, c, j)
            if narrow > wide:
                _row_sum_narrow(a, b, out, r0, r1, c, wide)
        for r in range(r0, r1):
            br = b[r]
            for c in range(tiled):
                _add_scaled(a[r, c], br, out[c], narrow, width)
            for c in range(tiled, columns):
                o, x = out[c], a[r, c]
                for j in range(width):
                    o[j] += x * br[j]


_MATRIX = types.float32[:, ::1]


@functools.cache
def _compiled() -> None:
    """Compile the kernels for float32 C-contiguous arrays with the SLP vectorizer on, once per process (or
    load them from numba's cache: ``pgnn/nn/__pycache__``)."""
    with slp_vectorized():
        _rows_kernel.compile(void(_MATRIX, _MATRIX, types.float32[::1], _MATRIX, types.int64, types.int64))
        _row_sum_kernel.compile(void(_MATRIX, _MATRIX, _MATRIX))


def _array(t: Tensor) -> np.ndarray:
    """A C-contiguous float32 array sharing ``t``'s memory (copied where ``t`` is a strided view)."""
    return t.detach().contiguous().numpy()


def _own_kernels(*tensors: Tensor | None) -> bool:
    """Whether pgnn's kernels compute this product (CPU float32 tensors), else torch's."""
    return all(t is None or (t.device.type == "cpu" and t.dtype == torch.float32) for t in tensors)


def product_tasks(out: Tensor, a: Tensor, b: Tensor, bias: Tensor | None = None) -> list[Callable[[], None]]:
    """Tasks that write ``bias + a @ b`` into ``out`` (C-contiguous), a block of rows each
    (:func:`run_tasks` runs them).

    Shapes:
        a: (E, K), b: (K, M), bias: (M,), out: (E, M)
    """
    arrays = _array(a), _array(b), _array(bias) if bias is not None else np.empty(0, np.float32)
    target = out.detach().numpy()
    _compiled()
    blocks = _row_blocks(a.shape[0], 2 * a.shape[1] * b.shape[1], _pool_threads)
    return [functools.partial(_rows_kernel, *arrays, target, start, stop) for start, stop in blocks]


def row_sum_task(out: Tensor, a: Tensor, b: Tensor) -> Callable[[], None]:
    """A task that writes ``a.T @ b`` (a sum over the rows, in row order) into ``out`` (C-contiguous).

    Shapes:
        a: (E, K), b: (E, M), out: (K, M)
    """
    _compiled()
    return functools.partial(_row_sum_kernel, _array(a), _array(b), out.detach().numpy())


def run_tasks(tasks: list[Callable[[], None]]) -> None:
    """Run product tasks on this thread and the pool."""
    _run_all(tasks)


def matmul(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``bias + a @ b``, on CPU float32 in row blocks on the product threads (the same bytes on any CPU and
    thread count), else torch's.

    Shapes:
        a: (E, K), b: (K, M), bias: (M,) -> (E, M)
    """
    if not _own_kernels(a, b, bias):
        return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
    out = a.new_empty((a.shape[0], b.shape[1]))
    if a.shape[0]:
        run_tasks(product_tasks(out, a, b, bias))
    return out


def row_sum(a: Tensor, b: Tensor) -> Tensor:
    """``a.T @ b``, a sum over the rows: on CPU float32 in row order (the same bytes on any CPU), else
    torch's. The wider of the two products' orientations is computed and the other one is its transpose
    (``x * y == y * x``, the same order of sums).

    Shapes:
        a: (E, K), b: (E, M) -> (K, M)
    """
    if not _own_kernels(a, b):
        return a.t().mm(b)
    if a.shape[1] > b.shape[1]:
        return row_sum(b, a).t()
    out = a.new_empty((a.shape[1], b.shape[1]))
    row_sum_task(out, a, b)()
    return out


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return matmul(x, weight.t(), bias)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        grad = grad.contiguous()
        tasks: list[Callable[[], None]] = []
        g_x = g_w = None
        if need_x and grad.shape[0]:
            g_x = grad.new_empty(x.shape)
            tasks += product_tasks(g_x, grad, weight)  # (E, M) @ (M, K)
        elif need_x:
            g_x = grad.new_zeros(x.shape)
        if need_w and x.shape[1] > weight.shape[0]:  # (M, K) = grad.T @ x, the inner loop over K
            g_w = grad.new_empty(weight.shape)
            tasks.append(row_sum_task(g_w, grad, x))
        elif need_w:  # its transpose x.T @ grad, the inner loop over M: the same bytes
            g_w_t = grad.new_empty((weight.shape[1], weight.shape[0]))
            tasks.append(row_sum_task(g_w_t, x, grad))
            g_w = g_w_t.t()
        run_tasks(tasks)
        g_b = grad.sum(0) if need_b and ctx.has_bias else None
        return g_x, g_w, g_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)``: on CPU float32 pgnn's kernels (:func:`matmul`, the same bytes on any CPU
    and thread count), with their own backward; torch's for CUDA, other dtypes, CPU autocast and exports.

    Shapes:
        x: (E, K), weight: (M, K), bias: (M,) -> (E, M)
    """
    exporting = torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export()
    autocast = torch.is_autocast_enabled("cpu")  # bf16 mixed precision: torch's own casts and kernels
    if not _own_kernels(x, weight, bias) or exporting or autocast or x.dim() != 2:
        return torch.nn.functional.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _Linear.apply(x, weight, bias)
    return matmul(x, weight.t(), bias)
