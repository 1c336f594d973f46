"""The original Point-GNN's two configuration files, typed: the *config* (``util.config_util.load_config``:
graph generation, labels, the model, the loss, NMS) and the *train config* (``load_train_config``: optimiser,
schedule, batch, epochs, augmentation, I/O) of WeijingShi/Point-GNN and the painted fork. The pydantic models
mirror them with the original's defaults where its code has one, and ``extra="forbid"``: a key the original
would not read, or that pgnn cannot honour, is a ``DataError`` naming the file and the key. The translation
into pgnn's configs is :mod:`pgnn.recipe.original`.

Keys that describe the original's machine, not the recipe, are read and dropped: ``NUM_GPU`` and
``COPY_PER_GPU`` (pgnn's ``batch_size`` is the global batch over every rank, as the original's is over its
towers, and its losses are normalised over the global batch as ``unify_copies`` does), ``gpu_memusage``,
``num_load_dataset_workers``, ``capacity``, ``load_dataset_to_mem``, ``train_dir``, ``checkpoint_path``,
``config_path``, ``visualization`` and ``eval_is_training`` (no layer of these models depends on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pgnn.core.bounded import read_json
from pgnn.core.errors import DataError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------------------------------------
# The config (load_config)
# ----------------------------------------------------------------------------------------------------------


class RadiusGraphKwargs(_Strict):
    """``gen_disjointed_rnn_local_graph_v3``'s arguments (its ``neighbors_downsample_method`` and ``scale``
    are not supported)."""

    radius: float = Field(gt=0)
    num_neighbors: int


class LevelConfig(_Strict):
    """One entry of ``level_configs``."""

    graph_gen_method: Literal["disjointed_rnn_local_graph_v3"]
    graph_gen_kwargs: RadiusGraphKwargs
    graph_level: int = Field(ge=0)
    graph_scale: float = Field(gt=0)


class GraphGenKwargs(_Strict):
    """``gen_multi_level_local_graph_v3``'s arguments (``graph_gen_kwargs``, ``runtime_graph_gen_kwargs``)."""

    base_voxel_size: float = Field(gt=0)
    level_configs: list[LevelConfig] = Field(min_length=1)
    add_rnd3d: bool = False
    downsample_method: Literal["center", "random"] = "center"


class PointSetPoolingKwargs(_Strict):
    """``scatter_max_point_set_pooling`` (``gnn.PointSetPooling.apply_regular``), the original's defaults."""

    point_MLP_depth_list: list[int]
    point_MLP_normalization_type: str = "fused_BN_center"
    point_MLP_activation_type: str = "ReLU"
    output_MLP_depth_list: list[int]
    output_MLP_normalization_type: str = "fused_BN_center"
    output_MLP_activation_type: str = "ReLU"


class GraphNetKwargs(_Strict):
    """``scatter_max_graph_auto_center_net`` (``gnn.GraphNetAutoCenter.apply_regular``)."""

    edge_MLP_depth_list: list[int]
    edge_MLP_normalization_type: str = "fused_BN_center"
    edge_MLP_activation_type: str = "ReLU"
    update_MLP_depth_list: list[int]
    update_MLP_normalization_type: str = "fused_BN_center"
    update_MLP_activation_type: str = "ReLU"
    auto_offset: bool = False
    auto_offset_MLP_depth_list: list[int] | None = None
    auto_offset_MLP_normalization_type: str = "fused_BN_center"
    auto_offset_MLP_feature_activation_type: str = "ReLU"


class PredictorKwargs(_Strict):
    """``classaware_predictor`` / ``classaware_predictor_128``."""

    normalization_type: str = "fused_BN_center"
    activation_type: str = "ReLU"


LAYER_KWARGS: Mapping[str, type[_Strict]] = {
    "scatter_max_point_set_pooling": PointSetPoolingKwargs,
    "scatter_max_graph_auto_center_net": GraphNetKwargs,
    "classaware_predictor": PredictorKwargs,
    "classaware_predictor_128": PredictorKwargs,
}


class LayerConfig(_Strict):
    """One entry of ``model_kwargs.layer_configs``; ``kwargs`` is checked against its ``type``."""

    type: Literal[
        "scatter_max_point_set_pooling",
        "scatter_max_graph_auto_center_net",
        "classaware_predictor",
        "classaware_predictor_128",
    ]
    graph_level: int = Field(ge=0)
    scope: str
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ModelKwargs(_Strict):
    """``MultiLayerFastLocalGraphModelV2``'s arguments (``model_kwargs``)."""

    layer_configs: list[LayerConfig] = Field(min_length=2)
    regularizer_type: Literal["l1", "l2", "l1_l2"] | None = None
    regularizer_kwargs: dict[str, float] | None = None


class LossKwargs(_Strict):
    """``MultiLayerFastLocalGraphModelV2.loss``'s arguments (``loss``), with the original's defaults."""

    cls_loss_type: Literal["softmax", "top_k_softmax", "focal_sigmoid", "focal_softmax"] = "focal_sigmoid"
    cls_loss_kwargs: dict[str, float] = Field(default_factory=dict)
    loc_loss_type: Literal["huber_loss", "top_k_huber_loss"] = "huber_loss"
    loc_loss_kwargs: dict[str, list[float]] = Field(default_factory=dict)
    cls_loss_weight: float = 1.0
    loc_loss_weight: float = 1.0


