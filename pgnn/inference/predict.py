"""Inference: frames (or cached graphs) -> detections -> KITTI result files, with per-stage timings.

One frame goes through five stages, each timed on its own (wall clock; CUDA is synchronised first):

======  ===============================================================================================
read    the frame's files: scan, calib, image, labels, and the field-of-view crop (``predict_frames``), or
        the next cached graph record (``predict_records``)
graph   the points in the model's input frame, the runtime graph (``pgnn.graphs.build``), the input features
gnn     tensors to the device, the forward pass, softmax, results back to numpy
decode  every class head's box decoded around its keypoint, then moved to the label frame
nms     candidates, NMS with box merging and scoring, the truncation filter and the occlusion rescoring
        (``pgnn.inference.postprocess.postprocess_frame``; the paper's "merge+score")
======  ===============================================================================================

``total`` is the whole frame, read included (and writing the result file; not the optional pictures).

Frames. pgnn's data are in KITTI's rectified camera-0 frame, the frame of the labels. A checkpoint records
the frame its weights expect the points in (``input_frame``):

* ``"rect"`` (pgnn's own models): points go in as they are.
* ``"cam2"`` (the authors' released weights): the original Point-GNN fed its network points in camera 2's
  rectified frame, ``x_cam2 = x_rect + K^-1 . P2[:, 3]`` with ``K = P2[:, :3]`` (about +6 cm in x; see
  ``pgnn.data.kitti.rect_to_cam2_offset``). The points are shifted into that frame before the graph and the
  network, and the decoded boxes (and their keypoints) are shifted back by the same offset right after
  decoding, before NMS. A translation changes neither IoUs, medians nor the occlusion ratios, so NMS is the
  same in either frame.

The result files are therefore always in KITTI's label frame, as the KITTI evaluation expects. The original
``run.py`` wrote its cam2 boxes without converting them back, so its files sit ~6 cm off in x. The 2D boxes
and truncation come from projecting the label-frame boxes with P2, which is the original's projection with
``[K | 0]`` in the cam2 frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig
from pgnn.config.inference import NMS_OVERLAP, PostprocessConfig, class_fold
from pgnn.core.errors import DataError
from pgnn.core.progress import track
from pgnn.data.kitti import (
    Frame,
    Label,
    frame_paths,
    load_frame,
    read_image,
    rect_to_cam2_offset,
)
from pgnn.graphs.records import graph_with_features
from pgnn.inference.postprocess import Detections, kitti_result_lines, postprocess_frame, write_kitti_result

if TYPE_CHECKING:
    import torch

    from pgnn.nn.model import PointGNN

InputFrame = Literal["rect", "cam2"]
STAGES: tuple[str, ...] = ("read", "graph", "gnn", "decode", "nms")
TIMING_KEYS: tuple[str, ...] = (*STAGES, "total")

# The paper's runtime breakdown (Shi & Rajkumar 2020, Sec. 5: 643 ms a frame on a GTX 1070; its "merge+score"
# is our nms stage, and it reports no separate decode time).
PAPER_MS: Mapping[str, float | None] = {
    "read": 70.0,
    "graph": 121.0,
    "gnn": 363.0,
    "decode": None,
    "nms": 84.0,
    "total": 643.0,
}

# ----------------------------------------------------------------------------------------------------------
# Settings derived from a checkpoint
# ----------------------------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"`` (an error when there is none)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DataError("--device", f"expected a CUDA device, got {name!r} but torch sees no GPU")
    return torch.device(name)


def input_frame_of(meta: Mapping[str, Any]) -> InputFrame:
    """The checkpoint's ``input_frame`` ("rect" or "cam2"); DataError for anything else."""
    frame = meta.get("input_frame")
    if frame not in ("rect", "cam2"):
        raise DataError("<checkpoint>", f"expected input_frame 'rect' or 'cam2', got {frame!r}")
    return frame


def frame_offset(frame: InputFrame, P2: np.ndarray) -> np.ndarray:
    """Translation from the label (rect) frame into ``frame``: 0 for "rect", ``K^-1 . P2[:, 3]`` for "cam2".

    Shapes:
        P2: (3, 4) -> (3,) float64
    """
    return rect_to_cam2_offset(P2) if frame == "cam2" else np.zeros(3)


