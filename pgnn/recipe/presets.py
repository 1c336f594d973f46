"""Named recipes: one key in ``params.yaml`` (``preset``) picks graph, targets, model, training, loss and
post-processing settings that belong together. ``params.yaml`` sections override single keys.

- ``small_painted_car``: the default (pgnn's own): ``small`` on the seed's painted ``is`` inputs, the heading
  kept (``Car_heading``), 3000 steps, validation AP during training.
- ``small``: a Car detector sized to train on a 2-core CPU in minutes, intensity only (pgnn's own).
- ``small_3class``: ``small`` as one model for Car, Pedestrian and Cyclist (label method ``yaw``).
- ``car_T3``: the paper's Car model, 0.8 m keypoints, T = 3, auto-registration (configs/car_auto_T3_train).
- ``ped_cyc_T3``: Pedestrian + Cyclist, 0.4 m keypoints, 256 channels (configs/ped_cyl_auto_T3_trainval).
- ``painted_car_T3``: car_T3 on painted points, ``is`` = reflectance + 4 PointPainting scores (the seed).

The three original recipes train with the original's augmentation
(:data:`pgnn.config.augment.ORIGINAL_CAR_AUGMENT`, rebuilt every epoch by
:class:`pgnn.training.dataset.AugmentedRecords`) and without ground-truth sampling, as the original's configs
did. ``small`` trains on the cached graphs without augmentation: in its 600-step run on the
synthetic data the original's augmentation cut the val Car AP (R40, moderate) from 13.1 to 1.4 (3D) and from
30.1 to 3.4 (BEV); so few steps cannot fit the rotated, flipped and shifted scenes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pgnn.config.augment import ORIGINAL_CAR_AUGMENT, AugmentConfig
from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig, TargetsConfig
from pgnn.config.gt_sampling import GtSampleConfig
from pgnn.config.inference import NMS_OVERLAP, YAW_MERGE, PostprocessConfig, class_fold
from pgnn.config.network import MODEL_PRESETS, LossConfig, ModelConfig
from pgnn.config.params import Params, overrides
from pgnn.config.training import TrainConfig
from pgnn.config.types import Flag, Seed
from pgnn.core.errors import ParamsError, params_error
from pgnn.graphs.features import FEATURE_WIDTHS
from pgnn.graphs.targets import method_class_names, num_classes


class Recipe(BaseModel):
    """Everything a preset fixes. ``graph``/``runtime_graph`` name entries of ``GRAPH_PRESETS``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    graph: GraphConfig
    graph_name: str
    runtime_graph: GraphConfig
    runtime_graph_name: str
    graph_seed: Seed = 0
    targets: TargetsConfig
    model: ModelConfig
    train: TrainConfig
    loss: LossConfig
    postprocess: PostprocessConfig = Field(default_factory=PostprocessConfig)
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    """Training-time augmentation, rebuilt every epoch (no steps: train on the cached graphs)."""
    gt_sampling: GtSampleConfig | None = None
    """Ground-truth sampling (pasting database objects) before the augmentation; None: off."""


def _car(model: str, input_features: str = "i", **train: Any) -> Recipe:
    return Recipe(
        graph=GRAPH_PRESETS["car"],
        graph_name="car",
        runtime_graph=GRAPH_PRESETS["car_runtime"],
        runtime_graph_name="car_runtime",
        targets=TargetsConfig(label_method="Car", input_features=input_features),
        model=MODEL_PRESETS[model],
        # configs/car_auto_T3_train_train_config: sgd 0.125, x0.1 every 400k steps, batch 4 (2 GPUs x 2)
        train=TrainConfig(
            **{
                "optimizer": "sgd",
                "initial_lr": 0.125,
                "decay_step": 400_000,
                "decay_factor": 0.1,
                "batch_size": 4,
                "max_steps": 1_400_000,
                "max_epoch": 1718,
                "checkpoint_every": 10_000,
                "save_every_epoch": 20,
                "train_dataset": "train_car.txt",
                **train,
            }
        ),
        loss=LossConfig(cls_loss_type="softmax", cls_loss_weight=0.1, loc_loss_weight=10.0),
        # the car_auto_T* train configs' data_aug_configs; none of them uses crop_aug (GT sampling)
        augment=ORIGINAL_CAR_AUGMENT,
    )


