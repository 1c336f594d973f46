"""Fidelity: the authors' released weights, imported, reproduce the original TF model's outputs.

The reference data (``pointgnn_reference`` fixture, see its README) holds the TF variables of
``car_auto_T{0,1}_train`` and, for 7 KITTI frames, the exact graph fed to the network and what TF computed
from it. We import the weights with ``pgnn import-weights`` (the session's ``released_checkpoint``,
tests/conftest.py), load the checkpoint, feed the saved graph (T0 uses the T1 graphs: they were
bit-identical) and compare.

Tolerance, per element: ``|ours - tf| <= 1e-4 + 1e-4 * |tf|`` (``np.testing.assert_allclose(rtol=1e-4,
atol=1e-4)``). The README measured an independent float32 numpy forward at <= 1.3e-5 from TF on the logits and
a wrong convention (concat order, offset sign) at 4-9.

T0 runs on all 7 frames; T1 (about 1M edges per frame, a few seconds each on one core) on 000000 (which has
every layer's features), 000114 (the frame with the most cars) and 000002, or on all 7 with
``PGNN_REFERENCE_ALL_FRAMES=1``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from pgnn.cli import main as cli_main
from pgnn.config.network import MODEL_PRESETS, GNNLayerConfig, ModelConfig
from pgnn.core.errors import DataError
from pgnn.nn.checkpoint import load_model
from pgnn.nn.graph_input import graph_input_from_arrays
from pgnn.nn.model import PointGNN
from pgnn.nn.weights import (
    checkpoint_from_released_weights,
    load_original_config,
    model_config_from_original,
    state_dict_from_tf,
    tf_variable_names,
)

ALL_FRAMES = ["000000", "000001", "000002", "000003", "000004", "000005", "000114"]
T1_FRAMES = (
    ALL_FRAMES if os.environ.get("PGNN_REFERENCE_ALL_FRAMES") == "1" else ["000000", "000114", "000002"]
)
RTOL = ATOL = 1e-4


# one thread: fastest on the shared 2-core machines (OpenMP busy-waiting hurts with two)
pytestmark = pytest.mark.usefixtures("one_torch_thread_per_module")


@pytest.fixture(scope="module")
def imported(released_checkpoint: Callable[[str], Path]) -> dict[str, tuple]:
    """``pgnn import-weights`` for T0 and T1 (config found beside the npz), then ``load_model``."""
    return {name: load_model(released_checkpoint(name), "cpu") for name in ("T0", "T1")}


def reference_frame(root: Path, run: str, frame: str) -> dict[str, np.ndarray]:
    with np.load(root / run / f"{frame}.npz") as npz:
        return {k: npz[k] for k in npz.files}


def assert_close(name: str, ours: torch.Tensor, theirs: np.ndarray) -> float:
    ours_np = ours.detach().cpu().numpy()
    assert ours_np.shape == theirs.shape, name
    np.testing.assert_allclose(ours_np, theirs, rtol=RTOL, atol=ATOL, err_msg=name)
    return float(np.abs(ours_np - theirs).max())


def check_predictions(ours_logits: torch.Tensor, ref: dict[str, np.ndarray]) -> None:
    probs = torch.softmax(ours_logits, dim=-1)
    assert_close("probs", probs, ref["probs"])
    top2 = np.sort(ref["probs"], axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4  # argmax is only meaningful away from ties
    assert np.array_equal(probs.argmax(-1).numpy()[clear], ref["predictions"][clear])


def test_imported_checkpoints_describe_the_released_models(imported: dict[str, tuple]) -> None:
    for name, preset in (("T0", "car_T0"), ("T1", "car_T1")):
        model, ckpt = imported[name]
        assert model.cfg == MODEL_PRESETS[preset]
        assert ckpt["input_frame"] == "cam2"
        assert ckpt["input_features"] == "i"
        assert ckpt["encoding"] == "classaware_all_class_box_encoding"
        assert ckpt["label_method"] == "Car"
        assert ckpt["graph_preset"] == "car_runtime"
        assert ckpt["step"] == 1_400_000
        levels = ckpt["original_config"]["runtime_graph_gen_kwargs"]["level_configs"]
        assert [lc["graph_gen_kwargs"]["radius"] for lc in levels] == [1.0, 4.0]
    assert sum(p.numel() for p in imported["T1"][0].parameters()) == 726_491
    assert sum(p.numel() for p in imported["T0"][0].parameters()) == 344_932


@pytest.mark.parametrize("frame", T1_FRAMES)
def test_t1_reproduces_tf(imported: dict[str, tuple], pointgnn_reference: Path, frame: str) -> None:
    ref = reference_frame(pointgnn_reference, "T1", frame)
    model, _ = imported["T1"]
    with torch.inference_mode():
        out = model.forward_with_intermediates(graph_input_from_arrays(ref, source=f"T1/{frame}.npz"))
    assert_close("logits", out.logits, ref["logits"])
    assert_close("pred_box", out.box_encodings, ref["pred_box"])
    assert_close("layer2_offset", out.offsets[0], ref["layer2_offset"])
    if frame == "000000":
        assert_close("layer1_features", out.layer_features[0], ref["layer1_features"])
        assert_close("layer2_features", out.layer_features[1], ref["layer2_features"])
    check_predictions(out.logits, ref)


@pytest.mark.parametrize("frame", ALL_FRAMES)
def test_t0_reproduces_tf(imported: dict[str, tuple], pointgnn_reference: Path, frame: str) -> None:
    graph = reference_frame(pointgnn_reference, "T1", frame)  # T0's graph was bit-identical to T1's
    ref = reference_frame(pointgnn_reference, "T0", frame)
    model, _ = imported["T0"]
    with torch.inference_mode():
        out = model.forward_with_intermediates(graph_input_from_arrays(graph, source=f"T1/{frame}.npz"))
    assert out.offsets == [] and len(out.layer_features) == 1
    assert_close("logits", out.logits, ref["logits"])
    assert_close("pred_box", out.box_encodings, ref["pred_box"])
    check_predictions(out.logits, ref)


# ---------------------------------------------------------------------------------------------------------
# The variable map and its checks
# ---------------------------------------------------------------------------------------------------------


def test_original_configs_map_to_the_presets(pointgnn_reference: Path) -> None:
    for name, preset in (("T0", "car_T0"), ("T1", "car_T1")):
        original = load_original_config(pointgnn_reference / f"car_auto_{name}_train_config.json")
        assert model_config_from_original(original) == MODEL_PRESETS[preset]


def test_original_config_variants(pointgnn_reference: Path) -> None:
    original = load_original_config(pointgnn_reference / "car_auto_T1_train_config.json")
    layers = original["model_kwargs"]["layer_configs"]
    # T3, as in configs/car_auto_T3_train_config: the T1 config with layer2 repeated as layer3 and layer4
    t3 = dict(
        original,
        model_kwargs=dict(
            original["model_kwargs"], layer_configs=[*layers[:2], layers[1], layers[1], layers[2]]
        ),
    )
    assert model_config_from_original(t3) == MODEL_PRESETS["car_T3"]
    fixed = [dict(layers[1], kwargs=dict(layers[1]["kwargs"], auto_offset=False))] * 3
    t3_fixed = dict(
        original, model_kwargs=dict(original["model_kwargs"], layer_configs=[layers[0], *fixed, layers[2]])
    )
    assert model_config_from_original(t3_fixed) == MODEL_PRESETS["car_fixed_T3"]
    painted = dict(t3, input_features="is")
    assert model_config_from_original(painted) == MODEL_PRESETS["painted_car_T3"]
    with pytest.raises(DataError, match="normalization_type NONE"):
        bn = dict(layers[1], kwargs=dict(layers[1]["kwargs"], edge_MLP_normalization_type="BN"))
        model_config_from_original(
            dict(
                original,
                model_kwargs=dict(original["model_kwargs"], layer_configs=[layers[0], bn, layers[2]]),
            )
        )
    with pytest.raises(DataError, match="predictor"):
        sep = dict(layers[2], type="classaware_separated_predictor")
        model_config_from_original(
            dict(
                original,
                model_kwargs=dict(original["model_kwargs"], layer_configs=[layers[0], layers[1], sep]),
            )
        )
    with pytest.raises(DataError, match="original Point-GNN model config"):
        model_config_from_original({"model_name": "multi_layer_fast_local_graph_model_v2"})


def test_released_variable_names_are_the_map(pointgnn_reference: Path) -> None:
    with np.load(pointgnn_reference / "car_auto_T1_train.npz") as npz:
        names = set(npz.files) - {"Variable"}
    assert names == set(tf_variable_names(MODEL_PRESETS["car_T1"]))
    assert tf_variable_names(MODEL_PRESETS["car_T1"])["layer2/fully_connected_1/weights"] == (
        "gnn.0.offset_mlp.layers.1.weight"
    )
    assert len(names) == 52


TINY = ModelConfig(
    num_classes=2,
    point_mlp=(4, 5),
    set_mlp=(6,),
    gnn_layers=(GNNLayerConfig(offset_mlp=(3, 3), edge_mlp=(4,), update_mlp=(6,)),),
    cls_hidden=(3,),
    loc_hidden=(3,),
)


def export_tf(model: PointGNN) -> dict[str, np.ndarray]:
    """The inverse map: slim variables (W as [in, out]) from a model."""
    state = model.state_dict()
    out = {}
    for tf_name, key in tf_variable_names(model.cfg).items():
        a = state[key].numpy()
        out[tf_name] = a.T.copy() if tf_name.endswith("/weights") else a.copy()
    out["Variable"] = np.array(7, dtype=np.int32)
    return out


def test_state_dict_from_tf_round_trips_and_transposes() -> None:
    model = PointGNN(TINY, generator=torch.Generator().manual_seed(0))
    variables = export_tf(model)
    assert variables["layer1/extract_vertex_features/fully_connected/weights"].shape == (4, 4)  # [in, out]
    assert variables["layer2/fully_connected_1/weights"].shape == (3, 3)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = state_dict_from_tf(variables, TINY, shapes)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda v: v.pop("output/predictor/loc/cls_1/fully_connected_1/biases"), "1 missing"),
        (lambda v: v.update({"layer3/fully_connected/weights": np.zeros((6, 3), np.float32)}), "1 unused"),
        (
            lambda v: v.update(
                {"layer2/combined_features/fully_connected/weights": np.zeros((6, 4), np.float32)}
            ),
            "shape",
        ),
        (
            lambda v: v.update({"layer1/combined_features/fully_connected/biases": np.zeros(6, np.float64)}),
            "float32",
        ),
    ],
)
def test_state_dict_from_tf_rejects_bad_variables(change, message: str) -> None:
    model = PointGNN(TINY)
    variables = export_tf(model)
    change(variables)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    with pytest.raises(DataError, match=message) as err:
        state_dict_from_tf(variables, TINY, shapes, source="weights.npz")
    assert "weights.npz" in str(err.value)


def test_import_rejects_weights_that_do_not_fit_the_config(pointgnn_reference: Path) -> None:
    # the T0 weights with the T1 config: layer2's variables are missing
    with pytest.raises(DataError, match="missing"):
        checkpoint_from_released_weights(
            pointgnn_reference / "car_auto_T0_train.npz", pointgnn_reference / "car_auto_T1_train_config.json"
        )


def test_cli_reports_a_missing_config(
    pointgnn_reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(
        [
            "import-weights",
            str(pointgnn_reference / "car_auto_T1_train.npz"),
            str(tmp_path / "x.pt"),
            "--config",
            str(tmp_path / "nope.json"),
        ]
    )
    assert code == 1
    assert "nope.json" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_command_module_interface() -> None:
    from pgnn.commands import import_weights

    parser = argparse.ArgumentParser()
    import_weights.add_arguments(parser)
    args = parser.parse_args(["w.npz", "out.pt", "--graph-preset", "car_runtime"])
    assert args.config is None and args.graph_preset == "car_runtime"
