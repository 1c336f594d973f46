"""pgnn/config/params.py + pgnn/recipe/presets.py: params.yaml validation and preset resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgnn.config.params import Params, load_params
from pgnn.core.errors import DataError
from pgnn.graphs.targets import method_class_names
from pgnn.recipe.presets import PRESETS, apply_preset

REPO = Path(__file__).resolve().parents[2]


def test_repo_params_resolve() -> None:
    recipe = apply_preset(load_params(REPO / "params.yaml"))
    assert recipe.targets.label_method == "Car_heading" and recipe.model.num_classes == 6
    assert recipe.targets.input_features == "is" and recipe.model.input_dim == 5


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_resolves_consistently(name: str) -> None:
    recipe = apply_preset(Params(preset=name))
    widths = {"i": 1, "is": 5}
    assert recipe.model.input_dim == widths[recipe.targets.input_features]
    assert (
        recipe.model.num_classes
        == {"Car": 4, "Pedestrian_and_Cyclist": 6, "yaw": 8, "Car_heading": 6}[recipe.targets.label_method]
    )
    assert recipe.postprocess.class_names == method_class_names(recipe.targets.label_method)
    assert len(recipe.postprocess.class_names) == recipe.model.num_classes


def test_overrides_apply_and_null_keeps_the_preset() -> None:
    base = apply_preset(Params())
    r = apply_preset(Params(train={"max_steps": 7, "batch_size": None}, targets={"input_features": "irgb"}))
    assert r.train.max_steps == 7 and r.train.batch_size == base.train.batch_size
    assert r.model.input_dim == 4  # follows the features


def test_unknown_keys_and_presets_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown preset"):
        apply_preset(Params(preset="nope"))
    with pytest.raises(Exception, match="max_stepz"):
        apply_preset(Params(train={"max_stepz": 3}))
    bad = tmp_path / "params.yaml"
    bad.write_text("preset: small\ndata:\n  rooot: x\n")
    with pytest.raises(DataError, match="params.yaml"):
        load_params(bad)
    bad.write_text("preset: [unclosed\n")
    with pytest.raises(DataError, match="valid YAML"):
        load_params(bad)


def test_yaw_merge_follows_the_label_method() -> None:
    """Car_heading decodes yaws over the whole circle: its box merge is circular; the original's are not."""
    assert apply_preset(Params(preset="small_painted_car")).postprocess.yaw_merge == "circular"
    for preset in ("small", "car_T3", "ped_cyc_T3", "painted_car_T3", "small_3class"):
        assert apply_preset(Params(preset=preset)).postprocess.yaw_merge == "median"
    heading = Params(preset="small", targets={"label_method": "Car_heading"})
    assert apply_preset(heading).postprocess.yaw_merge == "circular"
    forced = Params(preset="small_painted_car", postprocess={"yaw_merge": "median"})
    assert apply_preset(forced).postprocess.yaw_merge == "median"
