"""Eager PyTorch vs ONNX Runtime vs the torch.export program: ms a frame for the T1 GNN and end to end.

Imports the authors' released T1 weights (``pointgnn_reference``), exports them with ``pgnn export`` to
``.onnx`` and ``.pt2`` in a temporary folder, and runs ``predict_frame`` (read + crop, the runtime graph in
numba, the network, box decoding, NMS) on the 7 reference frames of the KITTI sample (KITTI data, CC BY-NC-SA
3.0, non-commercial use) with each backend, at 1 and 2 threads (torch's and ONNX Runtime's intra-op
threads). ``gnn`` is the network's stage (tensors in, softmax, results out); ``end to end`` is the whole
frame. Each backend first predicts one untimed frame (numba compiles, allocators warm up). The original TF
model's figures come from the reference data (``time_gnn_s``, ``time_frame_total_s`` of the same frames,
TF 2.15 CPU on this kind of 2-vCPU machine, measured when the reference was made).

    .venv/bin/python benchmarks/export.py [--threads 1 2] [--frames 000000,000114]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pgnn.cli import main as cli_main  # noqa: E402
from pgnn.data.frames import load_frame  # noqa: E402
from pgnn.inference.backends import Detector, ProgramNetwork, load_detector  # noqa: E402
from pgnn.inference.predict import predict_frame  # noqa: E402
from pgnn.nn.export import export_program  # noqa: E402

SHARED = Path(os.environ.get("PGNN_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"
FRAMES = ("000000", "000001", "000002", "000003", "000004", "000005", "000114")
BACKENDS = ("pt", "onnx", "pt2")
NAMES = {"pt": "eager torch", "onnx": "ONNX Runtime", "pt2": "torch.export"}
WARMUP_FRAME = "000002"


def _cli(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(argv) == 0, argv


def tf_ms(frames: Sequence[str]) -> dict[str, float]:
    """The original TF model's mean ms a frame on ``frames`` (GNN, whole frame) from the reference data."""
    gnn, total = [], []
    for f in frames:
        with np.load(SHARED / "pointgnn_reference" / "T1" / f"{f}.npz") as npz:
            gnn.append(float(npz["time_gnn_s"][0]))
            total.append(float(npz["time_frame_total_s"][0]))
    return {"gnn": 1000 * float(np.mean(gnn)), "total": 1000 * float(np.mean(total))}


def _frame_ms(detector: Detector, frame_id: str) -> tuple[float, float, int]:
    root = SHARED / "kitti_sample"
    t0 = time.perf_counter()
    frame = load_frame(root, frame_id)
    t_read = time.perf_counter() - t0
    card = detector.card
    prediction = predict_frame(
        detector.network,
        card,
        frame,
        card.runtime_graph,
        card.postprocess,
        "cpu",
        np.random.default_rng(0),
    )
    detections, times = prediction.detections, prediction.times
    total = t_read + sum(times.values())
    return 1000 * times["gnn"], 1000 * total, len(detections)


def _detector(files: dict[str, Path], backend: str, threads: int) -> Detector:
    """The backend's detector: the ``.pt`` and ``.onnx`` through ``load_detector``; the torch.export program
    (which pgnn does not load from a file: ``torch.export.load`` can run code) exported here in memory, the
    program that ``pgnn export`` wrote to the ``.pt2``."""
    if backend != "pt2":
        return load_detector(files[backend], "cpu", threads=threads)
    eager = load_detector(files["pt"], "cpu")
    program = ProgramNetwork(export_program(eager.network), eager.card)  # type: ignore[arg-type]
    return Detector(program, eager.card, eager.step)


def run_benchmark(threads: Sequence[int] = (1, 2), frames: Sequence[str] = FRAMES) -> dict[str, Any]:
    """Mean ms a frame (GNN, end to end) and detections, per thread count and backend, with TF's figures."""
    results: dict[str, Any] = {"frames": list(frames), "tf_ms": tf_ms(frames), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        files = {"pt": Path(tmp) / "t1.pt"}
        _cli(
            ["import-weights", str(SHARED / "pointgnn_reference" / "car_auto_T1_train.npz"), str(files["pt"])]
        )
        for suffix in ("onnx", "pt2"):
            files[suffix] = Path(tmp) / f"t1.{suffix}"
            t0 = time.perf_counter()
            _cli(["export", str(files["pt"]), str(files[suffix])])
            results[f"export_{suffix}_s"] = time.perf_counter() - t0
        results["load_before"] = Path("/proc/loadavg").read_text().split()[:3]
        for n in threads:
            torch.set_num_threads(n)
            for backend in BACKENDS:
                detector = _detector(files, backend, n)
                _frame_ms(detector, WARMUP_FRAME)
                per_frame = [_frame_ms(detector, f) for f in frames]
                gnn, total, dets = (np.array(v) for v in zip(*per_frame, strict=True))
                results["runs"].append(
                    {
                        "threads": n,
                        "backend": backend,
                        "gnn_ms": float(gnn.mean()),
                        "total_ms": float(total.mean()),
                        "detections": int(dets.sum()),
                    }
                )
                print(
                    f"{n} thread(s) {NAMES[backend]}: gnn {gnn.mean():.0f} ms, total {total.mean():.0f} ms",
                    flush=True,
                )
        results["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    return results


def format_table(results: dict[str, Any]) -> str:
    """The results as one table: ms a frame and the end-to-end time as a fraction of TF's."""
    tf = results["tf_ms"]
    n = len(results["frames"])
    load = f"load average before {' '.join(results['load_before'])}, after {' '.join(results['load_after'])}"
    header = ("backend", "threads", "GNN ms", "end to end ms", "x TF end to end", "detections")
    lines = [
        f"T1 on {n} reference frames, mean ms a frame ({load})",
        f"{header[0]:<16}{header[1]:>8}{header[2]:>10}{header[3]:>15}{header[4]:>17}{header[5]:>12}",
    ]
    for run in results["runs"]:
        lines.append(
            f"{NAMES[run['backend']]:<16}{run['threads']:>8}{run['gnn_ms']:>10.0f}{run['total_ms']:>15.0f}"
            f"{run['total_ms'] / tf['total']:>17.2f}{run['detections']:>12}"
        )
    lines.append(
        f"{'original TF':<16}{'default':>8}{tf['gnn']:>10.0f}{tf['total']:>15.0f}{1.0:>17.2f}{'':>12}"
    )
    lines.append(
        f"export: .onnx {results['export_onnx_s']:.1f} s, .pt2 {results['export_pt2_s']:.1f} s "
        "(the original TF: the reference data's timings, TF 2.15 CPU, oneDNN off, 2 vCPU)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--frames", default=",".join(FRAMES), help="comma-separated reference frame ids")
    args = parser.parse_args()
    print(format_table(run_benchmark(args.threads, args.frames.split(","))))


if __name__ == "__main__":
    main()
