"""Toy-graph tests of the Point-GNN modules (pgnn/nn/model.py and the layers it assembles)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pydantic
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import scatter

import pgnn.nn.conv
import pgnn.nn.model
from pgnn.config.network import MODEL_PRESETS, GNNLayerConfig, ModelConfig
from pgnn.core.errors import DataError
from pgnn.nn.conv import PointGNNConv, PointSetPooling
from pgnn.nn.graph_input import GraphInput, collate_graphs, graph_input_from_arrays
from pgnn.nn.layers import INITIALIZERS, MLP, LinearInit, linear
from pgnn.nn.model import PointGNN, count_parameters
from pgnn.nn.segment import EdgeChunk, destination_chunks, relative_edge_layer, segment_max

TINY = ModelConfig(
    num_classes=3,
    input_dim=2,
    point_mlp=(8, 16),
    set_mlp=(12,),
    gnn_layers=(GNNLayerConfig(offset_mlp=(6, 3), edge_mlp=(10, 9), update_mlp=(7, 12)),) * 2,
    cls_hidden=(5,),
    loc_hidden=(4, 4),
)


def toy_arrays(
    rng: np.random.Generator, n0: int = 60, n1: int = 9, f: int = 2, duplicates: int = 0
) -> dict[str, np.ndarray]:
    """A graph in the reference layout: radius edges (r0 = 0.35, r1 = 0.6, self loops on level 1).

    ``duplicates`` > 0: points ``duplicates .. 2 * duplicates - 1`` repeat points ``0 .. duplicates - 1``
    (position and features), and the keypoints include point 0 and its copy, so messages tie on both levels.
    """
    xyz0 = rng.uniform(0, 1, (n0, 3)).astype(np.float32)
    features = rng.normal(size=(n0, f)).astype(np.float32)
    kp = rng.choice(n0, n1, replace=False)
    if duplicates:
        xyz0[duplicates : 2 * duplicates] = xyz0[:duplicates]
        features[duplicates : 2 * duplicates] = features[:duplicates]
        kp = np.concatenate([[0, duplicates], [k for k in kp if k not in (0, duplicates)][: n1 - 2]])
    xyz1 = xyz0[kp]
    d0 = np.linalg.norm(xyz0[:, None] - xyz1[None], axis=-1)  # (n0, n1)
    src0, dst0 = np.nonzero(d0 <= 0.35)
    d1 = np.linalg.norm(xyz1[:, None] - xyz1[None], axis=-1)  # (n1, n1)
    src1, dst1 = np.nonzero(d1 <= 0.6)
    order0, order1 = np.argsort(dst0, kind="stable"), np.argsort(dst1, kind="stable")
    return {
        "input_features": features,
        "vertex_coord_0": xyz0,
        "vertex_coord_1": xyz1,
        "vertex_coord_2": xyz1.copy(),
        "keypoint_indices_0": kp[:, None].astype(np.int32),
        "keypoint_indices_1": np.arange(n1, dtype=np.int32)[:, None],
        "edges_0": np.stack([src0[order0], dst0[order0]], 1).astype(np.int32),
        "edges_1": np.stack([src1[order1], dst1[order1]], 1).astype(np.int32),
    }


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture
def graph(rng: np.random.Generator) -> GraphInput:
    return graph_input_from_arrays(toy_arrays(rng))


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def naive_scatter_max(values: torch.Tensor, dst: torch.Tensor, num_dst: int) -> torch.Tensor:
    """max over each destination's rows by a Python loop; 0 for an empty set."""
    out = values.new_zeros((num_dst, values.shape[1]))
    for i in range(num_dst):
        rows = values[dst == i]
        if len(rows):
            out[i] = rows.max(dim=0).values
    return out


def naive_pooling(m: PointSetPooling, features, coord, keypoints, edges) -> torch.Tensor:
    src, dst = edges[:, 0], edges[:, 1]
    rel = coord[src] - coord[keypoints][dst]  # x_j - x_kp(i)
    per_edge = m.point_mlp(torch.cat([features[src], rel], dim=1))  # features first
    return m.set_mlp(naive_scatter_max(per_edge, dst, len(keypoints)))


