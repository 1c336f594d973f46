"""The ground-truth sampling config (params.yaml's ``gt_sampling``): how crops of the database are drawn and
placed. The pasting itself is :mod:`pgnn.data.gt_paste`.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from pgnn.config.types import MAX_POINTS, MAX_TRIES, Flag, Int, Real


class GtSampleConfig(BaseModel):
    """How :func:`pgnn.data.gt_paste.sample_and_paste` samples and places crops (the rules in full: that
    module's docstring).

    Defaults follow the original's worked example (``crop_aug.vis_crop_aug_sampler``: 2 cars, 10 pedestrians,
    10 cyclists, 100 tries, yaw std pi/16, box and point checks, ground snapping that needs ground). pgnn's
    own: exact bird's-eye IoU (the original rasterised a 3D IoU), a point check that ignores the ground under
    the box (the original allowed 50 points instead), a robust ground estimate, and ``max_ground_shift``.

    Fields:
        sample_counts: crops to try per class, in this order (``"fill_to"``: up to this many in the scene).
        difficulties: sample only crops of these KITTI difficulties (None: all, -1 included).
        overlap_mode, max_overlap_iou, max_scene_points, ground_clearance, max_pasted_points_in_boxes: the
            collision rules.
        max_tries, yaw_distribution, yaw_std, rotation_center: the placement tries.
        snap_to_ground, ground_footprint_scale, ground_top_k, min_ground_points, require_ground,
            max_ground_shift: the ground snap.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_counts: dict[str, Annotated[Int, Field(ge=0, le=MAX_TRIES)]] = Field(
        default_factory=lambda: {"Car": 2, "Pedestrian": 10, "Cyclist": 10}
    )
    count_mode: Literal["add", "fill_to"] = "add"
    difficulties: tuple[Annotated[Int, Field(ge=-1, le=2)], ...] | None = None
    overlap_mode: Literal["box", "point", "box_and_point"] = "box_and_point"
    max_overlap_iou: Real = Field(0.0, ge=0.0, le=1.0)
    max_scene_points: Int = Field(0, ge=0, le=MAX_POINTS)
    ground_clearance: Real = Field(0.2, ge=0.0)
    max_pasted_points_in_boxes: Int = Field(0, ge=0, le=MAX_POINTS)
    max_tries: Int = Field(100, ge=1, le=MAX_TRIES)
    yaw_distribution: Literal["normal", "uniform"] = "normal"
    yaw_std: Real = Field(math.pi / 16, ge=0.0)
    rotation_center: Literal["origin", "box"] = "origin"
    snap_to_ground: Flag = True
    ground_footprint_scale: Real = Field(1.1, gt=0.0)
    ground_top_k: Int = Field(5, ge=1, le=MAX_POINTS)
    min_ground_points: Int = Field(3, ge=1, le=MAX_POINTS)
    require_ground: Flag = True
    max_ground_shift: Real | None = Field(0.5, ge=0.0)
