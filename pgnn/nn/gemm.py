"""Matrix products whose bytes do not depend on the thread count, spread over threads that never wait.

MKL splits one product over its threads, and the split changes the order of the sums: another thread count
gives other bytes, even in MKL's reproducible COMPATIBLE mode. torch's own kernels (gather, scatter,
elementwise, reductions) gave the same bytes at 1, 2 and 3 threads in the default training step, so MKL's
threads were the one reason the thread count was in the run key (benchmarks/README.md, "Threads that do
not change a byte").

Here MKL runs one thread per call (:func:`pgnn.core.cpu.set_mkl_threads`), and pgnn spreads a large product
itself: its rows are cut into blocks at multiples of ``ROW_ALIGN`` rows, each block one single-threaded MKL
call whose rows have the bytes the whole product's rows have (MKL's kernels do not depend on the row count
or on an aligned row offset: ``tests/nn/test_gemm.py``). The blocks run on a small pool of threads
(:func:`set_product_threads`); the caller takes the first block, then every block no pool thread has
started, so on a loaded machine a descheduled pool thread costs nothing (a libgomp team waits for its
slowest thread at every barrier, thousands of times a step). The weight gradient (a sum over the rows: not
split) runs in one call on a pool thread beside the input gradient's blocks.

Only CPU float32 autograd goes through :class:`_Linear`; CUDA, other dtypes, CPU autocast (bf16) and exports
(ONNX, torch.export) use ``torch.addmm``, which on CPU gives the same forward bytes as the blocks.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import torch
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


def product_tasks(out: Tensor, a: Tensor, b: Tensor, bias: Tensor | None = None) -> list[Callable[[], None]]:
    """Tasks that write ``bias + a @ b`` into ``out``, a block of rows each (:func:`run_tasks` runs them).

    Shapes:
        a: (E, K), b: (K, M), bias: (M,), out: (E, M)
    """

    inference = torch.is_inference_mode_enabled()  # thread-local, as grad mode: a pool thread has its own

    def block(start: int, stop: int) -> None:
        with torch.inference_mode(inference), torch.no_grad():
            if bias is None:
                torch.mm(a[start:stop], b, out=out[start:stop])
            else:
                torch.addmm(bias, a[start:stop], b, out=out[start:stop])

    blocks = _row_blocks(a.shape[0], 2 * a.shape[1] * b.shape[1], _pool_threads)
    return [functools.partial(block, start, stop) for start, stop in blocks]


def run_tasks(tasks: list[Callable[[], None]]) -> None:
    """Run product tasks on this thread and the pool (MKL on one thread each)."""
    set_mkl_threads(1)
    _run_all(tasks)


def matmul(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``bias + a @ b`` in row blocks on the product threads, with the bytes of one single-threaded call.

    Shapes:
        a: (E, K), b: (K, M), bias: (M,) -> (E, M)
    """
    out = a.new_empty((a.shape[0], b.shape[1]))
    if a.shape[0] == 0:
        return out
    run_tasks(product_tasks(out, a, b, bias))
    return out


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor, bias: Tensor | None, narrow: bool) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        ctx.narrow = narrow
        return matmul(x, _weight_t(weight, narrow), bias)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b, _ = ctx.needs_input_grad
        grad = grad.contiguous()
        tasks: list[Callable[[], None]] = []
        g_x = g_w = None
        if need_x and grad.shape[0]:
            g_x = grad.new_empty(x.shape)
            tasks += product_tasks(g_x, grad, weight)  # (E, M) @ (M, K)
        elif need_x:
            g_x = grad.new_zeros(x.shape)
        if need_w and ctx.narrow:
            # (K, E) @ (E, M): for few inputs several times faster in MKL than (M, E) @ (E, K)
            g_w_t = grad.new_empty((weight.shape[1], weight.shape[0]))
            tasks += product_tasks(g_w_t, x.t(), grad)
            g_w = g_w_t.t()
        elif need_w:
            g_w = grad.new_empty(weight.shape)
            tasks += product_tasks(g_w, grad.t(), x)  # (M, E) @ (E, K)
        run_tasks(tasks)
        g_b = grad.sum(0) if need_b and ctx.has_bias else None
        return g_x, g_w, g_b, None


def _weight_t(weight: Tensor, narrow: bool) -> Tensor:
    """(K, M): contiguous for few inputs (MKL's (E, 3) @ (3, M) is faster than with the transposed view)."""
    return weight.t().contiguous() if narrow else weight.t()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, narrow: bool = False) -> Tensor:
    """``F.linear(x, weight, bias)``: on CPU float32 with autograd, in blocks whose bytes do not depend on the
    thread count (:func:`matmul`); ``narrow`` takes the weight gradient's fast form for few inputs.

    Shapes:
        x: (E, K), weight: (M, K), bias: (M,) -> (E, M)
    """
    exporting = torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export()
    autocast = torch.is_autocast_enabled("cpu")  # bf16 mixed precision: torch's own casts and kernels
    if x.device.type != "cpu" or x.dtype != torch.float32 or exporting or autocast or x.dim() != 2:
        return torch.nn.functional.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _Linear.apply(x, weight, bias, narrow)
    return matmul(x, _weight_t(weight, narrow), bias)
