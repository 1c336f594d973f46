"""Every params value checked against its meaning (pgnn/config/types.py): generated over the models.

Walking the typed params (:class:`pgnn.recipe.resolved.Resolved`, the whole of params.yaml once its preset is
resolved, and every model under it): no int or float field takes ``true`` (pydantic's lax mode reads it as
1), no bool field takes ``1``, no float field takes ``.nan`` or ``.inf``, and no int field takes ``10**30``
(every count has an upper bound). Then the same through ``params.yaml`` (the key is named), a non-numeric
``graph.seed``, split names that leave ImageSets, and the ``params`` stage's one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from pgnn.cli import main as cli_main
from pgnn.config.params import Params, load_params
from pgnn.config.training import OPTIMIZER_KWARGS
from pgnn.core.errors import DataError, ParamsError
from pgnn.recipe.presets import PRESETS
from pgnn.recipe.resolved import Resolved, resolve

REPO = Path(__file__).resolve().parents[2]
HUGE = 10**30


def _arms(annotation: Any) -> list[Any]:
    """The alternatives of an annotation, through ``Annotated`` and unions (``int | None`` -> int, None)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _arms(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [arm for a in get_args(annotation) for arm in _arms(a)]
    return [annotation]


def _slot(annotation: Any, leaf: type) -> str | None:
    """Where values of type ``leaf`` live in a field: "scalar", "tuple" (items), "dict" (values) or None."""
    for arm in _arms(annotation):
        if arm is leaf:
            return "scalar"
        origin, args = get_origin(arm), get_args(arm)
        if origin is tuple and any(leaf in _arms(a) for a in args if a is not Ellipsis):
            return "tuple"
        if origin is dict and leaf in _arms(args[1]):
            return "dict"
    return None


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields hold (depth first, each once)."""
    seen: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        for arm in _arms(annotation):
            if isinstance(arm, type) and issubclass(arm, BaseModel):
                if arm not in seen:
                    seen.append(arm)
                    for field in arm.model_fields.values():
                        visit(field.annotation)
            for arg in get_args(arm):
                visit(arg)

    visit(root)
    return seen


def _examples() -> dict[type[BaseModel], BaseModel]:
    """A valid instance of every model reachable from the resolved params of every preset."""
    found: dict[type[BaseModel], BaseModel] = {Params: Params()}

    def visit(obj: Any) -> None:
        if isinstance(obj, BaseModel):
            found.setdefault(type(obj), obj)
            for name in type(obj).model_fields:
                visit(getattr(obj, name))
        elif isinstance(obj, tuple | list):
            for item in obj:
                visit(item)

    for name in PRESETS:  # gt_sampling and validation on, so that their models appear
        visit(resolve(Params(preset=name, gt_sampling={"enabled": True}, train={"eval_every": 10})))
    for kwargs_model in OPTIMIZER_KWARGS.values():
        found.setdefault(kwargs_model, kwargs_model())
    return found


MODELS = [m for m in _models(Resolved) if m is not Resolved] + [Resolved, Params, *OPTIMIZER_KWARGS.values()]
EXAMPLES = _examples()


def _probe(example: Any, slot: str, bad: Any) -> Any:
    """The field's example value with ``bad`` where its first ``slot`` value is."""
    if slot == "tuple":
        return [bad, *list(example or ())[1:]]
    if slot == "dict":
        items = dict(example or {"probe": None})
        return {**items, next(iter(items)): bad}
    return bad


def _cases(leaf: type, bad: Any) -> list[tuple[type[BaseModel], str, Any]]:
    return [
        (model, name, _probe(getattr(EXAMPLES[model], name), slot, bad))
        for model in dict.fromkeys(MODELS)
        for name, field in model.model_fields.items()
        if (slot := _slot(field.annotation, leaf))
    ]


def _refused(model: type[BaseModel], name: str, value: Any) -> list[dict[str, Any]]:
    data = {**EXAMPLES[model].model_dump(), name: value}
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return info.value.errors()


def test_the_walk_sees_every_model_and_its_fields() -> None:
    assert set(MODELS) <= set(EXAMPLES), set(MODELS) - set(EXAMPLES)
    names = {m.__name__ for m in MODELS}
    assert {"DataConfig", "TrainConfig", "GraphLevelConfig", "GNNLayerConfig", "GtSampleConfig"} <= names
    ints = {f"{m.__name__}.{n}" for m, n, _ in _cases(int, True)}
    assert {"TrainConfig.max_steps", "TrainConfig.batch_size", "TrainConfig.num_workers"} <= ints
    assert {"ModelConfig.point_mlp", "GraphLevelConfig.num_neighbors", "Resolved.graph_seed"} <= ints
    assert {"DataConfig.frames_per_shard", "SyntheticConfig.frames", "PostprocessConfig.class_fold"} <= ints
    assert len(ints) == 40 and len(_cases(float, True)) == 31 and len(_cases(bool, 1)) == 12  # as of writing


@pytest.mark.parametrize(
    ("model", "name", "value"), _cases(int, True), ids=lambda v: getattr(v, "__name__", v)
)
def test_no_int_field_reads_true_as_one(model: type[BaseModel], name: str, value: Any) -> None:
    errors = _refused(model, name, value)
    assert errors[0]["loc"][0] == name and errors[0]["input"] is True


@pytest.mark.parametrize(
    ("model", "name", "value"), _cases(int, HUGE), ids=lambda v: getattr(v, "__name__", v)
)
def test_every_count_has_an_upper_bound(model: type[BaseModel], name: str, value: Any) -> None:
    errors = _refused(model, name, value)
    assert any(e.get("input") == HUGE for e in errors) or errors[0]["loc"] == ()  # a bound or a cross-check


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), "0.5"], ids=["true", "nan", "inf", "str"])
def test_no_float_field_takes_a_bool_a_non_finite_number_or_a_string(bad: Any) -> None:
    for model, name, value in _cases(float, bad):
        errors = _refused(model, name, value)
        assert errors[0]["loc"][0] == name, (model.__name__, name)


