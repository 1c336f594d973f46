"""The Point-GNN operators (PyG ``MessagePassing``, max aggregation) and the class-aware heads.

With ``MLP`` a stack of fully connected layers (ReLU after each, or linear last where said):

* ``PointSetPooling`` (layer1), for keypoint i with its set of points j (edges ``(j, i)``):
  ``s_i = MLP_set( max_j MLP_point([f_j, x_j - x_kp(i)]) )``.
* ``PointGNNConv`` (one iteration t), on edges ``(j, i)`` (self loops included):
  ``Δx_i = MLP_offset(s_i)`` (linear last; zero when ``auto_offset`` is off),
  ``e_ij = MLP_edge([s_j, x_j - (x_i + Δx_i)])``, ``s_i <- s_i + MLP_update(max_j e_ij)`` (linear last).
* ``ClassAwarePredictor``: ``logits = MLP_cls(s)`` (linear last), ``boxes[:, k] = MLP_loc_k(s)`` (linear
  last), one box head per class.

Implementation choices that keep the math but save time and memory:

* The first layer of the edge MLP is linear in ``[s_j, dx]``: ``W [s_j, dx] + b = (W_s s_j + b) + W_x dx``.
  ``W_s s_j + b`` is computed once per *vertex* (N1 x D x H) and gathered, instead of once per edge
  (E1 x D x H, with E1 ~ 150-200 x N1 at runtime). That halves the edge MLP's work for the car models.
  Point-set pooling does not use the trick: its first layer sees only F + 3 inputs, and gathering its H-wide
  output would cost more memory traffic than the tiny matmul saves.
* Edges are processed in chunks of whole destination sets (``max_edges_per_chunk``), so inference on a
  runtime graph (~1M edges, 300 channels) never holds an (E, 300) tensor larger than a chunk. Each chunk
  aggregates complete sets, so the result is the unchunked one (up to float rounding in the matmuls). With
  ``checkpoint_chunks=True`` each chunk is recomputed in the backward pass instead of storing its
  (E_chunk, H) activations (training on big graphs).
* For ReLU (and ReLU6) the per-edge MLP's last activation runs after the max, per destination:
  ``max_j relu(x_j) = relu(max_j x_j)``, with the same gradient, and without ReLU's ties at 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import MessagePassing

from pgnn.config.network import GNNLayerConfig, Widths
from pgnn.nn import gemm
from pgnn.nn.layers import ACTIVATIONS, MLP, LinearInit
from pgnn.nn.segment import EdgeChunk, destination_chunks, relative_edge_layer, segment_max

# Default chunk size, in edges, by device. On CPU, small chunks keep the (E_chunk, H) activations in cache and
# the allocator reusing its buffers: a few thousand edges a chunk ran the T1 forward and a ``small`` training
# step fastest on one thread, faster than 128k-edge chunks. Many small chunks mean many OpenMP regions,
# though, and with several threads and OpenMP's default busy-wait on a loaded machine they were several times
# slower: use one thread per process (or OMP_WAIT_POLICY=PASSIVE). On GPUs, large chunks keep kernels big.
# (Measured: benchmarks/README.md, "Measurements behind the code".)
DEFAULT_EDGES_PER_CHUNK: Mapping[str, int] = MappingProxyType({"cpu": 8192, "other": 1 << 18})

# Activations that commute with max (non-decreasing, also in floats) and whose derivative is 0 wherever they
# map different inputs to one value: for these, max_j act(x_j) = act(max_j x_j) with the same TF gradient, so
# the max is taken over the last layer's pre-activations and the activation runs per destination, not per
# edge. (For strictly increasing ones like tanh, float saturation can merge values, which would change ties.)
MAX_COMMUTES = frozenset({"relu", "relu6"})


class _ChunkedMaxConv(MessagePassing):
    """A max-aggregating ``MessagePassing`` that runs ``propagate`` over chunks of whole destination sets.

    ``activation`` is the last activation of the message MLP; in ``MAX_COMMUTES`` it is applied after the max
    (the messages are then pre-activations).
    """

    def __init__(self, activation: str, max_edges_per_chunk: int | None, checkpoint_chunks: bool) -> None:
        super().__init__(aggr="max", flow="source_to_target")
        self.max_first = activation in MAX_COMMUTES
        self.post_act = ACTIVATIONS[activation]
        self.max_edges_per_chunk = max_edges_per_chunk
        self.checkpoint_chunks = checkpoint_chunks

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        """Keep ``MessagePassing.propagate`` as it is. PyG would render a TorchScript-ready ``propagate`` from
        its jinja template into a file it leaves in the system's temp folder (``delete=False``), one per
        class and process; pgnn does not script its models, and writes no file it does not own."""

    def edges_per_chunk(self, device: torch.device | str) -> int:
        """``max_edges_per_chunk``, or ``DEFAULT_EDGES_PER_CHUNK`` for ``device``."""
        kind = torch.device(device).type
        return self.max_edges_per_chunk or DEFAULT_EDGES_PER_CHUNK.get(kind, DEFAULT_EDGES_PER_CHUNK["other"])

    def aggregate(self, inputs: Tensor, index: Tensor, dim_size: int | None = None) -> Tensor:
        num_dst = dim_size if dim_size is not None else int(index.max()) + 1 if index.numel() else 0
        out = segment_max(inputs, index, num_dst)  # (num_dst, H)
        return self.post_act(out, False) if self.max_first else out  # (segment_max saved `out`)

    def _aggregate_chunk(self, edge_index: Tensor, num_src: int, num_dst: int, **kwargs: Tensor) -> Tensor:
        raise NotImplementedError

    def aggregate_chunked(
        self,
        edge_index: Tensor,
        num_src: int,
        num_dst: int,
        out_dim: int,
        ref: Tensor,
        dst_tensors: Mapping[str, Tensor],
        src_tensors: Mapping[str, Tensor],
        chunks: Sequence[EdgeChunk] | None = None,
    ) -> Tensor:
        """``max_j message`` for every destination, chunk by chunk; ``dst_tensors`` are sliced per chunk.

        ``chunks`` (``destination_chunks(edge_index, num_dst, ...)``) saves splitting the same edges again.

        Shapes:
            edge_index: (2, E); dst_tensors: (num_dst, ...); src_tensors: (num_src, ...) -> (num_dst, out_dim)
        """
        if chunks is None:
            chunks = destination_chunks(edge_index, num_dst, self.edges_per_chunk(ref.device))
        outs = []
        for local, d0, d1 in chunks:
            kwargs = dict(src_tensors) | {k: v[d0:d1] for k, v in dst_tensors.items()}
            if self.checkpoint_chunks and torch.is_grad_enabled():
                outs.append(
                    checkpoint(self._aggregate_chunk, local, num_src, d1 - d0, use_reentrant=False, **kwargs)
                )
            else:
                outs.append(self._aggregate_chunk(local, num_src, d1 - d0, **kwargs))
        if not outs:
            return ref.new_zeros((0, out_dim))
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class PointSetPooling(_ChunkedMaxConv):
    """Layer 1: embed each keypoint's set of points (the original's ``scatter_max_point_set_pooling``).

    ``s_i = MLP_set( max_{(j, i) in edges} MLP_point([f_j, x_j - x_kp(i)]) )``, ReLU after every layer.

    Shapes:
        features: (N0, F), coord: (N0, 3), keypoint_indices: (N1,), edge_index: (2, E0) -> (N1, D)
    """

    def __init__(
        self,
        in_dim: int,
        point_mlp: Widths,
        set_mlp: Widths,
        activation: str,
        *,
        init: LinearInit = LinearInit(),  # noqa: B008 (frozen)
        max_edges_per_chunk: int | None = None,
        checkpoint_chunks: bool = False,
    ) -> None:
        super().__init__(activation, max_edges_per_chunk, checkpoint_chunks)
        self.point_mlp = MLP(in_dim + 3, point_mlp, activation, linear_last=False, init=init)
        self.set_mlp = MLP(point_mlp[-1], set_mlp, activation, linear_last=False, init=init)

    def forward(
        self,
        features: Tensor,
        coord: Tensor,
        keypoint_indices: Tensor,
        edge_index: Tensor,
        chunks: Sequence[EdgeChunk] | None = None,
    ) -> Tensor:
        keypoint_coord = coord[keypoint_indices]  # (N1, 3)
        pooled = self.aggregate_chunked(  # (N1, P)
            edge_index,
            coord.shape[0],
            keypoint_coord.shape[0],
            self.point_mlp.out_dim,
            features,
            dst_tensors={"center": keypoint_coord},
            src_tensors={"features": features, "coord": coord},
            chunks=chunks,
        )
        return self.set_mlp(pooled)  # (N1, D)

    def _aggregate_chunk(
        self,
        edge_index: Tensor,
        num_src: int,
        num_dst: int,
        *,
        features: Tensor,
        coord: Tensor,
        center: Tensor,
    ) -> Tensor:
        return self.propagate(edge_index, x=features, pos=(coord, center), size=(num_src, num_dst))

    def message(self, x_j: Tensor, pos_j: Tensor, pos_i: Tensor) -> Tensor:
        per_edge = torch.cat([x_j, pos_j - pos_i], dim=-1)  # (E, F+3)
        return self.point_mlp(per_edge, last_activation=not self.max_first)  # (E, P)


class PointGNNConv(_ChunkedMaxConv):
    """One Point-GNN iteration with auto-registration (the original's ``scatter_max_graph_auto_center_net``).

    ``Δx_i = MLP_offset(s_i)`` (linear last; 0 when ``auto_offset`` is off),
    ``s_i' = s_i + MLP_update( max_{(j, i) in edges} MLP_edge([s_j, x_j - (x_i + Δx_i)]) )``
    (update MLP linear last).

    The edge MLP's first layer is split: ``W [s_j, dx] + b = (W_s s_j + b) + W_x dx``, with ``W_s s_j + b``
    computed per vertex and gathered per edge (``relative_edge_layer``).

    Shapes:
        state: (N, D), coord: (N, 3), edge_index: (2, E) -> (state' (N, D), offset (N, 3))
    """

    def __init__(
        self,
        state_dim: int,
        cfg: GNNLayerConfig,
        activation: str,
        *,
        init: LinearInit = LinearInit(),  # noqa: B008 (frozen)
        max_edges_per_chunk: int | None = None,
        checkpoint_chunks: bool = False,
    ) -> None:
        super().__init__(activation, max_edges_per_chunk, checkpoint_chunks)
        self.state_dim = state_dim
        self.offset_mlp = (
            MLP(state_dim, cfg.offset_mlp, activation, linear_last=True, init=init)
            if cfg.auto_offset
            else None
        )
        self.edge_mlp = MLP(state_dim + 3, cfg.edge_mlp, activation, linear_last=False, init=init)
        self.update_mlp = MLP(cfg.edge_mlp[-1], cfg.update_mlp, activation, linear_last=True, init=init)

    def forward(
        self, state: Tensor, coord: Tensor, edge_index: Tensor, chunks: Sequence[EdgeChunk] | None = None
    ) -> tuple[Tensor, Tensor]:
        offset = self.offset_mlp(state) if self.offset_mlp is not None else torch.zeros_like(coord)  # (N, 3)
        first = self.edge_mlp.layers[0]
        w_state, w_rel = (
            first.weight[:, : self.state_dim],
            first.weight[:, self.state_dim :],
        )  # (H, D), (H, 3)
        state_proj = gemm.linear(state, w_state, first.bias)  # (N, H), the per-vertex part of the first layer
        aggregated = self.aggregate_chunked(  # (N, H_last)
            edge_index,
            state.shape[0],
            state.shape[0],
            self.edge_mlp.out_dim,
            state,
            dst_tensors={"center": coord + offset},
            src_tensors={"state_proj": state_proj, "coord": coord, "w_rel_t": w_rel.t().contiguous()},
            chunks=chunks,
        )
        return state + self.update_mlp(aggregated), offset

    def _aggregate_chunk(
        self,
        edge_index: Tensor,
        num_src: int,
        num_dst: int,
        *,
        state_proj: Tensor,
        coord: Tensor,
        center: Tensor,
        w_rel_t: Tensor,
    ) -> Tensor:
        return self.propagate(
            edge_index,
            state_proj=state_proj,
            coord=coord,
            center=center,
            w_rel_t=w_rel_t,
            size=(num_src, num_dst),
        )

    def message(
        self, edge_index: Tensor, state_proj: Tensor, coord: Tensor, center: Tensor, w_rel_t: Tensor
    ) -> Tensor:
        # (E, H): the first edge layer's pre-activation, W_s s_j + b + W_x (x_j - (x_i + dx_i))
        pre = relative_edge_layer(state_proj, coord, center, w_rel_t, edge_index)
        return self.edge_mlp.forward_from_first(pre, last_activation=not self.max_first)  # (E, H_last)


class ClassAwarePredictor(nn.Module):
    """The heads (the original's ``classaware_predictor``): class logits and one box encoding per class.

    Shapes:
        state: (N, D) -> (logits (N, C), box_encodings (N, C, L))
    """

    def __init__(
        self,
        state_dim: int,
        num_classes: int,
        box_encoding_len: int,
        cls_hidden: Widths,
        loc_hidden: Widths,
        activation: str,
        *,
        init: LinearInit = LinearInit(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__()
        self.cls = MLP(state_dim, (*cls_hidden, num_classes), activation, linear_last=True, init=init)
        self.loc = nn.ModuleList(
            MLP(state_dim, (*loc_hidden, box_encoding_len), activation, linear_last=True, init=init)
            for _ in range(num_classes)
        )

    def forward(self, state: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.cls(state)  # (N, C)
        boxes = torch.stack([head(state) for head in self.loc], dim=1)  # (N, C, L)
        return logits, boxes
