"""Forward+backward step time and peak memory of the Point-GNN model, and the edge MLP's GFLOP/s.

    .venv/bin/python benchmarks/train_step.py [--device cpu|cuda|auto] [--threads 1] [--quick] [--synth-only]

Graphs:

* ``synth``: what the default pipeline trains on: synthetic KITTI frames (``pgnn synth``, seed 0) through
  ``pgnn.graphs.records.graph_record`` with the default recipe
  (``pgnn.recipe.presets.apply_preset(Params())``: the ``car`` training graph, 0.8 m random keypoints, cap
  256): ~1.4-2.1k keypoints, ~90k level-0 and 45-90k level-1 edges
  per frame.

and from the reference frames (``../shared/data/pointgnn_reference/T1/*.npz``):

* ``runtime``: the saved graphs themselves, built with the original's *runtime* config (0.4 m keypoints, no
  neighbour cap): 2-5k keypoints, 0.3-0.5M level-0 and 0.4-1.0M level-1 edges. These are 5-10x bigger than
  training graphs.
* ``train``: the same points through ``pgnn.graphs.build.build_graph`` with the ``car`` training preset (0.8
m random
  keypoints, cap 256): ~1.6k keypoints, ~0.1M edges per level.

The loss is a dummy (sum of all outputs); an Adam step is included. Each case runs in its own process, so its
peak RSS (``ru_maxrss``) is its own; ``base`` is the RSS after loading graphs and model, before the first
step. ``ckpt`` marks ``checkpoint_chunks=True`` (per-chunk recomputation in the backward pass). ``ms/step``
is wall clock per step after one warm-up step; ``CPU min`` the least process CPU time of a step, steadier
than wall clock on a shared machine.

Figures measured with it: docs/benchmarks.md ("Training step") and benchmarks/README.md ("Measurements behind
the code").
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("PGNN_SHARED", REPO.parent / "shared")) / "data" / "pointgnn_reference"
FRAMES_1 = ["000002"]  # the smallest level-1 edge count of the 7 (0.41M)
FRAMES_4 = ["000000", "000002", "000003", "000114"]
SYNTH_FRAMES = 2  # synthetic frames 000000, 000001 (seed 0)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def load_graph(frame: str, kind: str, device: str, synth_root: str | None = None):  # noqa: ANN201
    from pgnn.nn.graph_input import graph_input_from_arrays

    if kind == "synth":
        from pgnn.config.params import Params
        from pgnn.data.frames import load_frame
        from pgnn.graphs.records import graph_record
        from pgnn.recipe.presets import apply_preset

        recipe = apply_preset(Params())
        record = graph_record(load_frame(synth_root, frame), recipe.graph, recipe.targets, 0)
        return graph_input_from_arrays(record, device, source=f"synthetic {frame}")
    with np.load(REFERENCE / "T1" / f"{frame}.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    if kind == "train":
        from pgnn.config.graphs import GRAPH_PRESETS
        from pgnn.graphs.build import build_graph

        graph = build_graph(arrays["vertex_coord_0"], GRAPH_PRESETS["car"], np.random.default_rng(int(frame)))
        graph["input_features"] = arrays["input_features"]
        arrays = graph
    return graph_input_from_arrays(arrays, device, source=f"{frame}.npz")


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_case(case: dict) -> dict:
    """One configuration, in this process: step times (ms) and memory."""
    import torch

    from pgnn.config.network import MODEL_PRESETS
    from pgnn.nn.graph_input import collate_graphs
    from pgnn.nn.model import PointGNN

    torch.set_num_threads(case["threads"])
    device = case["device"]
    graph = collate_graphs(
        [load_graph(f, case["graph"], device, case.get("synth_root")) for f in case["frames"]]
    )
    model = PointGNN(
        MODEL_PRESETS[case["preset"]],
        generator=torch.Generator().manual_seed(0),
        checkpoint_chunks=case["ckpt"],
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    base = rss_mb()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    cpu_times = []
    for k in range(case["repeats"] + 1):  # the first step warms up
        sync(device)
        t, c = time.perf_counter(), time.process_time()
        logits, boxes = model(graph)
        (logits.sum() + boxes.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        if k > 0:
            times.append((time.perf_counter() - t) * 1000)
            cpu_times.append((time.process_time() - c) * 1000)
    return {
        **case,
        "ms": times,
        "cpu_ms": cpu_times,
        "n0": graph.vertex_coord[0].shape[0],
        "n1": graph.vertex_coord[1].shape[0],
        "e0": graph.edges[0].shape[0],
        "e1": graph.edges[1].shape[0],
        "base_mb": base,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None,
    }


def edge_mlp_rate(device: str, threads: int, frame: str = "000002") -> list[tuple[str, float, float]]:
    """GFLOP/s of one car_T3 Point-GNN iteration (forward, inference) on a runtime graph vs torch.mm."""
    import torch

    from pgnn.config.network import MODEL_PRESETS
    from pgnn.nn.conv import DEFAULT_EDGES_PER_CHUNK, PointGNNConv

    torch.set_num_threads(threads)
    graph = load_graph(frame, "runtime", device)
    cfg = MODEL_PRESETS["car_T3"]
    conv = PointGNNConv(cfg.state_dim, cfg.gnn_layers[0], cfg.activation).to(device)
    layer = cfg.gnn_layers[0]
    n, e, d = graph.vertex_coord[1].shape[0], graph.edges[1].shape[0], cfg.state_dim
    state = torch.rand(n, d, generator=torch.Generator().manual_seed(0)).to(device)
    edge_index = graph.edges[1].t().contiguous()

    def mlp_flops(widths: tuple[int, ...], d_in: int) -> int:
        dims = (d_in, *widths)
        return 2 * sum(a * b for a, b in zip(dims[:-1], dims[1:], strict=True))

    h = layer.edge_mlp
    # per edge: the 3 relative-xyz columns of the first layer, then the remaining edge layers
    flops_edges = e * (2 * 3 * h[0] + mlp_flops(h[1:], h[0]))
    # per vertex: offset MLP, the state columns of the first edge layer, the update MLP
    flops_vertex = n * (mlp_flops(layer.offset_mlp, d) + 2 * d * h[0] + mlp_flops(layer.update_mlp, h[-1]))
    rows = []
    with torch.inference_mode():
        conv(state, graph.vertex_coord[1], edge_index)
        ts = []
        for _ in range(3):
            sync(device)
            t = time.perf_counter()
            conv(state, graph.vertex_coord[1], edge_index)
            sync(device)
            ts.append(time.perf_counter() - t)
        t = statistics.median(ts)
        rows.append(
            (f"PointGNNConv fwd, {e / 1e6:.2f}M edges, {n} vertices", (flops_edges + flops_vertex) / 1e9, t)
        )
        chunk = DEFAULT_EDGES_PER_CHUNK.get(torch.device(device).type, DEFAULT_EDGES_PER_CHUNK["other"])
        for m in sorted({chunk, 131072}):
            a = torch.rand(m, 300, device=device)
            w = torch.rand(300, 300, device=device)
            reps = max(3, int(2e10 / (2 * m * 300 * 300)))
            torch.mm(a, w)
            sync(device)
            t = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, w)
            sync(device)
            t = (time.perf_counter() - t) / reps
            rows.append((f"torch.mm ({m}, 300) @ (300, 300)", 2 * m * 300 * 300 / 1e9, t))
    return rows


def cases(device: str, threads: int, quick: bool, synth_root: str, synth_only: bool = False) -> list[dict]:
    def case(preset: str, graph: str, frames: list[str], ckpt: bool, repeats: int) -> dict:
        return {
            "preset": preset,
            "graph": graph,
            "frames": frames,
            "ckpt": ckpt,
            "repeats": repeats,
            "device": device,
            "threads": threads,
            "synth_root": synth_root,
        }

    synth_frames = [f"{i:06d}" for i in range(SYNTH_FRAMES)]
    synth = [
        case("small", "synth", synth_frames, False, 8),  # the default pipeline's training step
        case("car_T3", "synth", synth_frames[:1], False, 3),
    ]
    if synth_only:
        return synth
    out = synth + [
        case("small", "train", FRAMES_1, False, 6),
        case("small", "train", FRAMES_4, False, 4),
        case("car_T3", "train", FRAMES_1, False, 3),
        case("car_T3", "train", FRAMES_4, False, 2),
        case("car_T3", "runtime", FRAMES_1, False, 2),
        case("car_T3", "runtime", FRAMES_1, True, 2),
    ]
    if not quick:
        out.append(case("car_T3", "runtime", FRAMES_4, True, 2))
        if device.startswith("cuda"):
            out.append(case("car_T3", "runtime", FRAMES_4, False, 3))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="skip the batch-4 runtime-graph cases")
    parser.add_argument(
        "--synth-only", action="store_true", help="only the synthetic-frame cases (no reference data needed)"
    )
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one case, print JSON
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_case(json.loads(args.one))))
        return 0

    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"torch {torch.__version__}, device {device}"
        f"{' (' + torch.cuda.get_device_name() + ')' if device.startswith('cuda') else ''}, "
        f"{args.threads} CPU thread(s), OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    )
    from pgnn.data.synthetic.dataset import generate_dataset

    synth_dir = tempfile.TemporaryDirectory(prefix="pgnn-train-step-")
    generate_dataset(synth_dir.name, SYNTH_FRAMES, 0)
    results = []
    header = (
        f"{'preset':<8} {'graph':<8} {'B':>1} {'ckpt':<4} {'N0':>7} {'N1':>6} {'E0':>8} {'E1':>8} "
        f"{'ms/step (each)':<34} {'CPU min':>8} {'peak RSS MB':>11} {'base MB':>8} {'CUDA MB':>8}"
    )
    print(header)
    print("-" * len(header))
    for c in cases(device, args.threads, args.quick, synth_dir.name, args.synth_only):
        proc = subprocess.run(
            [sys.executable, __file__, "--one", json.dumps(c)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            print(f"{c['preset']:<8} {c['graph']:<8} {len(c['frames'])} failed: {proc.stderr.strip()[-300:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        ms = ", ".join(f"{t:.0f}" for t in r["ms"])
        cuda = f"{r['cuda_peak_mb']:.0f}" if r["cuda_peak_mb"] is not None else "-"
        print(
            f"{r['preset']:<8} {r['graph']:<8} {len(r['frames'])} {'yes' if r['ckpt'] else 'no':<4} "
            f"{r['n0']:>7} {r['n1']:>6} {r['e0']:>8} {r['e1']:>8} {ms:<34} {min(r['cpu_ms']):>8.0f} "
            f"{r['peak_mb']:>11.0f} {r['base_mb']:>8.0f} {cuda:>8}",
            flush=True,
        )
    synth_dir.cleanup()
    if args.synth_only:
        if args.json:
            Path(args.json).write_text(json.dumps({"steps": results}, indent=2))
        return 0

    print()
    print(f"{'edge MLP rate (forward, inference)':<52} {'GFLOP':>8} {'ms':>9} {'GFLOP/s':>8}")
    rates = edge_mlp_rate(device, args.threads)
    for name, gflop, seconds in rates:
        print(f"{name:<52} {gflop:>8.1f} {seconds * 1000:>9.1f} {gflop / seconds:>8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": results, "rates": rates}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
