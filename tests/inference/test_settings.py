"""``pgnn.inference.settings``: the CPU threads of ``pgnn predict`` / ``pgnn detect``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from pgnn.core.errors import DataError
from pgnn.inference.settings import set_threads
from pgnn.nn import gemm


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    before = torch.get_num_threads(), gemm.product_threads()
    yield
    torch.set_num_threads(before[0])
    gemm.set_product_threads(before[1])


def test_the_default_puts_the_products_on_every_core_and_torch_kernels_on_one() -> None:
    set_threads(None)
    assert gemm.product_threads() == len(os.sched_getaffinity(0))
    assert torch.get_num_threads() == 1


def test_a_thread_count_is_the_products() -> None:
    set_threads(3)
    assert (gemm.product_threads(), torch.get_num_threads()) == (3, 1)


def test_no_threads_is_refused_naming_the_option() -> None:
    with pytest.raises(DataError, match="--threads.*positive"):
        set_threads(0)
