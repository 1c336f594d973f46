"""``pgnn graph ROOT FRAME_ID [--preset car] [--runtime] [--seed 0] [--json]``: a frame's Point-GNN graph.

Builds the multi-level graph of the frame's field-of-view points (no augmentation) with a graph preset of
``pgnn.graphs.build.GRAPH_PRESETS``: the training graph by default (random keypoints, seeded by ``--seed``),
the
runtime graph with ``--runtime``. JSON keys: ``frame_id``, ``preset`` (the preset used), ``vertices`` (vertex
count of every level, ``vertex_coord_0`` first) and ``edges`` (edge count of every level).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from pgnn.config.graphs import GRAPH_PRESETS
from pgnn.core.ids import frame_id_arg
from pgnn.data.frames import load_frame
from pgnn.graphs.build import build_graph, graph_counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="KITTI root (holds training/)")
    parser.add_argument("frame_id", type=frame_id_arg, help="frame id: 7 or 000007 (zero-padded to 6 digits)")
    parser.add_argument(
        "--preset", default="car", choices=sorted(GRAPH_PRESETS), help="graph preset (default: car)"
    )
    parser.add_argument("--runtime", action="store_true", help="the preset's runtime (inference) graph")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training graph's randomness")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: a short table)")
    parser.add_argument("--subset", default="training", help="folder under ROOT (training or testing)")


def preset_name(preset: str, runtime: bool) -> str:
    """``car`` + runtime -> ``car_runtime`` (a name already ending in _runtime is kept)."""
    if runtime and not preset.endswith("_runtime"):
        return f"{preset}_runtime"
    return preset


def frame_graph_summary(
    root: str | Path, frame_id: str, preset: str = "car", seed: int = 0, subset: str = "training"
) -> dict[str, Any]:
    """What ``pgnn graph --json`` prints."""
    if preset not in GRAPH_PRESETS:
        raise ValueError(f"unknown graph preset {preset!r}; expected one of {sorted(GRAPH_PRESETS)}")
    frame = load_frame(root, frame_id, subset=subset)
    graph = build_graph(frame.points_rect, GRAPH_PRESETS[preset], np.random.default_rng(seed))
    return {"frame_id": frame_id, "preset": preset, **graph_counts(graph)}


def run(args: argparse.Namespace) -> int:
    preset = preset_name(args.preset, args.runtime)
    summary = frame_graph_summary(args.root, args.frame_id, preset=preset, seed=args.seed, subset=args.subset)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"frame {summary['frame_id']}, graph preset {preset}")
    for i, n in enumerate(summary["vertices"]):
        line = f"  vertex_coord_{i}: {n:>8} vertices"
        if i < len(summary["edges"]):
            line += f"   edges_{i}: {summary['edges'][i]:>9}"
        print(line)
    return 0
