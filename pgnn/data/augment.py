"""Training-time data augmentation: the original Point-GNN's ``models/preprocess.py`` ops, pure and seeded.

The scene (points with attributes, boxes, names) is :mod:`pgnn.data.points`; the ops are in
:mod:`pgnn.data.augment_ops` (points alone, whole scene) and :mod:`pgnn.data.augment_box_ops` (per object,
background); this module holds their registry, the config and :func:`apply_augmentations`.

Every op has the signature ``op(points, boxes, names, rng, **params) -> (points, boxes, names)``; it never
modifies its inputs and draws all randomness from ``rng``. Every op carries ``DontCare`` rows (placeholders)
through unchanged, as the original did for all but ``random_transition``; ``dilute_background`` and
``remove_background`` drop them, as the original did. Empty clouds and empty background sets are handled
instead of crashing.

Op names and defaults are the original's (``models/preprocess.py``). Parameters are renamed where the
original's names were misleading; :func:`from_original_configs` translates an original ``data_aug_configs``
list:

================== ================= ===========================================================
original           pgnn              meaning
================== ================= ===========================================================
``method_name``    ``distribution``  ``"normal"``: N(0, std); ``"uniform"``: U(-std, std)
``max_trails``     ``max_tries``     attempts per object before it is left where it was
``expend_factor``  ``expand_hwl``    box scale factors, in the original's order **(h, w, l)**
``appr_factor``    (dropped)         raster resolution of the original's approximate IoU; pgnn's
                                     IoU is exact (:func:`pgnn.core.boxes.iou_3d`)
================== ================= ===========================================================

The Car configurations T0-T3 of the original train with :data:`ORIGINAL_CAR_AUGMENT`: a global rotation
with yaw ~ N(0, (pi/8)^2), a flip with p = 0.5, and a per-object shift ~ N(0, diag(3, 0, 3)^2) m with up to
100 tries.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model, model_serializer, model_validator

from pgnn.data.augment_box_ops import (
    dilute_background,
    random_box_global_rotation,
    random_box_rotation,
    random_box_shift,
    remove_background,
)
from pgnn.data.augment_ops import (
    random_drop,
    random_flip_all,
    random_global_drop,
    random_jitter,
    random_rotation_all,
    random_scale_all,
    random_transition,
    random_voxel_downsample,
)
from pgnn.data.points import PointSet, Scene, check_scene

__all__ = [
    "AUGMENT_OPS",
    "ORIGINAL_CAR_AUGMENT",
    "AugmentConfig",
    "AugmentStep",
    "apply_augmentations",
    "from_original_configs",
]

# Every op, by the name an AugmentStep's ``method`` gives
AUGMENT_OPS: dict[str, Callable[..., Scene]] = {
    "random_jitter": random_jitter,
    "random_drop": random_drop,
    "random_global_drop": random_global_drop,
    "random_voxel_downsample": random_voxel_downsample,
    "random_rotation_all": random_rotation_all,
    "random_flip_all": random_flip_all,
    "random_scale_all": random_scale_all,
    "random_transition": random_transition,
    "random_box_rotation": random_box_rotation,
    "random_box_global_rotation": random_box_global_rotation,
    "random_box_shift": random_box_shift,
    "dilute_background": dilute_background,
    "remove_background": remove_background,
}


@cache
def _params_model(method: str) -> type[BaseModel]:
    """A strict pydantic model of an op's keyword parameters, built from its signature and defaults."""
    fn = AUGMENT_OPS[method]
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            fields[p.name] = (hints[p.name], p.default)
    return create_model(f"{method}_params", __config__=ConfigDict(extra="forbid", frozen=True), **fields)


class AugmentStep(BaseModel):
    """One op: written (and dumped) flat as ``{"method": name, **kwargs}``.

    ``kwargs`` are checked against the op's signature (unknown names and bad values are errors) and stored
    with every default filled in, so a dumped config says exactly what ran.
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
        if method not in AUGMENT_OPS:
            known = ", ".join(sorted(AUGMENT_OPS))
            raise ValueError(f"unknown augmentation method {method!r}; expected one of: {known}")
        params = _params_model(method).model_validate(kwargs)
        return {"method": method, "kwargs": params.model_dump()}

    @model_serializer
    def _dump_flat(self) -> dict[str, Any]:
        return {"method": self.method, **self.kwargs}


class AugmentConfig(BaseModel):
    """An ordered list of augmentation steps, applied in order (the original's ``data_aug_configs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[AugmentStep, ...] = ()


def apply_augmentations(
    points: PointSet, boxes: np.ndarray, names: Sequence[str], cfg: AugmentConfig, rng: np.random.Generator
) -> Scene:
    """Run ``cfg``'s steps in order; each draws from ``rng``.

    Shapes:
        boxes: (M, 7) -> (M', 7) float64; names: M -> M' (only the background ops drop rows)
    """
    boxes_out, names_out = check_scene(points, boxes, names)
    for step in cfg.steps:
        op = AUGMENT_OPS[step.method]
        points, boxes_out, names_out = op(points, boxes_out, names_out, rng, **step.kwargs)
    return points, boxes_out, names_out


# Original kwargs renamed in pgnn, and the ones the original accepted but never read.
_ORIGINAL_RENAMES: dict[str, str] = {
    "method_name": "distribution",
    "max_trails": "max_tries",
    "expend_factor": "expand_hwl",
}
_ORIGINAL_UNUSED: dict[str, frozenset[str]] = {
    "random_rotation_all": frozenset({"expend_factor"}),
    "random_box_rotation": frozenset({"appr_factor"}),
    "random_box_global_rotation": frozenset({"appr_factor"}),
    "random_box_shift": frozenset({"appr_factor"}),
    "remove_background": frozenset({"mask_random_rotation_std", "mask_random_jitter_stds"}),
}


def from_original_configs(data_aug_configs: Sequence[dict[str, Any]]) -> AugmentConfig:
    """Translate an original train config's ``data_aug_configs`` (``method_name``/``method_kwargs`` items)."""
    steps = []
    for item in data_aug_configs:
        method = item["method_name"]
        unused = _ORIGINAL_UNUSED.get(method, frozenset())
        original = item.get("method_kwargs", {})
        kwargs = {_ORIGINAL_RENAMES.get(k, k): v for k, v in original.items() if k not in unused}
        steps.append({"method": method, **kwargs})
    return AugmentConfig(steps=tuple(steps))


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