def runtime_graph_config(meta: Mapping[str, Any], name: str | None = None) -> GraphConfig:
    """The inference graph of a checkpoint: ``GRAPH_PRESETS[name or meta["graph_preset"]]``.

    For a training preset (``"car"``) its runtime counterpart (``"car_runtime"``: 'center' keypoints, no
    neighbour cap), as the original's ``runtime_graph_gen_kwargs``.
    """
    name = name or str(meta.get("graph_preset", ""))
    if f"{name}_runtime" in GRAPH_PRESETS:
        name = f"{name}_runtime"
    if name not in GRAPH_PRESETS:
        raise DataError("<checkpoint>", f"expected a graph preset in {sorted(GRAPH_PRESETS)}, got {name!r}")
    return GRAPH_PRESETS[name]


def postprocess_config(meta: Mapping[str, Any], **overrides: Any) -> PostprocessConfig:
    """Post-processing for a checkpoint's label method, with the original's defaults.

    Class names from ``pgnn.graphs.targets.method_class_names`` (each object class's vertical-yaw id folds
    into its
    first id), candidates need a probability > 1 / num_classes (run.py's rule), and the NMS overlap threshold
    is the imported config's ``nms_overlapped_thres`` or the original's value for the label method.
    ``overrides`` replace any ``PostprocessConfig`` field (``score_threshold=...``).
    """
    from pgnn.graphs.targets import method_class_names

    method = str(meta.get("label_method", ""))
    try:
        names = method_class_names(method)
    except ValueError as e:
        raise DataError("<checkpoint>", f"expected a known label_method, got {method!r}") from e
    fold = class_fold(names)
    original = meta.get("original_config") or {}
    overlap = float(original.get("nms_overlapped_thres", NMS_OVERLAP.get(method, 0.01)))
    settings: dict[str, Any] = {
        "class_names": names,
        "class_fold": fold,
        "score_threshold": 1.0 / len(names),
        "overlap_threshold": overlap,
    }
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return PostprocessConfig(**settings)


# ----------------------------------------------------------------------------------------------------------
# One frame
# ----------------------------------------------------------------------------------------------------------


