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
  (E_chunk, H) activations (training on big graphs). The edges of a level are split once per forward pass and
  the split is shared by all T iterations.
* ``segment_max`` has its own backward with TF's gradient (the max's gradient goes to the rows attaining it,
  split evenly among exact ties); it finds the winners by comparing with the saved max and counts ties only
  when there are any, instead of PyTorch's ``scatter_reduce`` backward (several scatters per call, ~5x slower
  on CPU).
* For ReLU (and ReLU6) the per-edge MLP's last activation runs after the max, per destination:
  ``max_j relu(x_j) = relu(max_j x_j)``, with the same gradient, and without ReLU's ties at 0.
* ``relative_edge_layer`` (the first edge layer of a GNN iteration) sums its gradient per destination before
  the (H, 3) product, and narrow first layers (``linear``) use the weight layout that gives MKL the fast
  weight-gradient product. On the 2-core EPYC, one thread, a ``small`` training step (batch 2, 0.35M edges)
  went from ~440 to ~155 ms of forward + backward CPU time with these (benchmarks/train_step.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import MessagePassing

from pgnn.config.network import GNNLayerConfig, ModelConfig, Widths
from pgnn.core.errors import DataError

# ----------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------------
# Graph input
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphInput:
    """One frame's (or a collated batch's) multi-level graph, as tensors.

    Shapes:
        features: (N0, F) float32, the per-point input features (``input_features`` in the reference data)
        vertex_coord[i]: (N_i, 3) float32, the vertices of level i (level 0 = points, 1 = keypoints, ...)
        keypoint_indices[i]: (N_{i+1},) int64, rows of vertex_coord[i] that became level i+1's vertices
        edges[i]: (E_i, 2) int64, [:, 0] = source row of vertex_coord[i], [:, 1] = destination row of
            vertex_coord[i+1]
        batch: (N1,) int64 or None, the frame index of each output vertex (row of vertex_coord[1]); None means
            one frame
    """

    features: Tensor
    vertex_coord: tuple[Tensor, ...]
    keypoint_indices: tuple[Tensor, ...]
    edges: tuple[Tensor, ...]
    batch: Tensor | None = None
    num_graphs: int = 1

    def to(self, device: torch.device | str) -> GraphInput:
        """The same graph on ``device``."""
        return GraphInput(
            features=self.features.to(device),
            vertex_coord=tuple(c.to(device) for c in self.vertex_coord),
            keypoint_indices=tuple(k.to(device) for k in self.keypoint_indices),
            edges=tuple(e.to(device) for e in self.edges),
            batch=None if self.batch is None else self.batch.to(device),
            num_graphs=self.num_graphs,
        )

    @property
    def num_levels(self) -> int:
        return len(self.vertex_coord)


def _as_index_vector(a: np.ndarray, name: str, source: str) -> np.ndarray:
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise DataError(
            source, f"expected {name} of shape (N,) or (N, 1) with an integer dtype, got {a.shape} {a.dtype}"
        )
    return a


def _check_range(a: np.ndarray, upper: int, name: str, source: str) -> None:
    if a.size and (int(a.min()) < 0 or int(a.max()) >= upper):
        raise DataError(source, f"expected {name} in [0, {upper}), got values in [{a.min()}, {a.max()}]")


def graph_input_from_arrays(
    d: Mapping[str, np.ndarray], device: torch.device | str = "cpu", *, source: str = "<arrays>"
) -> GraphInput:
    """Read the reference-named graph arrays (an ``np.load`` result or a dict) into a ``GraphInput``.

    Reads ``input_features`` (or ``features``), ``vertex_coord_0 .. vertex_coord_{L-1}``, and for each level
    ``i < L-1`` ``keypoint_indices_i`` and ``edges_i``. Index arrays may be (N,) or (N, 1). ``source`` names
    the data in error messages (a ``DataError`` for any missing array, wrong shape or out-of-range index).

    Shapes:
        input_features: (N0, F) (or (N0,) for one feature)
        vertex_coord_i: (N_i, 3)
        keypoint_indices_i: (N_{i+1},) or (N_{i+1}, 1)
        edges_i: (E_i, 2)
    """
    key = "input_features" if "input_features" in d else "features"
    if key not in d:
        raise DataError(source, "expected an 'input_features' (or 'features') array, got none")
    features = np.asarray(d[key])
    if features.ndim == 1:
        features = features[:, None]
    if features.ndim != 2:
        raise DataError(source, f"expected {key} of shape (N0, F), got {features.shape}")

    coords: list[np.ndarray] = []
    while f"vertex_coord_{len(coords)}" in d:
        c = np.asarray(d[f"vertex_coord_{len(coords)}"])
        if c.ndim != 2 or c.shape[1] != 3:
            raise DataError(source, f"expected vertex_coord_{len(coords)} of shape (N, 3), got {c.shape}")
        coords.append(c)
    if len(coords) < 2:
        raise DataError(
            source, f"expected vertex_coord_0 and vertex_coord_1 at least, got {len(coords)} levels"
        )
    if features.shape[0] != coords[0].shape[0]:
        raise DataError(
            source, f"expected {key} with {coords[0].shape[0]} rows (vertex_coord_0), got {features.shape[0]}"
        )

    keypoints: list[np.ndarray] = []
    edges: list[np.ndarray] = []
    for i in range(len(coords) - 1):
        for name in (f"keypoint_indices_{i}", f"edges_{i}"):
            if name not in d:
                raise DataError(source, f"expected an array '{name}' for level {i}, got none")
        k = _as_index_vector(np.asarray(d[f"keypoint_indices_{i}"]), f"keypoint_indices_{i}", source)
        if k.shape[0] != coords[i + 1].shape[0]:
            raise DataError(
                source,
                f"expected keypoint_indices_{i} with {coords[i + 1].shape[0]} rows "
                f"(vertex_coord_{i + 1}), got {k.shape[0]}",
            )
        _check_range(k, coords[i].shape[0], f"keypoint_indices_{i}", source)
        e = np.asarray(d[f"edges_{i}"])
        if e.ndim != 2 or e.shape[1] != 2 or not np.issubdtype(e.dtype, np.integer):
            raise DataError(
                source, f"expected edges_{i} of shape (E, 2) with an integer dtype, got {e.shape} {e.dtype}"
            )
        _check_range(e[:, 0], coords[i].shape[0], f"edges_{i}[:, 0]", source)
        _check_range(e[:, 1], coords[i + 1].shape[0], f"edges_{i}[:, 1]", source)
        keypoints.append(k)
        edges.append(e)

    def f32(a: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)

    def i64(a: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

    return GraphInput(
        features=f32(features),
        vertex_coord=tuple(f32(c) for c in coords),
        keypoint_indices=tuple(i64(k) for k in keypoints),
        edges=tuple(i64(e) for e in edges),
    )


def collate_graphs(graphs: Sequence[GraphInput]) -> GraphInput:
    """Concatenate several frames into one disconnected graph (a batch).

    Vertex rows are stacked level by level; ``keypoint_indices[i]`` is shifted by the number of level-i
    vertices before it, ``edges[i][:, 0]`` by the level-i count and ``edges[i][:, 1]`` by the level-(i+1)
    count. ``batch`` gives each output vertex (row of ``vertex_coord[1]``) its frame index; already collated
    inputs keep their frames, renumbered. Edges sorted by destination within each frame stay sorted.
    """
    if not graphs:
        raise ValueError("collate_graphs needs at least one graph")
    num_levels = graphs[0].num_levels
    if any(g.num_levels != num_levels for g in graphs):
        raise ValueError(f"all graphs need {num_levels} levels, got {[g.num_levels for g in graphs]}")
    if len({g.features.shape[1] for g in graphs}) != 1:
        raise ValueError(
            f"all graphs need the same feature width, got {[g.features.shape[1] for g in graphs]}"
        )

    counts = torch.tensor([[c.shape[0] for c in g.vertex_coord] for g in graphs])  # (B, L)
    offsets = torch.cumsum(counts, dim=0) - counts  # (B, L) rows before each graph, per level
    keypoint_indices = []
    edges = []
    for i in range(num_levels - 1):
        keypoint_indices.append(
            torch.cat([g.keypoint_indices[i] + int(offsets[b, i]) for b, g in enumerate(graphs)])
        )
        shifts = [
            g.edges[i].new_tensor([int(offsets[b, i]), int(offsets[b, i + 1])]) for b, g in enumerate(graphs)
        ]
        edges.append(torch.cat([g.edges[i] + shift for g, shift in zip(graphs, shifts, strict=True)]))

    batches = []
    first_frame = 0
    for g in graphs:
        n1 = g.vertex_coord[1].shape[0]
        if g.batch is None:
            batches.append(torch.full((n1,), first_frame, dtype=torch.long, device=g.features.device))
        else:
            batches.append(g.batch + first_frame)
        first_frame += g.num_graphs
    return GraphInput(
        features=torch.cat([g.features for g in graphs]),
        vertex_coord=tuple(torch.cat([g.vertex_coord[i] for g in graphs]) for i in range(num_levels)),
        keypoint_indices=tuple(keypoint_indices),
        edges=tuple(edges),
        batch=torch.cat(batches),
        num_graphs=first_frame,
    )


# ----------------------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------------------


def _relu(x: Tensor, inplace: bool) -> Tensor:
    return F.relu(x, inplace=inplace)


def _relu6(x: Tensor, inplace: bool) -> Tensor:
    return F.relu6(x, inplace=inplace)


def _leaky_relu(x: Tensor, inplace: bool) -> Tensor:
    # the original's LeakyReLU is tf.nn.leaky_relu(alpha=0.01)
    return F.leaky_relu(x, negative_slope=0.01, inplace=inplace)


def _elu(x: Tensor, inplace: bool) -> Tensor:
    return F.elu(x, inplace=inplace)


def _sigmoid(x: Tensor, inplace: bool) -> Tensor:
    return x.sigmoid_() if inplace else torch.sigmoid(x)


def _tanh(x: Tensor, inplace: bool) -> Tensor:
    return x.tanh_() if inplace else torch.tanh(x)


# name -> activation(x, inplace). All of these are safe in place under autograd on a freshly computed linear
# output: their backward needs only their own result.
ACTIVATIONS: Mapping[str, Callable[[Tensor, bool], Tensor]] = MappingProxyType(
    {
        "relu": _relu,
        "relu6": _relu6,
        "leaky_relu": _leaky_relu,
        "elu": _elu,
        "sigmoid": _sigmoid,
        "tanh": _tanh,
    }
)


def _init_xavier_uniform(linear: nn.Linear, generator: torch.Generator | None) -> None:
    # slim.fully_connected's default: Glorot/Xavier uniform, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).
    nn.init.xavier_uniform_(linear.weight, generator=generator)
    nn.init.zeros_(linear.bias)


def _init_kaiming_uniform(linear: nn.Linear, generator: torch.Generator | None) -> None:
    nn.init.kaiming_uniform_(linear.weight, nonlinearity="relu", generator=generator)
    nn.init.zeros_(linear.bias)


def _init_torch_default(linear: nn.Linear, generator: torch.Generator | None) -> None:
    # nn.Linear.reset_parameters: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5), generator=generator)
    bound = 1.0 / math.sqrt(linear.in_features) if linear.in_features > 0 else 0.0
    nn.init.uniform_(linear.bias, -bound, bound, generator=generator)


INITIALIZERS: Mapping[str, Callable[[nn.Linear, torch.Generator | None], None]] = MappingProxyType(
    {
        "xavier_uniform": _init_xavier_uniform,
        "kaiming_uniform": _init_kaiming_uniform,
        "torch_default": _init_torch_default,
    }
)


@dataclass(frozen=True)
class LinearInit:
    """How to initialise a new ``nn.Linear``: ``INITIALIZERS[name]``, drawing from ``generator``.

    Modules initialise their layers in construction order, so one generator seeds a whole network.
    """

    name: str = "xavier_uniform"
    generator: torch.Generator | None = None

    def __call__(self, linear: nn.Linear) -> None:
        with torch.no_grad():
            INITIALIZERS[self.name](linear, self.generator)


# Inputs at most this wide go through ``linear``'s transposed-weight form.
NARROW_INPUT = 8


def linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """``layer(x)``, with the weight transposed to (K, M) and made contiguous when the input is narrow.

    The value is the same; the backward pass is not: autograd then computes the weight gradient as
    (K, E) @ (E, M) instead of (M, E) @ (E, K), which MKL ran 4-7x faster on the EPYC for E = 8192 rows,
    K = 3-4 inputs and M = 32-300 outputs (the first point-MLP layer of point-set pooling).

    Shapes:
        x: (E, K) -> (E, M)
    """
    if layer.in_features > NARROW_INPUT or x.dim() != 2:
        return layer(x)
    w_t = layer.weight.t().contiguous()  # (K, M)
    return torch.mm(x, w_t) if layer.bias is None else torch.addmm(layer.bias, x, w_t)


class MLP(nn.Module):
    """Fully connected layers ``in_dim -> widths[0] -> ... -> widths[-1]``, the activation after each layer
    except the last when ``linear_last`` (the original's ``is_logits=True``).

    Shapes:
        x: (..., in_dim) -> (..., widths[-1])
    """

    def __init__(
        self,
        in_dim: int,
        widths: Sequence[int],
        activation: str,
        *,
        linear_last: bool,
        init: LinearInit = LinearInit(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__()
        dims = [in_dim, *widths]
        self.layers = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, d_in, d_out)
            for d_in, d_out in zip(dims[:-1], dims[1:], strict=True)
        )
        for layer in self.layers:
            init(layer)
        self.act = ACTIVATIONS[activation]
        self.linear_last = linear_last
        self.out_dim = dims[-1]

    def forward(self, x: Tensor, *, last_activation: bool = True) -> Tensor:
        """``last_activation=False`` stops before the last layer's activation (when it has one)."""
        if not self.layers:
            return x
        return self.forward_from_first(linear(x, self.layers[0]), last_activation=last_activation)

    def forward_from_first(self, pre: Tensor, *, last_activation: bool = True) -> Tensor:
        """Continue from the first layer's pre-activation ``pre`` (..., widths[0]), which is overwritten."""
        x = pre
        last = len(self.layers) - 1
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = linear(x, layer)
            if k < last or (not self.linear_last and last_activation):
                x = self.act(x, True)  # in place: x is always a fresh linear output here
        return x


class EdgeChunk(NamedTuple):
    """The edges of the whole destination sets ``d0 .. d1-1``.

    Shapes:
        edge_index: (2, E_c) int64, [0] = source row, [1] = destination row minus ``d0``
    """

    edge_index: Tensor
    d0: int
    d1: int


def destination_chunks(edge_index: Tensor, num_dst: int, max_edges: int) -> list[EdgeChunk]:
    """Split edges into chunks of whole destination sets, each with about ``max_edges`` edges at most.

    Each chunk's edges, with destinations renumbered to ``0 .. d1-d0-1``, cover exactly the destinations
    ``d0 .. d1-1`` (a set larger than ``max_edges`` forms a chunk of its own). With more than one chunk, edges
    are sorted by destination first (stable) when they are not already; the graph builder's and the reference
    graphs are, and then this costs one comparison pass, a ``searchsorted`` and a host copy of the
    (num_dst + 1,) row starts. One chunk of the edges as given when they fit; none when ``num_dst == 0``.

    Shapes:
        edge_index: (2, E) int64, [0] = source, [1] = destination in [0, num_dst)
    """
    if num_dst == 0:
        return []
    if edge_index.shape[1] <= max_edges:
        return [EdgeChunk(edge_index, 0, num_dst)]  # one chunk: order does not matter
    dst = edge_index[1]  # (E,)
    if not bool((dst[1:] >= dst[:-1]).all()):
        edge_index = edge_index[:, torch.argsort(dst, stable=True)]
        dst = edge_index[1]
    # (num_dst + 1,) CSR row starts, on the host (contiguous inputs: no copy inside searchsorted)
    ptr = torch.searchsorted(dst.contiguous(), torch.arange(num_dst + 1, device=dst.device)).cpu().numpy()
    ends = np.searchsorted(ptr, ptr[:-1] + max_edges, side="right") - 1  # last fitting cut for each start
    chunks = []
    d0 = 0
    while d0 < num_dst:
        d1 = min(max(int(ends[d0]), d0 + 1), num_dst)
        e0, e1 = int(ptr[d0]), int(ptr[d1])
        local = torch.stack([edge_index[0, e0:e1], edge_index[1, e0:e1] - d0])  # (2, E_c)
        chunks.append(EdgeChunk(local, d0, d1))
        d0 = d1
    return chunks


# Default chunk size, in edges, by device. On CPU, small chunks keep the (E_chunk, H) activations in cache and
# the allocator reusing its buffers. On the 2-core EPYC (shared, loaded), one thread: the T1 forward on a
# 0.5M + 0.7M edge frame took ~3-4 s CPU time with 2k-8k-edge chunks and ~7 s with 128k-edge chunks (300
# channels); a ``small`` training step (64 channels, batch 2, 0.35M edges) took about the same with 4k-8k
# and 16% more with 16k-edge chunks. Many small chunks mean many OpenMP regions, though, and with several
# threads and OpenMP's default busy-wait on a loaded machine that was 3-10x slower: use one thread per process
# (or OMP_WAIT_POLICY=PASSIVE). On GPUs, large chunks keep kernels big.
DEFAULT_EDGES_PER_CHUNK: Mapping[str, int] = MappingProxyType({"cpu": 8192, "other": 1 << 18})

# Below this many (edge x channel) entries, a float32 sum of 0/1 values is exact (2^24).
_EXACT_FLOAT32_COUNT = 1 << 24


class _SegmentMax(torch.autograd.Function):
    """``segment_max`` with TF's gradient (see there)."""

    @staticmethod
    def forward(ctx: FunctionCtx, values: Tensor, index: Tensor, num_dst: int) -> Tensor:
        out = values.new_zeros((num_dst, values.shape[1]))  # (num_dst, H)
        out.scatter_reduce_(0, index.view(-1, 1).expand_as(values), values, "amax", include_self=False)
        ctx.save_for_backward(values, index, out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor, None, None]:
        values, index, out = ctx.saved_tensors
        won = out.index_select(0, index)  # (E, H)
        torch.eq(values, won, out=won)  # 1.0 where the row attains its destination's max, else 0.0
        if won.device.type == "cpu" and won.numel() < _EXACT_FLOAT32_COUNT:
            # Without ties every (non-empty destination, channel) has exactly one winner: skip counting. (A
            # host sync, cheap on CPU; elsewhere the count below always runs.)
            nonempty = int(torch.count_nonzero(torch.bincount(index, minlength=out.shape[0])))
            if int(won.sum()) == nonempty * out.shape[1] and not bool(torch.isnan(out).any()):
                return won.mul_(grad_out.index_select(0, index)), None, None
        ties = torch.zeros_like(out).index_add_(0, index, won)  # (num_dst, H), >= 1 unless the set is empty
        share = grad_out / ties.clamp_min_(1)  # (num_dst, H)
        return won.mul_(share.index_select(0, index)), None, None


def segment_max(values: Tensor, index: Tensor, num_dst: int) -> Tensor:
    """Max of ``values`` rows per destination ``index`` (0 for an empty set).

    The gradient is TF's (``unsorted_segment_max``): each output's gradient goes to the rows that attain the
    max, split evenly among exact ties. (PyTorch's own ``scatter_reduce(..., "amax", include_self=False)``
    agrees except where the max is exactly 0: it counts the excluded initial 0 as one more tie.) The
    backward pass saves no (E, H) tensor besides ``values`` itself; on CPU it counts ties only when there are
    any (more winners than (non-empty destination, channel) pairs), elsewhere always (no host sync).

    Shapes:
        values: (E, H), index: (E,) int64 in [0, num_dst) -> (num_dst, H)
    """
    return _SegmentMax.apply(values, index, num_dst)


class _RelativeEdgeLayer(torch.autograd.Function):
    """``relative_edge_layer``; its backward sums per destination before the (H, 3) product."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        vertex_part: Tensor,
        coord: Tensor,
        center: Tensor,
        w_rel_t: Tensor,
        src: Tensor,
        dst: Tensor,
    ) -> Tensor:
        rel = coord.index_select(0, src) - center.index_select(0, dst)  # (E, 3)
        pre = vertex_part.index_select(0, src).addmm_(rel, w_rel_t)  # (E, H)
        ctx.save_for_backward(rel, w_rel_t, src, dst)
        ctx.sizes = (vertex_part.shape[0], coord.shape[0], center.shape[0])
        return pre

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        rel, w_rel_t, src, dst = ctx.saved_tensors
        num_vertex, num_coord, num_center = ctx.sizes
        need_vertex, need_coord, need_center, need_w = ctx.needs_input_grad[:4]
        h = grad.shape[1]
        g_vertex = grad.new_zeros((num_vertex, h)).index_add_(0, src, grad) if need_vertex else None
        g_w = rel.t().mm(grad) if need_w else None  # (3, H)
        g_center = None
        if need_center:  # d rel / d center = -1: sum per destination first, then one (num_dst, H) @ (H, 3)
            g_center = grad.new_zeros((num_center, h)).index_add_(0, dst, grad).mm(w_rel_t.t()).neg_()
        g_coord = None
        if need_coord:
            g_coord = grad.new_zeros((num_coord, 3)).index_add_(0, src, grad.mm(w_rel_t.t()))
        return g_vertex, g_coord, g_center, g_w, None, None


def relative_edge_layer(
    vertex_part: Tensor, coord: Tensor, center: Tensor, w_rel_t: Tensor, edge_index: Tensor
) -> Tensor:
    """A linear layer on ``[s_j, x_j - c_i]`` per edge (j, i), given its per-vertex part ``W_s s + b``.

    ``pre[e] = vertex_part[j] + (coord[j] - center[i]) @ w_rel_t`` for edge e = (j, i): the values of
    gathering and ``addmm``. The backward pass sums the gradient per destination before multiplying by the
    (H, 3) weight, instead of an (E, H) @ (H, 3) product (slow in MKL), and the weight gradient is the fast
    (3, E) @ (E, H).

    Shapes:
        vertex_part: (N_src, H), coord: (N_src, 3), center: (N_dst, 3), w_rel_t: (3, H),
        edge_index: (2, E) [0] = source j, [1] = destination i -> (E, H)
    """
    return _RelativeEdgeLayer.apply(vertex_part, coord, center, w_rel_t, edge_index[0], edge_index[1])


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
        state_proj = F.linear(state, w_state, first.bias)  # (N, H), the per-vertex part of the first layer
        aggregated = self.aggregate_chunked(  # (N, H_last)
            edge_index,
            state.shape[0],
            state.shape[0],
            self.edge_mlp.out_dim,
            state,
            dst_tensors={"center": coord + offset},
            # (3, H) contiguous: MKL's (E, 3) @ (3, H) is ~4x faster than with the transposed view
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


# ----------------------------------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------------------------------


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
