"""Training-time data augmentation: the original Point-GNN's ``models/preprocess.py`` ops, pure and seeded.

The scene (points with attributes, boxes, names) is :mod:`pgnn.data.points`; the ops are in
:mod:`pgnn.data.augment_ops` (points alone, whole scene) and :mod:`pgnn.data.augment_box_ops` (per object,
background); this module holds their registry and :func:`apply_augmentations`. The config, with every op's
keyword arguments and their defaults, is :mod:`pgnn.config.augment`.

Every op has the signature ``op(points, boxes, names, rng, **kwargs) -> (points, boxes, names)``, with
exactly the keyword arguments of its model in :data:`pgnn.config.augment.AUGMENT_KWARGS` and no defaults of
its own (a step's ``kwargs`` hold them all); it never modifies its inputs and draws all randomness from
``rng``. Every op carries ``DontCare`` rows (placeholders) through unchanged, as the original did for all but
``random_transition``; ``dilute_background`` and ``remove_background`` drop them, as the original did. Empty
clouds and empty background sets are handled instead of crashing.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pgnn.config.augment import AugmentConfig
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
    "apply_augmentations",
    "from_original_configs",
]

# Every op, by the name an AugmentStep's ``method`` gives (their kwargs: pgnn.config.augment.AUGMENT_KWARGS)
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
