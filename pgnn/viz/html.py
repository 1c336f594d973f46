"""Interactive 3D pages of a frame: one self-contained HTML file (plotly, its JavaScript inside the file).

The page shows the points (coloured by height, reflectance or painted class), ground-truth and predicted 3D
boxes as wireframes (class and score on hover), and optionally the graph's keypoints and edges and the
candidate keypoints of each box-merge cluster. It opens offline in any browser: nothing loads from outside.

Every function takes plain arrays in KITTI's rectified camera frame (``pgnn.core.boxes``: x right, y down,
z forward; boxes ``[x, y, z, l, h, w, ry]``, bottom centre), so any source of points and boxes (a KITTI
frame, a raw scan) can draw one. The page shows them with the height up: display (x, z, -y), a rotation, so
nothing is mirrored. Same inputs give the same bytes (a fixed div id; the point subsample has its own seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from pgnn.core.boxes import boxes_to_corners
from pgnn.core.io import write_text_atomic
from pgnn.data.kitti import PAINTED_CLASSES
from pgnn.data.labels import Label
from pgnn.viz.render import CLASS_COLORS, COLOR_BY, PAINTED_COLORS

MAX_POINTS = 60_000
MAX_EDGES = 4_000
_BACKGROUND = "#101317"
_FOREGROUND = "#d8dde3"
_OTHER = "#d8dde3"  # a class with no colour of its own
# The box path through the corners (pgnn.core.boxes order) that draws all 12 edges in one line.
_BOX_PATH = np.array([0, 1, 2, 3, 0, 4, 5, 1, 5, 6, 2, 6, 7, 3, 7, 4])  # (16,)
_CLUSTER_COLORS = ("#ffd60a", "#ff6b6b", "#4dabf7", "#69db7c", "#f783ac", "#ffa94d", "#b197fc", "#63e6be")


@dataclass(frozen=True)
class Boxes:
    """Boxes to draw, with their class and (for detections) score.

    Shapes:
        boxes: (M, 7) rectified camera frame; names: M class names; scores: (M,) or None
    """

    boxes: np.ndarray
    names: tuple[str, ...]
    scores: np.ndarray | None = None

    @staticmethod
    def from_labels(labels: Sequence[Label]) -> Boxes:
        """The boxed labels (KITTI's box-less DontCare lines left out); scores when every label has one."""
        boxed = [lab for lab in labels if lab.l > 0 and lab.w > 0 and lab.z > -999]
        rows = [[lab.x, lab.y, lab.z, lab.l, lab.h, lab.w, lab.ry] for lab in boxed]
        scores = [lab.score for lab in boxed]
        return Boxes(
            boxes=np.array(rows, dtype=np.float64).reshape(-1, 7),
            names=tuple(lab.type for lab in boxed),
            scores=np.array(scores, dtype=np.float64) if all(s is not None for s in scores) else None,
        )


def to_display(xyz: np.ndarray) -> np.ndarray:
    """Camera-frame coordinates as the page shows them: (x right, z forward, -y up), a proper rotation.

    Shapes:
        xyz: (..., 3) -> (..., 3) float64
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    return np.stack([xyz[..., 0], xyz[..., 2], -xyz[..., 1]], axis=-1)


def subsample(n: int, cap: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``cap`` of ``n`` items, drawn without replacement with ``seed``.

    Shapes:
        return: (min(n, cap),) int64
    """
    if n <= cap:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=cap, replace=False)).astype(np.int64)


