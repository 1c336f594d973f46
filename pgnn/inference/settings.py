"""Run-time settings: the device, the CPU threads, and the offset of a model's input frame.

A model card's ``input_frame`` ("rect" or "cam2", :class:`pgnn.nn.card.ModelCard`) is the frame its weights
expect the points in; see ``pgnn.inference.predict`` for how a frame's points and boxes move between it and
the label frame. The runtime graph and the post-processing are the card's too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from pgnn.config.graphs import GraphConfig
from pgnn.core.errors import DataError
from pgnn.data.frames import rect_to_cam2_offset
from pgnn.nn.card import InputFrame, ModelCard, runtime_graph_of

if TYPE_CHECKING:
    import torch


def resolve_device(name: str) -> torch.device:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"`` (an error when there is none)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DataError("--device", f"expected a CUDA device, got {name!r} but torch sees no GPU")
    return torch.device(name)


def set_threads(threads: int | None) -> None:
    """``--threads``: the CPU threads of the network's matrix products (None: one per core this process may
    run on), torch's other kernels on one thread, as in training (:func:`pgnn.nn.gemm.cpu_threads`).

    The detections are the same bytes on any count (:mod:`pgnn.nn.gemm`), and a product's blocks never wait
    for a descheduled thread: on a busy machine the default costs no more than one thread
    (benchmarks/README.md, "Inference threads").
    """
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if threads < 1:
        raise DataError("--threads", f"expected a positive number of threads, got {threads}")
    import torch

    from pgnn.nn.gemm import set_product_threads

    torch.set_num_threads(1)
    set_product_threads(threads)


def frame_offset(frame: InputFrame, P2: np.ndarray) -> np.ndarray:
    """Translation from the label (rect) frame into ``frame``: 0 for "rect", ``K^-1 . P2[:, 3]`` for "cam2".

    Shapes:
        P2: (3, 4) -> (3,) float64
    """
    return rect_to_cam2_offset(P2) if frame == "cam2" else np.zeros(3)


def runtime_graph(card: ModelCard, name: str | None = None) -> GraphConfig:
    """The graph a model runs on: its card's, or ``--graph-preset``'s (:func:`pgnn.nn.card.runtime_graph_of`:
    a training preset's runtime counterpart)."""
    if name is None:
        return card.runtime_graph
    try:
        return runtime_graph_of(name)
    except ValueError as e:
        raise DataError("--graph-preset", str(e)) from e