class OriginalConfig(_Strict):
    """A whole config file (``configs/<name>_config``, ``checkpoints/<name>/config``)."""

    model_name: Literal["multi_layer_fast_local_graph_model_v2"]
    model_kwargs: ModelKwargs
    num_classes: int = Field(ge=1)
    box_encoding_method: str
    input_features: Literal["irgb", "rgb", "0rgb", "0000", "i000", "i", "0", "is"]
    label_method: Literal["Car", "Pedestrian_and_Cyclist", "yaw"]
    graph_gen_method: Literal["multi_level_local_graph_v3"]
    graph_gen_kwargs: GraphGenKwargs
    runtime_graph_gen_kwargs: GraphGenKwargs
    downsample_by_voxel_size: None = None
    """A voxel pre-downsampling of the points; only null (none) is supported."""
    loss: LossKwargs = Field(default_factory=LossKwargs)
    nms_overlapped_thres: float = Field(ge=0.0, le=1.0)
    eval_is_training: bool = True


# ----------------------------------------------------------------------------------------------------------
# The train config (load_train_config)
# ----------------------------------------------------------------------------------------------------------


class OriginalTrainConfig(_Strict):
    """A whole train config file (``configs/<name>_train_config``, ``checkpoints/<name>/train_config``)."""

    optimizer: Literal["sgd", "momentum", "rmsprop", "adam"]
    optimizer_kwargs: dict[str, Any] = Field(default_factory=dict)
    initial_lr: float = Field(gt=0)
    decay_step: int = Field(ge=1)
    decay_factor: float = Field(gt=0)
    is_staircase: bool = True
    batch_size: int = Field(1, ge=1)
    max_epoch: int = Field(ge=1)
    max_steps: int | None = None
    """<= 0 or absent: no step limit."""
    save_every_epoch: int = Field(ge=1)
    train_dataset: str
    data_aug_configs: list[dict[str, Any]] = Field(default_factory=list)
    expend_factor: tuple[float, float, float] = (1.0, 1.0, 1.0)
    NUM_GPU: int = Field(1, ge=1)
    COPY_PER_GPU: int = Field(1, ge=1)
    unify_copies: bool = False
    NUM_TEST_SAMPLE: Literal[-1] = -1
    """Train on every frame of the split (-1); a frame count is not supported."""
    load_dataset_every_N_time: Literal[0] = 0
    """0: every epoch regenerates graphs and augmentation (pgnn's way); reusing a sample N times is not
    supported."""
    is_pseudo_batch: Literal[False] = False
    """The original's pseudo-batch branch is broken (see the train-step reference README): unsupported."""
    load_dataset_to_mem: bool = True
    capacity: int = 1
    num_load_dataset_workers: int = 1
    gpu_memusage: float = -1
    train_dir: str = ""
    checkpoint_path: str = "model"
    config_path: str = "config"
    visualization: bool = False


# ----------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------


def load_original_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of an original config or train config file, not validated (``read_original_config``
    and ``read_original_train_config`` validate it); ``DataError`` when it is missing, too large or deep, or
    not a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "expected an original Point-GNN config (JSON), got no such file")
    data = read_json(path, "JSON")  # bounded: size and nesting
    if not isinstance(data, dict):
        raise DataError(path, f"expected a JSON object, got {type(data).__name__}")
    return data


def _validation_error(path: Path, what: str, e: ValidationError) -> DataError:
    lines = []
    for err in e.errors():
        key = ".".join(str(part) for part in err["loc"]) or "<top level>"
        if err["type"] == "extra_forbidden":
            lines.append(f"key {key!r}: not a key of {what} that pgnn supports")
        elif err["type"] == "missing":
            lines.append(f"key {key!r}: missing (the original requires it)")
        else:
            lines.append(f"key {key!r}: {err['msg']}, got {err.get('input')!r}")
    return DataError(path, f"expected an original {what}: " + "; ".join(lines))


def read_original_config(path: str | Path) -> OriginalConfig:
    """Read and validate an original config file (JSON)."""
    path = Path(path)
    try:
        cfg = OriginalConfig.model_validate(load_original_config(path))
    except ValidationError as e:
        raise _validation_error(path, "config", e) from e
    for n, layer in enumerate(cfg.model_kwargs.layer_configs):
        try:
            LAYER_KWARGS[layer.type].model_validate(layer.kwargs)
        except ValidationError as e:
            raise _validation_error(
                path, f"{layer.type} layer (model_kwargs.layer_configs.{n}.kwargs)", e
            ) from e
    return cfg


def read_original_train_config(path: str | Path) -> OriginalTrainConfig:
    """Read and validate an original train config file (JSON)."""
    path = Path(path)
    try:
        return OriginalTrainConfig.model_validate(load_original_config(path))
    except ValidationError as e:
        raise _validation_error(path, "train config", e) from e
