"""Pictures of a frame: its points seen from above with its boxes' footprints, and its image with 3D boxes.

The bird's-eye view is the rectified camera frame seen from above: x (right) across the page, z (forward) up
the page, the camera at the origin looking up; a scan without a camera (``pgnn detect``) is drawn in its own
output frame instead (:mod:`pgnn.viz.sensor_view`). The image view draws each 3D box's 12 edges projected into
image_2 with P2 (edges cut at a near plane in front of the camera, so boxes partly behind it draw correctly).
Functions here are pure: they take a ``Frame`` or an image (and optional detections) and return a matplotlib
``Figure`` built without pyplot (no global figure state), or write a PNG.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Polygon

from pgnn.core.boxes import BOX_EDGES, boxes_bev_footprints, boxes_to_corners
from pgnn.core.io import atomic_path
from pgnn.data.frames import Frame
from pgnn.data.kitti import PAINTED_CLASSES, Calib
from pgnn.data.labels import KITTI_CLASSES, Label, labels_to_boxes

CLASS_COLORS: dict[str, str] = {
    "Car": "#ff3b30",
    "Van": "#ff9500",
    "Truck": "#ffcc00",
    "Pedestrian": "#00e5ff",
    "Person_sitting": "#5ac8fa",
    "Cyclist": "#4cd964",
    "Tram": "#ff2d95",
    "Misc": "#c7a4ff",
    "DontCare": "#9a9a9a",
}
PAINTED_COLORS: tuple[str, ...] = ("#59606b", "#4cd964", "#ff3b30", "#00e5ff")  # PAINTED_CLASSES order
COLOR_BY: tuple[str, ...] = ("height", "intensity", "painted")
PNG_METADATA = {"Software": None}  # no matplotlib version in the file: the bytes depend on the data only

_BACKGROUND = "#101317"
_FOREGROUND = "#d8dde3"


def _has_box(label: Label) -> bool:
    """False for KITTI's box-less lines (DontCare: dimensions -1, location -1000)."""
    return label.l > 0 and label.w > 0 and label.z > -999


def _draw_box(ax: Axes, label: Label, linewidth: float, linestyle: str = "-", alpha: float = 1.0) -> None:
    color = CLASS_COLORS.get(label.type, _FOREGROUND)
    corners = boxes_bev_footprints(labels_to_boxes([label]))[0]  # (4, 2) (x, z), local +x face first
    ax.add_patch(
        Polygon(
            corners,
            closed=True,
            fill=False,
            edgecolor=color,
            linewidth=linewidth,
            linestyle=linestyle,
            alpha=alpha,
            zorder=4,
        )
    )
    # heading tick: centre -> middle of the front face (local +x, heading (cos ry, -sin ry) in (x, z))
    front = corners[:2].mean(axis=0)
    ax.plot(
        [label.x, front[0]],
        [label.z, front[1]],
        color=color,
        linewidth=linewidth,
        alpha=alpha,
        zorder=4,
        solid_capstyle="round",
    )


def _image_column_ray(calib: Calib, u: float, z: np.ndarray) -> np.ndarray:
    """x (rectified frame) of the ground-plane ray through image column ``u`` at depths ``z``.

    From u = (fx x + cx z + P2[0, 3]) / (z + P2[2, 3]) with P2[0, 1] = 0 (KITTI's P2).
    """
    p = calib.P2
    return (u * (z + p[2, 3]) - p[0, 2] * z - p[0, 3]) / p[0, 0]


def _draw_view_edges(ax: Axes, frame: Frame, z_max: float) -> None:
    z = np.array([0.0, z_max])
    for u in (0.0, float(frame.image_size[0])):
        ax.plot(
            _image_column_ray(frame.calib, u, z),
            z,
            color=_FOREGROUND,
            linewidth=0.6,
            alpha=0.35,
            linestyle=(0, (6, 4)),
            zorder=1,
        )


def _draw_dontcare_wedge(ax: Axes, label: Label, calib: Calib, z_max: float) -> None:
    """A box-less DontCare as the dashed wedge of image columns it covers (its depth is unknown)."""
    z = np.array([2.0, z_max])
    left = _image_column_ray(calib, label.bbox[0], z)
    right = _image_column_ray(calib, label.bbox[2], z)
    corners = np.array([[left[0], z[0]], [left[1], z[1]], [right[1], z[1]], [right[0], z[0]]])
    gray = CLASS_COLORS["DontCare"]
    ax.add_patch(Polygon(corners, closed=True, facecolor=gray, alpha=0.07, edgecolor="none", zorder=2))
    ax.add_patch(
        Polygon(
            corners,
            closed=True,
            fill=False,
            edgecolor=gray,
            alpha=0.55,
            linewidth=0.8,
            linestyle=(0, (4, 3)),
            zorder=2,
        )
    )


