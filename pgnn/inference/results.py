"""Inference over many frames (or cached graphs): detections -> KITTI result files, with per-stage timings.

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

All or nothing: :func:`predict_all_or_nothing` runs ``predict_frames`` or ``predict_records`` into a temporary
folder that replaces the output folder only when every frame succeeded (``pgnn predict`` and the pipeline's
``predict`` stage both go through it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from pgnn.config.graphs import GraphConfig
from pgnn.config.inference import PostprocessConfig
from pgnn.core.errors import DataError
from pgnn.core.outputs import replace_folder
from pgnn.core.progress import track, with_length
from pgnn.data.frames import Frame
from pgnn.data.kitti import read_image
from pgnn.data.labels import Label, label_from_box
from pgnn.inference.postprocess import Detections, kitti_result_lines, write_kitti_result
from pgnn.inference.predict import predict_frame, predict_graph
from pgnn.nn.card import InputFrame, ModelCard

if TYPE_CHECKING:
    import torch

    from pgnn.nn.model import PointGNN

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
# Outputs
# ----------------------------------------------------------------------------------------------------------


def detections_to_labels(detections: Detections) -> list[Label]:
    """The detections as KITTI result ``Label``s (truncated and occluded -1, alpha from the box, score)."""
    return [
        label_from_box(
            name,
            box,
            truncated=-1.0,
            occluded=-1,
            alpha=float(alpha),
            bbox=tuple(float(v) for v in box2d),
            score=float(score),
        )
        for name, box, box2d, alpha, score in zip(
            detections.names,
            detections.boxes,
            detections.boxes_2d,
            detections.alpha,
            detections.scores,
            strict=True,
        )
    ]


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
        IoU kernels on a fresh machine, CUDA start-up, torch's first allocations.
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


def predict_frames(
    model: PointGNN,
    card: ModelCard,
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
        prediction = predict_frame(model, card, frame, graph_cfg, post_cfg, device, rng)
        detections = prediction.detections
        _finish_frame(summary, out_dir, source.frame_id, detections, {**prediction.times, "read": t_read}, t0)
        if png:
            write_pictures(out_dir / "png", frame, detections, source.image_path)
        if on_frame is not None:
            on_frame(source.frame_id, detections, summary.timings[-1])
    return summary


def predict_records(
    model: PointGNN,
    card: ModelCard,
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
        prediction = predict_graph(
            model,
            card,
            record.graph,
            record.P2,
            record.image_size,
            post_cfg,
            device,
            graph_frame=record.graph_frame,
            source=f"graph of frame {record.frame_id}",
        )
        times = {**prediction.times, "read": t_read, "graph": 0.0}
        _finish_frame(summary, out_dir, record.frame_id, prediction.detections, times, t0)
        if on_frame is not None:
            on_frame(record.frame_id, prediction.detections, summary.timings[-1])
    return summary


# ----------------------------------------------------------------------------------------------------------
# All or nothing
# ----------------------------------------------------------------------------------------------------------


T = TypeVar("T")


def predict_all_or_nothing(
    out_dir: str | Path,
    frame_ids: Sequence[str],
    load: Callable[[int], T],
    predict: Callable[[Iterable[T], Path], PredictSummary],
    *,
    force: bool = False,
    inputs: Iterable[str | Path] = (),
) -> PredictSummary:
    """``predict(items, tmp)`` (``predict_frames`` or ``predict_records`` bound to their settings) into a
    temporary folder beside ``out_dir`` that replaces ``out_dir`` whole only when every frame succeeded.

    ``items`` yields ``load(i)`` for frame ``frame_ids[i]``, one at a time, so whatever fails (reading frame
    i's input inside ``load`` or later inside ``predict``) happens while frame i is the one in progress. On
    any exception ``out_dir`` keeps its previous content (or stays absent) and no temporary folder is left; a
    :class:`DataError` raised while a frame was in progress is re-raised naming that frame too::

        <file>: <what was wrong> (frame 000001 of 2; nothing written, <out_dir> left unchanged)

    ``out_dir`` must be absent, empty or an earlier ``pgnn predict`` folder (its ``.pgnn-output`` marker;
    ``force`` replaces any other folder) and apart from ``inputs`` (never replaced): see
    :func:`pgnn.core.outputs.replace_folder`, which also locks it against a second writer.

    Raises:
        DataError: ``out_dir`` holds something ``pgnn predict`` did not make, is one of ``inputs``
            (``pgnn.core.outputs.OutputError``), or a frame failed.
    """
    out = Path(out_dir)
    current: list[str] = []

    def items() -> Iterator[T]:  # remembering the frame in progress
        for i, frame_id in enumerate(frame_ids):
            current[:] = [frame_id]
            yield load(i)

    try:
        with replace_folder(out, "pgnn predict", force=force, inputs=inputs) as tmp:
            return predict(with_length(items(), len(frame_ids)), tmp)
    except DataError as e:
        if not current:
            raise
        where = f"frame {current[0]} of {len(frame_ids)}; nothing written, {out} left unchanged"
        raise DataError(e.path, f"{e.message} ({where})", e.line) from e
