"""The post-processing config (torch-free): consumed by :mod:`pgnn.inference.postprocess`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgnn.config.types import Flag, Int, Real

NmsName = Literal["plain", "merge_only", "score_only", "merge_score"]
YawMerge = Literal["median", "circular"]


class PostprocessConfig(BaseModel):
    """Post-processing knobs. Defaults are the original's for its Car models (``car_auto_T*_train``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    class_names: tuple[str, ...] = Field(
        default=("Background", "Car", "Car", "DontCare"),
        description="name of each network class index (Car model: 1 = Car yaw ~ 0, 2 = Car yaw ~ pi/2)",
    )
    ignore_class_names: tuple[str, ...] = Field(
        default=("Background", "DontCare"), description="classes that never become detections"
    )
    class_fold: dict[int, Int] = Field(
        default={2: 1}, description="class index -> class index it is reported as (the vertical-yaw classes)"
    )
    score_threshold: Real = Field(default=0.25, ge=0.0, lt=1.0, description="candidates need prob > this")
    nms: NmsName = Field(default="merge_score", description="NMS variant, a key of NMS_VARIANTS")
    overlap_threshold: Real = Field(default=0.01, ge=0.0, le=1.0, description="3D IoU > this is removed")
    yaw_merge: YawMerge = Field(
        default="median",
        description="how box merging takes a cluster's yaw: median (the original's: like any coordinate) or "
        "circular (the median of each yaw's difference to the survivor's, wrapped into [-pi, pi))",
    )
    max_truncation: Real = Field(default=0.4, ge=0.0, le=1.0, description="drop boxes truncated more")
    occlusion_rescore: Flag = Field(default=True, description="score *= 1 + occlusion ratio")

    @model_validator(mode="after")
    def _check_fold(self) -> PostprocessConfig:
        n = len(self.class_names)
        for src, dst in self.class_fold.items():
            if not (0 <= src < n and 0 <= dst < n):
                raise ValueError(f"class_fold {src} -> {dst}: indices must be in [0, {n})")
            if self.class_names[src] != self.class_names[dst]:
                raise ValueError(
                    f"class_fold {src} -> {dst} joins different classes: "
                    f"{self.class_names[src]!r} and {self.class_names[dst]!r}"
                )
        return self


# NMS overlap threshold of the original's configs, per label method (``nms_overlapped_thres``).
NMS_OVERLAP: Mapping[str, float] = {
    "Car": 0.01,
    "Pedestrian_and_Cyclist": 0.2,
    "yaw": 0.01,
    "Car_heading": 0.01,
}


# How box merging takes a cluster's yaw, per label method. The original's methods decode yaws into
# [-pi/4, 3pi/4] (two bins), where the plain median is safe; ``Car_heading`` decodes the whole circle, where
# the plain median of yaws on both sides of +-pi (3.1 and -3.1) is about 0: a box turned by 90 degrees.
YAW_MERGE: Mapping[str, YawMerge] = {
    "Car": "median",
    "Pedestrian_and_Cyclist": "median",
    "yaw": "median",
    "Car_heading": "circular",
}


def class_fold(names: Sequence[str]) -> dict[int, int]:
    """Each class id whose name repeats an earlier one (an object's vertical-yaw class) -> that first id."""
    first: dict[str, int] = {}
    fold: dict[int, int] = {}
    for c, name in enumerate(names):
        if name in first:
            fold[c] = first[name]
        else:
            first[name] = c
    return fold
