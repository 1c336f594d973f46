"""The sensor config (torch-free): how a LiDAR is mounted and which part of its scan to use.

A sensor file (``--sensor S.yaml``, or ``sensor.yaml`` of an own dataset) holds, all optional::

    mounting_height: 1.73        # metres above the ground of the output frame's origin (the sensor's)
    extrinsic: null              # 4x4 rigid sensor -> output frame (e.g. a tilted mount -> level vehicle)
    field_of_view: 360.0         # degrees, a cone about the output frame's +x; 360 = the whole scan
    max_range: null              # metres (horizontal); null = every point

Frames: the sensor frame is the usual LiDAR one (x forward, y left, z up, metres). Without ``extrinsic`` the
output frame (where detections and own-format labels live) is the sensor frame; with it, the frame it maps
into, which must be level (z up) for boxes that turn about z only. The defaults are KITTI's Velodyne HDL-64E
mount (1.73 m above the ground, level). ``pgnn.data.sensor`` maps the output frame to the frame the
network was trained in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgnn.core.errors import DataError, params_error
from pgnn.core.yamlfile import read_yaml

# KITTI's HDL-64E sits 1.73 m above the ground (Geiger et al., "Vision meets Robotics", IJRR 2013, Fig. 3).
KITTI_MOUNTING_HEIGHT = 1.73


class SensorConfig(BaseModel):
    """How the LiDAR is mounted and which points to use; defaults: KITTI's HDL-64E, the whole scan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mounting_height: float = Field(
        default=KITTI_MOUNTING_HEIGHT,
        gt=0.0,
        lt=10.0,
        description="height of the output frame's origin above the ground, metres (KITTI's HDL-64E: 1.73)",
    )
    extrinsic: tuple[tuple[float, float, float, float], ...] | None = Field(
        default=None, description="4x4 rigid transform sensor -> output frame (rows); null = identity"
    )
    field_of_view: float = Field(
        default=360.0, gt=0.0, le=360.0, description="degrees, a cone centred on the output frame's +x"
    )
    max_range: float | None = Field(default=None, gt=0.0, description="horizontal range limit, metres")

    @field_validator("extrinsic")
    @classmethod
    def _rigid(cls, value: tuple[tuple[float, ...], ...] | None) -> tuple[tuple[float, ...], ...] | None:
        if value is None:
            return None
        m = np.asarray(value, dtype=np.float64)
        if m.shape != (4, 4):
            raise ValueError(f"expected 4 rows of 4 numbers, got shape {m.shape}")
        if not np.allclose(m[3], [0.0, 0.0, 0.0, 1.0]):
            raise ValueError("expected the last row 0 0 0 1")
        r = m[:3, :3]
        if not (np.allclose(r @ r.T, np.eye(3), atol=1e-3) and np.linalg.det(r) > 0):
            raise ValueError("expected a rotation in the first 3x3 block (R R^T = I, det 1)")
        return value

    def extrinsic_matrix(self) -> np.ndarray:
        """The (4, 4) float64 sensor -> output frame transform (identity when none is set)."""
        return np.eye(4) if self.extrinsic is None else np.asarray(self.extrinsic, dtype=np.float64)


def load_sensor(path: str | Path | None) -> SensorConfig:
    """Read and validate a sensor YAML file (:func:`pgnn.core.yamlfile.read_yaml`: safe and bounded); ``None``
    gives the defaults."""
    if path is None:
        return SensorConfig()
    path = Path(path)
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise DataError(path, f"expected a mapping of sensor settings, got {type(raw).__name__}")
    try:
        return SensorConfig.model_validate(raw)
    except ValidationError as e:
        raise params_error(path, e, model=SensorConfig) from None
