"""Shared test fixtures.

Real data lives in ``../shared/data`` (read-only; CI has it there). A test that needs it fails with a clear
message when it is missing on CI, and is skipped (visibly, with the reason) only off CI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PGNN_SHARED", REPO.parent / "shared"))

# The suite runs one pytest-xdist worker per core, so a test's OpenMP threads share the cores with another
# worker: threads that spin while they wait lose whole time slices to it (measure it with
# `benchmarks/profile_train.py threads --busy 1`). Sleeping at once keeps a 2-thread test near its fair
# share; results do not depend on the wait policy.
os.environ.setdefault("GOMP_SPINCOUNT", "0")


def _need(path: Path) -> Path:
    if not path.exists():
        msg = f"shared data missing: {path} (set PGNN_SHARED to the shared/ folder)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``."""
    return _need(SHARED / "data")


@pytest.fixture(scope="session")
def kitti_sample() -> Path:
    """The 9 real KITTI frames: a KITTI root whose ``training/`` holds velodyne, calib, label_2, image_2."""
    return _need(SHARED / "data" / "kitti_sample")


@pytest.fixture(scope="session")
def pointgnn_reference() -> Path:
    """The authors' weights and the original TF model's inputs and outputs on 7 real frames."""
    return _need(SHARED / "data" / "pointgnn_reference")


def flip_data_page_bytes(path: Path, column: str) -> None:
    """Flip two bytes in the page data (past the page header: near the end of the column chunk, which ends
    with a data page) of ``column`` (row group 0) of a parquet file."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    at = start + chunk.total_compressed_size - 3
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    data[at + 1] ^= 0x55
    path.write_bytes(bytes(data))


@pytest.fixture
def flip_page() -> object:
    """:func:`flip_data_page_bytes`: corrupt a parquet file in the middle of a column's data page."""
    return flip_data_page_bytes
