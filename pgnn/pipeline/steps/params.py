"""Stage ``params``: validate the whole of params.yaml, resolve its preset, write ``params.resolved.yaml``.

It runs before every other stage (they all read its output), so a bad value stops ``dvc repro`` before any
work with one line naming params.yaml and the key (``stages/params.py: error: params.yaml: train.max_steps:
...``).
"""

from __future__ import annotations

from pathlib import Path

from pgnn.config.params import Params, params_digest
from pgnn.pipeline.stages import Layout
from pgnn.recipe.resolved import resolve_params, write_resolved


def params_step(params: Params, params_path: Path, out_path: Path) -> bool:
    """Resolve ``params`` (read from ``params_path``) and write the effective params to ``out_path``."""
    changed = write_resolved(out_path, resolve_params(params, params_path), params_digest(params_path))
    print(f"params: {out_path} {'written' if changed else 'unchanged'}")
    return changed


def run(params: Params, layout: Layout, item: str | None) -> None:
    params_step(params, layout.root / "params.yaml", layout.path("resolved"))
