"""Several runs' training curves overlaid in one chart: the total loss and the val AP logged during training.

``dvc plots diff`` draws each experiment's PNG beside the others, on separate axes, and its vega charts stay
blank offline; this chart puts every run on the same two axes (loss on the left, val AP on the right), one
colour per run, one legend; a seed group's val AP line may carry a band of ± its sd. Built without pyplot
and saved without a matplotlib version, like :mod:`pgnn.viz.charts`: the same curves give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pgnn.core.io import atomic_path
from pgnn.viz.charts import PNG_METADATA

Series = Mapping[str, tuple[Sequence[int], Sequence[float]]]  # run name -> (steps, values)
Bands = Mapping[str, Sequence[float]]  # run name -> the sd at each of its val steps (a seed group's)


def compare_figure(loss: Series, val: Series, val_label: str = "", val_bands: Bands | None = None) -> Figure:
    """The figure: the left panel one loss line per run (log axis), the right one val AP line per run, with
    a shaded band of ``value ± sd`` for each run in ``val_bands``.

    A run's colour is the same in both panels (its place in ``loss``, then ``val``); a run with nothing
    logged in a panel has no line there but keeps its legend entry.
    """
    names = list(dict.fromkeys([*loss, *val]))
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}
    fig = Figure(figsize=(12.0, 4.6), dpi=100, layout="constrained")  # room for the outside legend
    FigureCanvasAgg(fig)
    ax_loss, ax_val = fig.subplots(1, 2)
    for ax in (ax_loss, ax_val):
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("step")
    for name, (steps, values) in loss.items():
        if len(steps) and all(v > 0 for v in values):  # a log axis cannot draw zeros
            ax_loss.plot(steps, values, color=colors[name], linewidth=1.4, label=name)
    for name, (steps, values) in val.items():
        if len(steps):
            ax_val.plot(steps, values, color=colors[name], marker="o", markersize=3, label=name)
        if name in (val_bands or {}) and len(steps):
            low = [v - sd for v, sd in zip(values, val_bands[name], strict=True)]
            high = [v + sd for v, sd in zip(values, val_bands[name], strict=True)]
            ax_val.fill_between(steps, low, high, color=colors[name], alpha=0.2, linewidth=0)
    if ax_loss.get_lines():
        ax_loss.set_yscale("log")
    ax_loss.set_ylabel("total loss (mean over the log interval)")
    ax_loss.set_title("training loss")
    ax_val.set_ylabel("AP (R40, %)")
    ax_val.set_ylim(0, 100)
    ax_val.set_title(f"val AP during training ({val_label})" if val_label else "val AP during training")
    handles = [Line2D([], [], color=colors[n], linewidth=2.0, label=n) for n in names]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, title="run")
    return fig


def compare_chart(
    loss: Series, val: Series, path: str | Path, val_label: str = "", val_bands: Bands | None = None
) -> Path:
    """Draw :func:`compare_figure` to the PNG ``path`` (written atomically)."""
    fig = compare_figure(loss, val, val_label, val_bands)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", metadata=PNG_METADATA)
    return Path(path)
