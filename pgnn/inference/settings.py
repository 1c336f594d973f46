"""Settings derived from a checkpoint: its input frame, runtime graph and post-processing; the device.

A checkpoint's ``input_frame`` ("rect" or "cam2") is the frame its weights expect the points in; see
``pgnn.inference.predict`` for how a frame's points and boxes move between it and the label frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig
from pgnn.config.inference import NMS_OVERLAP, PostprocessConfig, class_fold
from pgnn.core.errors import DataError
from pgnn.data.frames import rect_to_cam2_offset

if TYPE_CHECKING:
    import torch

InputFrame = Literal["rect", "cam2"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"`` (an error when there is none)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DataError("--device", f"expected a CUDA device, got {name!r} but torch sees no GPU")
    return torch.device(name)


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads (None: torch's default)."""
    if threads is None:
        return
    if threads < 1:
        raise DataError("--threads", f"expected a positive number of threads, got {threads}")
    import torch

    torch.set_num_threads(threads)


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
