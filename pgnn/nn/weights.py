"""Import the authors' released Point-GNN weights (TF/slim variables) into a pgnn checkpoint.

The weights come as an npz with one array per TF variable, keyed by its name
(``layer2/extract_vertex_features/fully_connected_1/weights``), plus the global step ``Variable``; or as the
TF checkpoint itself (``model-1400000.index`` + ``.data-*``, read by ``pgnn.nn.tf_checkpoint``), which holds
the
same arrays under the same names (optimizer slots, if any, are skipped). slim's
``fully_connected`` computes ``y = x W + b`` with ``W`` of shape [in, out]; ``nn.Linear`` stores [out, in], so
weights are transposed. Within one variable scope slim names its layers ``fully_connected``,
``fully_connected_1``, ... in creation order:

======================================================== ===================================================
TF variable scope                                        module in ``PointGNN``
======================================================== ===================================================
``layer1/extract_vertex_features/fully_connected{,_k}``  ``pool.point_mlp.layers.k``
``layer1/combined_features/fully_connected{,_k}``        ``pool.set_mlp.layers.k``
``layer{t+2}/fully_connected{,_k}`` (created first)      ``gnn.t.offset_mlp.layers.k`` (auto_offset only)
``layer{t+2}/extract_vertex_features/fully_connected..`` ``gnn.t.edge_mlp.layers.k``
``layer{t+2}/combined_features/fully_connected{,_k}``    ``gnn.t.update_mlp.layers.k``
``output/predictor/cls/fully_connected{,_k}``            ``head.cls.layers.k``
``output/predictor/loc/cls_c/fully_connected{,_k}``      ``head.loc.c.layers.k``
======================================================== ===================================================

Every variable must be used exactly once and match its layer's shape, otherwise ``DataError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pgnn.config.network import GNNLayerConfig, ModelConfig
from pgnn.config.original_format import load_original_config
from pgnn.core.errors import DataError

GLOBAL_STEP_VARIABLE = "Variable"

# The original's ``input_features`` option -> the width of the per-point feature vector it builds.
INPUT_FEATURE_WIDTHS: Mapping[str, int] = {
    "i": 1,
    "0": 1,
    "rgb": 3,
    "irgb": 4,
    "0rgb": 4,
    "0000": 4,
    "i000": 4,
    "is": 5,
}

# models/box_encoding.py get_encoding_len
BOX_ENCODING_LENGTHS: Mapping[str, int] = {
    "direct_encoding": 7,
    "center_box_encoding": 7,
    "voxelnet_box_encoding": 7,
    "classaware_voxelnet_box_encoding": 7,
    "classaware_all_class_box_encoding": 7,
    "classaware_all_class_box_canonical_encoding": 7,
}

# The predictor types of models/models.py that share our head layout: (class head hidden, box head hidden).
PREDICTOR_WIDTHS: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "classaware_predictor": ((64,), (64, 64)),
    "classaware_predictor_128": ((128,), (128, 128)),
}

# The original's activation names -> ours.
ACTIVATION_NAMES: Mapping[str, str] = {
    "ReLU": "relu",
    "ReLU6": "relu6",
    "LeakyReLU": "leaky_relu",
    "ELU": "elu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
}

# The label methods of the original -> the graph preset name recorded in an imported checkpoint (the runtime
# graph of the original's config; the full config is kept in the checkpoint too).
RUNTIME_GRAPH_PRESETS: Mapping[str, str] = {
    "Car": "car_runtime",
    "Pedestrian_and_Cyclist": "ped_cyc_runtime",
}


def _slim_name(k: int) -> str:
    """slim's k-th ``fully_connected`` name in one scope: fully_connected, fully_connected_1, ..."""
    return "fully_connected" if k == 0 else f"fully_connected_{k}"


def _mlp_names(tf_scope: str, torch_prefix: str, num_layers: int) -> dict[str, str]:
    names = {}
    for k in range(num_layers):
        names[f"{tf_scope}/{_slim_name(k)}/weights"] = f"{torch_prefix}.layers.{k}.weight"
        names[f"{tf_scope}/{_slim_name(k)}/biases"] = f"{torch_prefix}.layers.{k}.bias"
    return names


