"""Shared by the stage scripts: the repo root on sys.path, one-line user errors, then run a stage of the stage
table by name. A bad input file or params value ends the stage with ``stages/<name>.py: error: <file>: ...``
and exit status 1, no traceback unless ``PGNN_DEBUG=1`` (see ``pgnn.core.errors.install_user_errors``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(name: str) -> None:
    """Run stage ``name`` (``pgnn.pipeline.runner``) with this script's arguments on the repo root. Importing
    pgnn first pins the CPU numerics and OpenMP's wait before torch loads (:mod:`pgnn.core.cpu`)."""
    from pgnn.core.errors import install_user_errors
    from pgnn.pipeline.runner import run_stage

    install_user_errors()
    run_stage(name, sys.argv[1:], ROOT)