def points_trace(
    points: np.ndarray,
    color_by: str = "height",
    intensity: np.ndarray | None = None,
    painted_scores: np.ndarray | None = None,
) -> go.Scatter3d:
    """The points as small markers coloured by ``color_by`` (``pgnn.viz.render.COLOR_BY``).

    "height" is metres above the camera (viridis, -2..1 m), "intensity" the reflectance (plasma, 0..0.6),
    "painted" the argmax PointPainting class (``PAINTED_CLASSES``, discrete colours).

    Shapes:
        points: (N, 3); intensity: (N,); painted_scores: (N, 4)
    """
    if color_by == "height":
        values = -np.asarray(points, dtype=np.float64)[:, 1]  # (N,)
        scale: dict[str, object] = {"colorscale": "Viridis", "cmin": -2.0, "cmax": 1.0}
        bar = "height above camera (m)"
    elif color_by == "intensity":
        if intensity is None:
            raise ValueError("color_by='intensity' needs the points' intensity")
        values = np.asarray(intensity, dtype=np.float64)
        scale, bar = {"colorscale": "Plasma", "cmin": 0.0, "cmax": 0.6}, "reflectance"
    elif color_by == "painted":
        if painted_scores is None:
            raise ValueError("color_by='painted' needs PointPainting scores (a painted frame)")
        values = np.argmax(painted_scores, axis=1).astype(np.float64)  # (N,)
        k = len(PAINTED_COLORS)
        colorscale = [[(i + j) / k, PAINTED_COLORS[i]] for i in range(k) for j in (0, 1)]  # flat bands
        scale = {"colorscale": colorscale, "cmin": -0.5, "cmax": k - 0.5}
        bar = "painted class"
    else:
        raise ValueError(f"color_by: expected one of {COLOR_BY}, got {color_by!r}")
    xyz = to_display(points)  # (N, 3)
    colorbar: dict[str, object] = {"title": {"text": bar}, "thickness": 14, "len": 0.6}
    if color_by == "painted":
        colorbar.update(tickvals=list(range(len(PAINTED_CLASSES))), ticktext=list(PAINTED_CLASSES))
    return go.Scatter3d(
        x=xyz[:, 0].astype(np.float32),
        y=xyz[:, 1].astype(np.float32),
        z=xyz[:, 2].astype(np.float32),
        mode="markers",
        name=f"points ({len(xyz):,}, by {color_by})",
        marker={"size": 1.6, "color": values.astype(np.float32), "colorbar": colorbar, **scale},
        hoverinfo="skip",
    )