def tf_variable_names(cfg: ModelConfig) -> dict[str, str]:
    """TF variable name -> ``PointGNN`` state-dict key, for every parameter of a model with config ``cfg``."""
    names = _mlp_names("layer1/extract_vertex_features", "pool.point_mlp", len(cfg.point_mlp))
    names |= _mlp_names("layer1/combined_features", "pool.set_mlp", len(cfg.set_mlp))
    for t, layer in enumerate(cfg.gnn_layers):
        scope = f"layer{t + 2}"
        if layer.auto_offset:
            names |= _mlp_names(scope, f"gnn.{t}.offset_mlp", len(layer.offset_mlp))
        names |= _mlp_names(f"{scope}/extract_vertex_features", f"gnn.{t}.edge_mlp", len(layer.edge_mlp))
        names |= _mlp_names(f"{scope}/combined_features", f"gnn.{t}.update_mlp", len(layer.update_mlp))
    names |= _mlp_names("output/predictor/cls", "head.cls", len(cfg.cls_hidden) + 1)
    for c in range(cfg.num_classes):
        names |= _mlp_names(f"output/predictor/loc/cls_{c}", f"head.loc.{c}", len(cfg.loc_hidden) + 1)
    return names


def state_dict_from_tf(
    variables: Mapping[str, np.ndarray],
    cfg: ModelConfig,
    expected_shapes: Mapping[str, tuple[int, ...]],
    *,
    source: str | Path = "<variables>",
) -> dict[str, Any]:
    """Map TF variables onto a state dict with the given shapes (torch layout).

    Every variable except the global step must be used exactly once, every parameter must be found, and every
    shape must match (a slim weight [in, out] is transposed to [out, in]); otherwise ``DataError``.
    """
    import torch

    names = tf_variable_names(cfg)
    missing = sorted(set(names) - set(variables))
    unused = sorted(set(variables) - set(names) - {GLOBAL_STEP_VARIABLE})
    if missing or unused:
        raise DataError(
            source,
            f"expected exactly the {len(names)} variables of the configured model, got "
            f"{len(missing)} missing {missing[:5]} and {len(unused)} unused {unused[:5]}",
        )
    if set(names.values()) != set(expected_shapes):
        raise DataError(
            source,
            "expected the variable map to cover the model's state dict exactly, got "
            f"{sorted(set(expected_shapes) ^ set(names.values()))[:5]}",
        )
    state = {}
    for tf_name, key in names.items():
        a = np.asarray(variables[tf_name])
        if a.dtype != np.float32:
            raise DataError(source, f"expected float32 for {tf_name}, got {a.dtype}")
        if tf_name.endswith("/weights"):
            a = a.T  # slim [in, out] -> nn.Linear [out, in]
        if tuple(a.shape) != tuple(expected_shapes[key]):
            raise DataError(
                source,
                f"expected {tf_name} to have shape {tuple(expected_shapes[key])} "
                f"(torch layout, {key}), got {a.shape}",
            )
        state[key] = torch.from_numpy(np.ascontiguousarray(a))
    return state


def _one_activation(names: list[str], source: str | Path) -> str:
    if len(set(names)) != 1 or names[0] not in ACTIVATION_NAMES:
        raise DataError(
            source, f"expected one supported activation for every layer, got {sorted(set(names))}"
        )
    return ACTIVATION_NAMES[names[0]]


