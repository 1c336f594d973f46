"""Validation AP while training: the official KITTI AP of the model in training on a fixed subset of the val
split's cached runtime graphs, as a :data:`pgnn.training.live.Validator` the training loop calls every
``train.eval_every`` steps. The AP is the same protocol as the ``evaluate`` stage (not vertex recall)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from pgnn.config.inference import PostprocessConfig
from pgnn.data.labels import Label, parse_labels
from pgnn.data.prepare import PreparedFrames
from pgnn.eval.kitti import ap_from_curves, pr_curves
from pgnn.graphs.cache import GraphCache
from pgnn.inference.postprocess import kitti_result_lines
from pgnn.inference.predict import predict_graph
from pgnn.nn.card import ModelCard
from pgnn.training.live import Validator

REPORTED = ("bbox", "aos", "bev", "3d")


def make_validator(
    graphs_dir: Path,
    prepared_dir: Path,
    card: ModelCard,
    post_cfg: PostprocessConfig,
    classes: Sequence[str],
    num_frames: int,
) -> Validator:
    """A validator over the first ``num_frames`` frames of the cached val graphs (a fixed subset, so the
    curve compares like with like). It reports ``val/<class>/<metric>/moderate`` (R40, percent) for the
    2D, AOS, BEV and 3D metrics and ``val/<class>/3d/easy|hard``."""
    cache = GraphCache(graphs_dir)
    ids = list(cache.frame_ids)[:num_frames]
    prepared = PreparedFrames(prepared_dir)
    index = {fid: i for i, fid in enumerate(prepared.frame_ids)}
    missing = [fid for fid in ids if fid not in index]
    if missing:
        raise ValueError(f"validation frames {missing[:3]} of {graphs_dir} are not in {prepared_dir}")
    frames = [prepared[index[fid]] for fid in ids]
    records = [cache[i] for i in range(len(ids))]
    gt = [f.labels for f in frames]

    def validate(model: torch.nn.Module, step: int) -> dict[str, float]:
        device = next(model.parameters()).device
        dt: list[list[Label]] = []
        for frame, record in zip(frames, records, strict=True):
            det = predict_graph(
                model, card, record, frame.calib.P2, frame.image_size, post_cfg, device, source=frame.frame_id
            ).detections
            lines = kitti_result_lines(det.names, det.boxes, det.boxes_2d, det.scores)
            dt.append(parse_labels("".join(line + "\n" for line in lines), f"<val {frame.frame_id}>", True))
        ap = ap_from_curves(pr_curves(gt, dt, classes))
        out = {}
        for cls in classes:
            for metric in REPORTED:
                out[f"val/{cls}/{metric}/moderate"] = ap[f"{cls}/{metric}/moderate/R40"]
            for diff in ("easy", "hard"):
                out[f"val/{cls}/3d/{diff}"] = ap[f"{cls}/3d/{diff}/R40"]
        return out

    return validate
