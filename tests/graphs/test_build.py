"""Tests of pgnn.graphs.build (with .voxel, .kdtree, .radius) and the ``pgnn graph`` command.

The strong checks run on real KITTI frames: the runtime ('center') graph reproduces the original's keypoints
and edge sets of the reference data exactly, and every radius search equals scikit-learn's
``radius_neighbors``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from sklearn.neighbors import BallTree, KDTree

from pgnn.cli import main as cli_main
from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig, GraphLevelConfig
from pgnn.data.frames import load_frame
from pgnn.graphs.build import build_graph
from pgnn.graphs.kdtree import _kd_build, snap_to_nearest
from pgnn.graphs.radius import radius_edges
from pgnn.graphs.voxel import downsample_levels, downsample_random, voxel_centroids

REFERENCE_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
SAMPLE_FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000008", "000114", "000134")


@cache
def _reference(root: str, frame_id: str) -> dict[str, np.ndarray]:
    with np.load(Path(root) / "T1" / f"{frame_id}.npz") as d:
        return {k: d[k] for k in ("vertex_coord_0", "keypoint_indices_0", "edges_0", "edges_1")}


@cache
def _frame_points(root: str, frame_id: str) -> np.ndarray:
    return load_frame(root, frame_id).points_rect


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted int64 codes of (a, b) pairs: a multiset fingerprint."""
    return np.sort(a.astype(np.int64) * (1 << 31) + b.astype(np.int64))


def _sklearn_edges(sources: np.ndarray, centers: np.ndarray, radius: float) -> np.ndarray:
    """The original's neighbour search: sklearn ball tree, float64, d <= r. Returns pair codes."""
    tree = BallTree(sources.astype(np.float64))
    neighbours = tree.query_radius(centers.astype(np.float64), r=radius)
    dst = np.repeat(np.arange(len(neighbours)), [len(n) for n in neighbours])
    src = np.concatenate(neighbours) if len(neighbours) else np.empty(0, np.int64)
    return _pair_codes(src, dst)


# ----------------------------------------------------------------------------------------------------------
# fidelity to the original on the reference frames


@pytest.mark.parametrize("frame_id", REFERENCE_FRAMES)
def test_runtime_graph_reproduces_reference_keypoints_and_edges(
    pointgnn_reference: Path, frame_id: str
) -> None:
    ref = _reference(str(pointgnn_reference), frame_id)
    graph = build_graph(ref["vertex_coord_0"], GRAPH_PRESETS["car_runtime"])  # 'center' draws no randomness
    kp_ref = ref["keypoint_indices_0"][:, 0]
    kp = graph["keypoint_indices_0"]
    # the same keypoints (the same original points, duplicates included); only the order may differ
    np.testing.assert_array_equal(np.sort(kp), np.sort(kp_ref))
    assert len(np.unique(kp)) < len(kp)  # the reference frames all hold duplicate keypoints; so do we
    # edges as multisets of (original point, original point) pairs
    e0, e1 = graph["edges_0"], graph["edges_1"]
    np.testing.assert_array_equal(
        _pair_codes(e0[:, 0], kp[e0[:, 1]]), _pair_codes(ref["edges_0"][:, 0], kp_ref[ref["edges_0"][:, 1]])
    )
    np.testing.assert_array_equal(
        _pair_codes(kp[e1[:, 0]], kp[e1[:, 1]]),
        _pair_codes(kp_ref[ref["edges_1"][:, 0]], kp_ref[ref["edges_1"][:, 1]]),
    )


def test_kd_replica_matches_sklearn_tree_layout_and_ties(pointgnn_reference: Path) -> None:
    rng = np.random.default_rng(3)
    clouds = [
        _reference(str(pointgnn_reference), "000114")["vertex_coord_0"].astype(np.float64),
        np.round(rng.random((777, 3)) * 4),  # many equal coordinates: comparator ties
        rng.random((31, 3)),
        rng.random((1, 3)),
        np.zeros((100, 3)),
    ]
    for cloud in clouds:
        tree = KDTree(cloud, leaf_size=30)
        _, idx_array, node_data, bounds = tree.get_arrays()
        mine = _kd_build(cloud, 30)
        np.testing.assert_array_equal(mine[0], idx_array)
        np.testing.assert_array_equal(mine[1], node_data["idx_start"])
        np.testing.assert_array_equal(mine[4], bounds[0])
        a = cloud[rng.integers(0, len(cloud), 300)]
        b = cloud[rng.integers(0, len(cloud), 300)]
        queries = np.concatenate([(a + b) / 2, a, rng.random((50, 3)) * 5])  # midpoints: exact ties
        expected = tree.query(queries, k=1, return_distance=False)[:, 0]
        np.testing.assert_array_equal(snap_to_nearest(cloud, queries), expected)


