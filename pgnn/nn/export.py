"""Export a trained Point-GNN to ONNX (``.onnx``) or a ``torch.export`` program (``.pt2``), graph as input.

The graph builder stays outside (numba); the exported network takes one frame's graph as six tensors and
returns what ``PointGNN.forward`` returns::

    features (N0, F) f32, vertex_coord_0 (N0, 3) f32, vertex_coord_1 (N1, 3) f32,
    keypoint_indices_0 (N1,) i64, edges_0 (K0 * 8192, 2) i64, edges_1 (K1 * 8192, 2) i64
        -> logits (N1, C) f32, box_encodings (N1, C, L) f32

with N0, N1, K0 and K1 dynamic; the edges are padded to whole chunks (``pad_edges``; the backends in
``pgnn.inference.backends`` do it). ``ExportablePointGNN`` computes ``PointGNN``'s math (see
``pgnn.nn.model``) with its parameters in traceable operators: no custom autograd functions, no PyG
``propagate``, and the edges in chunks of ``EDGE_CHUNK`` by a ``while_loop`` (ONNX ``Loop``) instead of
``pgnn.nn.conv``'s Python loop over data-dependent chunk boundaries, so that no (E, H) tensor exists (T1's
level-1 edges unchunked: 0.8 GB a tensor, over 5 GB of memory for the three backends of one test process).
The running max per destination is ``index_reduce(..., "amax")``, which the ONNX translation below writes
as one ``ScatterND(reduction="max")`` on (C, 1) indices (``scatter_reduce`` would become ``ScatterElements``
with an expanded (C, H) int64 index). The exporter is torch's dynamo-based ``torch.onnx.export(dynamo=True)``
(ONNX opset 18, the first with max reductions). (``scan`` instead of ``while_loop`` exported to a program but
not to ONNX: torch 2.13's type-promotion pass failed on the second scan.)

The file carries the checkpoint's model card (:class:`pgnn.nn.card.ModelCard`) and step: in an ``.onnx`` as
``metadata_props`` (``card``: the card as JSON, ``step``), in a ``.pt2`` as the extra file ``pgnn.json``
(the same strings). ``pgnn.inference.backends`` reads the ``.onnx`` back; it does not load ``.pt2`` files
(``torch.export.load`` can run code from one): a ``.pt2`` is for torch deployments that trust the file.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch._higher_order_ops.while_loop import while_loop

from pgnn.core.errors import DataError
from pgnn.core.io import write_bytes_atomic
from pgnn.nn.card import ModelCard, card_from_json, card_of
from pgnn.nn.conv import DEFAULT_EDGES_PER_CHUNK, PointGNNConv, PointSetPooling
from pgnn.nn.model import PointGNN

EXPORT_FORMAT = "pgnn-export/2"
INPUT_NAMES = (
    "features",
    "vertex_coord_0",
    "vertex_coord_1",
    "keypoint_indices_0",
    "edges_0",
    "edges_1",
)
OUTPUT_NAMES = ("logits", "box_encodings")
OPSET = 18
PT2_EXTRA_FILE = "pgnn.json"
SUFFIXES = (".onnx", ".pt2")
# Edges per chunk (see ``max_over_chunks``): small chunks keep the (C, H) activations in cache, as in
# ``pgnn.nn.conv`` (its CPU default).
EDGE_CHUNK = DEFAULT_EDGES_PER_CHUNK["cpu"]
_LOWEST = float(torch.finfo(torch.float32).min)


def pad_edges(edges: Tensor, num_dst: int) -> Tensor:
    """``edges`` with rows ``(0, num_dst)`` appended up to the next multiple of ``EDGE_CHUNK`` (one row at
    least, and two chunks at least: the programs are traced with 2 and 3): the exported networks' edge
    inputs. The padding rows aim at a dummy destination, dropped inside.

    Shapes:
        edges: (E, 2) int64 -> (K * EDGE_CHUNK, 2), K = max(E // EDGE_CHUNK + 1, 2)
    """
    pad = max(edges.shape[0] // EDGE_CHUNK + 1, 2) * EDGE_CHUNK - edges.shape[0]
    padding = torch.stack([edges.new_zeros(pad), edges.new_full((pad,), num_dst)], dim=1)  # (pad, 2)
    return torch.cat([edges, padding])


def max_over_chunks(
    messages_of: Callable[[Tensor, Tensor], Tensor], edges: Tensor, num_dst: int, width: int, like: Tensor
) -> Tensor:
    """``out[i] = max_{(j, i) in edges} messages_of(j, i)``, 0 for an empty set, one chunk of edges at a time.

    ``edges`` are ``pad_edges``'s: destination ``num_dst`` is the padding's, whose row is dropped. A
    ``while_loop`` (ONNX ``Loop``) carries the running max (it starts at the lowest float, which a real
    message exceeds) and each chunk of ``EDGE_CHUNK`` edges updates it with one ``index_reduce``
    (``ScatterND``, reduction max): only (EDGE_CHUNK, H) tensors exist. A max is exact, so the chunking
    changes no value.

    Shapes:
        C = EDGE_CHUNK; messages_of: (src (C,), dst (C,)) -> (C, width); edges: (K * C, 2) -> (num_dst, width)
    """
    chunks = edges.reshape(edges.shape[0] // EDGE_CHUNK, EDGE_CHUNK, 2)  # (K, C, 2)
    init = like.new_full((num_dst + 1, width), _LOWEST)  # (num_dst + 1, width)
    num_chunks = edges.new_full((1,), 1) * chunks.shape[0]  # (1,) K as a tensor

    def cond(k: Tensor, carry: Tensor) -> Tensor:
        return (k < num_chunks).squeeze(0)

    def body(k: Tensor, carry: Tensor) -> tuple[Tensor, Tensor]:
        chunk = chunks.index_select(0, k).squeeze(0)  # (C, 2)
        src, dst = chunk[:, 0], chunk[:, 1]  # (C,), (C,)
        return k + 1, carry.index_reduce(0, dst, messages_of(src, dst), "amax", include_self=True)

    _, out = while_loop(cond, body, (edges.new_zeros((1,)), init))
    out = out[:num_dst]  # (num_dst, width)
    return torch.where(out == _LOWEST, 0.0, out)


def _pool(
    layer: PointSetPooling, features: Tensor, coord: Tensor, keypoints: Tensor, edges: Tensor
) -> Tensor:
    """``PointSetPooling.forward``. Shapes: (N0, F), (N0, 3), (N1,), (K0 * C, 2) padded -> (N1, D)"""
    center = coord.index_select(0, keypoints)  # (N1, 3)
    center = torch.cat([center, center.new_zeros((1, 3))])  # (N1 + 1, 3): the padding's destination

    def messages_of(src: Tensor, dst: Tensor) -> Tensor:
        rel = coord.index_select(0, src) - center.index_select(0, dst)  # (C, 3)
        per_edge = torch.cat([features.index_select(0, src), rel], dim=1)  # (C, F+3)
        return layer.point_mlp(per_edge, last_activation=not layer.max_first)  # (C, P)

    pooled = max_over_chunks(messages_of, edges, keypoints.shape[0], layer.point_mlp.out_dim, coord)
    pooled = layer.post_act(pooled, False) if layer.max_first else pooled  # (N1, P)
    return layer.set_mlp(pooled)  # (N1, D)


def _iterate(conv: PointGNNConv, state: Tensor, coord: Tensor, edges: Tensor) -> Tensor:
    """``PointGNNConv.forward``'s state. Shapes: (N1, D), (N1, 3), (K1 * C, 2) padded -> (N1, D)"""
    offset = conv.offset_mlp(state) if conv.offset_mlp is not None else torch.zeros_like(coord)  # (N1, 3)
    center = torch.cat([coord + offset, coord.new_zeros((1, 3))])  # (N1 + 1, 3): the padding's destination
    first = conv.edge_mlp.layers[0]
    w_state, w_rel = first.weight[:, : conv.state_dim], first.weight[:, conv.state_dim :]  # (H, D), (H, 3)
    state_proj = nn.functional.linear(state, w_state, first.bias)  # (N1, H) per vertex
    w_rel_t = w_rel.t().contiguous()  # (3, H)

    def messages_of(src: Tensor, dst: Tensor) -> Tensor:
        rel = coord.index_select(0, src) - center.index_select(0, dst)  # (C, 3)
        pre = torch.addmm(state_proj.index_select(0, src), rel, w_rel_t)  # (C, H), as relative_edge_layer
        return conv.edge_mlp.forward_from_first(pre, last_activation=not conv.max_first)  # (C, H_last)

    aggregated = max_over_chunks(messages_of, edges, state.shape[0], conv.edge_mlp.out_dim, state)
    aggregated = conv.post_act(aggregated, False) if conv.max_first else aggregated  # (N1, H_last)
    return state + conv.update_mlp(aggregated)


class ExportablePointGNN(nn.Module):
    """``PointGNN``'s forward on six plain tensors (``INPUT_NAMES``), in traceable operators.

    Shapes:
        features (N0, F), vertex_coord_0 (N0, 3), vertex_coord_1 (N1, 3), keypoint_indices_0 (N1,),
        edges_0 (K0 * EDGE_CHUNK, 2), edges_1 (K1 * EDGE_CHUNK, 2) (``pad_edges``)
        -> logits (N1, C), box_encodings (N1, C, L)
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
    """A small random graph to trace with: sizes all different and > 1 (edges: 2 and 3 chunks), so that no
    axis is specialised.

    Shapes: the six inputs of ``ExportablePointGNN`` with N0 = 40, N1 = 7 and 3 and 2 chunks of edges.
    """
    n0, n1, e0, e1 = 40, 7, 2 * EDGE_CHUNK + 53, EDGE_CHUNK + 31
    edges_0 = torch.stack([torch.randint(0, n0, (e0,), generator=generator), torch.arange(e0) % n1], dim=1)
    edges_1 = torch.stack([torch.randint(0, n1, (e1,), generator=generator), torch.arange(e1) % n1], dim=1)
    return (
        torch.rand((n0, input_dim), generator=generator),
        torch.rand((n0, 3), generator=generator),
        torch.rand((n1, 3), generator=generator),
        torch.randint(0, n0, (n1,), generator=generator),
        pad_edges(edges_0, n1),
        pad_edges(edges_1, n1),
    )


def _dynamic_shapes() -> dict[str, Any]:
    from torch.export import Dim

    n0, n1 = Dim("num_points"), Dim("num_keypoints")
    e0, e1 = EDGE_CHUNK * Dim("edge_chunks_0"), EDGE_CHUNK * Dim("edge_chunks_1")
    return {
        "features": {0: n0},
        "vertex_coord_0": {0: n0},
        "vertex_coord_1": {0: n1},
        "keypoint_indices_0": {0: n1},
        "edges_0": {0: e0},
        "edges_1": {0: e1},
    }


def export_metadata(card: ModelCard, step: int) -> dict[str, str]:
    """The model's card and step as strings (the card and the step as JSON)."""
    return {"format": EXPORT_FORMAT, "card": card.to_json(), "step": json.dumps(int(step))}


def metadata_from_strings(strings: Mapping[str, str], source: str | Path) -> tuple[ModelCard, int]:
    """``export_metadata``'s strings read back: the card and the step; ``DataError`` naming ``source``.

    A file of ``pgnn export`` before the card (``pgnn-export/1``: one entry per checkpoint string) gets the
    card of its entries (:func:`pgnn.nn.card.card_of`).
    """
    fmt = strings.get("format")
    if fmt not in (EXPORT_FORMAT, _EXPORT_FORMAT_1):
        raise DataError(source, f"expected pgnn export metadata {EXPORT_FORMAT!r}, got {fmt!r}")
    keys = ("card", "step") if fmt == EXPORT_FORMAT else (*_EXPORT_KEYS_1, "step")
    missing = [key for key in keys if key not in strings]
    if missing:
        raise DataError(source, f"expected the metadata entries {', '.join(missing)}, got none")
    try:
        step = json.loads(strings["step"])
    except json.JSONDecodeError as e:
        raise DataError(source, f"expected the step as JSON in the metadata, got {e.msg}") from e
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise DataError(source, f"expected a non-negative int step in the metadata, got {step!r}")
    if fmt == EXPORT_FORMAT:
        return card_from_json(strings["card"], source), step
    entries: dict[str, Any] = {key: strings[key] for key in _EXPORT_KEYS_1}
    try:
        entries["model_config"] = json.loads(strings["model_config"])
    except json.JSONDecodeError as e:
        raise DataError(source, f"expected model_config as JSON in the metadata, got {e.msg}") from e
    return card_of(entries, source), step


_EXPORT_FORMAT_1 = "pgnn-export/1"
_EXPORT_KEYS_1 = ("model_config", "input_frame", "graph_preset", "encoding", "label_method", "input_features")


def export_program(model: PointGNN) -> torch.export.ExportedProgram:
    """``model`` as a ``torch.export`` program with dynamic point, keypoint and edge counts."""
    wrapper = ExportablePointGNN(model.eval()).eval()
    inputs = example_inputs(model.cfg.input_dim, torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.export.export(wrapper, inputs, dynamic_shapes=_dynamic_shapes(), strict=False)


def _index_reduce_onnx(self, dim: int, index, source, reduce: str, include_self: bool = True):  # noqa: ANN001, ANN202
    """ONNX for ``aten::index_reduce(self, 0, index, source, "amax", include_self=True)``: one
    ``ScatterND(reduction="max")`` of the rows of ``source`` into ``self`` (the only form used here)."""
    from onnxscript import opset18 as op

    if reduce != "amax" or dim != 0 or not include_self:
        raise NotImplementedError(f"index_reduce({reduce!r}, dim={dim}) has no ONNX translation here")
    indices = op.Unsqueeze(index, op.Constant(value_ints=[-1]))  # (C, 1)
    return op.ScatterND(self, indices, source, reduction="max")


def export_onnx_bytes(model: PointGNN, metadata: Mapping[str, str]) -> bytes:
    """``model`` as a serialised ONNX model (opset 18, weights inside) with ``metadata`` as metadata_props."""
    program = export_program(model)
    # the exporter logs a warning for each torchvision operator it cannot register (torchvision is not
    # installed, and not needed) and torch's pytree a FutureWarning: neither concerns the user
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            onnx_program = torch.onnx.export(
                program,
                input_names=list(INPUT_NAMES),
                output_names=list(OUTPUT_NAMES),
                opset_version=OPSET,
                verbose=False,
                dynamo=True,
                external_data=False,
                custom_translation_table={torch.ops.aten.index_reduce.default: _index_reduce_onnx},
            )
    finally:
        registration.setLevel(level)
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


def check_export_suffix(out: str | Path) -> None:
    """``DataError`` unless ``out`` ends in ``.onnx`` or ``.pt2``."""
    out = Path(out)
    if out.suffix not in SUFFIXES:
        raise DataError(
            out, f"expected an output ending in {' or '.join(SUFFIXES)}, got {out.suffix or 'none'!r}"
        )


def export_model_file(model: PointGNN, card: ModelCard, step: int, out: str | Path) -> None:
    """Export ``model`` (its ``card`` and ``step`` as metadata) to ``out`` (``.onnx`` or ``.pt2``, by suffix),
    atomically."""
    out = Path(out)
    check_export_suffix(out)
    metadata = export_metadata(card, step)
    data = export_onnx_bytes(model, metadata) if out.suffix == ".onnx" else export_pt2_bytes(model, metadata)
    write_bytes_atomic(out, data)