def box_lines(boxes: np.ndarray) -> np.ndarray:
    """One polyline through every box's 12 edges and its heading tick (bottom centre to front face), the
    boxes separated by NaN rows (a gap in the line), in display coordinates.

    Shapes:
        boxes: (M, 7) -> (M * 20, 3): per box 16 path corners, centre, front, and 2 NaN rows
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    corners = boxes_to_corners(boxes)  # (M, 8, 3)
    gap = np.full((len(boxes), 1, 3), np.nan)
    centre = boxes[:, None, :3]  # (M, 1, 3) bottom centre
    front = corners[:, [0, 1], :].mean(
        axis=1, keepdims=True
    )  # (M, 1, 3) middle of the local +x face's bottom
    path = np.concatenate([corners[:, _BOX_PATH], gap, centre, front, gap], axis=1)  # (M, 20, 3)
    return to_display(path.reshape(-1, 3))


def _box_hover(name: str, box: np.ndarray, score: float | None, kind: str) -> str:
    x, y, z, l, h, w, ry = (float(v) for v in box)
    head = f"{name} {score:.3f}" if score is not None else name
    size = f"l {l:.2f} h {h:.2f} w {w:.2f} m"
    return f"<b>{head}</b> ({kind})<br>x {x:.2f} y {y:.2f} z {z:.2f} m<br>{size}<br>ry {ry:.2f}"


def _tint(color: str, amount: float) -> str:
    """``#rrggbb`` mixed with white by ``amount`` (0: itself, 1: white)."""
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def box_traces(boxes: Boxes, kind: str = "label") -> list[go.Scatter3d]:
    """Wireframes of ``boxes``, one trace per class: labels thin and paler, detections thick (WebGL draws no
    dashes). Hovering over a box's corners shows its class, score (detections), centre, size and yaw."""
    traces = []
    detection = kind == "detection"
    for name in sorted(set(boxes.names)):
        rows = [i for i, n in enumerate(boxes.names) if n == name]
        xyz = box_lines(boxes.boxes[rows])  # (20 M', 3)
        scores = [None if boxes.scores is None else float(boxes.scores[i]) for i in rows]
        hover = [_box_hover(name, boxes.boxes[i], s, kind) for i, s in zip(rows, scores, strict=True)]
        text = np.repeat(np.array(hover, dtype=object), 20)  # (20 M',)
        color = CLASS_COLORS.get(name, _OTHER)
        traces.append(
            go.Scatter3d(
                x=xyz[:, 0],
                y=xyz[:, 1],
                z=xyz[:, 2],
                mode="lines",
                name=f"{kind}: {name} ({len(rows)})",
                line={"color": color if detection else _tint(color, 0.5), "width": 7 if detection else 3},
                text=text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return traces


def score_labels_trace(boxes: Boxes) -> go.Scatter3d:
    """The detections' scores as text just above each box's top centre.

    Shapes:
        boxes.scores: (M,) required
    """
    if boxes.scores is None:
        raise ValueError("score labels need scores")
    top = boxes.boxes[:, :3].copy()  # (M, 3)
    top[:, 1] -= boxes.boxes[:, 4] + 0.3  # above the top face (y points down)
    xyz = to_display(top)
    return go.Scatter3d(
        x=xyz[:, 0],
        y=xyz[:, 1],
        z=xyz[:, 2],
        mode="text",
        text=[f"{n} {s:.2f}" for n, s in zip(boxes.names, boxes.scores, strict=True)],
        textfont={"color": _FOREGROUND, "size": 12},
        name="scores",
        hoverinfo="skip",
    )


def graph_traces(
    keypoints: np.ndarray,
    sources: np.ndarray,
    targets: np.ndarray,
    edges: np.ndarray,
    max_edges: int = MAX_EDGES,
    seed: int = 0,
) -> list[go.Scatter3d]:
    """The graph's keypoints as markers and up to ``max_edges`` of its edges (a fixed-seed sample) as lines.

    Shapes:
        keypoints: (K, 3); sources: (S, 3); targets: (T, 3); edges: (E, 2) [row in sources, row in targets]
    """
    edges = np.asarray(edges).reshape(-1, 2)
    drawn = edges[subsample(len(edges), max_edges, seed)]  # (E', 2)
    ends = np.stack(
        [np.asarray(sources, np.float64)[drawn[:, 0]], np.asarray(targets, np.float64)[drawn[:, 1]]], axis=1
    )  # (E', 2, 3)
    gap = np.full((len(drawn), 1, 3), np.nan)
    lines = to_display(np.concatenate([ends, gap], axis=1).reshape(-1, 3))  # (3 E', 3)
    kp = to_display(keypoints)
    shown = f"{len(drawn):,} of {len(edges):,}" if len(drawn) < len(edges) else f"{len(edges):,}"
    return [
        go.Scatter3d(
            x=lines[:, 0].astype(np.float32),
            y=lines[:, 1].astype(np.float32),
            z=lines[:, 2].astype(np.float32),
            mode="lines",
            name=f"graph edges ({shown})",
            line={"color": "rgba(120, 170, 255, 0.35)", "width": 1},
            hoverinfo="skip",
        ),
        go.Scatter3d(
            x=kp[:, 0].astype(np.float32),
            y=kp[:, 1].astype(np.float32),
            z=kp[:, 2].astype(np.float32),
            mode="markers",
            name=f"keypoints ({len(kp):,})",
            marker={"size": 1.8, "color": "#ffffff", "opacity": 0.6},
            hoverinfo="skip",
        ),
    ]


def cluster_trace(keypoints: np.ndarray, cluster: np.ndarray, names: Sequence[str]) -> go.Scatter3d:
    """The candidate keypoints of the box-merge clusters, one colour per cluster; hover names the detection
    a candidate merged into (cluster -1: a box that NMS kept but the truncation filter dropped).

    Shapes:
        keypoints: (K, 3) each candidate's keypoint; cluster: (K,) detection row or -1; names: M class names
    """
    cluster = np.asarray(cluster, dtype=np.int64)
    xyz = to_display(keypoints)
    palette = np.array([*_CLUSTER_COLORS, "#6c757d"])
    colors = palette[np.where(cluster >= 0, cluster % len(_CLUSTER_COLORS), len(_CLUSTER_COLORS))]
    text = [
        f"candidate of detection {c} ({names[c]})" if c >= 0 else "candidate of a dropped box"
        for c in cluster
    ]
    return go.Scatter3d(
        x=xyz[:, 0],
        y=xyz[:, 1],
        z=xyz[:, 2],
        mode="markers",
        name=f"merge clusters ({len(cluster):,} candidates)",
        marker={"size": 4, "color": colors.tolist(), "symbol": "diamond"},
        text=text,
        hovertemplate="%{text}<extra></extra>",
    )


def scene_figure(traces: Sequence[go.Scatter3d], title: str) -> go.Figure:
    """The traces in one 3D scene: true proportions, dark background, seen from behind the camera."""
    fig = go.Figure(data=list(traces))
    axis = {"backgroundcolor": _BACKGROUND, "gridcolor": "#2a3038", "color": _FOREGROUND, "showspikes": False}
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 14}},
        paper_bgcolor=_BACKGROUND,
        font={"color": _FOREGROUND},
        margin={"l": 0, "r": 0, "t": 40, "b": 0},
        legend={"x": 0.01, "y": 0.95, "bgcolor": "rgba(16, 19, 23, 0.7)"},
        scene={
            "aspectmode": "data",
            "xaxis": {**axis, "title": {"text": "x right (m)"}},
            "yaxis": {**axis, "title": {"text": "z forward (m)"}},
            "zaxis": {**axis, "title": {"text": "up (m)"}},
            "camera": {"eye": {"x": 0.0, "y": -2.0, "z": 1.25}, "center": {"x": 0.0, "y": -0.3, "z": -0.25}},
        },
    )
    return fig