def test_voxel_centroids_are_float64_means_in_open3d_cells() -> None:
    rng = np.random.default_rng(0)
    points = (rng.random((5000, 3)) * [30, 4, 40]).astype(np.float32)
    voxel = 0.4
    origin = points.astype(np.float64).min(axis=0) - voxel / 2
    got = voxel_centroids(points, voxel, origin)
    cells = np.floor((points.astype(np.float64) - origin) / voxel).astype(np.int64)
    _, first, inverse = np.unique(cells, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    sums = np.stack([np.bincount(inverse, weights=points[:, a].astype(np.float64)) for a in range(3)], axis=1)
    expected = sums / np.bincount(inverse)[:, None]
    order = np.argsort(first)  # ours are in order of first appearance
    np.testing.assert_array_equal(got, expected[order])


# ----------------------------------------------------------------------------------------------------------
# radius search == scikit-learn on every real frame


@pytest.mark.parametrize("frame_id", SAMPLE_FRAMES)
def test_radius_edges_equal_sklearn_radius_neighbors(kitti_sample: Path, frame_id: str) -> None:
    points = _frame_points(str(kitti_sample), frame_id)
    rng = np.random.default_rng(int(frame_id))
    for preset in ("car", "ped_cyc"):
        cfg = GRAPH_PRESETS[preset]
        coords, _ = downsample_levels(points, cfg, rng)
        for i, level in enumerate(cfg.levels):
            got = radius_edges(coords[i], coords[i + 1], level.radius)  # no cap: the full sets
            assert got.dtype == np.int32
            np.testing.assert_array_equal(
                _pair_codes(got[:, 0], got[:, 1]), _sklearn_edges(coords[i], coords[i + 1], level.radius)
            )


@pytest.mark.parametrize("preset", ["car_runtime", "ped_cyc_runtime"])
def test_runtime_radius_edges_equal_sklearn(kitti_sample: Path, preset: str) -> None:
    points = _frame_points(str(kitti_sample), "000114")
    cfg = GRAPH_PRESETS[preset]
    g = build_graph(points, cfg)
    for i, level in enumerate(cfg.levels):
        src, dst = g[f"vertex_coord_{i}"], g[f"vertex_coord_{i + 1}"]
        e = g[f"edges_{i}"]
        np.testing.assert_array_equal(_pair_codes(e[:, 0], e[:, 1]), _sklearn_edges(src, dst, level.radius))


def test_radius_edges_include_pairs_exactly_at_the_radius() -> None:
    sources = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0000001]])
    edges = radius_edges(sources, sources[:1], 1.0)
    assert sorted(edges[:, 0].tolist()) == [0, 1, 2]
    assert (edges[:, 1] == 0).all()


# ----------------------------------------------------------------------------------------------------------
# the neighbour cap


def _dense_cloud(n: int = 2000, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, 3)) * [6.0, 2.0, 6.0]).astype(np.float32)


def test_cap_keeps_a_subset_of_min_degree_cap() -> None:
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.random((1500, 3)), rng.random((500, 3)) * 40.0]).astype(np.float32)
    centers = points[::7]
    full = radius_edges(points, centers, 2.0)
    capped = radius_edges(points, centers, 2.0, num_neighbors=64, rng=np.random.default_rng(1))
    degree_full = np.bincount(full[:, 1], minlength=len(centers))
    degree_capped = np.bincount(capped[:, 1], minlength=len(centers))
    assert (degree_full > 64).any() and (degree_full <= 64).any()
    np.testing.assert_array_equal(degree_capped, np.minimum(degree_full, 64))
    full_codes = set(_pair_codes(full[:, 0], full[:, 1]).tolist())
    capped_codes = _pair_codes(capped[:, 0], capped[:, 1])
    assert len(np.unique(capped_codes)) == len(capped_codes)  # no neighbour twice
    assert set(capped_codes.tolist()) <= full_codes


