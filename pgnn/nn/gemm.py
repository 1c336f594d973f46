"""Matrix products whose bytes depend on neither the CPU nor the thread count, on threads that never wait.

A CPU float32 product here is pgnn's own kernel (numba, no fast-math): each output element is
``sum_k a[i, k] * b[k, j]`` accumulated from zero in the order k = 0, 1, ..., each product and each sum
rounded once (no fused multiply-add), then the bias added. IEEE arithmetic in a fixed order gives the same
bits on every x86-64 CPU and any vector width (numba compiles the loop over j for the machine it runs on; that
changes the speed, not a bit: ``tests/nn/test_gemm.py`` compiles it for other CPUs). MKL's sgemm, even in its
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

import numpy as np
import torch
from numba import njit
from torch import Tensor
from torch.autograd.function import FunctionCtx

from pgnn.core.cpu import set_mkl_threads

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


@njit(cache=True, nogil=True, boundscheck=False)
def _rows_kernel(
    a: np.ndarray, b: np.ndarray, bias: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """``out[i] = (sum over k in order of a[i, k] * b[k]) + bias`` for rows ``start:stop`` (an empty ``bias``:
    none); float32 throughout, no fused multiply-add. Four rows at a time share each load of ``b[k]`` (2.4x
    the speed of one row at width 64, 1.1x at 300); every element's sums are in the same order."""
    depth, width = b.shape
    i = start
    while i < stop:
        if i + 4 > stop:
            _accumulate_row(a[i], b, out[i])
            i += 1
            continue
        r0, r1, r2, r3 = out[i], out[i + 1], out[i + 2], out[i + 3]
        for j in range(width):
            r0[j] = r1[j] = r2[j] = r3[j] = 0.0
        for k in range(depth):
            x0, x1, x2, x3 = a[i, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
            bk = b[k]
            for j in range(width):
                y = bk[j]
                r0[j] += x0 * y
                r1[j] += x1 * y
                r2[j] += x2 * y
                r3[j] += x3 * y
        i += 4
    for i in range(start, stop):
        row = out[i]
        for j in range(bias.shape[0]):
            row[j] += bias[j]


@njit(cache=True, nogil=True, boundscheck=False)
def _accumulate_row(x: np.ndarray, b: np.ndarray, row: np.ndarray) -> None:
    """``row = sum over k in order of x[k] * b[k]`` (a vector-matrix product, from zero)."""
    for j in range(row.shape[0]):
        row[j] = 0.0
    for k in range(b.shape[0]):
        xk = x[k]
        bk = b[k]
        for j in range(row.shape[0]):
            row[j] += xk * bk[j]


@njit(cache=True, nogil=True, boundscheck=False)
def _row_sum_kernel(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a.T @ b``: ``out[c, j] = sum over rows r in order of a[r, c] * b[r, j]``. Four output rows at
    a time share each load of ``b[r]``; every element's sums are in the same order."""
    columns, width = out.shape
    for c in range(columns):
        for j in range(width):
            out[c, j] = 0.0
    for r in range(a.shape[0]):
        br = b[r]
        c = 0
        while c + 4 <= columns:
            o0, o1, o2, o3 = out[c], out[c + 1], out[c + 2], out[c + 3]
            x0, x1, x2, x3 = a[r, c], a[r, c + 1], a[r, c + 2], a[r, c + 3]
            for j in range(width):
                y = br[j]
                o0[j] += x0 * y
                o1[j] += x1 * y
                o2[j] += x2 * y
                o3[j] += x3 * y
            c += 4
        while c < columns:
            o, x = out[c], a[r, c]
            for j in range(width):
                o[j] += x * br[j]
            c += 1


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
    blocks = _row_blocks(a.shape[0], 2 * a.shape[1] * b.shape[1], _pool_threads)
    return [functools.partial(_rows_kernel, *arrays, target, start, stop) for start, stop in blocks]


def row_sum_task(out: Tensor, a: Tensor, b: Tensor) -> Callable[[], None]:
    """A task that writes ``a.T @ b`` (a sum over the rows, in row order) into ``out`` (C-contiguous).

    Shapes:
        a: (E, K), b: (E, M), out: (K, M)
    """
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