def frame_html(fig: go.Figure, div_id: str) -> str:
    """The figure as one self-contained HTML page (plotly.js inside it), the same text for the same figure."""
    page = pio.to_html(
        fig,
        include_plotlyjs=True,
        full_html=True,
        div_id=div_id,
        default_height="100vh",
        config={"displaylogo": False, "responsive": True},
    )
    return page.replace("<body>", f'<body style="margin: 0; background: {_BACKGROUND}">', 1)


def write_frame_html(fig: go.Figure, path: str | Path, div_id: str = "pgnn-view") -> Path:
    """Write :func:`frame_html` to ``path`` atomically."""
    write_text_atomic(path, frame_html(fig, div_id))
    return Path(path)


def record_graph_traces(
    graph: Mapping[str, np.ndarray], max_edges: int = MAX_EDGES, seed: int = 0
) -> list[go.Scatter3d]:
    """:func:`graph_traces` of a graph record (``pgnn.graphs.build``): the keypoints ``vertex_coord_1`` and
    the last level's edges (the keypoint graph the GNN iterates over)."""
    last = max(int(k.rsplit("_", 1)[1]) for k in graph if k.startswith("edges_"))
    return graph_traces(
        graph["vertex_coord_1"],
        graph[f"vertex_coord_{last}"],
        graph[f"vertex_coord_{last + 1}"],
        graph[f"edges_{last}"],
        max_edges,
        seed,
    )


def frame_title(frame_id: str, shown: int, total: int, labels: Boxes | None, detections: Boxes | None) -> str:
    """``<id>: <shown> of <total> points; <n> labels; <m> detections``."""
    points = f"{shown:,} of {total:,} points" if shown < total else f"{total:,} points"
    parts = [f"{frame_id}: {points}"]
    if labels is not None:
        parts.append(f"{len(labels.names)} labelled boxes (thin)")
    if detections is not None:
        parts.append(f"{len(detections.names)} detections (thick, score)")
    return "; ".join(parts)


def view_figure(
    frame_id: str,
    points: np.ndarray,
    *,
    color_by: str = "height",
    intensity: np.ndarray | None = None,
    painted_scores: np.ndarray | None = None,
    labels: Boxes | None = None,
    detections: Boxes | None = None,
    graph: Mapping[str, np.ndarray] | None = None,
    clusters: tuple[np.ndarray, np.ndarray] | None = None,
    max_points: int = MAX_POINTS,
    max_edges: int = MAX_EDGES,
    seed: int = 0,
) -> go.Figure:
    """The whole page's figure: at most ``max_points`` points (a ``seed`` sample), the labels' and the
    detections' wireframes, the detections' scores, and optionally the graph (:func:`record_graph_traces`)
    and the merge clusters ``(candidate keypoints (K, 3), cluster (K,))`` (:func:`cluster_trace`).

    Shapes:
        points: (N, 3) rectified camera frame; intensity: (N,); painted_scores: (N, 4)
    """
    keep = subsample(len(points), max_points, seed)  # (N',)
    traces = [
        points_trace(
            np.asarray(points)[keep],
            color_by,
            None if intensity is None else np.asarray(intensity)[keep],
            None if painted_scores is None else np.asarray(painted_scores)[keep],
        )
    ]
    if graph is not None:
        traces += record_graph_traces(graph, max_edges, seed)
    if labels is not None:
        traces += box_traces(labels, "label")
    if detections is not None:
        traces += box_traces(detections, "detection")
        if detections.scores is not None and len(detections.names):
            traces.append(score_labels_trace(detections))
    if clusters is not None and detections is not None:
        traces.append(cluster_trace(clusters[0], clusters[1], detections.names))
    return scene_figure(traces, frame_title(frame_id, len(keep), len(points), labels, detections))