def test_no_bool_field_takes_a_number_or_a_word() -> None:
    for bad in (1, "yes"):
        for model, name, value in _cases(bool, bad):
            assert _refused(model, name, value)[0]["loc"][0] == name, (model.__name__, name)


def test_the_defaults_and_every_preset_still_validate() -> None:
    for model, example in EXAMPLES.items():
        assert model.model_validate(example.model_dump()) == example
    assert resolve(load_params(REPO / "params.yaml")).train.max_steps == 3000


# ----------------------------------------------------------------------------------------------------------
# through params.yaml: the error names the key

SECTIONS = ("data", "synthetic", "plots", "graph", "targets", "model", "train", "loss", "postprocess")


def _section_model(section: str) -> type[BaseModel]:
    resolved = {name: field.annotation for name, field in Resolved.model_fields.items()}
    return next(
        arm for arm in _arms(resolved[section]) if isinstance(arm, type) and issubclass(arm, BaseModel)
    )


def _yaml_cases() -> list[tuple[str, str, Any]]:
    cases = []
    for section in (*SECTIONS, "gt_sampling"):
        model = _section_model(section)
        for name, field in model.model_fields.items():
            if _slot(field.annotation, int) == "scalar":
                cases += [(section, name, True), (section, name, HUGE)]
    return cases


def _load(tmp_path: Path, raw: dict[str, Any]) -> Resolved:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return resolve(load_params(path))


@pytest.mark.parametrize(("section", "name", "value"), _yaml_cases(), ids=str)
def test_params_yaml_names_the_key_of_a_bool_or_huge_count(
    tmp_path: Path, section: str, name: str, value: Any
) -> None:
    with pytest.raises(ParamsError) as info:
        _load(tmp_path, {section: {name: value}})
    assert info.value.key == f"{section}.{name}" and "\n" not in str(info.value)
    assert f"got {value!r}" in str(info.value)


def test_true_is_not_one_step_and_a_string_is_not_a_rate(tmp_path: Path) -> None:
    with pytest.raises(
        ParamsError, match=r"params.yaml: train.max_steps: Input should be a valid integer, got True"
    ):
        _load(tmp_path, {"train": {"max_steps": True}})
    with pytest.raises(ParamsError, match=r"train.initial_lr: Input should be a valid number, got '0.1'"):
        _load(tmp_path, {"train": {"initial_lr": "0.1"}})
    with pytest.raises(ParamsError, match=r"model.point_mlp.0: Input should be a valid integer, got True"):
        _load(tmp_path, {"model": {"point_mlp": [True, 64]}})
    assert _load(tmp_path, {"model": {"point_mlp": [16, 64]}}).model.point_mlp == (16, 64)  # a YAML list
    assert _load(tmp_path, {"train": {"initial_lr": 1}}).train.initial_lr == 1.0  # an int is a fine float


@pytest.mark.parametrize("seed", ["abc", True, -1, 2.5, HUGE])
def test_a_bad_graph_seed_names_the_key(tmp_path: Path, seed: Any) -> None:
    with pytest.raises(ParamsError) as info:
        _load(tmp_path, {"graph": {"seed": seed}})
    assert str(info.value).startswith("params.yaml: graph.seed: ") and f"got {seed!r}" in str(info.value)
    assert _load(tmp_path, {"graph": {"seed": 7}}).graph_seed == 7


@pytest.mark.parametrize("split", ["../x", "/etc/passwd", "a/b", ".hidden", "", "x" * 101])
def test_split_names_stay_inside_imagesets(tmp_path: Path, split: str) -> None:
    for key in ("train_split", "val_split"):
        with pytest.raises(ParamsError) as info:
            _load(tmp_path, {"data": {key: split}})
        assert info.value.key == f"data.{key}"
        assert "expected a split file name inside ImageSets/" in str(info.value)
    assert _load(tmp_path, {"data": {"val_split": "val_car-2.v1"}}).data.val_split == "val_car-2.v1"


