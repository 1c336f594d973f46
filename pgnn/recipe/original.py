"""The original Point-GNN's config pair translated into pgnn's configs (the files themselves:
:mod:`pgnn.config.original_format`).

:func:`params_overrides` turns a pair into ``params.yaml`` sections over the matching preset
(``pgnn import-config``); :func:`model_config`, :func:`loss_config` and :func:`train_config` build the typed
configs the training code takes (``pgnn check train-step``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pgnn.config.augment import AugmentConfig
from pgnn.config.graphs import GraphConfig, GraphLevelConfig
from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.original_format import (
    LAYER_KWARGS,
    GraphGenKwargs,
    OriginalConfig,
    OriginalTrainConfig,
    read_original_config,
    read_original_train_config,
)
from pgnn.config.training import TrainConfig, optimizer_kwargs
from pgnn.core.errors import DataError
from pgnn.data.augment import from_original_configs
from pgnn.graphs.targets import method_class_names
from pgnn.nn.weights import model_config_from_original

# ----------------------------------------------------------------------------------------------------------
# Translation
# ----------------------------------------------------------------------------------------------------------


def graph_config(kwargs: GraphGenKwargs, *, source: str | Path, key: str) -> GraphConfig:
    """A ``GraphConfig`` from ``graph_gen_kwargs`` (level i must have ``graph_level`` i)."""
    levels = []
    for i, level in enumerate(kwargs.level_configs):
        if level.graph_level != i:
            raise DataError(
                source, f"key '{key}.level_configs.{i}.graph_level': expected {i}, got {level.graph_level}"
            )
        levels.append(
            GraphLevelConfig(
                graph_scale=level.graph_scale,
                radius=level.graph_gen_kwargs.radius,
                num_neighbors=level.graph_gen_kwargs.num_neighbors,
            )
        )
    return GraphConfig(
        base_voxel_size=kwargs.base_voxel_size,
        downsample_method=kwargs.downsample_method,
        add_rnd3d=kwargs.add_rnd3d,
        levels=tuple(levels),
    )


def model_config(cfg: OriginalConfig, *, source: str | Path) -> ModelConfig:
    """The network of ``model_kwargs`` (the layer kinds, scopes and widths pgnn builds; see
    pgnn.nn.weights)."""
    layers = cfg.model_kwargs.layer_configs
    expected_scopes = ["layer1", *(f"layer{t + 2}" for t in range(len(layers) - 2)), "output"]
    scopes = [layer.scope for layer in layers]
    if scopes != expected_scopes:
        raise DataError(
            source, f"key 'model_kwargs.layer_configs[*].scope': expected {expected_scopes}, got {scopes}"
        )
    filled = cfg.model_dump()
    for layer in filled["model_kwargs"]["layer_configs"]:
        layer["kwargs"] = LAYER_KWARGS[layer["type"]].model_validate(layer["kwargs"]).model_dump()
    model = model_config_from_original(filled, source=source)
    if model.num_classes != len(method_class_names(cfg.label_method)):
        raise DataError(
            source,
            f"key 'num_classes': expected {len(method_class_names(cfg.label_method))} for label_method "
            f"{cfg.label_method!r}, got {cfg.num_classes}",
        )
    return model


def loss_config(cfg: OriginalConfig, *, source: str | Path) -> LossConfig:
    """The loss of ``loss`` and ``model_kwargs``' regulariser (the Huber delta is the original's fixed 1)."""
    loss, mk = cfg.loss, cfg.model_kwargs
    if "top_k" in loss.cls_loss_type or "top_k" in loss.loc_loss_type:
        raise DataError(
            source,
            "key 'loss': top_k_softmax / top_k_huber_loss keep a fixed k per tower in the original and a "
            "per-frame fraction in pgnn; there is no exact translation",
        )
    cls_kwargs = {"softmax": set(), "focal_sigmoid": {"alpha", "gamma"}, "focal_softmax": {"gamma"}}
    unknown = sorted(set(loss.cls_loss_kwargs) - cls_kwargs[loss.cls_loss_type])
    if unknown:
        raise DataError(
            source, f"key 'loss.cls_loss_kwargs': unsupported for {loss.cls_loss_type}: {unknown}"
        )
    unknown = sorted(set(loss.loc_loss_kwargs) - {"classwise_loc_loss_weight"})
    if unknown:
        raise DataError(source, f"key 'loss.loc_loss_kwargs': unsupported keys {unknown}")
    fields: dict[str, Any] = {
        "cls_loss_type": loss.cls_loss_type,
        "cls_loss_weight": loss.cls_loss_weight,
        "loc_loss_type": loss.loc_loss_type,
        "loc_loss_weight": loss.loc_loss_weight,
        "huber_delta": 1.0,
        "regularizer_type": mk.regularizer_type,
        "regularizer_kwargs": dict(mk.regularizer_kwargs or {}),
    }
    if "alpha" in loss.cls_loss_kwargs:
        fields["focal_alpha"] = loss.cls_loss_kwargs["alpha"]
    if "gamma" in loss.cls_loss_kwargs:
        fields["focal_gamma"] = loss.cls_loss_kwargs["gamma"]
    if "classwise_loc_loss_weight" in loss.loc_loss_kwargs:
        fields["classwise_loc_loss_weight"] = tuple(loss.loc_loss_kwargs["classwise_loc_loss_weight"])
    try:
        return LossConfig(**fields)
    except ValidationError as e:
        raise DataError(source, f"keys 'loss' / 'model_kwargs.regularizer_*': {e}") from e


def train_config(tcfg: OriginalTrainConfig, *, source: str | Path) -> TrainConfig:
    """The optimiser, schedule, batch and length of a train config (pgnn's other settings at defaults)."""
    towers = tcfg.NUM_GPU * tcfg.COPY_PER_GPU
    if tcfg.batch_size % towers:
        raise DataError(
            source,
            f"key 'batch_size': expected a multiple of NUM_GPU x COPY_PER_GPU = {towers} (the original "
            f"would silently drop frames), got {tcfg.batch_size}",
        )
    if towers > 1 and not tcfg.unify_copies:
        raise DataError(
            source,
            "key 'unify_copies': pgnn normalises the losses over the whole batch (unify_copies: true); "
            f"per-tower means with {towers} towers are not supported",
        )
    try:
        optimizer_kwargs(tcfg.optimizer, tcfg.optimizer_kwargs)
    except ValueError as e:
        raise DataError(source, f"key 'optimizer_kwargs': {e}") from e
    return TrainConfig(
        optimizer=tcfg.optimizer,
        optimizer_kwargs=dict(tcfg.optimizer_kwargs),
        initial_lr=tcfg.initial_lr,
        decay_step=tcfg.decay_step,
        decay_factor=tcfg.decay_factor,
        staircase=tcfg.is_staircase,
        batch_size=tcfg.batch_size,
        max_steps=tcfg.max_steps if tcfg.max_steps is not None and tcfg.max_steps > 0 else None,
        max_epoch=tcfg.max_epoch,
        save_every_epoch=tcfg.save_every_epoch,
        train_dataset=tcfg.train_dataset,
    )


# train TrainConfig fields a train config sets (the rest are pgnn's: checkpoints, logging, seed, device)
TRAIN_KEYS = (
    "optimizer",
    "optimizer_kwargs",
    "initial_lr",
    "decay_step",
    "decay_factor",
    "staircase",
    "batch_size",
    "max_steps",
    "max_epoch",
    "save_every_epoch",
    "train_dataset",
)
LOSS_KEYS = (
    "cls_loss_type",
    "cls_loss_weight",
    "loc_loss_type",
    "loc_loss_weight",
    "huber_delta",
    "focal_alpha",
    "focal_gamma",
    "classwise_loc_loss_weight",
    "regularizer_type",
    "regularizer_kwargs",
)


def _loss_keys(loss: LossConfig) -> list[str]:
    """The LossConfig keys an original config sets (focal settings only for a focal loss)."""
    keys = [k for k in LOSS_KEYS if getattr(loss, k) is not None]
    if "focal" not in loss.cls_loss_type:
        keys = [k for k in keys if not k.startswith("focal_")]
    return keys


def choose_preset(cfg: OriginalConfig) -> str:
    """The preset an original config builds on: its label method's (painted Car for ``is`` features)."""
    if cfg.label_method == "Pedestrian_and_Cyclist":
        return "ped_cyc_T3"
    return "painted_car_T3" if cfg.input_features == "is" else "car_T3"


def _class_fold(names: tuple[str, ...]) -> dict[int, int]:
    first: dict[str, int] = {}
    fold = {}
    for i, name in enumerate(names):
        if name in first and name not in ("Background", "DontCare"):
            fold[i] = first[name]
        first.setdefault(name, i)
    return fold


def params_overrides(
    config_path: str | Path, train_config_path: str | Path, *, preset: str | None = None
) -> dict[str, Any]:
    """``params.yaml`` content (plain data) that makes pgnn's recipe the original pair's.

    Every section the pair determines is written out in full (graph, targets, model, train, loss,
    postprocess, augment, gt_sampling) over ``preset`` (default :func:`choose_preset`), which supplies only
    pgnn's own settings (checkpoint interval, logging, seeds) and the runtime graph: params.yaml cannot
    override that one, so the pair's ``runtime_graph_gen_kwargs`` must equal the preset's.
    """
    from pgnn.recipe.presets import PRESETS

    config_path, train_config_path = Path(config_path), Path(train_config_path)
    cfg = read_original_config(config_path)
    tcfg = read_original_train_config(train_config_path)
    preset = preset or choose_preset(cfg)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    runtime = graph_config(cfg.runtime_graph_gen_kwargs, source=config_path, key="runtime_graph_gen_kwargs")
    if runtime != PRESETS[preset].runtime_graph:
        raise DataError(
            config_path,
            f"key 'runtime_graph_gen_kwargs': params.yaml cannot override the runtime graph, and this one "
            f"differs from preset {preset!r}'s ({PRESETS[preset].runtime_graph_name}): "
            f"{runtime.model_dump()} vs {PRESETS[preset].runtime_graph.model_dump()}",
        )
    graph = graph_config(cfg.graph_gen_kwargs, source=config_path, key="graph_gen_kwargs")
    model = model_config(cfg, source=config_path)
    loss = loss_config(cfg, source=config_path)
    train = train_config(tcfg, source=train_config_path)
    try:
        augment = from_original_configs(tcfg.data_aug_configs)
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(train_config_path, f"key 'data_aug_configs': {e}") from e
    class_names = method_class_names(cfg.label_method)
    params = {
        "preset": preset,
        "graph": graph.model_dump(mode="json"),
        "targets": {
            "label_method": cfg.label_method,
            "encoding": cfg.box_encoding_method,
            "input_features": cfg.input_features,
            "expend_factor": list(tcfg.expend_factor),
        },
        "model": model.model_dump(mode="json"),
        "train": {k: v for k, v in train.model_dump(mode="json").items() if k in TRAIN_KEYS},
        "loss": {k: v for k, v in loss.model_dump(mode="json").items() if k in _loss_keys(loss)},
        "postprocess": {
            "class_names": list(class_names),
            "class_fold": _class_fold(class_names),
            "overlap_threshold": cfg.nms_overlapped_thres,
        },
        "augment": {
            "enabled": bool(augment.steps),
            "steps": augment.model_dump(mode="json")["steps"],
        },
        "gt_sampling": {"enabled": False},
    }
    _check_expressible(params, graph, model, loss, train, augment, train_config_path)
    return params


def _check_expressible(
    params: dict[str, Any],
    graph: GraphConfig,
    model: ModelConfig,
    loss: LossConfig,
    train: TrainConfig,
    augment: AugmentConfig,
    source: Path,
) -> None:
    """Apply ``params``' preset as :func:`pgnn.recipe.presets.apply_preset` will; check it gives the
    translated configs.

    params.yaml's ``null`` keeps the preset's value, so e.g. "no regulariser" or "no step limit" over a
    preset that has one cannot be written; that is a ``DataError`` naming the setting.
    """
    from pgnn.config.params import Params
    from pgnn.recipe.presets import PRESETS, apply_preset

    base = PRESETS[params["preset"]]
    nulls = [f"loss.{k}" for k in LOSS_KEYS if getattr(loss, k) is None and getattr(base.loss, k) is not None]
    nulls += [
        f"train.{k}" for k in TRAIN_KEYS if getattr(train, k) is None and getattr(base.train, k) is not None
    ]
    if nulls:
        raise DataError(
            source,
            f"params.yaml cannot express {nulls} over preset {params['preset']!r}: these are null (none) in "
            "the original pair, and a null in params.yaml keeps the preset's value",
        )
    try:
        recipe = apply_preset(Params.model_validate(params))
    except ValueError as e:
        raise DataError(source, f"the translated params.yaml sections do not resolve: {e}") from e
    wrong = []
    if recipe.graph != graph:
        wrong.append("graph")
    if recipe.model != model:
        wrong.append("model")
    wrong += [f"loss.{k}" for k in LOSS_KEYS if getattr(recipe.loss, k) != getattr(loss, k)]
    wrong += [f"train.{k}" for k in TRAIN_KEYS if getattr(recipe.train, k) != getattr(train, k)]
    if recipe.augment != augment:
        wrong.append("augment")
    if wrong:
        raise DataError(
            source,
            f"params.yaml cannot express {wrong} over preset {params['preset']!r} (null keeps the "
            "preset's value)",
        )