def _point_colors(frame: Frame, color_by: str) -> tuple[np.ndarray, dict[str, object]]:
    """Per-point scalar (or RGBA) values and the scatter keywords that map them to colours."""
    if color_by == "height":
        height = -frame.points_rect[:, 1].astype(np.float64)  # (N,) metres above the camera (y points down)
        return height, {"cmap": "viridis", "vmin": -2.0, "vmax": 1.0}
    if color_by == "intensity":
        return frame.intensity.astype(np.float64), {"cmap": "plasma", "vmin": 0.0, "vmax": 0.6}
    if color_by == "painted":
        if frame.scores is None:
            raise ValueError("color_by='painted' needs a frame loaded with painted=True")
        cls = np.argmax(frame.scores, axis=1)  # (N,)
        palette = np.array([_hex_rgba(c) for c in PAINTED_COLORS])  # (4, 4)
        return palette[cls], {}
    raise ValueError(f"color_by: expected one of {COLOR_BY}, got {color_by!r}")


def _hex_rgba(color: str) -> tuple[float, float, float, float]:
    return (int(color[1:3], 16) / 255, int(color[3:5], 16) / 255, int(color[5:7], 16) / 255, 1.0)


def _title(frame: Frame, n_points: int, detections: Sequence[Label]) -> str:
    counts = Counter(label.type for label in frame.labels)
    objects = ", ".join(f"{counts[c]} {c}" for c in KITTI_CLASSES if counts[c]) or "no labels"
    title = f"KITTI {frame.frame_id}: {n_points:,} points in view; {objects}"
    if detections:
        title += f"; {len(detections)} detections"
    return title


def bev_figure(
    frame: Frame,
    color_by: str = "height",
    x_range: tuple[float, float] = (-40.0, 40.0),
    z_range: tuple[float, float] = (0.0, 70.0),
    detections: Sequence[Label] = (),
    dpi: int = 120,
    point_size: float = 2.0,
) -> Figure:
    """A bird's-eye view of ``frame``: points coloured by ``color_by``, label footprints coloured per class.

    ``color_by``: "height" (above the camera, viridis), "intensity" (reflectance, plasma) or "painted"
    (argmax PointPainting class; needs a painted frame). Labels are drawn solid with a heading tick; DontCare
    dashed (a box-less DontCare as the wedge of image columns it covers); ``detections`` (Labels with
    scores) thinner, with their score. The dashed grey lines are image_2's left and right edges. The figure is
    13.4 x 11.2 inches: about 1600 px wide at the default ``dpi`` (scores 9 pt, about 15 px tall).
    """
    values, scatter_kw = _point_colors(frame, color_by)
    xz = frame.points_rect[:, [0, 2]].astype(np.float64)  # (N, 2)

    fig = Figure(figsize=(13.4, 11.2), dpi=dpi, facecolor=_BACKGROUND)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_facecolor(_BACKGROUND)
    ax.set_aspect("equal")
    ax.set_xlim(*x_range)
    ax.set_ylim(*z_range)

    in_x = (xz[:, 0] >= x_range[0]) & (xz[:, 0] <= x_range[1])  # (N,)
    inside = in_x & (xz[:, 1] >= z_range[0]) & (xz[:, 1] <= z_range[1])  # (N,)
    order = np.argsort(values[inside] if values.ndim == 1 else np.zeros(int(inside.sum())), kind="stable")
    mapped = ax.scatter(
        xz[inside, 0][order],
        xz[inside, 1][order],
        c=values[inside][order],
        s=point_size,
        linewidths=0,
        marker="o",
        zorder=3,
        rasterized=True,
        **scatter_kw,
    )
    _draw_view_edges(ax, frame, z_range[1] * 1.5)

    for label in frame.labels:
        if _has_box(label):
            dashed = label.type == "DontCare"
            _draw_box(ax, label, linewidth=1.1 if dashed else 1.7, linestyle=(0, (4, 3)) if dashed else "-")
        elif label.type == "DontCare":
            _draw_dontcare_wedge(ax, label, frame.calib, z_range[1] * 1.5)
    for det in detections:
        if _has_box(det):
            _draw_box(ax, det, linewidth=1.2, alpha=0.9)
            if det.score is not None:
                ax.text(
                    det.x,
                    det.z + max(det.l, det.w) / 2 + 0.4,  # just beyond the box, up the page
                    f"{det.score:.2f}",
                    color="white",
                    fontsize=9,
                    ha="center",
                    va="bottom",
                    zorder=5,
                    clip_on=True,
                    path_effects=[patheffects.withStroke(linewidth=2.5, foreground="black")],
                )

    ax.plot([0], [0], marker="^", markersize=8, color="white", zorder=5)  # the camera
    _style_axes(ax)
    ax.set_title(_title(frame, len(xz), detections), color=_FOREGROUND, fontsize=13, loc="left")
    _legend(ax, frame.labels, color_by, with_detections=bool(detections))
    if values.ndim == 1:
        bar = fig.colorbar(mapped, ax=ax, fraction=0.035, pad=0.02)
        bar.set_label("height above camera (m)" if color_by == "height" else "reflectance", color=_FOREGROUND)
        bar.ax.tick_params(colors=_FOREGROUND, labelsize=10)
        bar.outline.set_edgecolor(_FOREGROUND)
    fig.tight_layout()
    return fig


