"""Training fidelity: pgnn's training step against the original TF training graph (``pointgnn_reference/
train_step``, see its README and ``pgnn.train_step_check``).

Cases a (T1, the authors' weights, ``i``) and b (the seed's painted ``is`` model, TF's saved initialisation):
the loss terms and every gradient at the initial weights, and the weights after 3 SGD steps with the staircase
schedule (0.125, 0.125, 0.0125), from pgnn's own model, loss, optimiser and training step built from the
original JSON config pair. Required: loss_rel <= 1e-4, grad_rel <= 1e-3, weights_rel <= 1e-4.

Case b's free-running weights miss 1e-4: they reach 2.6e-4, on the zero-initialised biases of the first
point-MLP layers. That is float32 noise amplified by the max and ReLU kinks, not the update rule, and the test
pins down whose noise: pgnn's step-0 gradient differs from TF's by 3.6e-6 at most; when only *one* 32-float
vector, the step-0 gradient of the first point-MLP layer's bias (pgnn's differs from TF's by ~1e-8 absolute,
3e-6 relative, a few float32 roundings of a 240k-edge sum), is replaced by TF's, the three free-running steps
land within 4e-6 of TF's weights (``forced_only_rel``). Summing that gradient in float64 or in TF's sequential
order, or computing the forward in float64, does not bring it closer (float64: 2e-3). So case b asserts
weights_rel <= 5e-4 and ``forced_only_rel`` <= 1e-5 (``forced_rel``, step 0 on the whole reference gradient,
is 1.7e-5; case a asserts it).

Under the pinned CPU numerics (pgnn.nn.gemm's fixed-order products, the same bytes on every CPU; before them
MKL's COMPATIBLE mode, with the same figures) case b's figures are larger, on an AMD EPYC: grad_rel 9.6e-4,
weights_rel 2.4e-3, forced_only_rel 2.4e-3 (with each library's own kernels: 3.6e-6, 2.6e-4, 3.9e-6). The
pinned products sum the weight gradients' K dimension (the 240k edges) in float32 in one chain, longer than
MKL's AVX kernels or TF's Eigen do, so many
weight gradients, not one vector, carry ~1e-3 relative rounding: case b asserts grad_rel <= 2e-3 and
weights_rel, forced_only_rel <= 5e-3 (docs/reproducibility.md, "What it costs").

T3 supplement: the README's RandomState formula reproduces the init checksums; step-0 quantities are compared
tightly (its LR-0.125 trajectory diverges, so later steps only amplify float noise); one step is run.

The synthetic cases exercise the replay path (``grad_step<k>/`` reference gradients) for every optimiser
against the numpy TF1 rules of ``test_tf1_optim``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from test_tf1_optim import RULES

from pgnn.cli import main as cli_main
from pgnn.config.training import ORIGINAL_DEFAULT_KWARGS
from pgnn.core.errors import DataError
from pgnn.nn.model import PointGNN
from pgnn.nn.weights import tf_variable_names
from pgnn.recipe.original import model_config, read_original_config
from pgnn.training.check_step import check_train_step, xavier_init_from_formula
from pgnn.training.schedule import exponential_decay

LR_REF = [0.125, 0.125, float(np.float32(0.0125))]
FIRST_POINT_BIAS = "layer1/extract_vertex_features/fully_connected/biases"


@pytest.fixture(scope="module")
def train_step_dir(pointgnn_reference: Path) -> Path:
    return pointgnn_reference / "train_step"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _files(d: Path, case: str) -> list[str]:
    return [
        str(d / f"{case}.npz"),
        "--config",
        str(d / f"{case}_config.json"),
        "--train-config",
        str(d / f"{case}_train_config.json"),
    ]


def test_case_a_through_the_command(train_step_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["check", "train-step", *_files(train_step_dir, "case_a"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # one JSON object
    assert out["variables"] == 52 and out["parameters"] == 726_491 and out["steps"] == 3
    assert out["loss_rel"] <= 1e-4
    assert out["grad_rel"] <= 1e-3
    assert out["weights_rel"] <= 1e-4
    assert out["forced_rel"] <= 1e-4
    assert out["replay_rel"] is None  # the case stores no later-step gradients
    assert out["lr"] == LR_REF and out["lr_rel"] == 0.0
    assert out["steps_loss_rel"] <= 1e-4  # the loss before each step and after the last
    assert out["loss"]["total"][1] == pytest.approx(0.062343, rel=1e-5)


def test_case_b(train_step_dir: Path) -> None:
    d = train_step_dir
    out = check_train_step(
        d / "case_b.npz",
        d / "case_b_config.json",
        d / "case_b_train_config.json",
        forced=False,  # forced_only below is the sharper version (one run of 3 steps less on CI)
        forced_only=[FIRST_POINT_BIAS],
    )
    assert out["variables"] == 52 and out["parameters"] == 726_619
    assert out["loss_rel"] <= 1e-4
    assert out["grad_rel"] <= 2e-3  # the pinned products' long float32 sums (module docstring): 9.6e-4 here
    assert out["weights_rel"] <= 5e-3  # kink-amplified float noise: 2.4e-3 here (2.6e-4 unpinned)
    assert out["forced_rel"] is None
    assert out["forced_only_rel"] <= 5e-3  # 2.4e-3 here (unpinned 3.9e-6: that one vector's noise alone)
    assert out["lr"] == LR_REF
    assert out["steps_loss_rel"] <= 1e-4


def test_case_b_T3_step_zero(train_step_dir: Path) -> None:
    d = train_step_dir
    out = check_train_step(
        d / "case_b_T3.npz",
        d / "case_b_T3_config.json",
        d / "case_b_T3_train_config.json",
        inputs_path=d / "case_b.npz",
        max_steps=1,
    )
    assert out["parameters"] == 1_489_737 and out["variables"] == 76
    assert out["init"].startswith("RandomState(0)")
    assert out["init_checksum_rel"] <= 1e-12
    assert out["loss_rel"] <= 1e-4
    assert out["grad_rel"] <= 1e-3  # the 38 biases
    assert out["grad_stats_rel"] <= 1e-3  # ||g||, sum g, sum |g| of all 76 variables
    assert out["weights_norm_rel"] <= 1e-4  # the norms after step 1
    assert any("38 biases" in c for c in out["compared"])


def test_case_without_inputs_needs_them(train_step_dir: Path) -> None:
    d = train_step_dir
    with pytest.raises(DataError, match="--inputs"):
        check_train_step(d / "case_b_T3.npz", d / "case_b_T3_config.json", d / "case_b_T3_train_config.json")


def test_t3_init_formula_is_the_variable_order_of_the_model(train_step_dir: Path) -> None:
    cfg = model_config(read_original_config(train_step_dir / "case_b_T3_config.json"), source="t3")
    names = tf_variable_names(cfg)
    order = [
        n
        for n, _ in json.loads((train_step_dir / "case_b_T3.json").read_text())[
            "trainable_variables_in_order"
        ]
    ]
    assert list(names) == order
    model = PointGNN(cfg)
    shapes = {}
    for tf, key in names.items():
        shape = tuple(model.get_parameter(key).shape)
        shapes[tf] = shape[::-1] if tf.endswith("/weights") else shape
    init = xavier_init_from_formula(shapes)
    w = init["layer1/extract_vertex_features/fully_connected/weights"]
    assert w.shape == (8, 32) and np.abs(w).max() <= np.sqrt(6 / 40)


# ----------------------------------------------------------------------------------------------------------
# A synthetic case with later-step reference gradients: the replay path, for every optimiser
# ----------------------------------------------------------------------------------------------------------

TINY_CONFIG = {
    "model_name": "multi_layer_fast_local_graph_model_v2",
    "num_classes": 4,
    "box_encoding_method": "classaware_all_class_box_encoding",
    "input_features": "i",
    "label_method": "Car",
    "graph_gen_method": "multi_level_local_graph_v3",
    "graph_gen_kwargs": {
        "base_voxel_size": 0.8,
        "downsample_method": "random",
        "add_rnd3d": True,
        "level_configs": [
            {
                "graph_gen_method": "disjointed_rnn_local_graph_v3",
                "graph_gen_kwargs": {"radius": 1.0, "num_neighbors": -1},
                "graph_level": 0,
                "graph_scale": 1,
            },
            {
                "graph_gen_method": "disjointed_rnn_local_graph_v3",
                "graph_gen_kwargs": {"radius": 4.0, "num_neighbors": 256},
                "graph_level": 1,
                "graph_scale": 1,
            },
        ],
    },
    "runtime_graph_gen_kwargs": {
        "base_voxel_size": 0.8,
        "level_configs": [
            {
                "graph_gen_method": "disjointed_rnn_local_graph_v3",
                "graph_gen_kwargs": {"radius": 1.0, "num_neighbors": -1},
                "graph_level": 0,
                "graph_scale": 0.5,
            },
            {
                "graph_gen_method": "disjointed_rnn_local_graph_v3",
                "graph_gen_kwargs": {"radius": 4.0, "num_neighbors": -1},
                "graph_level": 1,
                "graph_scale": 0.5,
            },
        ],
    },
    "loss": {"cls_loss_type": "softmax", "cls_loss_weight": 0.1, "loc_loss_weight": 10.0},
    "model_kwargs": {
        "layer_configs": [
            {
                "graph_level": 0,
                "scope": "layer1",
                "type": "scatter_max_point_set_pooling",
                "kwargs": {
                    "point_MLP_depth_list": [4, 8],
                    "point_MLP_normalization_type": "NONE",
                    "point_MLP_activation_type": "ReLU",
                    "output_MLP_depth_list": [8],
                    "output_MLP_normalization_type": "NONE",
                    "output_MLP_activation_type": "ReLU",
                },
            },
            {
                "graph_level": 1,
                "scope": "layer2",
                "type": "scatter_max_graph_auto_center_net",
                "kwargs": {
                    "auto_offset": True,
                    "auto_offset_MLP_depth_list": [4, 3],
                    "auto_offset_MLP_normalization_type": "NONE",
                    "auto_offset_MLP_feature_activation_type": "ReLU",
                    "edge_MLP_depth_list": [8],
                    "edge_MLP_normalization_type": "NONE",
                    "edge_MLP_activation_type": "ReLU",
                    "update_MLP_depth_list": [8],
                    "update_MLP_normalization_type": "NONE",
                    "update_MLP_activation_type": "ReLU",
                },
            },
            {
                "graph_level": 1,
                "scope": "output",
                "type": "classaware_predictor",
                "kwargs": {"activation_type": "ReLU", "normalization_type": "NONE"},
            },
        ],
        "regularizer_type": "l1",
        "regularizer_kwargs": {"scale": 5e-7},
    },
    "nms_overlapped_thres": 0.01,
}


def _train_config(optimizer: str, kwargs: dict) -> dict:
    return {
        "optimizer": optimizer,
        "optimizer_kwargs": kwargs,
        "initial_lr": 0.05,
        "decay_step": 2,
        "decay_factor": 0.5,
        "batch_size": 2,
        "max_epoch": 1,
        "max_steps": 3,
        "save_every_epoch": 1,
        "train_dataset": "train.txt",
        "NUM_GPU": 1,
        "unify_copies": True,
    }


def synthetic_case(tmp_path: Path, optimizer: str, kwargs: dict, steps: int = 3) -> tuple[Path, Path, Path]:
    """A tiny 2-frame case whose reference weights follow the numpy TF1 rule from random gradients."""
    rng = np.random.default_rng(0)
    n0, n1 = 40, 10
    arrays: dict[str, np.ndarray] = {
        "input/initial_vertex_features": rng.uniform(0, 1, (n0, 1)).astype(np.float32),
        "input/vertex_coord_list_0": rng.uniform(-3, 3, (n0, 3)).astype(np.float32),
    }
    kp = np.arange(n1, dtype=np.int32)[:, None]
    arrays["input/vertex_coord_list_1"] = arrays["input/vertex_coord_list_0"][:n1]
    arrays["input/vertex_coord_list_2"] = arrays["input/vertex_coord_list_1"]
    arrays["input/keypoint_indices_list_0"] = kp
    arrays["input/keypoint_indices_list_1"] = kp
    arrays["input/edges_list_0"] = np.stack(
        [np.arange(n0), np.r_[np.arange(n1), rng.integers(0, n1, n0 - n1)]], 1
    ).astype(np.int32)
    pairs = [(j, i) for i in range(n1) for j in range(n1) if i == j or rng.random() < 0.3]
    arrays["input/edges_list_1"] = np.array(pairs, np.int32)
    arrays["batch/num_vertices"] = np.array([[25, 6, 6], [15, 4, 4]], np.int32)
    arrays["input/class_labels"] = rng.integers(0, 4, (n1, 1)).astype(np.int32)
    arrays["input/encoded_gt_boxes"] = rng.normal(size=(n1, 1, 7)).astype(np.float32)
    arrays["input/valid_gt_boxes"] = (arrays["input/class_labels"] % 3 != 0).astype(np.float32)[:, :, None]
    for t, v in (("cls", 1.0), ("loc", 1.0), ("reg", 1.0), ("total", 3.0)):
        arrays[f"loss/{t}_loss"] = np.float32(v)  # not what this test checks

    cfg = model_config(read_original_config(_write(tmp_path / "config.json", TINY_CONFIG)), source="tiny")
    model = PointGNN(cfg, generator=torch.Generator().manual_seed(0))
    names = tf_variable_names(cfg)
    weights = {tf: model.get_parameter(k).detach().numpy() for tf, k in names.items()}
    weights = {tf: (w.T if tf.endswith("/weights") else w).copy() for tf, w in weights.items()}
    full = {**ORIGINAL_DEFAULT_KWARGS[optimizer], **kwargs}
    states: dict[str, dict] = {tf: {} for tf in names}
    lrs = [exponential_decay(k, 0.05, 2, 0.5) for k in range(steps)]
    for tf in names:
        arrays[f"init/{tf}"] = weights[tf]
    for k in range(steps):
        prefix = "grad/" if k == 0 else f"grad_step{k}/"
        for tf in names:
            g = (rng.normal(size=weights[tf].shape) * 0.3).astype(np.float32)
            arrays[prefix + tf] = g
            weights[tf] = RULES[optimizer](weights[tf], g, states[tf], lrs[k], full)
    for tf in names:
        arrays[f"final/{tf}"] = weights[tf]
    arrays["steps/learning_rate"] = np.array(lrs, np.float32)
    case = tmp_path / "case.npz"
    np.savez(case, **arrays)
    return case, tmp_path / "config.json", _write(tmp_path / "train.json", _train_config(optimizer, kwargs))


def _write(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


@pytest.mark.parametrize(
    ("optimizer", "kwargs"),
    [
        ("sgd", {}),
        ("momentum", {"use_nesterov": True}),
        ("rmsprop", {}),
        ("rmsprop", {"centered": True, "momentum": 0.5}),
        ("adam", {"epsilon": 1e-3}),
    ],
)
def test_replay_of_reference_gradients(tmp_path: Path, optimizer: str, kwargs: dict) -> None:
    case, config, train = synthetic_case(tmp_path, optimizer, kwargs)
    out = check_train_step(case, config, train)
    assert out["replay_rel"] <= 1e-5
    assert any(c.startswith("replay") for c in out["compared"])
    assert out["lr"] == [float(np.float32(x)) for x in (0.05, 0.05, 0.025)]  # float32, as TF
    # a wrong reference gradient in the last step shows up
    with np.load(case) as z:
        arrays = dict(z)
    key = next(k for k in arrays if k.startswith("grad_step2/") and k.endswith("/biases"))
    arrays[key] = arrays[key] + 0.5
    np.savez(case, **arrays)
    assert check_train_step(case, config, train, forced=False)["replay_rel"] > 1e-3


def test_replay_needs_every_gradient(tmp_path: Path) -> None:
    case, config, train = synthetic_case(tmp_path, "sgd", {})
    with np.load(case) as z:
        arrays = {k: v for k, v in z.items() if k != "grad_step1/output/predictor/cls/fully_connected/biases"}
    np.savez(case, **arrays)
    with pytest.raises(DataError, match=r"grad_step1/output/predictor/cls/fully_connected/biases"):
        check_train_step(case, config, train, forced=False)


def test_bad_case_files_name_the_file(tmp_path: Path) -> None:
    case, config, train = synthetic_case(tmp_path, "sgd", {})
    with pytest.raises(DataError, match="no such file"):
        check_train_step(tmp_path / "missing.npz", config, train)
    with np.load(case) as z:
        arrays = {k: v for k, v in z.items() if k != "input/class_labels"}
    np.savez(case, **arrays)
    with pytest.raises(DataError, match=r"case\.npz.*'input/class_labels'"):
        check_train_step(case, config, train)
    np.savez(case, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match="case.npz"):
        check_train_step(case, config, train)
