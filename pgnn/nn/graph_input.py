"""The network's input: one frame's (or a batch's) multi-level graph as tensors (``GraphInput``).

``graph_input_from_arrays`` reads the reference-named arrays (``input_features``, ``vertex_coord_i``,
``keypoint_indices_i``, ``edges_i``) with their shapes and index ranges checked; ``collate_graphs`` stacks
frames into one disconnected graph, level by level, with a per-vertex frame index (``batch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pgnn.core.errors import DataError


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
