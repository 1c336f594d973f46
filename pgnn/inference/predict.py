"""One sample -> detections: the graph, the network, box decoding and NMS, each stage timed.

A *sample* is one scan with its calibration and image, a :class:`pgnn.data.frames.Frame` (the parameter
``frame``); everywhere else in this module a *frame* is a coordinate frame. The stages and their timings over
many samples (``read``, ``total``): ``pgnn.inference.results``.

Coordinate frames. pgnn's data are in KITTI's rectified camera-0 frame, the *label frame*. A model's card
(:class:`pgnn.nn.card.ModelCard`) records the frame its weights expect the points in, its *input frame*
(``input_frame``):

* ``"rect"`` (pgnn's own models): the label frame itself; points go in as they are.
* ``"cam2"`` (the authors' released weights): the original Point-GNN fed its network points in camera 2's
  rectified frame, ``x_cam2 = x_rect + K^-1 . P2[:, 3]`` with ``K = P2[:, :3]`` (about +6 cm in x; see
  ``pgnn.data.frames.rect_to_cam2_offset``). The points are shifted into that frame before the graph and the
  network, and the decoded boxes (and the graph with its keypoints) are shifted back to the label frame by
  the same offset right after decoding, before NMS. A translation changes neither IoUs, medians nor the
  occlusion ratios, so NMS is the same in either frame.

The result files are therefore always in the label frame, as the KITTI evaluation expects. The original
Point-GNN's ``run.py`` wrote its cam2 boxes without converting them back, so its files sit ~6 cm off in x. The
2D boxes and truncation come from projecting the label-frame boxes with P2, which is the original's
projection with ``[K | 0]`` in the cam2 frame.

What a prediction came from (:class:`Prediction`): the graph the network ran on and, for every candidate (a
keypoint and class whose probability passed the threshold), the detection its box merged into, as NMS's own
walk assigned it (``pgnn.inference.postprocess``); ``pgnn view`` draws them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pgnn.config.graphs import GraphConfig
from pgnn.config.inference import PostprocessConfig
from pgnn.core.errors import DataError
from pgnn.data.frames import Frame
from pgnn.graphs.records import graph_with_features
from pgnn.inference.postprocess import Candidates, Detections, postprocess_frame
from pgnn.inference.settings import frame_offset
from pgnn.nn.card import InputFrame, ModelCard

if TYPE_CHECKING:
    import torch

    from pgnn.nn.model import PointGNN


@dataclass(frozen=True)
class Prediction:
    """A sample's detections with what they came from, all in the label frame, and the stage timings.

    Shapes:
        graph: the graph record the network ran on (``pgnn.graphs.build.build_graph``'s arrays and
        ``features``), ``vertex_coord_i`` moved to the label frame, float64
        candidates: K boxes (``pgnn.inference.postprocess.select_candidates``)
        cluster: (K,) int64, the detection row each candidate merged into, -1 for a box NMS kept that the
        truncation filter then dropped
        times: seconds per stage: ``gnn``, ``decode``, ``nms`` (and ``graph`` from ``predict_frame``)
    """

    detections: Detections
    graph: Mapping[str, np.ndarray]
    candidates: Candidates
    cluster: np.ndarray
    times: dict[str, float]

    @property
    def candidate_keypoints(self) -> np.ndarray:
        """The keypoint each candidate's box was decoded around. Shapes: (K, 3) float64, label frame."""
        return self.graph["vertex_coord_1"][self.candidates.point_index]


def _sync(device: torch.device | str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def shift_graph(
    graph: Mapping[str, np.ndarray], delta: np.ndarray, dtype: type[np.floating] = np.float32
) -> dict[str, np.ndarray]:
    """A copy of ``graph`` with every ``vertex_coord_i`` translated by ``delta`` (a float64 sum cast to
    ``dtype``); the other arrays are shared.

    Shapes:
        vertex_coord_i: (N_i, 3); delta: (3,)
    """
    out = dict(graph)
    for key in graph:
        if key.startswith("vertex_coord_"):
            out[key] = (np.asarray(graph[key], dtype=np.float64) + delta).astype(dtype)  # (N_i, 3)
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
) -> np.ndarray:
    """Decode every class head's box around its keypoint, then translate the boxes by ``-offset``.

    ``keypoints`` and the decoded boxes are in the model's input frame; ``offset`` is that frame minus the
    label frame (``frame_offset``), so the boxes returned are in the label frame.

    Shapes:
        box_encodings: (N, C, 7); keypoints: (N, 3); offset: (3,)
        return: (N, C, 7) float64
    """
    from pgnn.graphs.encoding import decode_all_classes

    keypoints64 = np.asarray(keypoints, dtype=np.float64)  # (N, 3)
    try:
        boxes = decode_all_classes(box_encodings, keypoints64, class_names, encoding).astype(np.float64)
    except ValueError as e:
        raise DataError("<checkpoint>", f"expected a decodable box encoding: {e}") from e
    boxes[..., :3] -= offset  # (N, C, 7)
    return boxes


