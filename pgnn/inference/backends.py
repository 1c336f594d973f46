"""The network predict runs, from the file that holds it: a checkpoint, an ONNX model or a torch.export
program.

``load_network(path, device, threads)`` picks the backend by the file's suffix and returns one callable and
the checkpoint entries predict reads (``input_frame``, ``graph_preset``, ``encoding``, ``label_method``,
``input_features``, ``model_config``, ``step``)::

    other  a pgnn checkpoint (``.pt``): ``PointGNN`` in eager PyTorch (``pgnn.nn.checkpoint.load_model``)
    .onnx  ``pgnn export``'s ONNX model, run by ONNX Runtime on the CPU (metadata from ``metadata_props``)
    .pt2   ``pgnn export``'s ``torch.export`` program (metadata from its extra file ``pgnn.json``)

Each callable takes a ``GraphInput`` and returns ``(logits (N1, C), box_encodings (N1, C, L))`` as torch
tensors, like ``PointGNN.forward``, so ``pgnn.inference.predict`` runs them all the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pgnn.core.errors import DataError
from pgnn.nn.checkpoint import load_model
from pgnn.nn.export import INPUT_NAMES, PT2_EXTRA_FILE, metadata_from_strings, pad_edges
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


def _check_width(g: GraphInput, meta: dict[str, Any]) -> None:
    width = int(meta["model_config"]["input_dim"])
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
        self.meta = metadata_from_strings(strings, path)
        self.input_names = [i.name for i in self.session.get_inputs()]

    def __call__(self, g: GraphInput) -> tuple[Tensor, Tensor]:
        _check_width(g, self.meta)
        tensors = graph_tensors(g)
        feeds = {name: tensors[name].detach().cpu().numpy() for name in self.input_names}
        logits, boxes = self.session.run(None, feeds)  # (N1, C), (N1, C, L)
        return torch.from_numpy(np.asarray(logits)), torch.from_numpy(np.asarray(boxes))


class ProgramNetwork:
    """An exported ``.pt2`` program (``torch.export.load``) on ``device``."""

    def __init__(self, path: Path, device: torch.device | str = "cpu") -> None:
        extra = {PT2_EXTRA_FILE: ""}
        try:
            program = torch.export.load(str(path), extra_files=extra)
        except FileNotFoundError as e:
            raise DataError(path, "expected an exported program file, got no such file") from e
        except Exception as e:  # a foreign zip, a truncated file, another torch's serialisation ...
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise DataError(path, f"expected a torch.export program, got {type(e).__name__}: {first}") from e
        try:
            strings = json.loads(extra[PT2_EXTRA_FILE] or "{}")
        except json.JSONDecodeError as e:
            raise DataError(path, f"expected JSON in its extra file {PT2_EXTRA_FILE}, got {e}") from e
        self.meta = metadata_from_strings(strings, path)
        self.device = torch.device(device)
        self.module = program.module().to(self.device)

    def __call__(self, g: GraphInput) -> tuple[Tensor, Tensor]:
        _check_width(g, self.meta)
        tensors = graph_tensors(g.to(self.device))
        with torch.inference_mode():
            return self.module(*tensors.values())


def load_network(
    path: str | Path, device: torch.device | str = "cpu", threads: int | None = None
) -> tuple[Network, dict[str, Any]]:
    """The network in ``path`` (backend by suffix, see the module docstring) and its checkpoint entries.

    ``threads`` is ONNX Runtime's intra-op thread count (torch's threads are the caller's to set).
    """
    path = Path(path)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise DataError(path, "expected an ONNX model file, got no such file")
        network = OnnxNetwork(path, threads)
        return network, network.meta
    if path.suffix == ".pt2":
        program = ProgramNetwork(path, device)
        return program, program.meta
    return load_model(path, device)  # .pt, and any other name: a checkpoint or a one-line error