def model_config_from_original(config: Mapping[str, Any], *, source: str | Path = "<config>") -> ModelConfig:
    """The ``ModelConfig`` of an original Point-GNN config (``checkpoints/<name>/config``, JSON).

    Supports ``multi_layer_fast_local_graph_model_v2`` with a point-set pooling layer on graph level 0, any
    number of ``scatter_max_graph_auto_center_net`` layers on level 1 and a ``classaware_predictor`` (or
    ``_128``), no normalisation and one activation throughout; anything else is a ``DataError``.
    """
    try:
        if config["model_name"] != "multi_layer_fast_local_graph_model_v2":
            raise DataError(
                source,
                f"expected model_name multi_layer_fast_local_graph_model_v2, got {config['model_name']!r}",
            )
        layers = config["model_kwargs"]["layer_configs"]
        if len(layers) < 2:
            raise DataError(
                source, f"expected a pooling layer and a predictor at least, got {len(layers)} layers"
            )
        pool, gnns, pred = layers[0], layers[1:-1], layers[-1]
        if pool["type"] != "scatter_max_point_set_pooling" or pool["graph_level"] != 0:
            raise DataError(
                source,
                f"expected layer 0 to be scatter_max_point_set_pooling on graph level 0, "
                f"got {pool['type']} on level {pool['graph_level']}",
            )
        pk = pool["kwargs"]
        norms = [pk["point_MLP_normalization_type"], pk["output_MLP_normalization_type"]]
        acts = [pk["point_MLP_activation_type"], pk["output_MLP_activation_type"]]
        gnn_layers = []
        for n, layer in enumerate(gnns, start=1):
            if layer["type"] != "scatter_max_graph_auto_center_net" or layer["graph_level"] != 1:
                raise DataError(
                    source,
                    f"expected layer {n} to be scatter_max_graph_auto_center_net on graph "
                    f"level 1, got {layer['type']} on level {layer['graph_level']}",
                )
            k = layer["kwargs"]
            auto = bool(k.get("auto_offset", False))
            norms += [k["edge_MLP_normalization_type"], k["update_MLP_normalization_type"]]
            acts += [k["edge_MLP_activation_type"], k["update_MLP_activation_type"]]
            if auto:
                norms.append(k["auto_offset_MLP_normalization_type"])
                acts.append(k["auto_offset_MLP_feature_activation_type"])
            gnn_layers.append(
                GNNLayerConfig(
                    auto_offset=auto,
                    offset_mlp=tuple(k["auto_offset_MLP_depth_list"]) if auto else (64, 3),
                    edge_mlp=tuple(k["edge_MLP_depth_list"]),
                    update_mlp=tuple(k["update_MLP_depth_list"]),
                )
            )
        if pred["type"] not in PREDICTOR_WIDTHS:
            raise DataError(
                source, f"expected a predictor of type {sorted(PREDICTOR_WIDTHS)}, got {pred['type']}"
            )
        norms.append(pred["kwargs"].get("normalization_type", "fused_BN_center"))
        acts.append(pred["kwargs"].get("activation_type", "ReLU"))
        if set(norms) != {"NONE"}:
            raise DataError(source, f"expected normalization_type NONE everywhere, got {sorted(set(norms))}")
        cls_hidden, loc_hidden = PREDICTOR_WIDTHS[pred["type"]]
        features = config["input_features"]
        if features not in INPUT_FEATURE_WIDTHS:
            raise DataError(
                source, f"expected input_features in {sorted(INPUT_FEATURE_WIDTHS)}, got {features!r}"
            )
        encoding = config["box_encoding_method"]
        if encoding not in BOX_ENCODING_LENGTHS:
            raise DataError(
                source, f"expected box_encoding_method in {sorted(BOX_ENCODING_LENGTHS)}, got {encoding!r}"
            )
        return ModelConfig(
            num_classes=int(config["num_classes"]),
            box_encoding_len=BOX_ENCODING_LENGTHS[encoding],
            input_dim=INPUT_FEATURE_WIDTHS[features],
            point_mlp=tuple(pk["point_MLP_depth_list"]),
            set_mlp=tuple(pk["output_MLP_depth_list"]),
            gnn_layers=tuple(gnn_layers),
            cls_hidden=cls_hidden,
            loc_hidden=loc_hidden,
            activation=_one_activation(acts, source),
        )
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(
            source, f"expected an original Point-GNN model config, got {type(e).__name__}: {e}"
        ) from e


