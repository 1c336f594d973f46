"""The model predict runs, from the file that holds it: :func:`load_detector`, the one loader of every path
(the predict stage, ``pgnn predict``, ``pgnn detect``, ``pgnn view``, ``pgnn export``, the explain view, the
benchmarks).

``load_detector(path, device, threads)`` picks the backend by the file's suffix and returns a
:class:`Detector`: one callable network, the model's card (:class:`pgnn.nn.card.ModelCard`: input frame,
runtime graph, encoding, label method, features, post-processing) and its step::

    other  a pgnn checkpoint (``.pt``): ``PointGNN`` in eager PyTorch (``pgnn.nn.checkpoint.load_model``)
    .onnx  ``pgnn export``'s ONNX model, run by ONNX Runtime on the CPU (card from ``metadata_props``)
    .pt2   refused: ``torch.export.load`` can run code from the file (torch 2.13 unpickles parts of the
           archive without ``weights_only`` and evaluates the shape expressions of its graph with sympy)
    .npz   refused: the authors' released weights are converted by ``pgnn import-weights`` first

No model file runs code: a checkpoint is read with ``weights_only=True``, an ONNX model is data to ONNX
Runtime (its metadata is JSON, validated). Each callable takes a ``GraphInput`` and returns
``(logits (N1, C), box_encodings (N1, C, L))`` as torch tensors, like ``PointGNN.forward``, so
``pgnn.inference.predict`` runs them all the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pgnn.core.errors import DataError
from pgnn.nn.card import ModelCard, card_of
from pgnn.nn.checkpoint import load_model
from pgnn.nn.export import INPUT_NAMES, metadata_from_strings, pad_edges
from pgnn.nn.graph_input import GraphInput

Network = Callable[[GraphInput], tuple[Tensor, Tensor]]


def graph_tensors(g: GraphInput) -> dict[str, Tensor]:
    """The six named inputs of an exported network (``pgnn.nn.export.INPUT_NAMES``) of one frame's graph,
    the edges padded (``pad_edges``)."""
    if g.num_levels < 2 or not g.edges:
        raise ValueError(f"an exported network needs a graph of 2 levels at least, got {g.num_levels}")
    n1 = g.vertex_coord[1].shape[0]
    edges_1 = g.edges[1] if len(g.edges) > 1 else g.edges[0].new_zeros((0, 2))
    edges = (pad_edges(g.edges[0], n1), pad_edges(edges_1, n1))
    values = (g.features, g.vertex_coord[0], g.vertex_coord[1], g.keypoint_indices[0], *edges)
    return dict(zip(INPUT_NAMES, values, strict=True))


def _check_width(g: GraphInput, card: ModelCard) -> None:
    width = card.network.input_dim
    if g.features.shape[1] != width:
        raise ValueError(f"expected {width} input features per point, got {g.features.shape[1]}")


class OnnxNetwork:
    """An exported ``.onnx`` network in an ONNX Runtime session on the CPU.

    ``threads`` sets the session's intra-op threads (ONNX Runtime's default: one per core). Its threads do
    not spin while waiting: on a shared machine spinning threads take the cores the others need.
    """

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail / InvalidProtobuf / ... types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(path, f"expected an ONNX model ONNX Runtime can load, got {first}") from e
        strings = self.session.get_modelmeta().custom_metadata_map
        self.card, self.step = metadata_from_strings(strings, path)
        self.input_names = [i.name for i in self.session.get_inputs()]

    def __call__(self, g: GraphInput) -> tuple[Tensor, Tensor]:
        _check_width(g, self.card)
        tensors = graph_tensors(g)
        feeds = {name: tensors[name].detach().cpu().numpy() for name in self.input_names}
        logits, boxes = self.session.run(None, feeds)  # (N1, C), (N1, C, L)
        return torch.from_numpy(np.asarray(logits)), torch.from_numpy(np.asarray(boxes))


class ProgramNetwork:
    """A ``torch.export`` program of ``card``'s model on ``device``: one this process made
    (``pgnn.nn.export.export_program``), never one read from a file (see the module docstring)."""

    def __init__(
        self, program: torch.export.ExportedProgram, card: ModelCard, device: torch.device | str = "cpu"
    ):
        self.card = card
        self.device = torch.device(device)
        self.module = program.module().to(self.device)

    def __call__(self, g: GraphInput) -> tuple[Tensor, Tensor]:
        _check_width(g, self.card)
        tensors = graph_tensors(g.to(self.device))
        with torch.inference_mode():
            return self.module(*tensors.values())


@dataclass(frozen=True)
class Detector:
    """A loaded model: its network (``GraphInput`` -> logits, box encodings), its card and step."""

    network: Network
    card: ModelCard
    step: int


def load_detector(
    path: str | Path, device: torch.device | str = "cpu", threads: int | None = None
) -> Detector:
    """The model in ``path`` (backend by suffix, see the module docstring); ``DataError`` naming the file
    for anything else.

    ``threads`` is ONNX Runtime's intra-op thread count (torch's threads are the caller's to set).
    """
    path = Path(path)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise DataError(path, "expected an ONNX model file, got no such file")
        network = OnnxNetwork(path, threads)
        return Detector(network, network.card, network.step)
    if path.suffix == ".pt2":
        raise DataError(
            path,
            "expected a .pt checkpoint or an .onnx model: pgnn does not load .pt2 programs "
            "(torch.export.load can run code from the file); use the .pt, or export it to .onnx",
        )
    if path.suffix == ".npz":
        raise DataError(
            path,
            "expected a pgnn model (.pt, .onnx), got an npz: convert released weights with "
            "`pgnn import-weights FILE.npz model.pt` first",
        )
    model, ckpt = load_model(path, device)  # .pt, and any other name: a checkpoint or a one-line error
    return Detector(model, card_of(ckpt, path), int(ckpt["step"]))
