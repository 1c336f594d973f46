"""Stage ``gt_db``: the ground-truth sampling database (object point crops) of the prepared train split.

Built whether or not ``gt_sampling`` is on: it is cheap next to ``prepare`` (measured: benchmarks/README.md,
"Measurements behind the code").
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pgnn.config.params import ResolvedReader
from pgnn.data.gt_db import build_gt_db, write_gt_db
from pgnn.data.prepare import PreparedFrames
from pgnn.pipeline.stages import Layout


def gt_db_step(
    prepared_dir: Path, out_path: Path, *, min_points: int = 10, box_scale: float = 1.1
) -> dict[str, int]:
    """The ground-truth database of a prepared split (every labelled object with more than ``min_points``
    points in its box scaled by ``box_scale``, the original's 10 and 1.1), written atomically to ``out_path``.
    Returns the number of crops per class."""
    frames = PreparedFrames(prepared_dir, max_cached_shards=1)
    table = build_gt_db((frames[i] for i in range(len(frames))), min_points=min_points, box_scale=box_scale)
    write_gt_db(out_path, table)
    counts = dict(sorted(Counter(table.column("name").to_pylist()).items()))
    print(f"gt_db: {table.num_rows} object crops {counts} -> {out_path}")
    return counts


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    gt_db_step(layout.path("prepared", "train"), layout.path("gt_db"))