def naive_gnn(m: PointGNNConv, state, coord, edges) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-edge form, as the original computes it: the full edge MLP on [s_j, x_j - (x_i + dx_i)]."""
    src, dst = edges[:, 0], edges[:, 1]
    offset = m.offset_mlp(state) if m.offset_mlp is not None else torch.zeros_like(coord)
    rel = coord[src] - (coord + offset)[dst]
    per_edge = m.edge_mlp(torch.cat([state[src], rel], dim=1))
    return state + m.update_mlp(naive_scatter_max(per_edge, dst, len(state))), offset


# ---------------------------------------------------------------------------------------------------------
# MLP, initialisation, activations
# ---------------------------------------------------------------------------------------------------------


def test_mlp_activation_placement() -> None:
    mlp = MLP(3, (4, 2), "relu", linear_last=True)
    with torch.no_grad():
        for layer in mlp.layers:
            layer.weight.fill_(-1.0)
            layer.bias.zero_()
    x = torch.ones(1, 3)
    # hidden ReLU(-3) = 0 -> the last layer is linear and sees zeros, giving its bias (0)
    assert torch.equal(mlp(x), torch.zeros(1, 2))
    with torch.no_grad():
        mlp.layers[1].bias.fill_(-2.0)
    assert torch.equal(mlp(x), torch.full((1, 2), -2.0))  # linear last: negative output survives
    relu_last = MLP(3, (4, 2), "relu", linear_last=False)
    relu_last.load_state_dict(mlp.state_dict())
    assert torch.equal(relu_last(x), torch.zeros(1, 2))


def test_mlp_forward_from_first_matches_forward() -> None:
    mlp = MLP(5, (6, 7, 3), "tanh", linear_last=True, init=LinearInit(generator=seeded(2)))
    torch.nn.init.normal_(mlp.layers[0].bias, generator=seeded())
    x = torch.randn(4, 5, generator=seeded(1))
    assert torch.equal(mlp.forward_from_first(linear(x, mlp.layers[0])), mlp(x))
    assert torch.allclose(mlp.forward_from_first(mlp.layers[0](x)), mlp(x), atol=1e-6)
    # without the last activation (linear_last=False): the pre-activation of the last layer
    relu_mlp = MLP(5, (6, 7), "relu", linear_last=False, init=LinearInit(generator=seeded(2)))
    pre = relu_mlp(x, last_activation=False)
    assert (pre < 0).any() and torch.equal(F.relu(pre), relu_mlp(x))


@pytest.mark.parametrize("name", ["relu", "relu6", "leaky_relu", "elu", "sigmoid", "tanh"])
def test_every_activation_runs_forward_and_backward(name: str, graph: GraphInput) -> None:
    model = PointGNN(TINY.model_copy(update={"activation": name}), generator=seeded())
    logits, boxes = model(graph)
    (logits.sum() + boxes.sum()).backward()
    assert torch.isfinite(logits).all()
    assert all(p.grad is not None for p in model.parameters())


def test_xavier_uniform_is_the_default_and_matches_slim() -> None:
    model = PointGNN(MODEL_PRESETS["car_T1"], generator=seeded())
    w = model.gnn[0].edge_mlp.layers[0].weight.detach()  # (300, 303)
    bound = math.sqrt(6.0 / (303 + 300))
    assert float(w.abs().max()) <= bound
    assert float(w.abs().max()) > 0.95 * bound  # uniform over the whole range
    assert abs(float(w.std()) - bound / math.sqrt(3)) < 0.02 * bound
    assert all(float(b.abs().max()) == 0.0 for n, b in model.named_parameters() if n.endswith("bias"))


@pytest.mark.parametrize("init", sorted(INITIALIZERS))
def test_initialisation_follows_the_generator(init: str) -> None:
    cfg = TINY.model_copy(update={"init": init})
    a = PointGNN(cfg, generator=seeded(3)).state_dict()
    b = PointGNN(cfg, generator=seeded(3)).state_dict()
    c = PointGNN(cfg, generator=seeded(4)).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if k.endswith("weight"))


# ---------------------------------------------------------------------------------------------------------
# Config and presets
# ---------------------------------------------------------------------------------------------------------


def car_parameters(num_iterations: int, auto_offset: bool = True, input_dim: int = 1) -> int:
    pool = (input_dim + 3) * 32 + 32 + 32 * 64 + 64 + 64 * 128 + 128 + 128 * 300 + 300 + 2 * (300 * 300 + 300)
    offset = 300 * 64 + 64 + 64 * 3 + 3 if auto_offset else 0
    gnn = offset + 303 * 300 + 300 + 300 * 300 + 300 + 2 * (300 * 300 + 300)
    heads = 300 * 64 + 64 + 64 * 4 + 4 + 4 * (300 * 64 + 64 + 64 * 64 + 64 + 64 * 7 + 7)
    return pool + num_iterations * gnn + heads


def test_released_presets_have_the_released_parameter_counts() -> None:
    assert count_parameters(PointGNN(MODEL_PRESETS["car_T1"])) == 726_491
    assert count_parameters(PointGNN(MODEL_PRESETS["car_T0"])) == 344_932


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("car_T0", car_parameters(0)),
        ("car_T1", car_parameters(1)),
        ("car_T2", car_parameters(2)),
        ("car_T3", car_parameters(3)),
        ("car_fixed_T3", car_parameters(3, auto_offset=False)),
        ("painted_car_T3", car_parameters(3, input_dim=5)),
    ],
)
def test_car_presets_parameter_counts(name: str, expected: int) -> None:
    assert count_parameters(PointGNN(MODEL_PRESETS[name])) == expected


def test_every_preset_instantiates_and_runs(rng: np.random.Generator) -> None:
    for name, cfg in MODEL_PRESETS.items():
        g = graph_input_from_arrays(toy_arrays(rng, f=cfg.input_dim))
        logits, boxes = PointGNN(cfg, generator=seeded())(g)
        n1 = g.vertex_coord[1].shape[0]
        assert logits.shape == (n1, cfg.num_classes), name
        assert boxes.shape == (n1, cfg.num_classes, cfg.box_encoding_len), name
    assert MODEL_PRESETS["ped_cyc_T3"].num_classes == 6
    assert MODEL_PRESETS["ped_cyc_T3"].state_dim == 256
    assert MODEL_PRESETS["painted_car_T3"].input_dim == 5
    assert count_parameters(PointGNN(MODEL_PRESETS["small"])) < 60_000


def test_config_rejects_inconsistent_widths_and_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError, match="residual"):
        ModelConfig(gnn_layers=(GNNLayerConfig(update_mlp=(300, 200)),))
    with pytest.raises(pydantic.ValidationError, match="end with 3"):
        ModelConfig(gnn_layers=(GNNLayerConfig(offset_mlp=(64, 2)),))
    with pytest.raises(pydantic.ValidationError):
        ModelConfig(hidden=3)
    with pytest.raises(pydantic.ValidationError):
        ModelConfig(activation="swish")
    # no offset MLP needed without auto-registration
    assert ModelConfig(gnn_layers=(GNNLayerConfig(auto_offset=False, offset_mlp=()),)).num_iterations == 1


def test_config_round_trips_through_a_plain_dict() -> None:
    for cfg in MODEL_PRESETS.values():
        assert ModelConfig.model_validate(cfg.model_dump(mode="json")) == cfg


# ---------------------------------------------------------------------------------------------------------
# Layers against naive per-edge implementations
# ---------------------------------------------------------------------------------------------------------


def test_point_set_pooling_matches_the_naive_form(graph: GraphInput) -> None:
    m = PointSetPooling(2, (8, 16), (12,), "relu")
    torch.nn.init.normal_(m.point_mlp.layers[0].bias, generator=seeded())
    args = (graph.features, graph.vertex_coord[0], graph.keypoint_indices[0])
    got = m(*args, graph.edges[0].t())
    assert torch.allclose(got, naive_pooling(m, *args, graph.edges[0]), atol=1e-6)


@pytest.mark.parametrize("auto_offset", [True, False])
def test_point_gnn_conv_per_vertex_trick_matches_the_per_edge_form(
    graph: GraphInput, auto_offset: bool
) -> None:
    m = PointGNNConv(
        12,
        GNNLayerConfig(auto_offset=auto_offset, offset_mlp=(6, 3), edge_mlp=(10, 9), update_mlp=(7, 12)),
        "relu",
    )
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.5, generator=seeded(11))
    state = torch.randn(graph.vertex_coord[1].shape[0], 12, generator=seeded(2))
    coord = graph.vertex_coord[1]
    got, offset = m(state, coord, graph.edges[1].t())
    want, want_offset = naive_gnn(m, state, coord, graph.edges[1])
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.equal(offset, want_offset)
    assert (m.offset_mlp is None) == (not auto_offset)
    if not auto_offset:
        assert torch.equal(offset, torch.zeros_like(coord))
    else:
        assert float(offset.abs().max()) > 0


def test_auto_offset_is_added_to_the_destination(graph: GraphInput) -> None:
    """A pure-offset layer: with x_j - (x_i + dx_i), shifting dx by +d shifts the relative xyz by -d."""
    cfg = GNNLayerConfig(offset_mlp=(4, 3), edge_mlp=(3,), update_mlp=(12,))
    m = PointGNNConv(12, cfg, "relu")
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.offset_mlp.layers[1].bias.copy_(torch.tensor([0.25, 0.0, 0.0]))  # dx = (0.25, 0, 0) everywhere
        m.edge_mlp.layers[0].weight[:, 12:] = torch.eye(3)  # edge feature = ReLU(relative xyz)
        m.edge_mlp.layers[0].bias.fill_(10.0)  # keep it positive: edge feature = relative + 10
        m.update_mlp.layers[0].weight[:3, :3] = torch.eye(3)
    coord = graph.vertex_coord[1]
    state = torch.zeros(len(coord), 12)
    out, _ = m(state, coord, graph.edges[1].t())
    src, dst = graph.edges[1][:, 0], graph.edges[1][:, 1]
    rel = coord[src] - coord[dst] - torch.tensor([0.25, 0.0, 0.0])
    want = naive_scatter_max(rel + 10.0, dst, len(coord))
    assert torch.allclose(out[:, :3], want, atol=1e-6)


def test_max_aggregation_is_permutation_invariant(graph: GraphInput) -> None:
    model = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=16)
    logits, boxes = model(graph)
    g = torch.Generator().manual_seed(5)
    shuffled = GraphInput(
        features=graph.features,
        vertex_coord=graph.vertex_coord,
        keypoint_indices=graph.keypoint_indices,
        edges=tuple(e[torch.randperm(len(e), generator=g)] for e in graph.edges),
    )
    logits2, boxes2 = model(shuffled)
    assert torch.allclose(logits, logits2, atol=1e-6) and torch.allclose(boxes, boxes2, atol=1e-6)


def test_relabelling_the_points_permutes_nothing_but_rows(rng: np.random.Generator) -> None:
    a = toy_arrays(rng)
    n0 = len(a["vertex_coord_0"])
    perm = rng.permutation(n0)  # new row r holds old point perm[r]
    inverse = np.argsort(perm)
    b = dict(a)
    b["input_features"], b["vertex_coord_0"] = a["input_features"][perm], a["vertex_coord_0"][perm]
    b["keypoint_indices_0"] = inverse[a["keypoint_indices_0"]]
    b["edges_0"] = np.stack([inverse[a["edges_0"][:, 0]], a["edges_0"][:, 1]], 1)
    model = PointGNN(TINY, generator=seeded())
    la, ba = model(graph_input_from_arrays(a))
    lb, bb = model(graph_input_from_arrays(b))
    assert torch.allclose(la, lb, atol=1e-6) and torch.allclose(ba, bb, atol=1e-6)


def test_empty_sets_aggregate_to_zero() -> None:
    m = PointSetPooling(1, (4,), (), "relu")
    with torch.no_grad():
        m.point_mlp.layers[0].weight.fill_(1.0)
        m.point_mlp.layers[0].bias.fill_(1.0)
    features = torch.ones(3, 1)
    coord = torch.zeros(3, 3)
    keypoints = torch.tensor([0, 1, 2])
    edges = torch.tensor([[0, 0], [1, 0]]).t()  # keypoints 1 and 2 get no points
    out = m(features, coord, keypoints, edges)
    assert torch.equal(out[0], torch.full((4,), 2.0))
    assert torch.equal(out[1:], torch.zeros(2, 4))
    # no edges at all, and no destinations at all
    assert torch.equal(m(features, coord, keypoints, torch.zeros(2, 0, dtype=torch.long)), torch.zeros(3, 4))
    assert m(features, coord, keypoints[:0], torch.zeros(2, 0, dtype=torch.long)).shape == (0, 4)


def test_empty_sets_aggregate_to_zero_even_for_negative_messages() -> None:
    """PyG's convention (0), not TF's unsorted_segment_max (lowest float), and not a max with 0."""
    m = PointSetPooling(1, (2,), (), "tanh")
    with torch.no_grad():
        m.point_mlp.layers[0].weight.zero_()
        m.point_mlp.layers[0].bias.fill_(-1.0)
    features, coord, keypoints = torch.ones(2, 1), torch.zeros(2, 3), torch.tensor([0, 1])
    out = m.aggregate_chunked(
        torch.tensor([[0], [0]]),
        2,
        2,
        2,
        features,
        {"center": coord[keypoints]},
        {"features": features, "coord": coord},
    )
    assert torch.allclose(out[0], torch.tanh(torch.tensor([-1.0, -1.0])))
    assert torch.equal(out[1], torch.zeros(2))


# ---------------------------------------------------------------------------------------------------------
# Chunking
# ---------------------------------------------------------------------------------------------------------


def test_destination_chunks_cover_whole_sets() -> None:
    dst = torch.tensor([0, 0, 0, 1, 3, 3, 3, 3, 3, 4, 4, 6])
    edge_index = torch.stack([torch.arange(len(dst)), dst])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch.searchsorted's non-contiguous input warning
        chunks = destination_chunks(edge_index, 8, 4)
    assert all(isinstance(c, EdgeChunk) for c in chunks)
    covered = []
    for local, d0, d1 in chunks:
        assert d1 > d0
        assert local.shape[1] <= 4 or d1 - d0 == 1  # only a single oversized set may exceed the cap
        assert bool(((local[1] >= 0) & (local[1] < d1 - d0)).all())
        covered += list(zip(local[0].tolist(), (local[1] + d0).tolist(), strict=True))
    assert [c[1] for c in chunks] == sorted(c[1] for c in chunks)
    assert chunks[0][1] == 0 and chunks[-1][2] == 8
    assert sorted(covered) == sorted(zip(edge_index[0].tolist(), dst.tolist(), strict=True))
    assert destination_chunks(edge_index, 0, 4) == []


def test_edges_are_split_once_per_level(graph: GraphInput, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting(edge_index: torch.Tensor, num_dst: int, max_edges: int) -> list[EdgeChunk]:
        calls.append(edge_index.shape[1])
        return destination_chunks(edge_index, num_dst, max_edges)

    # PointGNN splits each level's edges; the convs would split again only without the chunks it passes.
    monkeypatch.setattr(pgnn.nn.model, "destination_chunks", counting)
    monkeypatch.setattr(pgnn.nn.conv, "destination_chunks", counting)
    PointGNN(TINY, generator=seeded(), max_edges_per_chunk=16)(graph)  # two GNN iterations
    assert calls == [len(graph.edges[0]), len(graph.edges[1])]


def test_chunked_forward_equals_unchunked_and_sorts_unsorted_edges(graph: GraphInput) -> None:
    whole = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=10**9)
    chunked = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=7)
    reversed_edges = GraphInput(
        graph.features, graph.vertex_coord, graph.keypoint_indices, tuple(e.flip(0) for e in graph.edges)
    )
    a = whole.forward_with_intermediates(graph)
    b = chunked.forward_with_intermediates(reversed_edges)
    assert torch.allclose(a.logits, b.logits, atol=1e-6)
    assert torch.allclose(a.box_encodings, b.box_encodings, atol=1e-6)
    for x, y in zip(a.layer_features, b.layer_features, strict=True):
        assert torch.allclose(x, y, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Segment max, the relative edge layer, narrow linear layers (custom backward passes)
# ---------------------------------------------------------------------------------------------------------


def torch_scatter_max(values: torch.Tensor, index: torch.Tensor, num_dst: int) -> torch.Tensor:
    """PyTorch's own scatter max (PyG's ``scatter(reduce="max")``), with PyTorch's autograd."""
    return values.new_zeros((num_dst, values.shape[1])).scatter_reduce(
        0, index.view(-1, 1).expand_as(values), values, "amax", include_self=False
    )


