"""For every key of params.resolved.yaml, a changed value gives what a fresh run of that value gives.

A stage that declares a key reruns under DVC when it changes (tests/pipeline/test_stage_params.py shows each
stage declares exactly what it reads). Inside a stage that reruns, three shortcuts can still keep old work:
the prepare and graphs shards (kept while their content key holds) and training (resumed from the checkpoints
of its run key). So for every leaf key of the resolved params, generated from the values of a tiny project
(a key added later is covered without a change here), this changes the value and checks that the content key
of every shortcut of every stage declaring the key changes too, unless the key is listed in :data:`NEUTRAL`
for that stage with its reason (and each such key has its own test that the result is the same). The other
stages (synth, gt_db, predict, evaluate, plots) have no shortcut: they rebuild their outputs when they run.
"""

from __future__ import annotations

import shutil
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import pgnn.training.source
from pgnn.config.training import RESUMABLE_CHANGES
from pgnn.pipeline.runner import run_in_order
from pgnn.pipeline.stages import SPLITS, STAGES, UNTRACKED_PARAMS, Layout
from pgnn.pipeline.steps.graphs import graphs_plan
from pgnn.pipeline.steps.prepare import split_plan
from pgnn.pipeline.steps.train import train_meta
from pgnn.recipe.resolved import Resolved
from pgnn.training.source import train_run_key

TINY = {
    "synthetic": {"frames": 4, "seed": 3, "val_fraction": 0.5},
    "data": {"frames_per_shard": 1, "workers": 1},
    "train": {"max_steps": 2, "batch_size": 1},
}
SHORTCUTS = ("prepare", "graphs", "train")
NEUTRAL: dict[str, dict[str, str]] = {
    "prepare": {k: v for k, v in UNTRACKED_PARAMS.items() if k.startswith("data.")},
    "graphs": {k: v for k, v in UNTRACKED_PARAMS.items() if k.startswith("data.")},
    # tests/training/test_neutral_settings.py shows each leaves the weights (and the curves) equal
    "train": {f"train.{k}": why for k, why in RESUMABLE_CHANGES.items()},
}
"""Keys a stage declares that do not change its shortcut's key, by stage, with the reason."""
CARD_ONLY = ("postprocess.", "runtime_graph.")
"""Train-stage keys that only the exported model card holds (pgnn/nn/card.py): the weights never see them, so
a changed value resumes the run at its last step and exports the same weights with the new card, as a fresh
run would (tests/pipeline/test_predict_stage.py: the card is what every path predicts with)."""
CHANGED: dict[str, Any] = {
    # keys whose changed value the generic rule cannot make (a path, a split name, a list, a dict, a None)
    "runtime_graph_name": "ped_cyc_runtime",  # a name the checkpoints record (train_meta)
    "data.root": None,  # another KITTI root: other input files, whose bytes the shard keys hash (below)
    "data.train_split": "val",
    "data.val_split": "train",
    "train.optimizer_kwargs": {"beta1": 0.8},  # the tiny project's preset trains with adam
    "train.train_dataset": "train_car.txt",
    "train.clip_grad_norm": 10.0,
    "train.save_every_epoch": 2,
    "train.eval_every": 5,
    "train.max_epoch": 7,
    "gt_sampling": {"sample_counts": {"Car": 3}},
    "validation": {"postprocess": {}, "classes": ["Car"]},
    "eval.classes": ["Car", "Pedestrian"],
    "postprocess.class_names": ["Background", "Car", "Car", "Van"],
    "postprocess.ignore_class_names": ["Background"],
    "augment.steps": [{"method": "random_flip_all", "flip_prob": 0.5}],
    "targets.encoding": "direct_encoding",
    "model.set_mlp": [64, 64],
    "model.gnn_layers": [{"auto_offset": True, "offset_mlp": [32, 3], "edge_mlp": [64], "update_mlp": [64]}],
    "train.num_workers": 1,
    "loss.classwise_loc_loss_weight": [1.0, 2.0, 2.0, 1.0],
    "loss.regularizer_type": "l1",
    "loss.regularizer_kwargs": {"scale": 1e-6},
}
ALSO: dict[str, dict[str, Any]] = {
    # keys valid only together with another: changed with it
    "loss.regularizer_type": {"loss.regularizer_kwargs": {"scale": 1e-6}},
    "loss.regularizer_kwargs": {"loss.regularizer_type": "l1"},
}