_SMALL = Recipe(
    graph=GRAPH_PRESETS["car"],
    graph_name="car",
    runtime_graph=GRAPH_PRESETS["car_runtime"],
    runtime_graph_name="car_runtime",
    targets=TargetsConfig(label_method="Car", input_features="i"),
    model=MODEL_PRESETS["small"],
    train=TrainConfig(
        optimizer="adam",
        initial_lr=0.004,
        decay_step=200,
        decay_factor=0.5,
        staircase=True,
        batch_size=2,
        max_steps=600,
        max_epoch=None,
        checkpoint_every=100,
        keep_last=2,
        log_every=20,
        resample_graph=False,
    ),
    loss=LossConfig(
        cls_loss_type="softmax",
        cls_loss_weight=1.0,
        loc_loss_weight=10.0,
        regularizer_type=None,
        regularizer_kwargs={},
    ),
)


def _small_painted_car(recipe: Recipe) -> Recipe:
    """The default: ``recipe`` (``small``) on the seed's painted ``is`` inputs, with the heading kept
    (``Car_heading``: four yaw bins instead of the original's two, which fold a car's heading modulo pi),
    the ``small_car`` graphs (a 2 m keypoint radius instead of 4 m), the classification loss weighted 2
    (instead of 1), 3000 steps (x0.5 every 750) on 2 CPU threads, and the validation AP on 16 val frames
    every 1000 steps. Found with the experiments of docs/experiment-log.md (e10, then e12-e16 for speed)."""
    names = method_class_names("Car_heading")
    return recipe.model_copy(
        update={
            "graph": GRAPH_PRESETS["small_car"],
            "graph_name": "small_car",
            "runtime_graph": GRAPH_PRESETS["small_car_runtime"],
            "runtime_graph_name": "small_car_runtime",
            "targets": recipe.targets.model_copy(
                update={"label_method": "Car_heading", "input_features": "is"}
            ),
            "model": recipe.model.model_copy(update={"input_dim": 5, "num_classes": len(names)}),
            "loss": recipe.loss.model_copy(update={"cls_loss_weight": 2.0}),
            "train": recipe.train.model_copy(
                update={
                    "max_steps": 3000,
                    "decay_step": 750,
                    "eval_every": 1000,
                    "eval_frames": 16,
                    "threads": 2,
                }
            ),
            "postprocess": recipe.postprocess.model_copy(
                update={
                    "class_names": names,
                    "class_fold": class_fold(names),
                    "score_threshold": 1.0 / len(names),
                }
            ),
        }
    )


def _three_class(recipe: Recipe) -> Recipe:
    """``recipe`` as one model for Car, Pedestrian and Cyclist: the ``yaw`` label method (8 classes: each
    object class in two yaw bins, Background, DontCare), its post-processing and NMS overlap."""
    names = method_class_names("yaw")
    return recipe.model_copy(
        update={
            "targets": recipe.targets.model_copy(update={"label_method": "yaw"}),
            "model": recipe.model.model_copy(update={"num_classes": len(names)}),
            "postprocess": recipe.postprocess.model_copy(
                update={
                    "class_names": names,
                    "class_fold": class_fold(names),
                    "overlap_threshold": NMS_OVERLAP["yaw"],
                }
            ),
        }
    )