def test_a_duplicated_key_or_section_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  max_steps: 5\n  batch_size: 2\n  max_steps: 7\n")
    with pytest.raises(DataError, match=r"params.yaml:4: expected each key once, got 'max_steps' again "):
        load_params(path)
    path.write_text("train:\n  max_steps: 5\ndata:\n  workers: 1\ntrain:\n  batch_size: 1\n")
    with pytest.raises(DataError) as info:
        load_params(path)
    assert (info.value.line, info.value.message) == (
        5,
        "expected each key once, got 'train' again (first on line 1)",
    )


def test_a_params_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("- train\n- data\n")
    with pytest.raises(DataError, match=r"params.yaml: expected a mapping of sections, got a list"):
        load_params(path)


# ----------------------------------------------------------------------------------------------------------
# the params stage: one line, exit 1, no traceback, nothing written. The file is named as the path the stage
# read (``<root>/params.yaml``), for what the preset's sections find too (they said ``params.yaml`` whatever
# the file was: ``pgnn train --params other.yaml`` named the wrong file).

STAGE_CASES = {
    "true_steps": (
        "train:\n  max_steps: true\n",
        "{root}/params.yaml: train.max_steps: Input should be a valid integer",
    ),
    "huge_batch": (
        f"train:\n  batch_size: {HUGE}\n",
        "{root}/params.yaml: train.batch_size: Input should be less than or equal to 4096",
    ),
    "word_seed": (
        "graph:\n  seed: abc\n",
        "{root}/params.yaml: graph.seed: Input should be a valid integer, got 'abc'",
    ),
    "split_out": (
        "data:\n  val_split: ../x\n",
        "{root}/params.yaml: data.val_split: expected a split file name",
    ),
    "section_twice": (
        "train:\n  max_steps: 5\ndata:\n  workers: 1\ntrain:\n  batch_size: 1\n",
        "{root}/params.yaml:5: expected each key once, got 'train' again (first on line 1)",
    ),
}


@pytest.mark.parametrize("case", sorted(STAGE_CASES))
def test_the_params_stage_reports_a_bad_value_in_one_line(tmp_path: Path, case: str) -> None:
    text, message = STAGE_CASES[case]
    shutil.copytree(REPO / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "params.yaml").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PGNN_DEBUG": ""}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "stages" / "params.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith(f"stages/params.py: error: {message.format(root=tmp_path)}"), lines[0]
    assert not (tmp_path / "params.resolved.yaml").exists() and (tmp_path / "params.yaml").read_text() == text


def test_an_exponent_learning_rate_is_a_number(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  initial_lr: 1e-3\n")
    assert resolve(load_params(path)).train.initial_lr == 0.001


@pytest.mark.parametrize("section", ["augment", "gt_sampling"])
def test_enabled_is_true_false_or_null(tmp_path: Path, section: str) -> None:
    """``enabled: "false"`` used to be truthy: it turned the section on."""
    for bad in ("false", 1, "no"):
        with pytest.raises(ParamsError) as info:
            _load(tmp_path, {section: {"enabled": bad}})
        assert info.value.key == f"{section}.enabled" and f"got {bad!r}" in str(info.value)
    assert _load(tmp_path, {section: {"enabled": False}}).gt_sampling is None


# ----------------------------------------------------------------------------------------------------------
# which file, which key: a section error names the file given, an unknown key its name and the closest one


def test_pgnn_train_names_the_params_file_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error inside a section (found when the preset is resolved) said ``params.yaml`` for any file."""
    other = tmp_path / "other.yaml"
    other.write_text("train:\n  max_steps: true\n")
    assert cli_main(["train", "--params", str(other)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"pgnn train: error: {other}: train.max_steps: Input should be a valid integer, got True"
    ]
    assert not (tmp_path / "params.resolved.yaml").exists()


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ("x-defs: &d {a: 1}\n", "x-defs", ""),  # a usual home for YAML anchors: it was reported as ''
        ("presett: small\n", "presett", " (did you mean 'preset'?)"),
        ("data:\n  wrokers: 2\n", "data.wrokers", " (did you mean 'workers'?)"),
        ("train:\n  initial_lrr: 0.1\n", "train.initial_lrr", " (did you mean 'initial_lr'?)"),
        ("gt_sampling:\n  max_trys: 3\n", "gt_sampling.max_trys", " (did you mean 'max_tries'?)"),
        ("train:\n  zzzzzz: 1\n", "train.zzzzzz", ""),
    ],
)
def test_an_unknown_key_is_named_with_the_closest_known_one(
    tmp_path: Path, text: str, key: str, hint: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError) as info:
        resolve(load_params(path), path)  # the file's own keys, then the preset's sections
    assert info.value.key == key
    assert str(info.value) == f"{path}: {key}: unknown key (not a setting of this section){hint}"
