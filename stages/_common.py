"""Shared by the stage scripts: the repo root on sys.path, then run a stage of the stage table by name."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(name: str) -> None:
    """Run stage ``name`` (``pgnn.pipeline.stages``) with this script's arguments on the repo root."""
    from pgnn.pipeline.stages import run_stage

    run_stage(name, sys.argv[1:], ROOT)