PRESETS: Mapping[str, Recipe] = MappingProxyType(
    {
        "small": _SMALL,
        "small_3class": _three_class(_SMALL),
        "small_painted_car": _small_painted_car(_SMALL),
        "car_T3": _car("car_T3"),
        # the fork's checkpoints/painted_car_auto_T3_train/train_config: 1 GPU x batch 2, 245k steps or 150
        # epochs (it stopped at 150 epochs, 244,500 steps, before the 400k decay: constant-LR SGD)
        "painted_car_T3": _car(
            "painted_car_T3", input_features="is", batch_size=2, max_steps=245_000, max_epoch=150
        ),
        "ped_cyc_T3": Recipe(
            graph=GRAPH_PRESETS["ped_cyc"],
            graph_name="ped_cyc",
            runtime_graph=GRAPH_PRESETS["ped_cyc_runtime"],
            runtime_graph_name="ped_cyc_runtime",
            targets=TargetsConfig(label_method="Pedestrian_and_Cyclist", input_features="i"),
            model=MODEL_PRESETS["ped_cyc_T3"],
            # configs/ped_cyl_auto_T3_trainval_train_config: sgd 0.32, x0.25 every 400k steps
            train=TrainConfig(
                optimizer="sgd",
                initial_lr=0.32,
                decay_step=400_000,
                decay_factor=0.25,
                batch_size=4,
                max_steps=1_000_000,
                max_epoch=1611,
                checkpoint_every=10_000,
                save_every_epoch=20,
                train_dataset="trainval_pedestrian_cyclist.txt",
            ),
            # its model_kwargs regularise with l1 scale 1e-6 (the car configs: 5e-7)
            loss=LossConfig(
                cls_loss_type="softmax",
                cls_loss_weight=0.1,
                loc_loss_weight=10.0,
                regularizer_kwargs={"scale": 1e-6},
            ),
            postprocess=PostprocessConfig(
                class_names=("Background", "Pedestrian", "Pedestrian", "Cyclist", "Cyclist", "DontCare"),
                class_fold={2: 1, 4: 3},
                overlap_threshold=0.2,
            ),
            # its data_aug_configs are the Car configs' list; it uses no crop_aug either
            augment=ORIGINAL_CAR_AUGMENT,
        ),
    }
)


def _merge(cfg: BaseModel, section: Mapping[str, Any]) -> Any:
    """``cfg`` with the non-null keys of ``section`` replaced, re-validated (unknown keys are errors)."""
    upd = overrides(dict(section))
    if not upd:
        return cfg
    return type(cfg).model_validate({**cfg.model_dump(), **upd})


_ENABLED = TypeAdapter(Flag | None)


def _enabled(section: Mapping[str, Any], key: str) -> bool | None:
    """A section's ``enabled``: true, false or null (a ParamsError naming ``<key>.enabled`` otherwise)."""
    try:
        return _ENABLED.validate_python(section.get("enabled"))
    except ValidationError as e:
        raise params_error("params.yaml", e, f"{key}.enabled") from e


def _augment(base: AugmentConfig, section: Mapping[str, Any]) -> AugmentConfig:
    """The preset's augmentation with params.yaml's ``augment`` section (``enabled``, ``steps``) applied.

    ``enabled: false`` turns it off (whatever ``steps`` says); ``steps`` (a list) replaces the preset's;
    ``enabled: true`` with neither steps given nor any in the preset runs the original's Car list.
    """
    unknown = sorted(set(section) - {"enabled", "steps"})
    if unknown:
        raise ParamsError(
            "params.yaml", f"unknown keys {unknown}; expected 'enabled' and 'steps'", key="augment"
        )
    enabled, steps = _enabled(section, "augment"), section.get("steps")
    if enabled is False:
        return AugmentConfig()
    if steps is not None:
        return AugmentConfig(steps=steps)
    if enabled and not base.steps:
        return ORIGINAL_CAR_AUGMENT
    return base


