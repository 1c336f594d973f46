"""Operators on edges grouped by destination: chunks of whole destination sets, a max per destination
with TF's gradient, and the first edge layer of a Point-GNN iteration.

* ``destination_chunks`` splits the edges (sorted by destination, stable, when they are not already) into
  chunks of complete destination sets, so that a max over each chunk gives the unchunked result.
* ``segment_max`` computes ``out[i] = max_{e: index[e] = i} values[e]`` (0 for an empty set) with its own
  backward and TF's gradient (the max's gradient goes to the rows attaining it, split evenly among exact
  ties); it finds the winners by comparing with the saved max and counts ties only when there are any,
  instead of PyTorch's ``scatter_reduce`` backward (several scatters per call, slower on CPU: measured in
  benchmarks/README.md, "Measurements behind the code").
* ``relative_edge_layer`` computes ``pre[e] = W_s s_j + b + W_x (x_j - c_i)`` for edge e = (j, i) from the
  per-vertex part ``W_s s + b``; its backward sums the gradient per destination before the (H, 3) product.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from pgnn.nn import gemm


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


_HALF_DTYPES = (torch.float16, torch.bfloat16)


def at_least_float32(t: Tensor) -> Tensor:
    """``t`` in float32 when it is float16 or bfloat16 (autocast's outputs), else ``t`` itself (no copy)."""
    return t.float() if t.dtype in _HALF_DTYPES else t


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
    Half-precision values (autocast) are cast to float32 first: the tie counts are sums of 0/1 values, which
    float16 and bfloat16 cannot hold exactly; the result is then float32.

    Shapes:
        values: (E, H), index: (E,) int64 in [0, num_dst) -> (num_dst, H)
    """
    return _SegmentMax.apply(at_least_float32(values), index, num_dst)


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
        pre = vertex_part.index_select(0, src).add_(gemm.matmul(rel, w_rel_t))  # (E, H)
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
        g_w = gemm.row_sum(rel, grad) if need_w else None  # (3, H)
        g_center = None
        if need_center:  # d rel / d center = -1: sum per destination first, then one (num_dst, H) @ (H, 3)
            g_center = gemm.matmul(
                grad.new_zeros((num_center, h)).index_add_(0, dst, grad), w_rel_t.t()
            ).neg_()
        g_coord = None
        if need_coord:
            g_coord = grad.new_zeros((num_coord, 3)).index_add_(0, src, gemm.matmul(grad, w_rel_t.t()))
        return g_vertex, g_coord, g_center, g_w, None, None


def relative_edge_layer(
    vertex_part: Tensor, coord: Tensor, center: Tensor, w_rel_t: Tensor, edge_index: Tensor
) -> Tensor:
    """A linear layer on ``[s_j, x_j - c_i]`` per edge (j, i), given its per-vertex part ``W_s s + b``.

    ``pre[e] = vertex_part[j] + (coord[j] - center[i]) @ w_rel_t`` for edge e = (j, i): the values of
    gathering and adding ``rel @ w_rel_t`` (:func:`pgnn.nn.gemm.matmul`). The backward pass sums the gradient
    per destination before multiplying by the (H, 3) weight, instead of an (E, H) @ (H, 3) product, and the
    weight gradient is a sum over the edges (:func:`pgnn.nn.gemm.row_sum`). It computes in float32 when
    ``vertex_part`` is half precision (autocast): coordinate differences and the per-destination gradient
    sums need float32's mantissa.

    Shapes:
        vertex_part: (N_src, H), coord: (N_src, 3), center: (N_dst, 3), w_rel_t: (3, H),
        edge_index: (2, E) [0] = source j, [1] = destination i -> (E, H)
    """
    vertex_part = at_least_float32(vertex_part)
    return _RelativeEdgeLayer.apply(vertex_part, coord, center, w_rel_t, edge_index[0], edge_index[1])
