"""A scan without a camera (``pgnn detect``) seen from above in its sensor's output frame: x forward up the
page, y left to the left, the sensor at the origin, where its detections' JSON boxes are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from pgnn.viz.render import _BACKGROUND, _FOREGROUND, CLASS_COLORS, _save_png, _style_axes


def sensor_bev_figure(
    points: np.ndarray,
    boxes: np.ndarray,
    names: Sequence[str],
    scores: np.ndarray,
    title: str,
    x_range: tuple[float, float] = (-40.0, 70.0),
    y_range: tuple[float, float] = (-40.0, 40.0),
    dpi: int = 120,
) -> Figure:
    """A scan and its detections seen from above in the output frame of a sensor (x forward up the page, y
    left to the left, z up as the colour), the frame of ``pgnn detect``'s JSON boxes; titled ``title``.

    Shapes:
        points: (N, 3) output frame; boxes: (M, 7) [x, y, z, l, w, h, yaw] (centre, yaw about +z from +x);
        scores: (M,)
    """
    fig = Figure(figsize=(11.2, 13.4), dpi=dpi, facecolor=_BACKGROUND)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_facecolor(_BACKGROUND)
    ax.set_aspect("equal")
    ax.set_xlim(y_range[1], y_range[0])  # y left: larger y to the left
    ax.set_ylim(*x_range)
    xyz = np.asarray(points, dtype=np.float64).reshape(-1, 3)  # (N, 3)
    inside = (xyz[:, 0] >= x_range[0]) & (xyz[:, 0] <= x_range[1])
    inside &= (xyz[:, 1] >= y_range[0]) & (xyz[:, 1] <= y_range[1])  # (N,)
    shown = xyz[inside][np.argsort(xyz[inside, 2], kind="stable")]  # (K, 3), highest drawn last
    mapped = ax.scatter(
        shown[:, 1],
        shown[:, 0],
        c=shown[:, 2],
        s=2.0,
        linewidths=0,
        cmap="viridis",
        zorder=3,
        rasterized=True,
    )
    for box, name, score in zip(
        np.asarray(boxes, dtype=np.float64).reshape(-1, 7), names, scores, strict=True
    ):
        x, y, _, length, width, _, yaw = box
        c, s = np.cos(yaw), np.sin(yaw)
        half = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]]) * [length / 2, width / 2]  # (4, 2) box frame
        corners = half @ np.array([[c, s], [-s, c]]) + [x, y]  # (4, 2) output frame x, y
        color = CLASS_COLORS.get(name, _FOREGROUND)
        ax.add_patch(
            Polygon(corners[:, ::-1], closed=True, fill=False, edgecolor=color, linewidth=1.4, zorder=4)
        )
        front = (corners[0] + corners[1]) / 2  # (2,) the middle of the front edge: the heading tick
        ax.plot([y, front[1]], [x, front[0]], color=color, linewidth=1.4, zorder=4)
        stroke = [patheffects.withStroke(linewidth=2.5, foreground="black")]
        label = f"{name} {float(score):.2f}"
        ax.text(
            y, x + max(length, width) / 2 + 0.4, label, color="white", fontsize=9, ha="center", va="bottom"
        )
        ax.texts[-1].update({"zorder": 5, "clip_on": True, "path_effects": stroke})
    ax.plot([0], [0], marker="^", markersize=8, color="white", zorder=5)  # the sensor, looking up the page
    _style_axes(ax)
    ax.set_xlabel("y, left (m)", color=_FOREGROUND, fontsize=11)
    ax.set_ylabel("x, forward (m)", color=_FOREGROUND, fontsize=11)
    ax.set_title(title, color=_FOREGROUND, fontsize=13, loc="left")
    bar = fig.colorbar(mapped, ax=ax, fraction=0.035, pad=0.02)
    bar.set_label("z, height (m)", color=_FOREGROUND)
    bar.ax.tick_params(colors=_FOREGROUND, labelsize=10)
    bar.outline.set_edgecolor(_FOREGROUND)
    fig.tight_layout()
    return fig


def write_sensor_bev_png(path: str | Path, *args: object, **kwargs: object) -> None:
    """Render ``sensor_bev_figure(*args, **kwargs)`` to a PNG at ``path``, atomically."""
    _save_png(sensor_bev_figure(*args, **kwargs), path)  # type: ignore[arg-type]
