"""Configs of the network and its loss (torch-free: the presets, the graphs stage and params.yaml validation
load these without importing torch).

- :class:`ModelConfig` / :data:`MODEL_PRESETS`: the network's shape
  (:class:`pgnn.nn.model.PointGNN`).
- :class:`LossConfig`: the loss terms (computed by :mod:`pgnn.nn.losses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgnn.config.types import Flag, Real, Width

ActivationName = Literal["relu", "relu6", "leaky_relu", "elu", "sigmoid", "tanh"]
InitName = Literal["xavier_uniform", "kaiming_uniform", "torch_default"]

Widths = tuple[Width, ...]


class GNNLayerConfig(BaseModel):
    """One Point-GNN iteration (the original's ``scatter_max_graph_auto_center_net`` layer).

    ``offset_mlp`` lists the widths of the auto-registration MLP including its 3-wide (linear) output;
    ``edge_mlp`` the widths of the per-edge MLP (ReLU after every layer); ``update_mlp`` the widths of the
    update MLP (linear last), whose last width must equal the vertex state width (residual connection).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    auto_offset: Flag = True
    offset_mlp: Widths = (64, 3)
    edge_mlp: Widths = (300, 300)
    update_mlp: Widths = (300, 300)


class ModelConfig(BaseModel):
    """The network's shape. Normalisation is never used (the original's released configs all say ``NONE``).

    ``input_dim`` is the width of the per-point input features (1 for reflectance ``i``, 5 for the painted
    ``is``). The vertex state width is ``set_mlp[-1]`` (or ``point_mlp[-1]`` when ``set_mlp`` is empty).
    ``cls_hidden`` / ``loc_hidden`` are the hidden widths of the class head and of each per-class box head;
    their outputs (``num_classes`` / ``box_encoding_len`` wide) are linear. ``init`` names the weight
    initialisation (see ``INITIALIZERS``; the original used slim's default, Glorot/Xavier uniform weights and
    zero biases).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_classes: Width = 4
    box_encoding_len: Width = 7
    input_dim: Width = 1
    point_mlp: Widths = (32, 64, 128, 300)
    set_mlp: Widths = (300, 300)
    gnn_layers: tuple[GNNLayerConfig, ...] = (GNNLayerConfig(),)
    cls_hidden: Widths = (64,)
    loc_hidden: Widths = (64, 64)
    activation: ActivationName = "relu"
    init: InitName = "xavier_uniform"

    @property
    def state_dim(self) -> int:
        """Width D of the vertex state s after point-set pooling and after every GNN iteration."""
        return (self.set_mlp or self.point_mlp)[-1]

    @property
    def num_iterations(self) -> int:
        """T, the number of Point-GNN iterations."""
        return len(self.gnn_layers)

    @model_validator(mode="after")
    def _check_widths(self) -> ModelConfig:
        if not self.point_mlp:
            raise ValueError("point_mlp needs at least one layer")
        for t, layer in enumerate(self.gnn_layers):
            if not layer.edge_mlp or not layer.update_mlp:
                raise ValueError(f"gnn_layers[{t}]: edge_mlp and update_mlp need at least one layer")
            if layer.update_mlp[-1] != self.state_dim:
                raise ValueError(
                    f"gnn_layers[{t}]: update_mlp must end at the state width {self.state_dim} (residual), "
                    f"got {layer.update_mlp[-1]}"
                )
            if layer.auto_offset and (not layer.offset_mlp or layer.offset_mlp[-1] != 3):
                raise ValueError(f"gnn_layers[{t}]: offset_mlp must end with 3 (an xyz offset)")
        return self


def _car_config(num_iterations: int, *, auto_offset: bool = True, input_dim: int = 1) -> ModelConfig:
    """The original car models (configs/car_{auto,fixed}_T*_train_config): 300 channels, 4 classes."""
    return ModelConfig(
        num_classes=4,
        input_dim=input_dim,
        gnn_layers=tuple(GNNLayerConfig(auto_offset=auto_offset) for _ in range(num_iterations)),
    )


MODEL_PRESETS: Mapping[str, ModelConfig] = MappingProxyType(
    {
        # The authors' released checkpoints car_auto_T0_train (344,932 parameters) and car_auto_T1_train
        # (726,491 parameters).
        "car_T0": _car_config(0),
        "car_T1": _car_config(1),
        "car_T2": _car_config(2),
        "car_T3": _car_config(3),  # the paper's main Car model (configs/car_auto_T3_train_config)
        "car_fixed_T3": _car_config(3, auto_offset=False),  # the ablation without auto-registration
        # configs/ped_cyl_auto_T3_trainval_config: 6 classes, 256 channels, a 5-layer point MLP.
        "ped_cyc_T3": ModelConfig(
            num_classes=6,
            point_mlp=(32, 64, 128, 256, 512),
            set_mlp=(256, 256),
            gnn_layers=tuple(
                GNNLayerConfig(offset_mlp=(64, 3), edge_mlp=(256, 256), update_mlp=(256, 256))
                for _ in range(3)
            ),
        ),
        # The painted-points seed (input_features "is": reflectance + 4 semantic scores), otherwise car_T3.
        "painted_car_T3": _car_config(3, input_dim=5),
        # Trains on a 2-core CPU in minutes: a fwd+bwd+Adam step costs a small fraction of car_T3's on the
        # same graph (measured with benchmarks/train_step.py: benchmarks/README.md, "Measurements behind the
        # code"); 43,494 parameters.
        "small": ModelConfig(
            num_classes=4,
            point_mlp=(32, 64),
            set_mlp=(64,),
            gnn_layers=tuple(
                GNNLayerConfig(offset_mlp=(32, 3), edge_mlp=(64,), update_mlp=(64,)) for _ in range(2)
            ),
            cls_hidden=(32,),
            loc_hidden=(32, 32),
        ),
    }
)


ClsLossType = Literal["softmax", "focal_sigmoid", "focal_softmax", "top_k_softmax"]
LocLossType = Literal["huber_loss", "top_k_huber_loss"]
RegularizerType = Literal["l1", "l2", "l1_l2"]

_REGULARIZER_KWARGS: dict[str, set[str]] = {
    "l1": {"scale"},
    "l2": {"scale"},
    "l1_l2": {"scale_l1", "scale_l2"},
}


class LossConfig(BaseModel):
    """Loss settings; names and defaults follow the original Car configs (``loss`` + ``model_kwargs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cls_loss_type: ClsLossType = "softmax"
    cls_loss_weight: Real = Field(0.1, ge=0.0)
    loc_loss_type: LocLossType = "huber_loss"
    loc_loss_weight: Real = Field(10.0, ge=0.0)
    huber_delta: Real = Field(1.0, gt=0.0)
    focal_alpha: Real = Field(0.5, ge=0.0, le=1.0)
    """Weight of the positive term in ``focal_sigmoid`` (the original's default 0.5)."""
    focal_gamma: Real = Field(2.0, ge=0.0)
    top_k_ratio: Real = Field(0.25, gt=0.0, le=1.0)
    """Fraction of each frame's vertices kept by the hardest-k losses."""
    classwise_loc_loss_weight: tuple[Real, ...] | None = None
    """Optional per-class factor on the localisation loss (the original's ``loc_loss_kwargs`` entry)."""
    regularizer_type: RegularizerType | None = "l1"
    regularizer_kwargs: dict[str, Real] = Field(default_factory=lambda: {"scale": 5e-7})
    """``l1``/``l2``: ``scale``; ``l1_l2``: ``scale_l1``, ``scale_l2`` (slim's regulariser arguments)."""

    @model_validator(mode="after")
    def _check_regularizer(self) -> LossConfig:
        if self.regularizer_type is None:
            if self.regularizer_kwargs:
                raise ValueError("regularizer_kwargs given without a regularizer_type")
            return self
        expected = _REGULARIZER_KWARGS[self.regularizer_type]
        if set(self.regularizer_kwargs) != expected:
            raise ValueError(
                f"regularizer {self.regularizer_type!r} expects kwargs {sorted(expected)}, "
                f"got {sorted(self.regularizer_kwargs)}"
            )
        return self
