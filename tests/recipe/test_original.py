"""The original's config pairs (``tests/recipe/original_configs``, see its README) translate into pgnn's
configs, and pgnn's presets equal the recipes they are named after.

A preset equals an original pair when ``pgnn import-config``'s params.yaml sections for the pair, applied over
the preset, leave it unchanged: every key the pair determines (graph, targets, model, optimiser, schedule,
batch, length, loss, augmentation, NMS) is then the preset's own value.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pgnn.cli import main as cli_main
from pgnn.config.network import MODEL_PRESETS
from pgnn.config.params import Params, load_params
from pgnn.core.errors import DataError
from pgnn.recipe.original import (
    loss_config,
    model_config,
    params_overrides,
    read_original_config,
    read_original_train_config,
    train_config,
)
from pgnn.recipe.presets import PRESETS, apply_preset

ORIGINAL = Path(__file__).parent / "original_configs"

PAIRS = {
    "car_T3": "car_auto_T3_train",  # WeijingShi/Point-GNN configs/
    "ped_cyc_T3": "ped_cyl_auto_T3_trainval",  # WeijingShi/Point-GNN configs/
    "painted_car_T3": "painted_car_auto_T3_train",  # the painted fork (the seed)
}


def pair(name: str) -> tuple[Path, Path]:
    stem = PAIRS[name]
    return ORIGINAL / f"{stem}_config.json", ORIGINAL / f"{stem}_train_config.json"


@pytest.mark.parametrize("preset", sorted(PAIRS))
def test_preset_equals_the_original_recipe(preset: str) -> None:
    params = params_overrides(*pair(preset))
    assert params["preset"] == preset  # chosen by label method and input features
    assert apply_preset(Params.model_validate(params)) == PRESETS[preset]


def test_painted_recipe_is_the_forks_run() -> None:
    recipe = PRESETS["painted_car_T3"]
    train = recipe.train
    assert (train.optimizer, train.optimizer_kwargs, train.initial_lr) == ("sgd", {}, 0.125)
    assert (train.decay_step, train.decay_factor, train.staircase) == (400_000, 0.1, True)
    assert (train.batch_size, train.max_steps, train.max_epoch) == (2, 245_000, 150)
    assert (train.save_every_epoch, train.train_dataset) == (20, "train_car.txt")
    assert recipe.targets.input_features == "is" and recipe.model == MODEL_PRESETS["painted_car_T3"]
    assert recipe.loss.regularizer_kwargs == {"scale": 5e-7}
    assert [s.method for s in recipe.augment.steps] == [
        "random_rotation_all",
        "random_flip_all",
        "random_box_shift",
    ]


def test_ped_cyc_regularises_with_its_own_scale() -> None:
    assert PRESETS["ped_cyc_T3"].loss.regularizer_kwargs == {"scale": 1e-6}
    assert PRESETS["car_T3"].loss.regularizer_kwargs == {"scale": 5e-7}


def test_the_painted_config_is_the_train_step_reference_config(pointgnn_reference: Path) -> None:
    ours = json.loads(pair("painted_car_T3")[0].read_text())
    ref = json.loads((pointgnn_reference / "train_step" / "case_b_T3_config.json").read_text())
    assert ours == ref


def test_reference_case_configs_translate(pointgnn_reference: Path) -> None:
    d = pointgnn_reference / "train_step"
    cfg = read_original_config(d / "case_a_config.json")
    assert model_config(cfg, source="a") == MODEL_PRESETS["car_T1"]
    assert loss_config(cfg, source="a") == PRESETS["car_T3"].loss
    train = train_config(read_original_train_config(d / "case_a_train_config.json"), source="a")
    assert (train.decay_step, train.batch_size, train.optimizer) == (2, 2, "sgd")
    painted = read_original_config(d / "case_b_config.json")
    assert model_config(painted, source="b").input_dim == 5


def test_import_config_command_prints_and_writes_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, train = pair("painted_car_T3")
    assert cli_main(["import-config", str(config), str(train)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["preset"] == "painted_car_T3"
    assert printed["train"]["batch_size"] == 2 and printed["train"]["max_steps"] == 245_000
    assert printed["targets"]["input_features"] == "is"
    assert printed["postprocess"]["overlap_threshold"] == 0.01
    out = tmp_path / "params.yaml"
    assert cli_main(["import-config", str(config), str(train), "--out", str(out)]) == 0
    assert apply_preset(load_params(out)) == PRESETS["painted_car_T3"]


def test_import_onto_another_preset_carries_every_setting() -> None:
    config, train = pair("car_T3")
    params = params_overrides(config, train, preset="small")
    recipe = apply_preset(Params.model_validate(params))
    assert recipe.model == PRESETS["car_T3"].model
    assert recipe.train.optimizer == "sgd" and recipe.train.batch_size == 4
    assert recipe.loss == PRESETS["car_T3"].loss
    assert recipe.augment == PRESETS["car_T3"].augment
    assert recipe.train.checkpoint_every == PRESETS["small"].train.checkpoint_every  # pgnn's own setting


# ----------------------------------------------------------------------------------------------------------
# Bad input: a DataError naming the file and the key
# ----------------------------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, obj: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def _load(path: Path) -> dict[str, Any]:
    return copy.deepcopy(json.loads(path.read_text()))


@pytest.mark.parametrize(
    ("which", "edit", "message"),
    [
        ("config", lambda c: c.update(nms_top_k=5), r"key 'nms_top_k': not a key of config"),
        ("config", lambda c: c.update(downsample_by_voxel_size=0.1), r"key 'downsample_by_voxel_size'"),
        ("config", lambda c: c["graph_gen_kwargs"].update(scale=2), r"key 'graph_gen_kwargs.scale'"),
        (
            "config",
            lambda c: c["model_kwargs"]["layer_configs"][1]["kwargs"].update(edge_dropout=0.1),
            r"layer_configs.1.kwargs\).*key 'edge_dropout'",
        ),
        (
            "config",
            lambda c: c["model_kwargs"]["layer_configs"][1]["kwargs"].update(
                edge_MLP_normalization_type="BN"
            ),
            "normalization_type NONE",
        ),
        ("config", lambda c: c["loss"].update(cls_loss_type="top_k_softmax"), "key 'loss'.*top_k"),
        ("config", lambda c: c.update(num_classes=6), "key 'num_classes'"),
        ("config", lambda c: c.pop("label_method"), r"key 'label_method': missing"),
        (
            "config",
            lambda c: c["runtime_graph_gen_kwargs"].update(base_voxel_size=0.4),
            "runtime_graph_gen_kwargs",
        ),
        ("train", lambda t: t.update(learning_rate=0.1), r"key 'learning_rate': not a key of train config"),
        ("train", lambda t: t.update(optimizer="adagrad"), r"key 'optimizer'"),
        ("train", lambda t: t.update(optimizer_kwargs={"eps": 1.0}), r"key 'optimizer_kwargs'.*'eps'"),
        ("train", lambda t: t.update(NUM_GPU=2, unify_copies=False), "key 'unify_copies'"),
        ("train", lambda t: t.update(batch_size=3, NUM_GPU=2), "key 'batch_size'"),
        ("train", lambda t: t.update(crop_aug={"crop_filename": "x"}), "key 'crop_aug'"),
        ("train", lambda t: t.update(is_pseudo_batch=True), "key 'is_pseudo_batch'"),
        ("train", lambda t: t.update(NUM_TEST_SAMPLE=100), "key 'NUM_TEST_SAMPLE'"),
    ],
)
def test_unsupported_keys_name_the_file_and_the_key(
    tmp_path: Path, which: str, edit: Any, message: str
) -> None:
    config, train = pair("car_T3")
    c, t = _load(config), _load(train)
    edit(c if which == "config" else t)
    config_path = _write(tmp_path, "my_config.json", c)
    train_path = _write(tmp_path, "my_train_config.json", t)
    with pytest.raises(DataError, match=message) as err:
        params_overrides(config_path, train_path)
    assert str(err.value).startswith(str(config_path if which == "config" else train_path))


def test_command_reports_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, train = pair("car_T3")
    assert cli_main(["import-config", str(tmp_path / "nope.json"), str(train)]) == 1
    assert (
        "nope.json: expected an original Point-GNN config (JSON), got no such file" in capsys.readouterr().err
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli_main(["import-config", str(config), str(bad)]) == 1
    assert "bad.json:1: expected JSON" in capsys.readouterr().err


def test_inexpressible_settings_are_errors(tmp_path: Path) -> None:
    # params.yaml's null keeps the preset's value, so "no regulariser" over car_T3 cannot be written
    config, train = pair("car_T3")
    c = _load(config)
    del c["model_kwargs"]["regularizer_type"], c["model_kwargs"]["regularizer_kwargs"]
    with pytest.raises(DataError, match=r"cannot express \['loss.regularizer_type'\] over preset 'car_T3'"):
        params_overrides(_write(tmp_path, "c.json", c), train)
