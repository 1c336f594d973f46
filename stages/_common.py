"""Shared by the stage scripts: the repo root on sys.path and params.yaml loading."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pgnn.config.params import Params, load_params  # noqa: E402


def params() -> Params:
    """The validated params.yaml of the repo."""
    return load_params(ROOT / "params.yaml")