def _gt_sampling(base: GtSampleConfig | None, section: Mapping[str, Any]) -> GtSampleConfig | None:
    """The preset's ground-truth sampling with params.yaml's ``gt_sampling`` section applied: ``enabled``
    (null: the preset's choice) and any :class:`pgnn.config.gt_sampling.GtSampleConfig` keys (null: the
    default)."""
    settings = dict(section)
    enabled = _enabled(settings, "gt_sampling")
    settings.pop("enabled", None)
    start = base if base is not None else GtSampleConfig()
    merged = _merge(start, settings)  # validated even when off: a misspelt key is an error
    if enabled is False or (enabled is None and base is None):
        return None
    return merged


def _postprocess(base: PostprocessConfig, label_method: str, section: Mapping[str, Any]) -> PostprocessConfig:
    """The preset's post-processing for ``label_method``: class names and folds follow the label method (a
    Car preset switched to ``yaw`` post-processes Car, Pedestrian and Cyclist), and so does the original's NMS
    overlap threshold unless the preset's method is the same, and the yaw merge (``YAW_MERGE``: circular for
    ``Car_heading``); params.yaml's ``postprocess`` keys override."""
    names = method_class_names(label_method)
    if tuple(base.class_names) != names:
        base = base.model_copy(
            update={
                "class_names": names,
                "class_fold": class_fold(names),
                "overlap_threshold": NMS_OVERLAP.get(label_method, base.overlap_threshold),
            }
        )
    base = base.model_copy(update={"yaw_merge": YAW_MERGE.get(label_method, base.yaw_merge)})
    return _merge(base, section)


# The params.yaml section of each config class (names the key of a ParamsError).
_SECTION_OF: dict[type[BaseModel], str] = {
    GraphConfig: "graph",
    TargetsConfig: "targets",
    ModelConfig: "model",
    TrainConfig: "train",
    LossConfig: "loss",
    PostprocessConfig: "postprocess",
    AugmentConfig: "augment",
    GtSampleConfig: "gt_sampling",
}


def apply_preset(params: Params, source: str | Path = "params.yaml") -> Recipe:
    """The preset named by ``params.preset`` with the params sections' overrides applied.

    Raises:
        ParamsError: an unknown preset, or a section value its config rejects (naming the file ``source``
            and ``<section>.<key>``, with the closest known key for an unknown one).
    """
    try:
        return _apply_preset(params)
    except ValidationError as e:
        model = next((m for m in _SECTION_OF if m.__name__ == e.title), None)
        raise params_error(source, e, _SECTION_OF.get(model, ""), model=model) from e
    except ParamsError as e:  # raised below, before the file was known
        raise ParamsError(source, e.message, e.line, key=e.key) from e


_SEED = TypeAdapter(Seed)


def _apply_preset(params: Params) -> Recipe:
    if params.preset not in PRESETS:
        raise ParamsError(
            "params.yaml",
            f"unknown preset {params.preset!r}; expected one of {sorted(PRESETS)}",
            key="preset",
        )
    base = PRESETS[params.preset]
    graph_section = dict(params.graph)
    seed = graph_section.pop("seed", None)
    try:
        graph_seed = base.graph_seed if seed is None else _SEED.validate_python(seed)
    except ValidationError as e:
        raise params_error("params.yaml", e, "graph.seed") from e
    targets = _merge(base.targets, params.targets)
    # The network's input width and class count follow the features and label method unless set explicitly.
    implied = {
        "input_dim": FEATURE_WIDTHS[targets.input_features],
        "num_classes": num_classes(targets.label_method),
    }
    model = _merge(base.model, {**implied, **overrides(dict(params.model))})
    return base.model_copy(
        update={
            "graph": _merge(base.graph, graph_section),
            "graph_seed": graph_seed,
            "targets": targets,
            "model": model,
            "train": _merge(base.train, params.train),
            "loss": _merge(base.loss, params.loss),
            "postprocess": _postprocess(base.postprocess, targets.label_method, params.postprocess),
            "augment": _augment(base.augment, params.augment),
            "gt_sampling": _gt_sampling(base.gt_sampling, params.gt_sampling),
        }
    )
