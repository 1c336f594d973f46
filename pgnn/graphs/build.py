"""Point-GNN's multi-level graphs: voxel downsampling and radius neighbourhoods.

A graph config lists levels. Level ``i`` connects ``vertex_coord_i`` (sources) to ``vertex_coord_{i+1}``
(destinations, a subset of the sources picked by voxel downsampling at ``base_voxel_size * graph_scale``):

```
vertex_coord_0  (N0, 3)  all points                  edges_0 (E0, 2): [src row in vc_0, dst row in vc_1]
vertex_coord_1  (N1, 3)  = vc_0[keypoint_indices_0]  edges_1 (E1, 2): [src row in vc_1, dst row in vc_2]
vertex_coord_2  (N2, 3)  = vc_1[keypoint_indices_1]  ...
```

The vertices and keypoints come from :mod:`pgnn.graphs.voxel` (downsampling methods, the ``center`` snap of
:mod:`pgnn.graphs.kdtree`), the edges from :mod:`pgnn.graphs.radius`. On the reference frames they are
exactly the original's edge sets and keypoints (tests/graphs/test_build.py).

Shapes: see :func:`build_graph`. Vertex rows are float32, index arrays int32.
"""

from __future__ import annotations

import numpy as np

from pgnn.config.graphs import GraphConfig
from pgnn.graphs.radius import radius_edges
from pgnn.graphs.voxel import downsample_levels


def build_graph(
    points: np.ndarray, cfg: GraphConfig, rng: np.random.Generator | None = None
) -> dict[str, np.ndarray]:
    """The multi-level graph of a point cloud, deterministic for a given ``rng`` state.

    Shapes: points (N, 3) -> ``vertex_coord_{i}`` (N_i, 3) float32 for i = 0..L,
    ``keypoint_indices_{i}`` (N_{i+1},) int32 and ``edges_{i}`` (E_i, 2) int32 for i = 0..L-1
    (L = number of levels; edges_i[:, 0] rows of vertex_coord_i, edges_i[:, 1] rows of vertex_coord_{i+1}).
    """
    coords, keypoints = downsample_levels(points, cfg, rng)
    graph: dict[str, np.ndarray] = {}
    for i, c in enumerate(coords):
        graph[f"vertex_coord_{i}"] = c
    for i, k in enumerate(keypoints):
        graph[f"keypoint_indices_{i}"] = k
    for i, level in enumerate(cfg.levels):
        graph[f"edges_{i}"] = radius_edges(coords[i], coords[i + 1], level.radius, level.num_neighbors, rng)
    return graph


def warm_up(cfg: GraphConfig) -> None:
    """Load the numba kernels :func:`build_graph` runs for ``cfg`` (before a process pool forks, so that its
    workers inherit them)."""
    points = np.random.default_rng(0).random((64, 3)).astype(np.float32) * 8.0
    build_graph(points, cfg, np.random.default_rng(0))


def graph_counts(graph: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """Vertex counts per level (vertex_coord_0..L) and edge counts per level (edges_0..L-1)."""
    vertices = []
    i = 0
    while f"vertex_coord_{i}" in graph:
        vertices.append(int(graph[f"vertex_coord_{i}"].shape[0]))
        i += 1
    edges = []
    i = 0
    while f"edges_{i}" in graph:
        edges.append(int(graph[f"edges_{i}"].shape[0]))
        i += 1
    return {"vertices": vertices, "edges": edges}
