"""Stage ``params``: validate the whole of params.yaml, apply its preset, write ``params.resolved.yaml``.

It runs before every other stage (they all read its output), so a bad value stops ``dvc repro`` before any
work with one line naming params.yaml and the key (``stages/params.py: error: params.yaml: train.max_steps:
...``).
"""

from __future__ import annotations

from pathlib import Path

from pgnn.config.params import ParamsSource
from pgnn.pipeline.stages import Layout
from pgnn.recipe.resolved import resolve, write_resolved


def params_step(source: ParamsSource, out_path: Path) -> bool:
    """Resolve ``source.params`` and write the resolved params to ``out_path``, naming ``source.digest``
    as their source; True when the file changed."""
    changed = write_resolved(out_path, resolve(source.params, source.path), source.digest)
    print(f"params: {out_path} {'written' if changed else 'unchanged'}")
    return changed


def run(source: ParamsSource, layout: Layout, item: str | None) -> None:
    params_step(source, layout.path("resolved"))