def _style_axes(ax: Axes) -> None:
    ax.set_xlabel("x, right (m)", color=_FOREGROUND, fontsize=11)
    ax.set_ylabel("z, forward (m)", color=_FOREGROUND, fontsize=11)
    ax.tick_params(colors=_FOREGROUND, labelsize=10)
    for spine in ax.spines.values():
        spine.set_edgecolor("#3a4048")
    ax.grid(True, color="#2a3038", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)


def _legend(ax: Axes, labels: Sequence[Label], color_by: str, with_detections: bool = False) -> None:
    present = [c for c in KITTI_CLASSES if any(label.type == c for label in labels)]
    handles = [
        Line2D(
            [],
            [],
            color=CLASS_COLORS[c],
            linewidth=1.7,
            linestyle=(0, (4, 3)) if c == "DontCare" else "-",
            label=c,
        )
        for c in present
    ]
    if with_detections:
        handles.append(Line2D([], [], color=_FOREGROUND, linewidth=0.9, label="detection (thin, score)"))
    if color_by == "painted":
        handles += [
            Line2D([], [], color=col, marker="o", linestyle="", markersize=4, label=f"point: {name}")
            for name, col in zip(PAINTED_CLASSES, PAINTED_COLORS, strict=True)
        ]
    if handles:
        legend = ax.legend(
            handles=handles,
            loc="upper left",
            fontsize=10,
            facecolor=_BACKGROUND,
            edgecolor="#3a4048",
            labelcolor=_FOREGROUND,
            framealpha=0.85,
        )
        legend.set_zorder(6)


def write_bev_png(frame: Frame, path: str | Path, **kwargs: object) -> None:
    """Render ``bev_figure(frame, **kwargs)`` to a PNG at ``path``, atomically."""
    _save_png(bev_figure(frame, **kwargs), path)  # type: ignore[arg-type]


