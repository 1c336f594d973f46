"""KITTI labels of a frame: the objects image_2 sees, with 2D boxes, truncation and alpha from their boxes,
occlusion from the scan, and DontCare regions for the small ones."""

from __future__ import annotations

import numpy as np

from pgnn.core.boxes import alpha_from_box, boxes_to_image_2d
from pgnn.data.labels import Label, label_from_box
from pgnn.data.synthetic.config import SynthConfig
from pgnn.data.synthetic.lidar import Scan
from pgnn.data.synthetic.objects import round2
from pgnn.data.synthetic.scene import Scene


def occlusion_level(visible: int, expected: int) -> int:
    """KITTI occlusion state from the share of an object's rays that reach it first (package docstring)."""
    if expected <= 0:
        return 3
    fraction = visible / expected
    if fraction >= 0.8:
        return 0
    if fraction >= 0.4:
        return 1
    if fraction >= 0.1:
        return 2
    return 3


def make_labels(scene: Scene, scan: Scan, config: SynthConfig) -> tuple[list[Label], np.ndarray, np.ndarray]:
    """KITTI labels of the objects image_2 sees, objects first, DontCare regions last.

    Returns the labels, each object's label row (-1: not labelled), and whether it became DontCare.
    """
    n = len(scene.kinds)
    box2d, truncation = boxes_to_image_2d(
        scene.boxes, scene.calib.P2, config.image_width - 1, config.image_height - 1
    )
    alpha = alpha_from_box(scene.boxes) if n else np.zeros(0)
    in_image = (box2d[:, 2] > box2d[:, 0]) & (box2d[:, 3] > box2d[:, 1]) & (truncation < 1.0)
    height = box2d[:, 3] - box2d[:, 1]
    dontcare = in_image & (height < config.dontcare_min_height_px)
    labels: list[Label] = []
    label_index = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(in_image & ~dontcare):
        labels.append(
            label_from_box(
                scene.kinds[i],
                scene.boxes[i],
                truncated=round2(float(truncation[i])),
                occluded=occlusion_level(int(scan.visible[i]), int(scan.expected[i])),
                alpha=round2(float(alpha[i])),
                bbox=tuple(round2(float(v)) for v in box2d[i]),  # type: ignore[arg-type]
            )
        )
        label_index[i] = len(labels) - 1
    for i in np.flatnonzero(dontcare):
        labels.append(
            Label(
                type="DontCare",
                truncated=-1.0,
                occluded=-1,
                alpha=-10.0,
                bbox=tuple(round2(float(v)) for v in box2d[i]),  # type: ignore[arg-type]
                h=-1.0,
                w=-1.0,
                l=-1.0,
                x=-1000.0,
                y=-1000.0,
                z=-1000.0,
                ry=-10.0,
            )
        )
        label_index[i] = len(labels) - 1
    return labels, label_index, dontcare