def predict_graph(
    model: PointGNN,
    card: ModelCard,
    graph_record: Mapping[str, np.ndarray],
    P2: np.ndarray,
    image_size: tuple[int, int],
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    *,
    graph_frame: InputFrame = "rect",
    source: str = "<graph>",
) -> Prediction:
    """A sample's detections from its ready graph, in the label frame, with the ``gnn``, ``decode`` and
    ``nms`` timings.

    ``graph_record`` holds ``features`` (or ``input_features``), ``vertex_coord_i``, ``keypoint_indices_i``
    and ``edges_i`` (see ``pgnn.graphs.build``) in the coordinate frame ``graph_frame``; when that is not the
    card's ``input_frame`` its coordinates are translated first (a translation leaves the graph's edges
    valid). The decoded boxes and the graph are moved to the label frame before NMS; 2D boxes and truncation
    use ``P2`` (the label frame's projection into image_2) and ``image_size`` (width, height).

    Shapes:
        P2: (3, 4)
    """
    offset = frame_offset(card.input_frame, P2)  # (3,) the input frame minus the label frame
    t0 = time.perf_counter()
    if graph_frame != card.input_frame:  # e.g. a cached rect-frame graph fed to cam2 weights
        graph_record = shift_graph(graph_record, offset - frame_offset(graph_frame, P2))
    probs, encodings = run_network(model, graph_record, device, source)  # (N1, C), (N1, C, L)
    _sync(device)
    t1 = time.perf_counter()
    keypoints = graph_record["vertex_coord_1"]  # (N1, 3) input frame
    boxes = decode_boxes(encodings, keypoints, post_cfg.class_names, card.encoding, offset)  # (N1, C, 7)
    graph = shift_graph(graph_record, -offset, np.float64)  # label frame
    t2 = time.perf_counter()
    detections, candidates, cluster = postprocess_frame(
        probs, boxes, graph["vertex_coord_1"], P2, image_size, post_cfg
    )
    t3 = time.perf_counter()
    times = {"gnn": t1 - t0, "decode": t2 - t1, "nms": t3 - t2}
    return Prediction(detections, graph, candidates, cluster, times)


def frame_graph(
    frame: Frame, card: ModelCard, graph_cfg: GraphConfig, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """The graph record of the sample ``frame``, in the card's input frame, with its input features.

    Shapes:
        return: ``features`` (N0, F) float32 and the arrays of ``pgnn.graphs.build.build_graph``
    """
    offset = frame_offset(card.input_frame, frame.calib.P2)  # (3,)
    points = (frame.points_rect.astype(np.float64) + offset).astype(np.float32)  # (N0, 3) input frame
    return graph_with_features(
        points,
        frame.intensity,
        frame.rgb,
        frame.scores,
        graph_cfg,
        card.input_features,
        rng,
        f"frame {frame.frame_id}",
    )


def predict_frame(
    model: PointGNN,
    card: ModelCard,
    frame: Frame,
    graph_cfg: GraphConfig,
    post_cfg: PostprocessConfig,
    device: torch.device | str,
    rng: np.random.Generator,
) -> Prediction:
    """``predict_graph`` of a loaded sample (``frame``): its graph is built from the sample's points moved
    into the card's input frame, and its ``times`` start with ``graph``."""
    t0 = time.perf_counter()
    graph = frame_graph(frame, card, graph_cfg, rng)
    t1 = time.perf_counter()
    prediction = predict_graph(
        model,
        card,
        graph,
        frame.calib.P2,
        frame.image_size,
        post_cfg,
        device,
        graph_frame=card.input_frame,
        source=f"frame {frame.frame_id}",
    )
    return replace(prediction, times={"graph": t1 - t0, **prediction.times})
