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
