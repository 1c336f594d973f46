"""The generator's knobs (``SynthConfig``, defaults KITTI-like) and the classes it labels."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

CLASSES: tuple[str, ...] = ("Car", "Van", "Pedestrian", "Cyclist")


class SynthConfig(BaseModel):
    """Knobs of the generator (defaults: KITTI-like).

    Count ranges are inclusive (min, max) per frame: ``cars`` .. ``cyclists`` are placed ``object_range_m``
    from the sensor (``front_fraction`` of them ahead), ``distant_vehicles`` (cars and vans) just beyond it,
    where most become DontCare regions. ``calib_jitter_deg`` rotates Tr_velo_to_cam per frame (0: KITTI's
    calibration as is). ``paint_concentration`` is the Dirichlet weight of the true class in the painted
    scores. ``image_render_scale`` traces one ray per scale x scale pixel block.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    azimuth_step_deg: float = Field(0.16, gt=0.01, le=1.0)
    max_range_m: float = Field(120.0, gt=10.0)
    mount_height_m: float = Field(1.73, gt=0.5)
    range_noise_std_m: float = Field(0.02, ge=0.0)
    range_noise_clip_m: float = Field(0.05, ge=0.0, le=0.05)
    dropout: float = Field(0.03, ge=0.0, lt=1.0)
    image_width: int = Field(1242, ge=64)
    image_height: int = Field(375, ge=32)
    cars: tuple[int, int] = (4, 12)
    vans: tuple[int, int] = (0, 2)
    pedestrians: tuple[int, int] = (0, 4)
    cyclists: tuple[int, int] = (0, 3)
    object_range_m: tuple[float, float] = (5.0, 60.0)
    front_fraction: float = Field(0.75, ge=0.0, le=1.0)
    distant_vehicles: tuple[int, int] = (0, 3)
    dontcare_min_height_px: float = Field(20.0, ge=0.0)
    calib_jitter_deg: float = Field(0.0, ge=0.0, le=1.0)
    paint_concentration: float = Field(20.0, gt=0.0)
    image_noise: float = Field(4.0, ge=0.0)
    image_render_scale: int = Field(2, ge=1, le=4)
    png_compress_level: int = Field(1, ge=0, le=9)

    @model_validator(mode="after")
    def _ranges_ordered(self) -> SynthConfig:
        for name in ("cars", "vans", "pedestrians", "cyclists", "distant_vehicles", "object_range_m"):
            lo, hi = getattr(self, name)
            if lo < 0 or hi < lo:
                raise ValueError(f"{name}: expected 0 <= min <= max, got ({lo}, {hi})")
        return self
