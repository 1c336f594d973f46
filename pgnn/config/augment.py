"""The augmentation config: the keyword arguments of every op, their defaults, and the steps that run them.

The ops themselves, and the registry that maps a step's ``method`` to one, are :mod:`pgnn.data.augment`; this
module holds only their schema, so that params.yaml is checked without importing the ops. One model per op
(:data:`AUGMENT_KWARGS`) lists its parameters in the op's order with the original's defaults
(``models/preprocess.py``); each op takes exactly these keyword arguments and has no defaults of its own
(tests/data/test_augment.py checks that the names and types agree).

The Car configurations T0-T3 of the original train with :data:`ORIGINAL_CAR_AUGMENT`: a global rotation
with yaw ~ N(0, (pi/8)^2), a flip with p = 0.5, and a per-object shift ~ N(0, diag(3, 0, 3)^2) m with up to
100 tries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

# The ops' parameter types.
NonNegative = Annotated[float, Field(ge=0.0)]
Std = NonNegative
"""A standard deviation (or a uniform half-width, see :data:`Distribution`)."""
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Distribution = Literal["normal", "uniform"]
"""``"normal"``: N(0, std^2); ``"uniform"``: U(-std, std)."""
Positive = Annotated[float, Field(gt=0.0)]
Scales = tuple[Positive, Positive, Positive]
Stds = tuple[Std, Std, Std]
Tries = Annotated[int, Field(ge=0)]

DEFAULT_AUGMENT_LIST: tuple[str, ...] = (
    "Car",
    "Pedestrian",
    "Cyclist",
    "Van",
    "Truck",
    "Misc",
    "Tram",
    "Person_sitting",
)
"""The classes the original's per-object ops move by default."""

DEFAULT_KEEP_LIST: tuple[str, ...] = (
    "Car",
    "Pedestrian",
    "Cyclist",
    "Van",
    "Truck",
    "Misc",
    "Person_sitting",
)
"""The classes the original's background ops keep by default (no Tram, no DontCare)."""


class _Kwargs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------------------------------------
# Point-only ops (pgnn.data.augment_ops)


class RandomJitterKwargs(_Kwargs):
    """``random_jitter``: per-point noise ~ N(0, diag(xyz_std)^2)."""

    xyz_std: Stds = (0.1, 0.1, 0.1)


class RandomDropKwargs(_Kwargs):
    """``random_drop``: the drop probability, or tiers of it picked with probabilities ``tier_prob``."""

    drop_prob: Probability | tuple[Probability, ...] = 0.5
    tier_prob: tuple[Probability, ...] | None = None


class RandomGlobalDropKwargs(_Kwargs):
    """``random_global_drop``: a per-scene drop probability ``|N(0, drop_std^2)|``."""

    drop_std: Std = 0.25


class RandomVoxelDownsampleKwargs(_Kwargs):
    """``random_voxel_downsample``: voxel size ``min(|N(0, voxel_std^2)|, max_voxel)``, none below
    ``min_voxel``."""

    voxel_std: Std = 0.2
    min_voxel: Std = 0.02
    max_voxel: Std = 0.8


# ----------------------------------------------------------------------------------------------------------
# Whole-scene ops (pgnn.data.augment_ops)


class RandomRotationAllKwargs(_Kwargs):
    """``random_rotation_all``: a yaw about the origin."""

    distribution: Distribution = "normal"
    yaw_std: Std = 0.3


class RandomFlipAllKwargs(_Kwargs):
    """``random_flip_all``: a left-right mirror with probability ``flip_prob``."""

    flip_prob: Probability = 0.5


class RandomScaleAllKwargs(_Kwargs):
    """``random_scale_all``: a scale ``1 + N(0, scale_std^2)`` about the origin."""

    distribution: Distribution = "normal"
    scale_std: Std = 0.05


class RandomTransitionKwargs(_Kwargs):
    """``random_transition``: one offset ~ N(0, diag(xyz_std)^2) for the whole scene."""

    xyz_std: Stds = (0.1, 0.1, 0.1)


# ----------------------------------------------------------------------------------------------------------
# Per-object and background ops (pgnn.data.augment_box_ops); ``expand_hwl`` is in the original's (h, w, l)


class RandomBoxRotationKwargs(_Kwargs):
    """``random_box_rotation``: a yaw of each object in place, up to ``max_tries`` tries."""

    max_overlap_num_allowed: NonNegative = 0.1
    max_tries: Tries = 100
    distribution: Distribution = "normal"
    yaw_std: Std = 0.3
    expand_hwl: Scales = (1.0, 1.1, 1.1)
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST


class RandomBoxGlobalRotationKwargs(_Kwargs):
    """``random_box_global_rotation``: each object moved along a circle about the origin."""

    max_overlap_num_allowed: NonNegative = 0.1
    max_tries: Tries = 100
    distribution: Distribution = "normal"
    yaw_std: Std = 0.3
    expand_hwl: Scales = (1.1, 1.1, 1.1)
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST


class RandomBoxShiftKwargs(_Kwargs):
    """``random_box_shift``: each object shifted by ~ N(0, diag(xyz_std)^2), up to ``max_tries`` tries."""

    max_overlap_num_allowed: NonNegative = 0.1
    max_overlap_rate: NonNegative | None = None
    max_tries: Tries = 100
    distribution: Distribution = "normal"
    xyz_std: Stds = (1.0, 0.0, 1.0)
    expand_hwl: Scales = (1.0, 1.1, 1.1)
    augment_list: tuple[str, ...] = DEFAULT_AUGMENT_LIST
    shuffle: bool = False


class DiluteBackgroundKwargs(_Kwargs):
    """``dilute_background``: the background voxelised at ``dilute_voxel_base`` (m)."""

    dilute_voxel_base: Positive = 0.4
    expand_hwl: Scales = (4.0, 4.0, 4.0)
    keep_list: tuple[str, ...] = DEFAULT_KEEP_LIST


class RemoveBackgroundKwargs(_Kwargs):
    """``remove_background``: only the points near objects (``num_object > 0``: near that many drawn)."""

    expand_hwl: Scales = (4.0, 4.0, 4.0)
    keep_list: tuple[str, ...] = DEFAULT_KEEP_LIST
    num_object: int = -1


AUGMENT_KWARGS: Mapping[str, type[_Kwargs]] = {
    "random_jitter": RandomJitterKwargs,
    "random_drop": RandomDropKwargs,
    "random_global_drop": RandomGlobalDropKwargs,
    "random_voxel_downsample": RandomVoxelDownsampleKwargs,
    "random_rotation_all": RandomRotationAllKwargs,
    "random_flip_all": RandomFlipAllKwargs,
    "random_scale_all": RandomScaleAllKwargs,
    "random_transition": RandomTransitionKwargs,
    "random_box_rotation": RandomBoxRotationKwargs,
    "random_box_global_rotation": RandomBoxGlobalRotationKwargs,
    "random_box_shift": RandomBoxShiftKwargs,
    "dilute_background": DiluteBackgroundKwargs,
    "remove_background": RemoveBackgroundKwargs,
}
"""The keyword arguments of every op, by the name an :class:`AugmentStep`'s ``method`` gives (the ops:
``pgnn.data.augment.AUGMENT_OPS``, the same names)."""


class AugmentStep(BaseModel):
    """One op: written (and dumped) flat as ``{"method": name, **kwargs}``.

    ``kwargs`` are checked against the op's model in :data:`AUGMENT_KWARGS` (unknown names and bad values are
    errors) and stored with every default filled in, so a dumped config says exactly what ran.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_to_nested(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "kwargs" in data and set(data) <= {"method", "kwargs"}:
            method, kwargs = data.get("method"), dict(data["kwargs"])
        else:
            method = data.get("method")
            kwargs = {k: v for k, v in data.items() if k != "method"}
        if method not in AUGMENT_KWARGS:
            known = ", ".join(sorted(AUGMENT_KWARGS))
            raise ValueError(f"unknown augmentation method {method!r}; expected one of: {known}")
        params = AUGMENT_KWARGS[method].model_validate(kwargs)
        return {"method": method, "kwargs": params.model_dump()}

    @model_serializer
    def _dump_flat(self) -> dict[str, Any]:
        return {"method": self.method, **self.kwargs}


class AugmentConfig(BaseModel):
    """An ordered list of augmentation steps, applied in order (the original's ``data_aug_configs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[AugmentStep, ...] = ()


# The original's car_auto_T{0,1,2,3}_train / _trainval train configs (identical "data_aug_configs"; the
# ped_cyl_auto_T3_trainval config uses the same list).
ORIGINAL_CAR_AUGMENT = AugmentConfig(
    steps=(
        {"method": "random_rotation_all", "distribution": "normal", "yaw_std": math.pi / 8},
        {"method": "random_flip_all", "flip_prob": 0.5},
        {
            "method": "random_box_shift",
            "max_overlap_num_allowed": 100,
            "max_overlap_rate": 0.01,
            "max_tries": 100,
            "distribution": "normal",
            "xyz_std": (3.0, 0.0, 3.0),
            "expand_hwl": (1.1, 1.1, 1.1),
        },
    )
)