def leaves(obj: Any, path: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj and not path.endswith(("optimizer_kwargs", "sample_counts")):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out |= leaves(v, f"{path}.{k}" if path else str(k))
        return out
    return {path: obj}


def set_key(raw: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = yaml.safe_load(yaml.safe_dump(raw))
    node = out
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    return out


def annotation(key: str) -> Any:
    """The type of ``key``'s field in the resolved model (None where it is not a plain field path)."""
    model: Any = Resolved
    for part in key.split("."):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return None
        model = fields[part].annotation
        args = [a for a in typing.get_args(model) if a is not type(None)]
        if typing.get_origin(model) in (typing.Union, types.UnionType) and args:
            model = args[0]
    return model


def changed_value(key: str, value: Any) -> Any:
    """Another valid value for ``key`` (the generic rule by type, or :data:`CHANGED`)."""
    if key in CHANGED:
        return CHANGED[key]
    kind = annotation(key)
    if typing.get_origin(kind) is typing.Literal:
        return next(a for a in typing.get_args(kind) if a != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 if value else 0.5
    if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        return [value[0] + 1, *value[1:]]
    if isinstance(value, list) and value and isinstance(value[-1], dict):  # e.g. graph levels: the last one's
        last = dict(value[-1])  # first number changed
        numbers = [k for k, v in last.items() if isinstance(v, int | float) and not isinstance(v, bool)]
        name = numbers[0] if numbers else None
        if name is not None:
            last[name] = last[name] * 1.5 if isinstance(last[name], float) else last[name] + 1
            return [*value[:-1], last]
    raise AssertionError(f"give params.resolved.yaml key {key} (value {value!r}) a changed value in CHANGED")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Layout, dict[str, Any]]:
    root = tmp_path_factory.mktemp("keys")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY))
    layout = Layout(root)
    run_in_order(layout, ["params", "synth", "prepare", "gt_db", "graphs"])
    return layout, yaml.safe_load(layout.path("resolved").read_text())


def content_keys(resolved: Resolved, layout: Layout, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The key of each shortcut under ``resolved``: the prepare and graphs shard keys of both splits, and the
    training run key computed from those (what its data would be after prepare and graphs reran)."""
    prepare = {s: split_plan(resolved.data, s, layout.path("prepared", s), layout.root) for s in SPLITS}
    fpsh = resolved.data.frames_per_shard
    graphs = {
        s: graphs_plan(resolved, s, layout.path("prepared", s), layout.path("graphs", s), fpsh)
        for s in SPLITS
    }
    manifests = {
        layout.path("prepared", "train"): prepare["train"],
        layout.path("graphs", "train"): graphs["train"],
    }
    monkeypatch.setattr(
        pgnn.training.source,
        "read_manifest",
        lambda folder: {"shards": [{"key": t.key} for t in manifests[Path(folder)].tasks]},
    )
    graphs_dir, prepared_dir, gt_db = (
        layout.path("graphs", "train"),
        layout.path("prepared", "train"),
        layout.path("gt_db"),
    )
    meta = train_meta(resolved)
    train = train_run_key(resolved, graphs_dir, meta, prepared_dir, gt_db, resolved.validation)
    return {
        "prepare": [t.key for p in prepare.values() for t in p.tasks],
        "graphs": [t.key for p in graphs.values() for t in p.tasks],
        "train": train,
    }


def declares(stage_params: tuple[str, ...], key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in stage_params)


def test_every_key_changes_the_shortcuts_of_the_stages_that_declare_it(
    project: tuple[Layout, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, raw = project
    base = content_keys(Resolved.model_validate(raw), layout, monkeypatch)
    checked: dict[str, list[str]] = {}
    problems: list[str] = []
    for key, value in leaves(raw).items():
        declaring = [s.name for s in STAGES if declares(s.params, key) and s.name in SHORTCUTS]
        if not declaring or key == "data.root":  # no shortcut; data.root: test_input_keys_follow_...
            continue
        try:
            changed = set_key(raw, key, changed_value(key, value))
            for other, also in ALSO.get(key, {}).items():
                changed = set_key(changed, other, also)
            resolved = Resolved.model_validate(changed)
        except (AssertionError, ValidationError) as e:
            problems.append(f"{key}: no valid changed value, set one in CHANGED: {str(e).splitlines()[0]}")
            continue
        after = content_keys(resolved, layout, monkeypatch)
        for name in declaring:
            neutral = key in NEUTRAL[name] or (name == "train" and key.startswith(CARD_ONLY))
            if neutral and after[name] != base[name]:
                problems.append(f"{key} is listed neutral for {name} but changes its key")
            if not neutral and after[name] == base[name]:
                problems.append(f"{key} reruns {name} under DVC, but its shortcut keeps the old result")
        checked[key] = declaring
    assert not problems, "\n".join(problems)
    assert len(checked) > 60 and {"train.initial_lr", "graph.levels", "data.painted"} <= set(checked)
    assert all(checked[k] for k in ("model.num_classes", "targets.label_method", "graph_seed"))


def test_input_keys_follow_the_input_bytes(project: tuple[Layout, dict[str, Any]], tmp_path: Path) -> None:
    """``data.root`` names the input files: a root with other bytes gives other prepare keys."""
    layout, raw = project
    resolved = Resolved.model_validate(raw)
    root = tmp_path / "other"
    shutil.copytree(layout.path("synthetic"), root)
    label = sorted((root / "training" / "label_2").iterdir())[0]
    label.write_text(label.read_text() + "DontCare -1 -1 -10 0 0 10 10 -1 -1 -1 -1000 -1000 -1000 -10\n")
    data = resolved.data.model_copy(update={"root": str(root)})
    before = [t.key for t in split_plan(resolved.data, "train", tmp_path / "a", layout.root).tasks]
    after = [t.key for t in split_plan(data, "train", tmp_path / "b", layout.root).tasks]
    assert before != after