def test_cap_draws_neighbours_uniformly() -> None:
    sources = np.random.default_rng(0).random((200, 3)).astype(np.float32)  # all within 2 m of the centre
    center = np.array([[0.5, 0.5, 0.5]], np.float32)
    counts = np.zeros(200)
    trials = 400
    for seed in range(trials):
        edges = radius_edges(sources, center, 2.0, num_neighbors=50, rng=np.random.default_rng(seed))
        counts[edges[:, 0]] += 1
    expected = trials * 50 / 200  # 100 each
    assert counts.min() > 0.6 * expected and counts.max() < 1.4 * expected  # binomial sd 8.7: > 4.5 sd


def test_train_graph_caps_level_1_and_is_deterministic_per_seed() -> None:
    points = _dense_cloud(6000)
    cfg = GRAPH_PRESETS["car"]
    a = build_graph(points, cfg, np.random.default_rng(7))
    b = build_graph(points, cfg, np.random.default_rng(7))
    c = build_graph(points, cfg, np.random.default_rng(8))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["keypoint_indices_0"], c["keypoint_indices_0"])
    assert np.bincount(a["edges_1"][:, 1]).max() == 256  # capped (every keypoint has > 256 within 4 m)
    assert np.bincount(a["edges_0"][:, 1]).max() > 256  # level 0 is not capped


# ----------------------------------------------------------------------------------------------------------
# downsampling and level structure


def test_random_downsampling_picks_one_point_per_occupied_voxel_uniformly() -> None:
    rng = np.random.default_rng(0)
    points = rng.random((3000, 3)) * 5.0
    origin = points.min(axis=0)
    cells = np.floor((points - origin) / 0.8).astype(np.int64)
    picks = downsample_random(points, 0.8, origin, rng)
    picked_cells = {tuple(c) for c in cells[picks]}
    assert len(picked_cells) == len(picks) == len({tuple(c) for c in cells})
    # uniform within a voxel: a 4-point voxel's points are each picked about a quarter of the time
    four = np.array([[0.1, 0.1, 0.1], [0.2, 0.1, 0.1], [0.3, 0.1, 0.1], [0.4, 0.1, 0.1]])
    counts = np.bincount(
        [downsample_random(four, 0.8, np.zeros(3), np.random.default_rng(s))[0] for s in range(2000)],
        minlength=4,
    )
    assert counts.min() > 400 and counts.max() < 600


def test_levels_of_equal_scale_share_vertices() -> None:
    points = _dense_cloud(3000)
    for name, cfg in GRAPH_PRESETS.items():
        g = build_graph(points, cfg, np.random.default_rng(0))
        assert sorted(g) == sorted(
            [
                "vertex_coord_0",
                "vertex_coord_1",
                "vertex_coord_2",
                "keypoint_indices_0",
                "keypoint_indices_1",
                "edges_0",
                "edges_1",
            ]
        ), name
        np.testing.assert_array_equal(g["vertex_coord_1"], g["vertex_coord_0"][g["keypoint_indices_0"]])
        np.testing.assert_array_equal(g["vertex_coord_2"], g["vertex_coord_1"])
        np.testing.assert_array_equal(g["keypoint_indices_1"], np.arange(len(g["vertex_coord_1"])))
        assert g["vertex_coord_0"].dtype == np.float32
        assert g["keypoint_indices_0"].dtype == np.int32 and g["edges_0"].dtype == np.int32
        # every keypoint is its own neighbour on both levels
        for i in (0, 1):
            e = g[f"edges_{i}"]
            src_xyz = g[f"vertex_coord_{i}"][e[:, 0]]
            dst_xyz = g[f"vertex_coord_{i + 1}"][e[:, 1]]
            self_loops = np.unique(e[(src_xyz == dst_xyz).all(axis=1), 1])
            assert len(self_loops) == len(g[f"vertex_coord_{i + 1}"])


def test_levels_of_growing_scale_downsample_again() -> None:
    cfg = GraphConfig(
        base_voxel_size=0.5,
        downsample_method="random",
        levels=(GraphLevelConfig(graph_scale=1.0, radius=1.0), GraphLevelConfig(graph_scale=4.0, radius=3.0)),
    )
    g = build_graph(_dense_cloud(3000), cfg, np.random.default_rng(0))
    assert len(g["vertex_coord_2"]) < len(g["vertex_coord_1"]) < len(g["vertex_coord_0"])
    np.testing.assert_array_equal(g["vertex_coord_2"], g["vertex_coord_1"][g["keypoint_indices_1"]])
    center = cfg.model_copy(update={"downsample_method": "center"})
    g = build_graph(_dense_cloud(3000), center)
    np.testing.assert_array_equal(g["vertex_coord_2"], g["vertex_coord_1"][g["keypoint_indices_1"]])