def _sync(device: torch.device | str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def shift_graph(graph: Mapping[str, np.ndarray], delta: np.ndarray) -> dict[str, np.ndarray]:
    """A copy of ``graph`` with every ``vertex_coord_i`` translated by ``delta`` (float64 sum, float32 out).

    Shapes:
        vertex_coord_i: (N_i, 3); delta: (3,)
    """
    out = dict(graph)
    for key in graph:
        if key.startswith("vertex_coord_"):
            out[key] = (np.asarray(graph[key], dtype=np.float64) + delta).astype(np.float32)  # (N_i, 3)
    return out


def run_network(
    model: PointGNN, graph: Mapping[str, np.ndarray], device: torch.device | str, source: str = "<graph>"
) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities and box encodings of every keypoint (row of ``vertex_coord_1``).

    ``graph`` holds the reference-named arrays and ``features`` (or ``input_features``), in the model's
    input frame.

    Shapes:
        return: probs (N1, C) float32, box_encodings (N1, C, L) float32
    """
    import torch

    from pgnn.nn.graph_input import graph_input_from_arrays

    g = graph_input_from_arrays(graph, device, source=source)
    with torch.inference_mode():
        logits, boxes = model(g)  # (N1, C), (N1, C, L)
        probs = torch.softmax(logits, dim=1)  # (N1, C)
    return probs.float().cpu().numpy(), boxes.float().cpu().numpy()


def decode_boxes(
    box_encodings: np.ndarray,
    keypoints: np.ndarray,
    class_names: Sequence[str],
    encoding: str,
    offset: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode every class head's box around its keypoint, then translate boxes and keypoints by ``-offset``.

    ``keypoints`` and the decoded boxes are in the model's input frame; ``offset`` is that frame minus the
    label frame (``frame_offset``), so the results are in the label frame.

    Shapes:
        box_encodings: (N, C, 7); keypoints: (N, 3); offset: (3,)
        return: boxes (N, C, 7) float64, keypoints (N, 3) float64
    """
    from pgnn.graphs.encoding import decode_all_classes

    keypoints64 = np.asarray(keypoints, dtype=np.float64)  # (N, 3)
    try:
        boxes = decode_all_classes(box_encodings, keypoints64, class_names, encoding).astype(np.float64)
    except ValueError as e:
        raise DataError("<checkpoint>", f"expected a decodable box encoding: {e}") from e
    boxes[..., :3] -= offset  # (N, C, 7)
    return boxes, keypoints64 - offset


def predict_graph_timed(
    model: PointGNN,
    meta: Mapping[str, Any],
    graph_record: Mapping[str, np.ndarray],
    P2: np.ndarray,
    image_size: tuple[int, int],
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    *,
    graph_frame: InputFrame = "rect",
    source: str = "<graph>",
) -> tuple[Detections, dict[str, float]]:
    """``predict_graph`` and its stage timings in seconds: ``gnn``, ``decode``, ``nms``."""
    model_frame = input_frame_of(meta)
    t0 = time.perf_counter()
    if graph_frame != model_frame:  # e.g. a cached rect-frame graph fed to cam2 weights
        delta = frame_offset(model_frame, P2) - frame_offset(graph_frame, P2)  # (3,)
        graph_record = shift_graph(graph_record, delta)
    probs, encodings = run_network(model, graph_record, device, source)  # (N1, C), (N1, C, L)
    _sync(device)
    t1 = time.perf_counter()
    boxes, keypoints = decode_boxes(  # (N1, C, 7), (N1, 3) label frame
        encodings,
        np.asarray(graph_record["vertex_coord_1"]),
        post_cfg.class_names,
        str(meta.get("encoding", "classaware_all_class_box_encoding")),
        frame_offset(model_frame, P2),
    )
    t2 = time.perf_counter()
    detections = postprocess_frame(probs, boxes, keypoints, P2, image_size, post_cfg)
    t3 = time.perf_counter()
    return detections, {"gnn": t1 - t0, "decode": t2 - t1, "nms": t3 - t2}


def predict_graph(
    model: PointGNN,
    meta: Mapping[str, Any],
    graph_record: Mapping[str, np.ndarray],
    P2: np.ndarray,
    image_size: tuple[int, int],
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    *,
    graph_frame: InputFrame = "rect",
    source: str = "<graph>",
) -> Detections:
    """Detections of one frame from its ready graph, in KITTI's label frame.

    ``graph_record`` holds ``features`` (or ``input_features``), ``vertex_coord_i``, ``keypoint_indices_i``
    and ``edges_i`` (see ``pgnn.graphs.build``) in the frame ``graph_frame``; when that is not the
    checkpoint's
    ``input_frame`` its coordinates are translated first (a translation leaves the graph's edges valid). The
    decoded boxes are moved to the label frame before NMS; 2D boxes and truncation use ``P2`` (the label
    frame's projection into image_2) and ``image_size`` (width, height).

    Shapes:
        P2: (3, 4)
    """
    detections, _ = predict_graph_timed(
        model, meta, graph_record, P2, image_size, post_cfg, device, graph_frame=graph_frame, source=source
    )
    return detections


def frame_graph(
    frame: Frame, meta: Mapping[str, Any], graph_cfg: GraphConfig, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """The graph record of ``frame`` in the checkpoint's input frame, with its input features.

    Shapes:
        return: ``features`` (N0, F) float32 and the arrays of ``pgnn.graphs.build.build_graph``
    """
    offset = frame_offset(input_frame_of(meta), frame.calib.P2)  # (3,)
    points = (frame.points_rect.astype(np.float64) + offset).astype(np.float32)  # (N0, 3) model frame
    features = str(meta.get("input_features", "i"))
    source = f"frame {frame.frame_id}"
    graph = graph_with_features(
        points, frame.intensity, frame.rgb, frame.scores, graph_cfg, features, rng, source
    )
    return graph


def predict_frame(
    model: PointGNN,
    ckpt_meta: Mapping[str, Any],
    frame: Frame,
    graph_cfg: GraphConfig,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    rng: np.random.Generator,
) -> tuple[Detections, dict[str, float]]:
    """Detections of one loaded frame (label frame; see the module docstring) and its stage timings in
    seconds: ``graph``, ``gnn``, ``decode``, ``nms``.

    The graph is built from the frame's points moved into the checkpoint's ``input_frame``.
    """
    t0 = time.perf_counter()
    model_frame = input_frame_of(ckpt_meta)
    graph = frame_graph(frame, ckpt_meta, graph_cfg, rng)
    t1 = time.perf_counter()
    detections, times = predict_graph_timed(
        model,
        ckpt_meta,
        graph,
        frame.calib.P2,
        frame.image_size,
        post_cfg,
        device,
        graph_frame=model_frame,
        source=f"frame {frame.frame_id}",
    )
    return detections, {"graph": t1 - t0, **times}


# ----------------------------------------------------------------------------------------------------------
# Outputs
# ----------------------------------------------------------------------------------------------------------


def detections_to_labels(detections: Detections) -> list[Label]:
    """The detections as KITTI result ``Label``s (truncated and occluded -1, alpha from the box, score)."""
    out = []
    for name, box, box2d, alpha, score in zip(
        detections.names,
        detections.boxes,
        detections.boxes_2d,
        detections.alpha,
        detections.scores,
        strict=True,
    ):
        x, y, z, l, h, w, ry = (float(v) for v in box)
        out.append(
            Label(
                type=name,
                truncated=-1.0,
                occluded=-1,
                alpha=float(alpha),
                bbox=tuple(float(v) for v in box2d),
                h=h,
                w=w,
                l=l,
                x=x,
                y=y,
                z=z,
                ry=ry,
                score=float(score),
            )
        )
    return out


def write_detections(path: str | Path, detections: Detections) -> None:
    """One frame's KITTI result file (an empty file when there are no detections), atomically."""
    lines = kitti_result_lines(detections.names, detections.boxes, detections.boxes_2d, detections.scores)
    write_kitti_result(path, lines)


def write_pictures(png_dir: Path, frame: Frame, detections: Detections, image_path: Path | None) -> None:
    """``NNNNNN_bev.png`` (points, labels, detections from above) and, when the image exists,
    ``NNNNNN_image.png`` (image_2 with the labels' and detections' 3D boxes)."""
    from pgnn.viz.render import write_bev_png, write_image_png

    dets = detections_to_labels(detections)
    write_bev_png(frame, png_dir / f"{frame.frame_id}_bev.png", detections=dets)
    if image_path is not None and image_path.is_file():
        title = f"KITTI {frame.frame_id}: {len(dets)} detections (solid), labels dashed"
        write_image_png(
            read_image(image_path),
            frame.calib.P2,
            png_dir / f"{frame.frame_id}_image.png",
            labels=frame.labels,
            detections=dets,
            title=title,
        )


# ----------------------------------------------------------------------------------------------------------
# Many frames
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameSource:
    """How to load one frame: ``load()`` returns it; ``image_path`` (optional) is drawn on with ``png``."""

    frame_id: str
    load: Callable[[], Frame]
    image_path: Path | None = None


@dataclass(frozen=True)
class GraphFrame:
    """One frame's cached graph with what post-processing needs.

    Shapes:
        graph: reference-named arrays (see ``predict_graph``); P2: (3, 4); image_size: (width, height)
    """

    frame_id: str
    graph: Mapping[str, np.ndarray]
    P2: np.ndarray
    image_size: tuple[int, int]
    graph_frame: InputFrame = "rect"


@dataclass
class PredictSummary:
    """What a run over frames did: per-frame detection counts and stage timings (seconds)."""

    frame_ids: list[str] = field(default_factory=list)
    num_detections: list[int] = field(default_factory=list)
    timings: list[dict[str, float]] = field(default_factory=list)

    def add(self, frame_id: str, detections: int, timings: Mapping[str, float]) -> None:
        self.frame_ids.append(frame_id)
        self.num_detections.append(detections)
        self.timings.append({k: float(timings.get(k, 0.0)) for k in TIMING_KEYS})

    @property
    def num_frames(self) -> int:
        return len(self.frame_ids)

    def mean_ms(self, skip_first: bool = False) -> dict[str, float]:
        """Mean milliseconds a frame of each stage and of the whole frame (``total``); NaN with no frames.

        ``skip_first`` leaves out the first frame, which pays one-off costs: numba compiling the graph and
        IoU kernels on a fresh machine (~10 s), CUDA start-up, torch's first allocations.
        """
        timings = self.timings[1:] if skip_first else self.timings
        if not timings:
            return {k: float("nan") for k in TIMING_KEYS}
        return {k: 1000.0 * float(np.mean([t[k] for t in timings])) for k in TIMING_KEYS}

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "frames": self.num_frames,
            "detections": int(sum(self.num_detections)),
            "mean_ms": self.mean_ms(),
            "mean_ms_after_first": self.mean_ms(skip_first=True) if self.num_frames > 1 else None,
            "per_frame": [
                {"frame_id": f, "detections": n, **{k: 1000.0 * v for k, v in t.items()}}
                for f, n, t in zip(self.frame_ids, self.num_detections, self.timings, strict=True)
            ],
        }

    def table(self, device: str = "") -> str:
        """Mean ms a frame per stage (all frames, and without the first, warm-up one) beside the paper's."""
        n = self.num_frames
        columns = [(f"all {n} frame{'s' if n != 1 else ''}", self.mean_ms())]
        if n > 1:
            columns.append((f"frames 2-{n}", self.mean_ms(skip_first=True)))
        title = "mean ms/frame" + (f" on {device}" if device else "")
        header = f"{'stage':<8}" + "".join(f"{name:>16}" for name, _ in columns) + f"{'paper (GTX 1070)':>20}"
        lines = [title, header]
        for k in TIMING_KEYS:
            paper = PAPER_MS.get(k)
            row = f"{k:<8}" + "".join(f"{mean[k]:>16.1f}" for _, mean in columns)
            lines.append(row + f"{'-' if paper is None else f'{paper:.0f}':>20}")
        return "\n".join(lines)


def _finish_frame(
    summary: PredictSummary,
    out_dir: Path,
    frame_id: str,
    detections: Detections,
    times: dict[str, float],
    t_start: float,
) -> None:
    write_detections(out_dir / f"{frame_id}.txt", detections)
    times["total"] = time.perf_counter() - t_start
    summary.add(frame_id, len(detections), times)


def run_frames(
    model: PointGNN,
    meta: Mapping[str, Any],
    sources: Iterable[FrameSource],
    out_dir: str | Path,
    *,
    graph_cfg: GraphConfig,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    rng: np.random.Generator,
    png: bool = False,
    on_frame: Callable[[str, Detections, dict[str, float]], None] | None = None,
) -> PredictSummary:
    """Load, predict and write ``out_dir/<frame_id>.txt`` for every source; pictures in ``out_dir/png``.

    ``on_frame(frame_id, detections, timings)`` is called after each frame (progress, tests).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = PredictSummary()
    for source in track(sources, "predict", "frame"):
        t0 = time.perf_counter()
        frame = source.load()
        t_read = time.perf_counter() - t0
        detections, times = predict_frame(model, meta, frame, graph_cfg, post_cfg, device, rng)
        times["read"] = t_read
        _finish_frame(summary, out_dir, source.frame_id, detections, times, t0)
        if png:
            write_pictures(out_dir / "png", frame, detections, source.image_path)
        if on_frame is not None:
            on_frame(source.frame_id, detections, summary.timings[-1])
    return summary


def predict_frames(
    model: PointGNN,
    meta: Mapping[str, Any],
    root: str | Path,
    frame_ids: Sequence[str],
    out_dir: str | Path,
    *,
    graph_cfg: GraphConfig,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    rng: np.random.Generator,
    painted: bool = False,
    subset: str = "training",
    png: bool = False,
    on_frame: Callable[[str, Detections, dict[str, float]], None] | None = None,
) -> PredictSummary:
    """Predict the frames ``frame_ids`` of a KITTI root (``root/subset``): see ``run_frames``."""
    sources = (
        FrameSource(
            fid,
            partial(load_frame, root, fid, painted, subset),
            image_path=frame_paths(root, fid, subset).image,
        )
        for fid in frame_ids
    )
    return run_frames(
        model,
        meta,
        sources,
        out_dir,
        graph_cfg=graph_cfg,
        post_cfg=post_cfg,
        device=device,
        rng=rng,
        png=png,
        on_frame=on_frame,
    )


def predict_records(
    model: PointGNN,
    meta: Mapping[str, Any],
    records: Iterable[GraphFrame],
    out_dir: str | Path,
    *,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    on_frame: Callable[[str, Detections, dict[str, float]], None] | None = None,
) -> PredictSummary:
    """Predict cached graphs (e.g. the pipeline's runtime graph split) and write ``out_dir/<frame_id>.txt``.

    ``read`` times fetching each record from ``records``; ``graph`` is 0 (the graphs are ready).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = PredictSummary()
    iterator = iter(track(records, "predict", "frame"))
    while True:
        t0 = time.perf_counter()
        try:
            record = next(iterator)
        except StopIteration:
            break
        t_read = time.perf_counter() - t0
        detections, times = predict_graph_timed(
            model,
            meta,
            record.graph,
            record.P2,
            record.image_size,
            post_cfg,
            device,
            graph_frame=record.graph_frame,
            source=f"graph of frame {record.frame_id}",
        )
        times.update(read=t_read, graph=0.0)
        _finish_frame(summary, out_dir, record.frame_id, detections, times, t0)
        if on_frame is not None:
            on_frame(record.frame_id, detections, summary.timings[-1])
    return summary
