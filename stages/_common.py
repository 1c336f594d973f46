"""Shared by the stage scripts: the repo root on sys.path, params.yaml loading, and one-line user errors
(a bad input file or params value ends the stage with ``stages/<name>.py: error: <file>: ...`` and exit
status 1, no traceback unless ``PGNN_DEBUG=1``; see ``pgnn.errors.install_user_errors``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pgnn.config import Params, load_params  # noqa: E402
from pgnn.errors import install_user_errors  # noqa: E402

install_user_errors()


def params() -> Params:
    """The validated params.yaml of the repo."""
    return load_params(ROOT / "params.yaml")