@pytest.mark.parametrize("preset", sorted(GRAPH_PRESETS))
@pytest.mark.parametrize("n", [0, 1, 2])
def test_degenerate_inputs(preset: str, n: int) -> None:
    points = np.array([[0.0, 0.0, 5.0], [100.0, 3.0, 60.0]], np.float32)[:n]
    g = build_graph(points, GRAPH_PRESETS[preset], np.random.default_rng(0))
    assert g["vertex_coord_0"].shape == (n, 3)
    assert g["vertex_coord_1"].shape == (n, 3)  # every point alone in its voxel
    for i in (0, 1):
        assert g[f"edges_{i}"].shape == (n, 2) and g[f"edges_{i}"].dtype == np.int32  # self loops only
        assert g[f"keypoint_indices_{i}"].shape == (n,)


def test_identical_points_and_empty_queries() -> None:
    same = np.ones((50, 3), np.float32)
    g = build_graph(same, GRAPH_PRESETS["car_runtime"])
    assert len(g["vertex_coord_1"]) == 1 and len(g["edges_0"]) == 50 and len(g["edges_1"]) == 1
    assert radius_edges(same, np.empty((0, 3)), 1.0).shape == (0, 2)
    assert radius_edges(np.empty((0, 3)), same, 1.0).shape == (0, 2)


def test_bad_inputs_and_configs_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        build_graph(np.zeros((4, 2)), GRAPH_PRESETS["car"], np.random.default_rng(0))
    with pytest.raises(ValueError, match="finite"):
        build_graph(np.full((4, 3), np.nan), GRAPH_PRESETS["car"], np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        build_graph(np.zeros((4, 3)), GRAPH_PRESETS["car"])  # random keypoints need an rng
    with pytest.raises(ValueError, match="finite"):
        radius_edges(np.array([[0.0, np.inf, 0.0]]), np.zeros((1, 3)), 1.0)
    with pytest.raises(ValidationError):
        GraphLevelConfig(graph_scale=1.0, radius=1.0, num_neighbors=0)
    with pytest.raises(ValidationError):
        GraphConfig(base_voxel_size=0.8, levels=())
    with pytest.raises(ValidationError):
        GraphConfig(base_voxel_size=0.8, levels=(GraphLevelConfig(graph_scale=1, radius=1),), extra=1)


def test_presets_carry_the_original_configs_numbers() -> None:
    def numbers(name: str) -> tuple:
        c = GRAPH_PRESETS[name]
        return (
            c.base_voxel_size,
            c.downsample_method,
            c.add_rnd3d,
            tuple((lv.graph_scale, lv.radius, lv.num_neighbors) for lv in c.levels),
        )

    assert numbers("car") == (0.8, "random", True, ((1.0, 1.0, -1), (1.0, 4.0, 256)))
    assert numbers("car_runtime") == (0.8, "center", False, ((0.5, 1.0, -1), (0.5, 4.0, -1)))
    assert numbers("ped_cyc") == (0.8, "random", True, ((0.5, 0.4, -1), (0.5, 1.6, 256)))
    assert numbers("ped_cyc_runtime") == (0.8, "center", False, ((0.25, 0.4, -1), (0.25, 1.6, -1)))


# ----------------------------------------------------------------------------------------------------------
# the command


def test_graph_command_prints_counts_per_level(
    kitti_sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["graph", str(kitti_sample), "000114", "--preset", "car", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    points = _frame_points(str(kitti_sample), "000114")
    expected = build_graph(points, GRAPH_PRESETS["car"], np.random.default_rng(0))
    assert out["frame_id"] == "000114" and out["preset"] == "car"
    assert out["vertices"] == [len(points), len(expected["vertex_coord_1"]), len(expected["vertex_coord_2"])]
    assert out["edges"] == [len(expected["edges_0"]), len(expected["edges_1"])]
    assert cli_main(["graph", str(kitti_sample), "000114", "--runtime", "--json"]) == 0
    runtime = json.loads(capsys.readouterr().out)
    assert runtime["preset"] == "car_runtime"
    assert runtime["vertices"][1] > out["vertices"][1]  # 0.4 m keypoints vs 0.8 m
    assert runtime["edges"][1] > out["edges"][1]