def default_config_path(weights_path: str | Path) -> Path:
    """The original config that goes with the weights.

    For an npz, ``<stem>_config.json`` beside it (car_auto_T1_train.npz -> car_auto_T1_train_config.json);
    for a TF checkpoint prefix, ``config`` in its folder (the original keeps ``checkpoints/<name>/config``).
    """
    from pgnn.nn.tf_checkpoint import checkpoint_prefix

    prefix = checkpoint_prefix(weights_path)
    if prefix is not None:
        return prefix.parent / "config"
    weights_path = Path(weights_path)
    return weights_path.with_name(f"{weights_path.stem}_config.json")


def load_released_variables(weights_path: str | Path) -> tuple[dict[str, np.ndarray], Path]:
    """The TF variables of an npz or of a TF checkpoint prefix, and the file to name in errors about them.

    From a checkpoint, optimizer state (``<var>/Momentum``, Adam's moments, ...) is skipped, and a global step
    saved as ``global_step`` is returned as ``Variable``, the name the original uses.
    """
    from pgnn.nn.tf_checkpoint import checkpoint_prefix, index_path, is_optimizer_state, read_tf_checkpoint

    prefix = checkpoint_prefix(weights_path)
    if prefix is not None:
        variables = read_tf_checkpoint(prefix, keep=lambda name: not is_optimizer_state(name))
        if GLOBAL_STEP_VARIABLE not in variables and "global_step" in variables:
            variables[GLOBAL_STEP_VARIABLE] = variables.pop("global_step")
        return variables, index_path(prefix)
    npz_path = Path(weights_path)
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}, npz_path
    except FileNotFoundError as e:
        raise DataError(
            npz_path, "expected a weights npz or a TF checkpoint prefix (PREFIX.index), got no such file"
        ) from e
    except (OSError, ValueError) as e:
        raise DataError(npz_path, f"expected a weights npz, got {e}") from e


def checkpoint_from_released_weights(
    weights_path: str | Path, config_path: str | Path | None = None, *, graph_preset: str | None = None
) -> dict[str, Any]:
    """Build a pgnn checkpoint (see ``pgnn.nn.checkpoint``) from the authors' weights and their config.

    ``weights_path`` is an npz of the TF variables or a TF checkpoint prefix (see
    ``load_released_variables``).

    The weights expect points in the original's camera-2 rectified frame (``input_frame = "cam2"``). The step
    is the checkpoint's global step. Its card (``pgnn.nn.card``) runs the graph preset of the label method
    and post-processes with the method's settings and the config's ``nms_overlapped_thres``. The original
    config is kept verbatim under ``original_config`` (its
    ``runtime_graph_gen_kwargs`` define the graph the weights were run with).
    """
    from pgnn.nn.card import card_of
    from pgnn.nn.checkpoint import make_checkpoint
    from pgnn.nn.model import PointGNN

    weights_path = Path(weights_path)
    config_path = Path(config_path) if config_path is not None else default_config_path(weights_path)
    original = load_original_config(config_path)
    cfg = model_config_from_original(original, source=config_path)
    variables, source = load_released_variables(weights_path)

    model = PointGNN(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = state_dict_from_tf(variables, cfg, shapes, source=source)
    model.load_state_dict(state, strict=True)
    step = int(variables[GLOBAL_STEP_VARIABLE]) if GLOBAL_STEP_VARIABLE in variables else 0
    label_method = str(original.get("label_method", ""))
    if graph_preset is None:
        graph_preset = RUNTIME_GRAPH_PRESETS.get(label_method, "runtime")
    facts = {
        "model_config": cfg.model_dump(mode="json"),
        "input_frame": "cam2",
        "graph_preset": graph_preset,
        "encoding": str(original["box_encoding_method"]),
        "label_method": label_method,
        "input_features": str(original["input_features"]),
        "original_config": original,
    }
    card = card_of(facts, config_path)  # the runtime graph and post-processing of the label method
    return make_checkpoint(
        model,
        step=step,
        card=card,
        source={"weights": weights_path.name, "config": config_path.name},
        original_config=original,
    )
