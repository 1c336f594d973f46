"""Stage ``predict``: the trained model on the cached runtime graphs of the val split -> KITTI result files,
mean per-stage timings.

The model comes from :func:`pgnn.inference.backends.load_detector`, as in ``pgnn predict``, and is
post-processed as its card says (the train stage wrote the resolved ``postprocess`` into it), so ``pgnn
predict`` with the same model on the same frames writes the same files.

All or nothing, as ``pgnn predict`` (the same :func:`pgnn.inference.results.predict_all_or_nothing`): the
result files are written to a temporary folder that replaces the output folder only when every frame
succeeded; a failing frame leaves the previous folder (or none) and an error naming the file and the frame.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import torch

from pgnn.config.params import ResolvedReader
from pgnn.core.io import write_json_atomic
from pgnn.data.prepare import read_prepared_dir
from pgnn.graphs.cache import GraphCache
from pgnn.inference.backends import load_detector
from pgnn.inference.results import GraphFrame, predict_all_or_nothing, predict_records
from pgnn.inference.settings import resolve_device
from pgnn.pipeline.stages import Layout


def predict_step(
    model_path: Path, graphs_dir: Path, prepared_dir: Path, out_dir: Path, timings_path: Path
) -> dict[str, float]:
    """Detect objects on the cached runtime graphs of a split; write KITTI result files and stage timings."""
    torch.set_num_threads(int(os.environ.get("PGNN_TORCH_THREADS", "1")))
    device = resolve_device("auto")
    detector = load_detector(model_path, device)
    frames = {f.frame_id: f for f in read_prepared_dir(prepared_dir)}
    cache = GraphCache(graphs_dir)

    def record(i: int) -> GraphFrame:
        f = frames[cache.frame_ids[i]]
        return GraphFrame(f.frame_id, cache[i], f.calib.P2, f.image_size)

    predict = partial(
        predict_records, detector.network, detector.card, post_cfg=detector.card.postprocess, device=device
    )
    summary = predict_all_or_nothing(out_dir, cache.frame_ids, record, predict)
    timings = {f"ms_{k}": round(v, 3) for k, v in summary.mean_ms().items()}
    timings["frames"] = summary.num_frames
    timings["detections"] = int(sum(summary.num_detections))
    write_json_atomic(timings_path, timings)
    print(f"predict: {summary.num_frames} frames, {timings['detections']} detections; mean ms {timings}")
    return timings


def run(params: ResolvedReader, layout: Layout, item: str | None) -> None:
    predict_step(
        layout.path("model"),
        layout.path("graphs", "val"),
        layout.path("prepared", "val"),
        layout.path("predictions", "val"),
        layout.path("predict_timings"),
    )
