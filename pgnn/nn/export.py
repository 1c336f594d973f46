"""Export a trained Point-GNN to ONNX (``.onnx``) or a ``torch.export`` program (``.pt2``), graph as input.

The graph builder stays outside (numba); the exported network takes one frame's graph as six tensors and
returns what ``PointGNN.forward`` returns::

    features (N0, F) f32, vertex_coord_0 (N0, 3) f32, vertex_coord_1 (N1, 3) f32,
    keypoint_indices_0 (N1,) i64, edges_0 (E0, 2) i64, edges_1 (E1, 2) i64
        -> logits (N1, C) f32, box_encodings (N1, C, L) f32

with N0, N1, E0 and E1 dynamic. ``ExportablePointGNN`` computes ``PointGNN``'s math (see ``pgnn.nn.model``)
with its parameters, but in plain traceable operators: no chunking of the edges (a Python loop over
data-dependent chunk boundaries), no custom autograd functions, no PyG ``propagate``. The max per destination
is ``index_reduce(..., "amax", include_self=False)`` on zeros (PyG's 0 for an empty set), which the ONNX
translation below writes as one ``ScatterND(reduction="max")`` on (E, 1) indices: ``scatter_reduce`` would
become ``ScatterElements`` with an expanded (E, H) int64 index (1.7 GB for T1's level-1 edges). The exporter
is torch's dynamo-based ``torch.onnx.export(dynamo=True)`` (ONNX opset 18, the first with max reductions).

The file carries what ``pgnn predict`` needs from the checkpoint (``EXPORT_KEYS``): in an ``.onnx`` as
``metadata_props`` (strings; ``model_config`` and ``step`` as JSON), in a ``.pt2`` as the extra file
``pgnn.json``. ``pgnn.inference.backends`` reads both back.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from pgnn.config.network import ModelConfig
from pgnn.core.errors import DataError
from pgnn.core.io import write_bytes_atomic
from pgnn.nn.checkpoint import load_model
from pgnn.nn.conv import PointGNNConv, PointSetPooling
from pgnn.nn.model import PointGNN

EXPORT_FORMAT = "pgnn-export/1"
INPUT_NAMES = (
    "features",
    "vertex_coord_0",
    "vertex_coord_1",
    "keypoint_indices_0",
    "edges_0",
    "edges_1",
)
OUTPUT_NAMES = ("logits", "box_encodings")
# The checkpoint entries predict reads (``pgnn.inference.settings``, ``pgnn.inference.predict``).
EXPORT_KEYS = ("model_config", "input_frame", "graph_preset", "encoding", "label_method", "input_features")
OPSET = 18
PT2_EXTRA_FILE = "pgnn.json"
SUFFIXES = (".onnx", ".pt2")


def max_per_destination(values: Tensor, index: Tensor, num_dst: int) -> Tensor:
    """``out[i] = max_{e: index[e] = i} values[e]``, 0 for an empty set (``segment_max``'s forward).

    Shapes:
        values: (E, H), index: (E,) int64 in [0, num_dst) -> (num_dst, H)
    """
    zeros = values.new_zeros((num_dst, values.shape[1]))  # (num_dst, H)
    return zeros.index_reduce(0, index, values, "amax", include_self=False)


def _pool(
    layer: PointSetPooling, features: Tensor, coord: Tensor, keypoints: Tensor, edges: Tensor
) -> Tensor:
    """``PointSetPooling.forward`` unchunked. Shapes: (N0, F), (N0, 3), (N1,), (E0, 2) -> (N1, D)"""
    src, dst = edges[:, 0], edges[:, 1]  # (E0,), (E0,)
    center = coord.index_select(0, keypoints)  # (N1, 3)
    rel = coord.index_select(0, src) - center.index_select(0, dst)  # (E0, 3)
    per_edge = torch.cat([features.index_select(0, src), rel], dim=1)  # (E0, F+3)
    messages = layer.point_mlp(per_edge, last_activation=not layer.max_first)  # (E0, P)
    pooled = max_per_destination(messages, dst, keypoints.shape[0])  # (N1, P)
    pooled = layer.post_act(pooled, False) if layer.max_first else pooled
    return layer.set_mlp(pooled)  # (N1, D)


def _iterate(conv: PointGNNConv, state: Tensor, coord: Tensor, edges: Tensor) -> Tensor:
    """``PointGNNConv.forward`` unchunked (its state only). Shapes: (N1, D), (N1, 3), (E1, 2) -> (N1, D)"""
    src, dst = edges[:, 0], edges[:, 1]  # (E1,), (E1,)
    offset = conv.offset_mlp(state) if conv.offset_mlp is not None else torch.zeros_like(coord)  # (N1, 3)
    first = conv.edge_mlp.layers[0]
    w_state, w_rel = first.weight[:, : conv.state_dim], first.weight[:, conv.state_dim :]  # (H, D), (H, 3)
    state_proj = nn.functional.linear(state, w_state, first.bias)  # (N1, H) per vertex
    rel = coord.index_select(0, src) - (coord + offset).index_select(0, dst)  # (E1, 3)
    pre = state_proj.index_select(0, src) + rel @ w_rel.t()  # (E1, H)
    messages = conv.edge_mlp.forward_from_first(pre, last_activation=not conv.max_first)  # (E1, H_last)
    aggregated = max_per_destination(messages, dst, state.shape[0])  # (N1, H_last)
    aggregated = conv.post_act(aggregated, False) if conv.max_first else aggregated
    return state + conv.update_mlp(aggregated)


class ExportablePointGNN(nn.Module):
    """``PointGNN``'s forward on six plain tensors (``INPUT_NAMES``), in traceable operators.

    Shapes:
        features (N0, F), vertex_coord_0 (N0, 3), vertex_coord_1 (N1, 3), keypoint_indices_0 (N1,),
        edges_0 (E0, 2), edges_1 (E1, 2) -> logits (N1, C), box_encodings (N1, C, L)
    """

    def __init__(self, model: PointGNN) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        features: Tensor,
        vertex_coord_0: Tensor,
        vertex_coord_1: Tensor,
        keypoint_indices_0: Tensor,
        edges_0: Tensor,
        edges_1: Tensor,
    ) -> tuple[Tensor, Tensor]:
        m = self.model
        state = _pool(m.pool, features, vertex_coord_0, keypoint_indices_0, edges_0)  # (N1, D)
        for conv in m.gnn:
            state = _iterate(conv, state, vertex_coord_1, edges_1)  # (N1, D)
        return m.head(state)  # (N1, C), (N1, C, L)


def example_inputs(input_dim: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """A small random graph to trace with: sizes all different and > 1, so that no axis is specialised.

    Shapes: the six inputs of ``ExportablePointGNN`` with N0 = 40, N1 = 7, E0 = 53, E1 = 31.
    """
    n0, n1, e0, e1 = 40, 7, 53, 31
    return (
        torch.rand((n0, input_dim), generator=generator),
        torch.rand((n0, 3), generator=generator),
        torch.rand((n1, 3), generator=generator),
        torch.randint(0, n0, (n1,), generator=generator),
        torch.stack([torch.randint(0, n0, (e0,), generator=generator), torch.arange(e0) % n1], dim=1),
        torch.stack([torch.randint(0, n1, (e1,), generator=generator), torch.arange(e1) % n1], dim=1),
    )


def _dynamic_shapes() -> dict[str, Any]:
    from torch.export import Dim

    n0, n1, e0, e1 = Dim("num_points"), Dim("num_keypoints"), Dim("num_edges_0"), Dim("num_edges_1")
    return {
        "features": {0: n0},
        "vertex_coord_0": {0: n0},
        "vertex_coord_1": {0: n1},
        "keypoint_indices_0": {0: n1},
        "edges_0": {0: e0},
        "edges_1": {0: e1},
    }


def export_metadata(ckpt: Mapping[str, Any]) -> dict[str, str]:
    """The checkpoint entries predict needs, as strings (``model_config`` and ``step`` JSON)."""
    meta = {"format": EXPORT_FORMAT, "step": json.dumps(int(ckpt.get("step", 0)))}
    for key in EXPORT_KEYS:
        value = ckpt[key]
        meta[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return meta


def metadata_from_strings(strings: Mapping[str, str], source: str | Path) -> dict[str, Any]:
    """``export_metadata``'s strings read back as checkpoint entries; ``DataError`` when any is missing."""
    if strings.get("format") != EXPORT_FORMAT:
        raise DataError(
            source, f"expected pgnn export metadata {EXPORT_FORMAT!r}, got {strings.get('format')!r}"
        )
    missing = [key for key in (*EXPORT_KEYS, "step") if key not in strings]
    if missing:
        raise DataError(source, f"expected the metadata entries {', '.join(missing)}, got none")
    meta: dict[str, Any] = {key: strings[key] for key in EXPORT_KEYS}
    try:
        meta["model_config"] = ModelConfig.model_validate_json(strings["model_config"]).model_dump(
            mode="json"
        )
        meta["step"] = int(json.loads(strings["step"]))
    except ValueError as e:  # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
        raise DataError(source, f"expected a valid model_config and step in the metadata, got {e}") from e
    return meta


def export_program(model: PointGNN) -> torch.export.ExportedProgram:
    """``model`` as a ``torch.export`` program with dynamic point, keypoint and edge counts."""
    wrapper = ExportablePointGNN(model.eval()).eval()
    inputs = example_inputs(model.cfg.input_dim, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.export.export(wrapper, inputs, dynamic_shapes=_dynamic_shapes(), strict=False)


def _index_reduce_onnx(self, dim: int, index, source, reduce: str, include_self: bool = True):  # noqa: ANN001, ANN202
    """ONNX for ``aten::index_reduce`` with ``"amax"`` on dim 0: ``ScatterND(reduction="max")``.

    Rows never indexed keep ``self`` (``include_self=False``: they start at the lowest float, which any
    real value exceeds, and are put back from ``self`` afterwards); indexed rows get the max of their
    sources (and of ``self`` with ``include_self``).
    """
    from onnxscript import opset18 as op

    if reduce != "amax" or dim != 0:
        raise NotImplementedError(f"index_reduce({reduce!r}, dim={dim}) has no ONNX translation here")
    lowest = np.array([np.finfo(np.float32).min], dtype=np.float32)
    indices = op.Unsqueeze(index, op.Constant(value_ints=[-1]))  # (E, 1)
    if include_self:
        return op.ScatterND(self, indices, source, reduction="max")
    base = op.Expand(op.Constant(value_floats=lowest.tolist()), op.Shape(self))  # (N, H)
    out = op.ScatterND(base, indices, source, reduction="max")
    return op.Where(op.Equal(out, base), self, out)


def export_onnx_bytes(model: PointGNN, metadata: Mapping[str, str]) -> bytes:
    """``model`` as a serialised ONNX model (opset 18, weights inside) with ``metadata`` as metadata_props."""
    program = export_program(model)
    onnx_program = torch.onnx.export(
        program,
        input_names=list(INPUT_NAMES),
        output_names=list(OUTPUT_NAMES),
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
        custom_translation_table={torch.ops.aten.index_reduce.default: _index_reduce_onnx},
    )
    proto = onnx_program.model_proto
    del proto.metadata_props[:]
    for key, value in sorted(metadata.items()):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    return proto.SerializeToString()


def export_pt2_bytes(model: PointGNN, metadata: Mapping[str, str]) -> bytes:
    """``model`` as a ``torch.export.save`` archive with ``metadata`` in the extra file ``pgnn.json``."""
    buf = io.BytesIO()
    extra = {PT2_EXTRA_FILE: json.dumps(dict(metadata), sort_keys=True)}
    torch.export.save(export_program(model), buf, extra_files=extra)
    return buf.getvalue()


def export_checkpoint(ckpt_path: str | Path, out: str | Path) -> None:
    """Export the checkpoint ``ckpt_path`` to ``out`` (``.onnx`` or ``.pt2``, by suffix), atomically."""
    out = Path(out)
    if out.suffix not in SUFFIXES:
        raise DataError(
            out, f"expected an output ending in {' or '.join(SUFFIXES)}, got {out.suffix or 'none'!r}"
        )
    model, ckpt = load_model(ckpt_path, "cpu")
    metadata = export_metadata(ckpt)
    data = export_onnx_bytes(model, metadata) if out.suffix == ".onnx" else export_pt2_bytes(model, metadata)
    write_bytes_atomic(out, data)