def _save_png(fig: Figure, path: str | Path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(
            tmp,
            format="png",
            facecolor=fig.get_facecolor(),
            bbox_inches="tight",
            pad_inches=0.12,
            metadata=PNG_METADATA,
        )


# --- image view ---


def project_box_edges(boxes: np.ndarray, P: np.ndarray, near: float = 0.1) -> list[np.ndarray]:
    """The image segments of each box's 12 edges, cut where they pass behind the plane depth = ``near``.

    Depth is the third homogeneous coordinate ``P[2] . [X, 1]``; the part of an edge with depth < ``near`` is
    dropped (interpolated in homogeneous coordinates, which P maps affinely), so no segment is ever mirrored
    through the camera. A box wholly behind the plane has no segments.

    Shapes:
        boxes: (M, 7) in the camera frame of ``P``; P: (3, 4)
        return: M arrays of shape (S, 2, 2): S <= 12 segments [[u0, v0], [u1, v1]] in pixels
    """
    P = np.asarray(P, dtype=np.float64)
    corners = boxes_to_corners(np.asarray(boxes, dtype=np.float64).reshape(-1, 7))  # (M, 8, 3)
    hom = np.concatenate([corners, np.ones((*corners.shape[:2], 1))], axis=2) @ P.T  # (M, 8, 3)
    h0 = hom[:, BOX_EDGES[:, 0], :]  # (M, 12, 3)
    h1 = hom[:, BOX_EDGES[:, 1], :]  # (M, 12, 3)
    d0 = h0[..., 2] - near  # (M, 12)
    d1 = h1[..., 2] - near  # (M, 12)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(d0 != d1, d0 / (d0 - d1), 0.0)  # (M, 12) where the edge meets the plane
    cut = h0 + t[..., None] * (h1 - h0)  # (M, 12, 3)
    a = np.where((d0 >= 0.0)[..., None], h0, cut)  # (M, 12, 3) the front part's ends
    b = np.where((d1 >= 0.0)[..., None], h1, cut)  # (M, 12, 3)
    visible = (d0 >= 0.0) | (d1 >= 0.0)  # (M, 12)
    seg = np.stack([a, b], axis=2)  # (M, 12, 2, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = seg[..., :2] / seg[..., 2:3]  # (M, 12, 2, 2)
    return [uv[m][visible[m]] for m in range(uv.shape[0])]


def _draw_image_boxes(
    ax: Axes,
    labels: Sequence[Label],
    P: np.ndarray,
    linewidth: float,
    linestyle: str | tuple[int, tuple[int, int]],
    detections: bool,
) -> None:
    """Labels thin and dashed; detections solid with a dark halo and their score above the box."""
    with_box = [lab for lab in labels if _has_box(lab)]
    if not with_box:
        return
    halo = (
        [patheffects.withStroke(linewidth=linewidth + 1.6, foreground="black", alpha=0.8)]
        if detections
        else []
    )
    boxes = labels_to_boxes(with_box)  # (M, 7)
    for lab, segments in zip(with_box, project_box_edges(boxes, P), strict=True):
        color = CLASS_COLORS.get(lab.type, _FOREGROUND)
        if len(segments):
            lines = LineCollection(
                segments,
                colors=color,
                linewidths=linewidth,
                linestyles=linestyle,
                zorder=4 if detections else 3,
                capstyle="round",
            )
            lines.set_path_effects(halo)
            ax.add_collection(lines)
        if detections and lab.score is not None and len(segments):
            uv = segments.reshape(-1, 2)  # (2S, 2)
            ax.text(
                float(uv[:, 0].min()),
                float(uv[:, 1].min()) - 2.0,
                f"{lab.score:.2f}",
                color=color,
                fontsize=9,
                ha="left",
                va="bottom",
                zorder=5,
                clip_on=True,
                path_effects=halo,
            )


def image_figure(
    image: np.ndarray,
    P: np.ndarray,
    labels: Sequence[Label] = (),
    detections: Sequence[Label] = (),
    title: str | None = None,
    dpi: int = 100,
) -> Figure:
    """``image`` with the 3D boxes of ``labels`` (thin, dashed) and ``detections`` (solid, dark halo, score).

    Boxes are in the rectified camera frame and projected with ``P`` (KITTI's P2); colours per class as in
    the bird's-eye view. DontCare regions and box-less lines are not drawn. The figure has the image's pixel
    size at ``dpi``.

    Shapes:
        image: (H, W, 3) uint8; P: (3, 4)
    """
    height, width = image.shape[:2]
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor=_BACKGROUND)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.imshow(image, interpolation="nearest")
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    gt = [lab for lab in labels if lab.type != "DontCare"]
    _draw_image_boxes(ax, gt, P, linewidth=1.1, linestyle=(0, (4, 3)), detections=False)
    _draw_image_boxes(ax, detections, P, linewidth=1.5, linestyle="-", detections=True)
    if title:
        ax.text(
            6,
            6,
            title,
            color="white",
            fontsize=9,
            ha="left",
            va="top",
            zorder=5,
            bbox={"facecolor": _BACKGROUND, "alpha": 0.7, "edgecolor": "none", "pad": 2},
        )
    return fig


def write_image_png(image: np.ndarray, P: np.ndarray, path: str | Path, **kwargs: object) -> None:
    """Render ``image_figure(image, P, **kwargs)`` to a PNG at ``path`` (the image's size), atomically."""
    fig = image_figure(image, P, **kwargs)  # type: ignore[arg-type]
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", facecolor=fig.get_facecolor(), metadata=PNG_METADATA)
