"""The Point-GNN network (Shi & Rajkumar, CVPR 2020) in PyTorch + PyG, readable top to bottom.

The network sees a multi-level graph (built elsewhere, see ``pgnn.graphs.build``) and predicts, for every
keypoint
(a row of ``vertex_coord_1``), class logits and one encoded box per class::

    points (N0, F), xyz_0 (N0, 3) --edges_0--> PointSetPooling --> s (N1, D)        # layer1
    s, xyz_1 (N1, 3)            --edges_1--> PointGNNConv x T  --> s (N1, D)        # layer2 .. layer{T+1}
    s                                     --> ClassAwarePredictor --> logits (N1, C), boxes (N1, C, 7)

The math, with ``MLP`` a stack of fully connected layers (ReLU after each, or linear last where said):

* Point-set pooling (layer1). For keypoint i with its set of points j (``edges_0`` rows ``(j, i)``):
  ``s_i = MLP_set( max_j MLP_point([f_j, x_j - x_kp(i)]) )`` where ``x_kp(i) = xyz_0[keypoint_indices_0[i]]``.
* Point-GNN iteration t, on ``edges_1`` rows ``(j, i)`` (self loops included) with ``x = xyz_1``:
  ``Δx_i = MLP_offset(s_i)`` (linear last; zero when ``auto_offset`` is off),
  ``e_ij = MLP_edge([s_j, x_j - (x_i + Δx_i)])``, ``s_i <- s_i + MLP_update(max_j e_ij)`` (linear last).
* Heads: ``logits = MLP_cls(s)`` (linear last), ``boxes[:, k] = MLP_loc_k(s)`` (linear last), one box head per
  class.

Conventions checked numerically against the authors' TF code and released weights (see
``tests/nn/test_reference.py`` and the reference README): the per-edge input is ``[features, relative xyz]``
(features first), and the auto-registration offset is *added to the destination* coordinate before the
difference (relative = x_src - x_dst - Δx_dst); the source coordinate is the un-offset one. No normalisation
layers.

Max aggregation over an empty set gives 0 (PyG's convention; the original's ``unsorted_segment_max`` would
give the lowest float). Every keypoint has a self edge on level 1 and at least its own point on level 0, so
this only matters for hand-made graphs.

The pieces: ``pgnn.nn.graph_input`` (the input graph, batching), ``pgnn.nn.layers`` (activations,
initialisers, ``MLP``), ``pgnn.nn.segment`` (per-destination edge operators with their own autograd) and
``pgnn.nn.conv`` (the three layers above); this module assembles them.

Implementation choices that keep the math but save time and memory are described where they live:
``pgnn.nn.conv`` (the edge MLP's first layer computed per vertex, edges processed in chunks of whole
destination sets, ReLU after the max), ``pgnn.nn.segment`` (the backward passes of the max and of the first
edge layer) and ``pgnn.nn.layers`` (the weight layout of narrow first layers). The edges of a level are split
into chunks once per forward pass and the split is shared by all T iterations. The two backward passes, the
max before ReLU and the narrow-layer layout together made a ``small`` training step much cheaper on CPU
(measured: benchmarks/README.md, "Measurements behind the code").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from pgnn.config.network import ModelConfig
from pgnn.nn.conv import ClassAwarePredictor, PointGNNConv, PointSetPooling
from pgnn.nn.graph_input import GraphInput
from pgnn.nn.layers import LinearInit
from pgnn.nn.segment import destination_chunks


@dataclass(frozen=True)
class PointGNNOutput:
    """Everything one forward pass computes.

    Shapes:
        logits: (N1, C); box_encodings: (N1, C, L)
        layer_features[0]: (N1, D) after point-set pooling (the reference's ``layer1_features``);
            layer_features[t]: (N1, D) after GNN iteration t (``layer{t+1}_features``)
        offsets[t - 1]: (N1, 3) the auto-registration offset of iteration t (zeros when it is off)
    """

    logits: Tensor
    box_encodings: Tensor
    layer_features: list[Tensor] = field(default_factory=list)
    offsets: list[Tensor] = field(default_factory=list)


class PointGNN(nn.Module):
    """Point-GNN: point-set pooling, T Point-GNN iterations, class-aware heads.

    ``max_edges_per_chunk`` bounds the per-chunk (E, H) activations; ``checkpoint_chunks`` recomputes them in
    the backward pass (both leave the results unchanged). ``generator`` seeds the initialisation.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        generator: torch.Generator | None = None,
        max_edges_per_chunk: int | None = None,
        checkpoint_chunks: bool = False,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        init = LinearInit(cfg.init, generator)
        conv_options = {
            "init": init,
            "max_edges_per_chunk": max_edges_per_chunk,
            "checkpoint_chunks": checkpoint_chunks,
        }
        self.pool = PointSetPooling(cfg.input_dim, cfg.point_mlp, cfg.set_mlp, cfg.activation, **conv_options)
        self.gnn = nn.ModuleList(
            PointGNNConv(cfg.state_dim, layer, cfg.activation, **conv_options) for layer in cfg.gnn_layers
        )
        self.head = ClassAwarePredictor(
            cfg.state_dim,
            cfg.num_classes,
            cfg.box_encoding_len,
            cfg.cls_hidden,
            cfg.loc_hidden,
            cfg.activation,
            init=init,
        )

    def forward(self, g: GraphInput) -> tuple[Tensor, Tensor]:
        """Logits (N1, C) and box encodings (N1, C, L) for the vertices of level 1."""
        out = self.forward_with_intermediates(g)
        return out.logits, out.box_encodings

    def forward_with_intermediates(self, g: GraphInput) -> PointGNNOutput:
        """The forward pass, keeping each layer's features and each iteration's offsets."""
        if g.features.shape[1] != self.cfg.input_dim:
            raise ValueError(
                f"expected {self.cfg.input_dim} input features per point, got {g.features.shape[1]}"
            )
        needed_levels = 1 if not self.gnn else 2
        if len(g.edges) < needed_levels:
            raise ValueError(f"this model needs edges for {needed_levels} graph levels, got {len(g.edges)}")

        edge_index_0 = g.edges[0].t().contiguous()  # (2, E0)
        n1 = g.vertex_coord[1].shape[0]
        chunks_0 = destination_chunks(edge_index_0, n1, self.pool.edges_per_chunk(g.features.device))
        state = self.pool(  # (N1, D)
            g.features, g.vertex_coord[0], g.keypoint_indices[0], edge_index_0, chunks=chunks_0
        )
        layer_features = [state]
        offsets = []
        if self.gnn:
            coord = g.vertex_coord[1]  # (N1, 3)
            edge_index = g.edges[1].t().contiguous()  # (2, E1)
            # one split for all iterations (same edges)
            chunks_1 = destination_chunks(edge_index, n1, self.gnn[0].edges_per_chunk(coord.device))
            for conv in self.gnn:
                state, offset = conv(state, coord, edge_index, chunks=chunks_1)  # (N1, D), (N1, 3)
                layer_features.append(state)
                offsets.append(offset)
        logits, boxes = self.head(state)  # (N1, C), (N1, C, L)
        return PointGNNOutput(logits, boxes, layer_features, offsets)


def count_parameters(model: nn.Module) -> int:
    """The number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
