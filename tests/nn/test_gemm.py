"""pgnn.nn.gemm: products in row blocks have the bytes of one single-threaded MKL call on any thread count."""

from __future__ import annotations

import threading

import pytest
import torch

from pgnn.core.cpu import set_mkl_threads
from pgnn.nn import gemm


@pytest.fixture(autouse=True)
def _restore_threads() -> None:
    before = torch.get_num_threads(), gemm.product_threads()
    yield
    gemm.set_product_threads(before[1])
    torch.set_num_threads(before[0])


def _single_call(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    torch.set_num_threads(1)
    set_mkl_threads(1)
    return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 1000, 8192, 20001])
@pytest.mark.parametrize("shape", [(3, 32), (32, 64), (67, 300), (300, 300)])
def test_blocks_equal_one_single_threaded_call(rows: int, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(rows)
    a = torch.randn(rows, shape[0], generator=g)
    b = torch.randn(shape[0], shape[1], generator=g)
    bias = torch.randn(shape[1], generator=g)
    want = _single_call(a, b, bias)
    for threads in (1, 2, 3):
        gemm.set_product_threads(threads)
        assert torch.equal(gemm.matmul(a, b, bias), want), threads
        assert torch.equal(gemm.matmul(a, b), _single_call(a, b, None)), threads


def test_row_blocks_cover_the_rows_at_aligned_starts() -> None:
    for rows in (1, 64, 1000, 8193, 100_000):
        for parts in (1, 2, 3, 8):
            blocks = gemm._row_blocks(rows, 2 * 64 * 64, parts)
            assert blocks[0][0] == 0 and blocks[-1][1] == rows
            assert all(stop == start for (_, stop), (start, _) in zip(blocks, blocks[1:], strict=False))
            assert all(start % gemm.ROW_ALIGN == 0 for start, _ in blocks)
            assert len(blocks) <= parts


def test_linear_forward_and_backward_bytes_do_not_depend_on_the_threads() -> None:
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(5000, 67, generator=g)
    w0 = torch.randn(300, 67, generator=g)
    b0 = torch.randn(300, generator=g)
    narrow_x0 = torch.randn(5000, 3, generator=g)
    narrow_w0 = torch.randn(64, 3, generator=g)
    results = []
    for threads in (1, 2, 3):
        with gemm.cpu_threads(threads):
            x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
            y = gemm.linear(x, w, b)
            (y * y).sum().backward()
            nx, nw = narrow_x0.clone().requires_grad_(), narrow_w0.clone().requires_grad_()
            ny = gemm.linear(nx, nw, None, narrow=True)
            ny.sum().backward()
        results.append([y, x.grad, w.grad, b.grad, ny, nx.grad, nw.grad])
    for other in results[1:]:
        assert all(torch.equal(p, q) for p, q in zip(results[0], other, strict=True))
    reference = torch.nn.functional.linear(x0, w0, b0)
    assert torch.allclose(results[0][0], reference, rtol=1e-5, atol=1e-4)


def test_blocks_run_in_inference_mode_from_the_caller() -> None:
    gemm.set_product_threads(2)
    a, b = torch.randn(20000, 64), torch.randn(64, 64)
    with torch.inference_mode():
        out = gemm.linear(a, b.t(), None)
    assert out.is_inference() and torch.equal(out, _single_call(a, b, None))


def test_cpu_autocast_goes_to_torch_and_computes_in_bf16() -> None:
    x = torch.randn(300, 64, requires_grad=True)
    w = torch.randn(32, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = gemm.linear(x, w, None)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32


def test_cpu_threads_restores_and_the_pool_threads_take_one_thread_each() -> None:
    before = torch.get_num_threads(), gemm.product_threads()
    seen: list[int] = []
    with gemm.cpu_threads(2):
        assert torch.get_num_threads() == 1 and gemm.product_threads() == 2
        gemm._pool.submit(lambda: seen.append(torch.get_num_threads())).result()
        assert threading.active_count() >= 2
    assert seen == [1]
    assert (torch.get_num_threads(), gemm.product_threads()) == before
    with pytest.raises(ValueError, match="positive"):
        gemm.set_product_threads(0)
