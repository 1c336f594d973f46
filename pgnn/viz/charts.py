"""Charts of a run as PNG files: the training losses, the val AP logged during training, the KITTI PR curves.

They are the pipeline's offline plots (the ``plots`` stage writes them to ``plots/images``, declared as DVC
image plots): ``dvc plots show`` draws its other plots with vega, loaded from a CDN, so a page without a
network shows those blank; a PNG needs nothing. Built without pyplot (no global figure state), like
:mod:`pgnn.viz.render`; same inputs give the same bytes (no timestamps in the PNG metadata).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pgnn.core.io import atomic_path

DIFFICULTY_STYLES: Mapping[str, str] = {"easy": ":", "moderate": "-", "hard": "--"}
METRIC_TITLES: Mapping[str, str] = {"bbox": "2D bbox", "aos": "AOS", "bev": "BEV", "3d": "3D"}
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: the bytes depend on the data only


def read_tsv_series(path: str | Path) -> tuple[list[int], list[float]]:
    """(steps, values) of one dvclive history file (``step`` and one value column, tab-separated)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if not rows:
        return [], []
    head = rows[0]
    if "step" not in head or len(head) < 2:
        raise ValueError(f"{path}: expected a dvclive TSV with a 'step' column, got header {head}")
    s = head.index("step")
    v = next(i for i, name in enumerate(head) if name not in ("step", "timestamp"))
    steps, values = [], []
    for row in rows[1:]:
        if len(row) > max(s, v) and row[v] != "":
            steps.append(int(row[s]))
            values.append(float(row[v]))
    return steps, values


def _figure(width: float = 7.0, height: float = 4.2, dpi: int = 220) -> tuple[Figure, Axes]:
    """A figure ``width`` x ``height`` inches: at 220 dpi the charts are 1100-1800 px wide, text included."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: str | Path) -> Path:
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", metadata=PNG_METADATA)
    return Path(path)


def _message(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def loss_chart(series: Mapping[str, tuple[Sequence[int], Sequence[float]]], path: str | Path) -> Path:
    """The training losses (``total``, ``cls``, ``loc``, ``reg``: one line each) against the step."""
    fig, ax = _figure()
    drawn = False
    for name, (steps, values) in series.items():
        if not steps:
            continue
        if all(v <= 0 for v in values):  # a log axis cannot draw it (e.g. no regulariser)
            ax.plot([], [], label=f"{name} (0: not drawn)", linestyle="none")
            continue
        ax.plot(steps, values, label=name, linewidth=2.0 if name == "total" else 1.2)
        drawn = True
    if drawn:
        ax.set_xlabel("step")
        ax.set_ylabel("loss (mean over the log interval)")
        ax.set_yscale("log")
        ax.legend()
    else:
        _message(ax, "no training losses logged")
    ax.set_title("training losses")
    return _save(fig, path)


def val_ap_chart(series: Mapping[str, tuple[Sequence[int], Sequence[float]]], path: str | Path) -> Path:
    """The official AP on the val frames logged during training (``val/<class>/<metric>/<difficulty>``:
    one line each, the metric by colour, the difficulty by line style) against the step."""
    fig, ax = _figure(8.0, 4.6)
    colors: dict[str, str] = {}
    palette = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9")
    for name in sorted(series):
        steps, values = series[name]
        if not steps:
            continue
        cls, metric, diff = (name.split("/") + ["", "", ""])[:3]
        key = f"{cls} {METRIC_TITLES.get(metric, metric)}"
        color = colors.setdefault(key, palette[len(colors) % len(palette)])
        ax.plot(
            steps,
            values,
            color=color,
            linestyle=DIFFICULTY_STYLES.get(diff, "-"),
            marker="o",
            markersize=3,
            label=f"{key} {diff}",
        )
    if colors:
        ax.set_xlabel("step")
        ax.set_ylabel("AP (R40, %)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=7, ncol=2)
    else:
        _message(ax, "no validation during training (set train.eval_every in params.yaml)")
    ax.set_title("val AP during training (train.eval_frames val frames)")
    return _save(fig, path)


def read_pr_csv(path: str | Path) -> tuple[list[float], dict[str, list[float]]]:
    """(recall, {difficulty: precision}) of a PR-curve CSV (:func:`pgnn.eval.report.write_curves`)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    if head[0] != "recall":
        raise ValueError(f"{path}: expected a PR-curve CSV starting with 'recall', got {head}")
    cols = {name: [float(r[i]) for r in rows[1:]] for i, name in enumerate(head)}
    recall = cols.pop("recall")
    return recall, cols


def pr_chart(
    recall: Sequence[float], precision: Mapping[str, Sequence[float]], title: str, path: str | Path
) -> Path:
    """One class and metric's interpolated precision (orientation similarity for AOS) against recall, easy,
    moderate and hard in one chart."""
    fig, ax = _figure(5.2, 4.2)
    for diff, values in precision.items():
        ax.plot(recall, values, linestyle=DIFFICULTY_STYLES.get(diff, "-"), label=diff)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recall (41 points)")
    ax.set_ylabel("precision")
    ax.legend()
    ax.set_title(title)
    return _save(fig, path)