def tied_values(rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(40, 5) float64 rows over 7 destinations (destination 6 empty), with exact ties, none at 0."""
    index = torch.from_numpy(rng.integers(0, 6, 40))
    values = torch.from_numpy(rng.normal(size=(40, 5)))
    values[1::4] = values[0::4]  # duplicated rows ...
    index[1::4] = index[0::4]  # ... to the same destination: ties wherever the original wins
    return values, index, 7


def test_segment_max_values_and_empty_sets(rng: np.random.Generator) -> None:
    values, index, n = tied_values(rng)
    out = segment_max(values, index, n)
    assert torch.equal(out, torch_scatter_max(values, index, n))
    assert torch.equal(out[6], torch.zeros(5))
    assert torch.equal(out[:6], naive_scatter_max(values, index, 6))
    assert (out[:6] < 0).any()  # negative maxima stay negative (no max with 0)


@pytest.mark.parametrize("with_ties", [True, False])
def test_segment_max_gradient_equals_pytorchs_in_float64(rng: np.random.Generator, with_ties: bool) -> None:
    values, index, n = tied_values(rng)
    if not with_ties:
        values = values + torch.arange(40, dtype=torch.float64)[:, None] * 1e-3
    weights = torch.from_numpy(rng.normal(size=(n, 5)))
    grads = []
    for fn in (segment_max, torch_scatter_max):
        v = values.clone().requires_grad_()
        (fn(v, index, n) * weights).sum().backward()
        grads.append(v.grad)
    ties = int((values == segment_max(values, index, n)[index]).sum()) - 6 * 5
    assert (ties > 0) == with_ties
    assert torch.allclose(grads[0], grads[1], rtol=0, atol=1e-15)


def test_segment_max_splits_ties_evenly_like_tf() -> None:
    values = torch.tensor([[2.0, 0.0], [2.0, 0.0], [1.0, -1.0], [5.0, 3.0]], requires_grad=True)
    index = torch.tensor([0, 0, 0, 1])
    segment_max(values, index, 2).sum().backward()
    # column 0: two rows tie at 2 -> 1/2 each; column 1: two rows tie at exactly 0 -> 1/2 each (TF; PyTorch's
    # own scatter_reduce backward gives 1/3, counting the excluded initial 0)
    want = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.0, 0.0], [1.0, 1.0]])
    assert torch.equal(values.grad, want)


def test_segment_max_passes_gradcheck(rng: np.random.Generator) -> None:
    values = torch.from_numpy(rng.normal(size=(30, 4))).requires_grad_()
    index = torch.from_numpy(rng.integers(0, 5, 30))
    assert torch.autograd.gradcheck(lambda v: segment_max(v, index, 6), (values,))


def test_relative_edge_layer_equals_the_gathered_form(rng: np.random.Generator) -> None:
    def t(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.normal(size=shape)).requires_grad_()

    vertex_part, coord, center, w_rel_t = t(6, 4), t(6, 3), t(5, 3), t(3, 4)
    edge_index = torch.from_numpy(np.stack([rng.integers(0, 6, 25), np.sort(rng.integers(0, 5, 25))]))
    src, dst = edge_index
    got = relative_edge_layer(vertex_part, coord, center, w_rel_t, edge_index)
    want = vertex_part[src] + (coord[src] - center[dst]) @ w_rel_t
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    inputs = (vertex_part, coord, center, w_rel_t)
    assert torch.autograd.gradcheck(lambda *a: relative_edge_layer(*a, edge_index), inputs)
    # only what needs a gradient gets one
    plain = [x.detach() for x in inputs]
    plain[2].requires_grad_()
    relative_edge_layer(*plain, edge_index).sum().backward()
    assert plain[2].grad is not None and all(x.grad is None for k, x in enumerate(plain) if k != 2)


@pytest.mark.parametrize("in_dim", [3, 4, 12])
def test_linear_equals_nn_linear_with_the_same_gradients(in_dim: int) -> None:
    layer = torch.nn.Linear(in_dim, 6).double()
    x = torch.randn(50, in_dim, dtype=torch.float64, generator=seeded(3))
    grads = []
    for fn in (linear, lambda x, m: m(x)):
        layer.zero_grad()
        out = fn(x, layer)
        (out * torch.arange(6.0, dtype=torch.float64)).sum().backward()
        grads.append((out.detach(), layer.weight.grad.clone(), layer.bias.grad.clone()))
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("activation", ["relu", "relu6", "tanh"])
def test_point_set_pooling_matches_the_naive_form_for_each_activation(
    graph: GraphInput, activation: str
) -> None:
    """relu and relu6 take the max over pre-activations (``MAX_COMMUTES``), tanh per edge: same values."""
    m = PointSetPooling(2, (8, 16), (12,), activation)
    torch.nn.init.normal_(m.point_mlp.layers[1].bias, std=3.0, generator=seeded())  # reach relu6's top
    args = (graph.features, graph.vertex_coord[0], graph.keypoint_indices[0])
    assert m.max_first == (activation != "tanh")
    assert torch.allclose(m(*args, graph.edges[0].t()), naive_pooling(m, *args, graph.edges[0]), atol=1e-6)


def per_edge_forward(model: PointGNN, g: GraphInput) -> tuple[torch.Tensor, torch.Tensor]:
    """The network as the previous implementation computed it: full per-edge MLPs (activation per edge) and
    PyG's scatter max with PyTorch's autograd."""
    src, dst = g.edges[0][:, 0], g.edges[0][:, 1]
    coord0, keypoints = g.vertex_coord[0], g.keypoint_indices[0]
    rel = coord0[src] - coord0[keypoints][dst]
    per_edge = model.pool.point_mlp(torch.cat([g.features[src], rel], dim=1))
    state = model.pool.set_mlp(scatter(per_edge, dst, 0, len(keypoints), reduce="max"))
    coord = g.vertex_coord[1]
    src, dst = g.edges[1][:, 0], g.edges[1][:, 1]
    for conv in model.gnn:
        offset = conv.offset_mlp(state) if conv.offset_mlp is not None else torch.zeros_like(coord)
        per_edge = conv.edge_mlp(torch.cat([state[src], coord[src] - (coord + offset)[dst]], dim=1))
        state = state + conv.update_mlp(scatter(per_edge, dst, 0, len(state), reduce="max"))
    return model.head(state)


@pytest.mark.parametrize(("activation", "chunk"), [("relu", 10**9), ("relu", 13), ("tanh", 13)])
def test_model_gradients_equal_the_per_edge_scatter_max_form_in_float64(
    rng: np.random.Generator, activation: str, chunk: int
) -> None:
    """Duplicated points make exact ties (at positive values) on both levels; ReLU adds ties at 0."""
    g = graph_input_from_arrays(toy_arrays(rng, n0=60, n1=12, duplicates=15))
    coords = tuple(c.double() for c in g.vertex_coord)
    g = GraphInput(g.features.double(), coords, g.keypoint_indices, g.edges)
    cfg = TINY.model_copy(update={"activation": activation})
    model = PointGNN(cfg, generator=seeded(), max_edges_per_chunk=chunk).double()
    for p in model.parameters():  # non-zero biases: more varied signs, maxima away from 0
        torch.nn.init.normal_(p, std=0.4, generator=seeded(9))
    grads = []
    for forward in (model, lambda g: per_edge_forward(model, g)):
        model.zero_grad()
        logits, boxes = forward(g)
        w = torch.linspace(-1, 1, logits.numel(), dtype=torch.float64).view_as(logits)
        ((logits * w).sum() + boxes.square().sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, want in grads[1].items():
        assert float(want.abs().max()) > 0, name
        assert torch.allclose(grads[0][name], want, rtol=1e-10, atol=1e-12), name
    # the duplicates did tie: point 0 and its copy send equal messages to keypoint 0 (and the two keypoints,
    # equal too, to each other's sets)
    state = model.forward_with_intermediates(g).layer_features[0]
    assert torch.equal(state[0], state[1])


# ---------------------------------------------------------------------------------------------------------
# The network
# ---------------------------------------------------------------------------------------------------------


def test_forward_with_intermediates_shapes(graph: GraphInput) -> None:
    model = PointGNN(TINY, generator=seeded())
    out = model.forward_with_intermediates(graph)
    n1 = graph.vertex_coord[1].shape[0]
    assert out.logits.shape == (n1, 3) and out.box_encodings.shape == (n1, 3, 7)
    assert [f.shape for f in out.layer_features] == [(n1, 12)] * 3
    assert [o.shape for o in out.offsets] == [(n1, 3)] * 2
    logits, boxes = model(graph)
    assert torch.equal(logits, out.logits) and torch.equal(boxes, out.box_encodings)
    # the heads see the last layer's features; per-class box heads are separate
    l2, b2 = model.head(out.layer_features[-1])
    assert torch.equal(l2, out.logits) and torch.equal(b2, out.box_encodings)
    assert not torch.equal(boxes[:, 0], boxes[:, 1])


def test_model_rejects_wrong_feature_width(graph: GraphInput) -> None:
    with pytest.raises(ValueError, match="input features"):
        PointGNN(TINY.model_copy(update={"input_dim": 1}))(graph)


def test_gradients_reach_every_parameter(graph: GraphInput) -> None:
    model = PointGNN(TINY, generator=seeded())
    logits, boxes = model(graph)
    (logits.square().sum() + boxes.square().sum()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name


def test_checkpointed_chunks_give_the_same_gradients(graph: GraphInput) -> None:
    plain = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=9)
    ckpt = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=9, checkpoint_chunks=True)
    for model in (plain, ckpt):
        logits, boxes = model(graph)
        (logits.square().sum() + boxes.sum()).backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_gradients_match_finite_differences_in_float64(graph: GraphInput) -> None:
    model = PointGNN(TINY, generator=seeded()).double()
    g = GraphInput(
        graph.features.double(),
        tuple(c.double() for c in graph.vertex_coord),
        graph.keypoint_indices,
        graph.edges,
    )
    w = model.gnn[1].edge_mlp.layers[1].weight

    def loss() -> torch.Tensor:
        logits, boxes = model(g)
        return (
            logits * torch.linspace(-1, 1, logits.numel(), dtype=torch.float64).view_as(logits)
        ).sum() + boxes.sum()

    loss().backward()
    eps = 1e-6
    for idx in [(0, 0), (3, 2), (8, 7)]:
        with torch.no_grad():
            w[idx] += eps
            up = float(loss())
            w[idx] -= 2 * eps
            down = float(loss())
            w[idx] += eps
        assert abs((up - down) / (2 * eps) - float(w.grad[idx])) < 1e-5


# ---------------------------------------------------------------------------------------------------------
# Graph input and collation
# ---------------------------------------------------------------------------------------------------------


def test_graph_input_from_arrays_accepts_column_and_flat_indices(rng: np.random.Generator) -> None:
    a = toy_arrays(rng)
    b = dict(a)
    b["features"] = b.pop("input_features")
    b["keypoint_indices_0"] = a["keypoint_indices_0"][:, 0]
    ga, gb = graph_input_from_arrays(a), graph_input_from_arrays(b)
    assert ga.num_levels == 3 and len(ga.edges) == 2 and ga.batch is None
    assert ga.keypoint_indices[0].shape == (9,) and ga.keypoint_indices[0].dtype == torch.int64
    assert torch.equal(ga.keypoint_indices[0], gb.keypoint_indices[0])
    assert torch.equal(ga.features, gb.features)
    assert ga.edges[0].dtype == torch.int64 and ga.vertex_coord[0].dtype == torch.float32


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("edges_1"), "edges_1"),
        (lambda d: d.pop("input_features"), "input_features"),
        (lambda d: d.update(vertex_coord_1=d["vertex_coord_1"][:, :2]), "vertex_coord_1"),
        (lambda d: d.update(keypoint_indices_0=d["keypoint_indices_0"][:-1]), "keypoint_indices_0"),
        (lambda d: d.update(keypoint_indices_0=d["keypoint_indices_0"] + 1000), "keypoint_indices_0"),
        (lambda d: d.update(edges_0=d["edges_0"] * 0 + np.array([0, 99])), r"edges_0\[:, 1\]"),
        (lambda d: d.update(edges_0=d["edges_0"].astype(np.float32)), "edges_0"),
        (lambda d: d.update(input_features=d["input_features"][:-1]), "rows"),
    ],
)
def test_graph_input_from_arrays_rejects_bad_arrays(rng: np.random.Generator, change, message: str) -> None:
    d = toy_arrays(rng)
    change(d)
    with pytest.raises(DataError, match=message) as err:
        graph_input_from_arrays(d, source="frame.npz")
    assert "frame.npz" in str(err.value)


def test_collate_offsets_and_batch_vector(rng: np.random.Generator) -> None:
    a, b = toy_arrays(rng, n0=30, n1=5), toy_arrays(rng, n0=40, n1=7)
    ga, gb = graph_input_from_arrays(a), graph_input_from_arrays(b)
    g = collate_graphs([ga, gb])
    assert g.num_graphs == 2
    assert g.features.shape == (70, 2) and g.vertex_coord[1].shape == (12, 3)
    assert torch.equal(g.keypoint_indices[0][5:], gb.keypoint_indices[0] + 30)
    assert torch.equal(g.keypoint_indices[1][5:], gb.keypoint_indices[1] + 5)
    n_e0 = len(ga.edges[0])
    assert torch.equal(g.edges[0][n_e0:], gb.edges[0] + torch.tensor([30, 5]))
    assert torch.equal(g.edges[1][len(ga.edges[1]) :], gb.edges[1] + torch.tensor([5, 5]))
    assert torch.equal(g.batch, torch.tensor([0] * 5 + [1] * 7))
    # collating collated graphs keeps frames apart
    g3 = collate_graphs([g, ga])
    assert g3.num_graphs == 3 and torch.equal(g3.batch[-5:], torch.full((5,), 2))


def test_collated_forward_equals_per_frame_forward(rng: np.random.Generator) -> None:
    graphs = [
        graph_input_from_arrays(toy_arrays(rng, n0=n0, n1=n1)) for n0, n1 in [(30, 5), (50, 8), (20, 4)]
    ]
    model = PointGNN(TINY, generator=seeded(), max_edges_per_chunk=13)
    logits, boxes = model(collate_graphs(graphs))
    want = [model(g) for g in graphs]
    assert torch.allclose(logits, torch.cat([w[0] for w in want]), atol=1e-6)
    assert torch.allclose(boxes, torch.cat([w[1] for w in want]), atol=1e-6)


def test_graph_input_to_device_keeps_everything(graph: GraphInput) -> None:
    g = collate_graphs([graph, graph]).to("cpu")
    assert g.num_graphs == 2 and g.batch is not None and g.num_levels == 3


def test_inference_mode_matches_grad_mode(graph: GraphInput) -> None:
    model = PointGNN(TINY, generator=seeded())
    with torch.inference_mode():
        a = model(graph)
    b = model(graph)
    assert torch.equal(a[0], b[0].detach()) and torch.equal(a[1], b[1].detach())
    assert F.softmax(a[0], dim=-1).shape == a[0].shape


def test_building_a_model_writes_no_temp_file(tmp_path: Path) -> None:
    """PyG's ``MessagePassing`` renders a ``propagate`` per class into a file it never deletes; pgnn's
    operators keep the plain one, so a process that builds a model leaves its temp folder empty."""
    script = (
        "import torch\n"
        "from pgnn.config.network import MODEL_PRESETS\n"
        "from pgnn.nn.model import PointGNN\n"
        "from pgnn.nn.conv import PointGNNConv\n"
        "model = PointGNN(MODEL_PRESETS['car_T1'])\n"
        "assert PointGNNConv.propagate.__module__ == 'torch_geometric.nn.conv.message_passing'\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    assert list(tmp_path.iterdir()) == []
