"""pgnn.nn.gemm: products with the bytes of a fixed-order float32 sum, on any thread count and any CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.nn import gemm, gemm_codegen

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_threads() -> None:
    before = torch.get_num_threads(), gemm.product_threads()
    yield
    gemm.set_product_threads(before[1])
    torch.set_num_threads(before[0])


def _in_order(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``bias + a @ b`` as numpy's float32 elementwise ops: each product and sum rounded, k in order."""
    x, w = a.numpy(), b.numpy()
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(x.shape[1]):
        acc += x[:, k : k + 1] * w[k]
    return torch.from_numpy(acc if bias is None else acc + bias.numpy())


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 1000, 8192, 20001])
# widths: 32 and 64 only wide tiles; 24 a wide and a narrow one; 300 wide, narrow and 4 more columns; 13 a
# narrow tile and 5 more; 3 no tile (rows 1, 63, 65 and 20001 end with rows no tile covers)
@pytest.mark.parametrize("shape", [(3, 32), (32, 64), (67, 300), (64, 3), (5, 24), (9, 13)])
def test_products_are_the_in_order_sum_on_any_thread_count(rows: int, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(rows)
    a = torch.randn(rows, shape[0], generator=g)
    b = torch.randn(shape[0], shape[1], generator=g)
    bias = torch.randn(shape[1], generator=g)
    want, want_no_bias = _in_order(a, b, bias), _in_order(a, b, None)
    for threads in (1, 2, 3):
        gemm.set_product_threads(threads)
        assert torch.equal(gemm.matmul(a, b, bias), want), threads
        assert torch.equal(gemm.matmul(a, b), want_no_bias), threads
        assert torch.equal(gemm.matmul(a.t().contiguous().t(), b), want_no_bias), "a strided view"


# 6 and 13 output rows: tiles of 4 and rows no tile covers; 300 columns: wide and narrow tiles and 4 more;
# 3000 rows: 11 full blocks of ROW_SUM_BLOCK and one part
@pytest.mark.parametrize("widths", [(3, 64), (64, 3), (32, 32), (6, 64), (13, 300)])
def test_row_sums_are_the_in_order_sum_in_either_orientation(widths: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(sum(widths))
    a = torch.randn(3000, widths[0], generator=g)
    b = torch.randn(3000, widths[1], generator=g)
    want = _in_order(a.t().contiguous(), b, None)
    assert torch.equal(gemm.row_sum(a, b), want)
    assert torch.equal(gemm.row_sum(b, a), want.t())


_PROBE = """
import hashlib, torch
from pgnn.nn import gemm
g = torch.Generator().manual_seed(0)
a, b = torch.randn(5000, 67, generator=g), torch.randn(67, 300, generator=g)
c, d = torch.randn(5000, 3, generator=g), torch.randn(5000, 300, generator=g)
out = [gemm.matmul(a, b, b[0]), gemm.row_sum(a, c), gemm.row_sum(c, a), gemm.row_sum(a, d)]
print(hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in out)).hexdigest())
"""


def test_the_kernels_compiled_for_other_cpus_give_the_same_bytes(tmp_path: Path) -> None:
    """numba compiles for the CPU it runs on (the vector width, the instruction choice); compiled for a
    generic x86-64, for Haswell (AVX2) and for an Intel Ice Lake server (AVX-512), the bytes are the same.
    (Each other CPU compiles into a cache folder of its own, about 8 s each; this one uses the usual one.)"""
    hashes = {}
    for cpu in ("host", "generic", "haswell", "icelake-server"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "NUMBA_CPU_NAME": cpu}
        if cpu != "host":
            env["NUMBA_CACHE_DIR"] = str(tmp_path / cpu)
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300, check=True
        )
        hashes[cpu] = proc.stdout.strip()
    assert len(set(hashes.values())) == 1, hashes


def test_the_register_tiles_are_what_their_generator_writes() -> None:
    assert gemm_codegen.TARGET.read_text() == gemm_codegen.source(), "run python -m pgnn.nn.gemm_codegen"


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
            ny = gemm.linear(nx, nw, None)
            ny.sum().backward()
        results.append([y, x.grad, w.grad, b.grad, ny, nx.grad, nw.grad])
    for other in results[1:]:
        assert all(torch.equal(p, q) for p, q in zip(results[0], other, strict=True))
    assert torch.equal(results[0][0], _in_order(x0, w0.t(), b0))
    assert torch.allclose(results[0][0], torch.nn.functional.linear(x0, w0, b0), rtol=1e-5, atol=1e-4)


def test_blocks_run_in_inference_mode_from_the_caller() -> None:
    gemm.set_product_threads(2)
    a, b = torch.randn(20000, 64), torch.randn(64, 64)
    with torch.inference_mode():
        out = gemm.linear(a, b.t(), None)
    assert out.is_inference() and torch.equal(out, _in_order(a, b, None))


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
