"""Human- and DVC-readable outputs of the KITTI evaluation: a text table and PR-curve files."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from pgnn.core.io import write_text_atomic
from pgnn.eval.kitti import CLASSES, DIFFICULTIES, METRICS, recall_points


def _split(key: str) -> tuple[str, str, str, str]:
    cls, metric, diff, sampling = key.split("/")
    return cls, metric, diff, sampling


def format_table(results: dict[str, float]) -> str:
    """A fixed-width table of flat AP results: one row per class and metric, R40 then R11 columns.

    Missing entries show as ``-``.
    """
    rows = sorted(
        {_split(k)[:2] for k in results},
        key=lambda cm: (
            CLASSES.index(cm[0]) if cm[0] in CLASSES else len(CLASSES),
            cm[0],
            METRICS.index(cm[1]) if cm[1] in METRICS else len(METRICS),
        ),
    )
    cols = [(s, d) for s in ("R40", "R11") for d in DIFFICULTIES]
    head1 = f"{'':<12}{'':<8}" + "".join(f"{s + ' ' + d:>14}" for s, d in cols)
    lines = [head1, "-" * len(head1)]
    for cls, metric in rows:
        cells = []
        for s, d in cols:
            v = results.get(f"{cls}/{metric}/{d}/{s}")
            cells.append(f"{'-' if v is None else f'{v:.2f}':>14}")
        lines.append(f"{cls:<12}{metric:<8}" + "".join(cells))
    return "\n".join(lines) + "\n"


FEW_GROUND_TRUTH = 40


def few_ground_truth_warnings(counts: dict[str, tuple[int, ...]]) -> list[str]:
    """One line per class with 40 or fewer counted ground-truth boxes at some difficulty (``counts`` from
    ``pgnn.eval.kitti.ground_truth_counts``).

    With n <= 40 boxes recall moves in steps of 1/n, so only n of the 40 recall points of AP R40 can be
    reached: the AP counts recall points more than it measures precision, and perfect detections score
    (n - 1) / 40 (39 boxes: 95.0, 10 boxes: 22.5; tested in tests/eval).
    """
    lines = []
    for cls, per_diff in counts.items():
        if min(per_diff) > FEW_GROUND_TRUTH:
            continue
        boxes = ", ".join(f"{n} {d}" for n, d in zip(per_diff, DIFFICULTIES, strict=True))
        best = " / ".join(f"{min(max(n - 1, 0), 40) / 40 * 100:.1f}" for n in per_diff)
        lines.append(
            f"{cls}: only {boxes} ground-truth boxes; with {FEW_GROUND_TRUTH} or fewer, AP R40 is a count "
            f"over its 40 recall points (perfect detections would score {best})"
        )
    return lines


HEADLINE_METRICS: tuple[tuple[str, str], ...] = (("3d", "3d"), ("bev", "bev"), ("bbox", "2d"), ("aos", "aos"))
"""The headline metrics (KITTI name, name in ``metrics/ap.json``), in the order they are shown."""


def headline_ap(
    results: dict[str, float], difficulty: str = "moderate", sampling: str = "R40"
) -> dict[str, dict[str, float]]:
    """The headline of flat AP results: ``{class: {"3d", "bev", "2d", "aos"}}`` at ``difficulty`` and
    ``sampling`` (KITTI's leaderboard: moderate, R40), rounded to 0.01 AP.

    This is the pipeline's DVC metric (``metrics/ap.json``): four numbers per class, so that ``dvc metrics
    diff`` and ``dvc exp show`` fit a terminal; the full table is ``metrics/eval.json``.
    """
    classes = sorted(
        {_split(k)[0] for k in results},
        key=lambda c: (CLASSES.index(c) if c in CLASSES else len(CLASSES), c),
    )
    out: dict[str, dict[str, float]] = {}
    for cls in classes:
        row = {}
        for metric, name in HEADLINE_METRICS:
            value = results.get(f"{cls}/{metric}/{difficulty}/{sampling}")
            if value is not None:
                row[name] = round(float(value), 2)
        out[cls] = row
    return out


def write_curves(curves: dict[str, np.ndarray], out_dir: str | Path) -> list[Path]:
    """Write one CSV per class and metric, ``<out_dir>/<class>_<metric>.csv``, atomically.

    Columns: ``recall`` (0, 1/40, .., 1), then one column per difficulty (``easy``, ``moderate``, ``hard``)
    with the interpolated precision (orientation similarity for ``aos``) in [0, 1]. DVC plots them with
    ``x: recall`` and ``y: [easy, moderate, hard]``. Returns the written paths.
    """
    out_dir = Path(out_dir)
    groups: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for key, values in curves.items():
        cls, metric, diff = key.split("/")
        groups.setdefault((cls, metric), {})[diff] = values
    recall = recall_points()
    written = []
    for (cls, metric), by_diff in groups.items():
        diffs = [d for d in DIFFICULTIES if d in by_diff]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["recall", *diffs])
        for i, r in enumerate(recall):
            writer.writerow([f"{r:.6g}", *(f"{by_diff[d][i]:.6f}" for d in diffs)])
        path = out_dir / f"{cls}_{metric}.csv"
        out_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, buf.getvalue())
        written.append(path)
    return written
