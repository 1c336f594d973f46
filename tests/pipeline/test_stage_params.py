"""Each stage declares exactly the params its outputs depend on (issue 13.2).

Every stage but ``params`` reads ``params.resolved.yaml`` through :class:`pgnn.config.params.ResolvedReader`,
whose ``on_load`` hook sees every typed config it hands out. Here each stage's ``run`` runs once on a tiny
synthetic project (train three times: plain, validating during training, and augmenting with ground-truth
sampling, the paths that read different settings) while every read of a config field is recorded: a field
read by attribute, or a whole config dumped (a run key, a shard key). The reads, collapsed to a section where
all of its fields are read, must equal the stage's ``params`` in the stage table (and so in dvc.yaml):
nothing missing (a value that changes the outputs without rerunning the stage), nothing unread (a rerun for
nothing). Keys read that do not change outputs (``UNTRACKED_PARAMS``: the worker count) are not declared.

A second check maps each key of params.yaml to the stages it reruns, through the resolved file.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from pgnn.config.params import Params, ParamsSource, ResolvedReader, load_params
from pgnn.core.errors import ParamsError
from pgnn.pipeline.dvcyaml import stage_dict
from pgnn.pipeline.stages import STAGES, UNTRACKED_PARAMS, Layout, Stage
from pgnn.recipe.resolved import Resolved, resolve, resolved_text

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "synthetic": {"frames": 4, "seed": 3, "val_fraction": 0.5},
    "data": {"frames_per_shard": 2, "workers": 1},
    "train": {"max_steps": 2, "batch_size": 1, "checkpoint_every": 2, "log_every": 1, "eval_every": None},
    "plots": {"bev_frames": 1},
}
# training reads different settings on these paths: each is run, and the reads are united
TRAIN_VARIANTS = {
    "plain": {},
    "validating": {"train": {"eval_every": 1, "eval_frames": 1}},
    "augmenting": {"augment": {"enabled": True}, "gt_sampling": {"enabled": True}},
}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class Recorder:
    """Records reads of config fields by their ``params.resolved.yaml`` key (``train.max_steps``)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.keep: list[Any] = []  # keeps registered objects alive (ids stay theirs)
        self.reads: set[str] = set()

    def register(self, path: str, obj: Any) -> None:
        if isinstance(obj, BaseModel):
            self.paths.setdefault(id(obj), path)
            self.keep.append(obj)
            for name in type(obj).model_fields:
                self.register(_join(path, name), object.__getattribute__(obj, name))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        rec = self
        orig_getattribute = BaseModel.__getattribute__
        orig_dump, orig_json, orig_iter = BaseModel.model_dump, BaseModel.model_dump_json, BaseModel.__iter__
        orig_copy = BaseModel.model_copy

        def getattribute(obj: Any, name: str) -> Any:
            value = orig_getattribute(obj, name)
            path = rec.paths.get(id(obj))
            if path is not None and name in type(obj).model_fields and not isinstance(value, BaseModel):
                rec.reads.add(_join(path, name))
            return value

        def whole(orig: Any) -> Any:
            def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
                path = rec.paths.get(id(obj))
                if path is not None:
                    rec.reads.add(path)
                return orig(obj, *args, **kwargs)

            return wrapper

        def model_copy(obj: Any, *args: Any, **kwargs: Any) -> Any:
            new = orig_copy(obj, *args, **kwargs)
            path = rec.paths.get(id(obj))
            if path is not None:
                rec.paths.setdefault(id(new), path)
                rec.keep.append(new)
            return new

        patches = {
            "__getattribute__": getattribute,
            "model_dump": whole(orig_dump),
            "model_dump_json": whole(orig_json),
            "__iter__": whole(orig_iter),
            "model_copy": model_copy,
        }
        saved = {name: BaseModel.__dict__.get(name) for name in patches}
        try:
            for name, fn in patches.items():
                setattr(BaseModel, name, fn)
            yield
        finally:
            for name, fn in saved.items():
                if fn is None:
                    delattr(BaseModel, name)
                else:
                    setattr(BaseModel, name, fn)


def collapse(reads: set[str], model: BaseModel) -> set[str]:
    """The reads as params keys: a key under a read key is dropped; a config all of whose fields are read
    becomes its own key."""

    def keys(obj: BaseModel, path: str) -> set[str]:
        if path in reads:
            return {path}
        out: set[str] = set()
        fields = type(obj).model_fields
        for name in fields:
            value = getattr(obj, name)
            sub = _join(path, name)
            if isinstance(value, BaseModel):
                out |= keys(value, sub)
            elif sub in reads:
                out.add(sub)
        if path and fields and all(_join(path, n) in out for n in fields):
            return {path}
        return out

    return keys(model, "")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for section, values in extra.items():
        out[section] = {**(out.get(section) or {}), **values}
    return out


def _resolved(raw_params: dict[str, Any], on_load: Any = None) -> ResolvedReader:
    """What a stage gets: the params resolved, written as text and read back (as ``run_stage`` does)."""
    text = resolved_text(resolve(Params.model_validate(raw_params)), "test")
    return ResolvedReader(yaml.safe_load(text), "params.resolved.yaml", on_load)


@pytest.fixture(scope="module")
def stage_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Stage -> the params.resolved.yaml keys its ``run`` read on the tiny project (variants united)."""
    root = tmp_path_factory.mktemp("stage_params")
    base = _merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    layout = Layout(root)
    out: dict[str, set[str]] = {}
    timings = {}
    for s in STAGES:
        if s.reads_params_yaml:
            continue
        variants = TRAIN_VARIANTS if s.name == "train" else {"": {}}
        reads: set[str] = set()
        t0 = time.perf_counter()
        for extra in variants.values():
            rec = Recorder()
            params = _resolved(_merge(base, extra), rec.register)
            entry = importlib.import_module(s.entry)
            for item in s.foreach or (None,):
                with rec.recording():
                    entry.run(params, layout, item)
            reads |= collapse(rec.reads - set(UNTRACKED_PARAMS), params.whole(Resolved))
            if s.name == "train":  # each variant trains from scratch (a finished run would only resume)
                shutil.rmtree(layout.path("checkpoints"), ignore_errors=True)
        timings[s.name] = round(time.perf_counter() - t0, 1)
        out[s.name] = {k for k in reads if not any(k.startswith(a + ".") for a in reads)}
    print(f"\nseconds per stage: {timings}")
    return out


@pytest.mark.parametrize("name", [s.name for s in STAGES if not s.reads_params_yaml])
def test_a_stage_declares_exactly_the_params_it_reads(stage_reads: dict[str, set[str]], name: str) -> None:
    s = next(s for s in STAGES if s.name == name)
    read, declared = stage_reads[name], set(s.params)
    missing, unread = sorted(read - declared), sorted(declared - read)
    assert not missing, f"{name} reads params it does not declare (no rerun when they change): {missing}"
    assert not unread, f"{name} declares params it never reads (reruns for nothing): {unread}"


def test_dvc_yaml_params_are_the_declared_ones() -> None:
    for s in STAGES:
        body = stage_dict(s)
        body = body.get("do", body)
        if s.reads_params_yaml:
            assert body["params"] == [{"params.yaml": None}], "the params stage tracks all of params.yaml"
        elif s.params:
            assert body["params"] == [{"params.resolved.yaml": list(s.params)}], s.name
        else:
            assert "params" not in body, s.name


def _leaves(obj: Any, path: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out |= _leaves(v, _join(path, str(k)))
        return out
    return {path: obj}


# A changed value for every leaf key of params.yaml (the test fails when params.yaml gains a key not here);
# a key that matters only with another set (CONTEXT) is compared with that one set on both sides.
CONTEXT: dict[str, dict[str, Any]] = {"gt_sampling.sample_counts": {"gt_sampling.enabled": True}}
PERTURB: dict[str, Any] = {
    "preset": "car_T3",
    "data.root": "/elsewhere/kitti",
    "data.painted": False,
    "data.train_split": "trainval",
    "data.val_split": "test",
    "data.frames_per_shard": 4,
    "data.workers": 1,
    "synthetic.frames": 8,
    "synthetic.seed": 1,
    "synthetic.val_fraction": 0.25,
    "graph.seed": 1,
    "targets.label_method": "yaw",
    "targets.input_features": "irgb",
    "model": {"point_mlp": [16, 32]},
    "train.max_steps": 300,
    "train.batch_size": 4,
    "train.seed": 1,
    "train.resample_graph": True,
    "train.class_filter": False,
    "train.clip_grad_norm": 10.0,
    "train.eval_every": 100,
    "train.eval_frames": 4,
    "train.precision": "bf16",
    "train.compile": True,
    "train.threads": 3,
    "loss": {"cls_loss_weight": 0.5},
    "augment.enabled": True,
    "augment.steps": [{"method": "random_flip_all", "flip_prob": 0.5}],
    "gt_sampling.enabled": True,
    "gt_sampling.sample_counts": {"Car": 4},
    "postprocess.score_threshold": 0.5,
    "eval.classes": ["Car", "Pedestrian"],
    "plots.bev_frames": 1,
    "plots.view_frames": 1,
}
# What each changes, through params.resolved.yaml: the stages that rerun.
EXPECTED_RERUNS = {
    "data.workers": set(),  # the same shards with any process count
    "synthetic.seed": {"synth"},
    "data.frames_per_shard": {"prepare", "graphs"},
    "graph.seed": {"graphs"},  # train reruns through its dep on the graphs, not the param
    "train.max_steps": {"train"},
    "train.eval_frames": {"train"},
    # train: the model card (and its val curves); predict reruns through its dep on the model, not the param
    "postprocess.score_threshold": {"train"},
    "eval.classes": {"evaluate"},
    "plots.bev_frames": {"plots"},
    "train.resample_graph": {"train"},
    "train.clip_grad_norm": {"train"},
    "targets.input_features": {"graphs", "train"},
}


def _set(raw: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    section, _, leaf = key.partition(".")
    if leaf:
        out[section] = {**(out.get(section) or {}), leaf: value}
    else:
        out[section] = value
    return out


def _declares(s: Stage, key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in s.params)


def reruns(changed: set[str]) -> set[str]:
    return {s.name for s in STAGES if not s.reads_params_yaml and any(_declares(s, k) for k in changed)}


def test_every_params_yaml_key_reaches_the_stages_that_depend_on_it() -> None:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    leaves = _leaves(raw)
    assert set(leaves) == set(PERTURB), "give each params.yaml key a changed value in PERTURB"
    table = {}
    for key, value in PERTURB.items():
        context = raw
        for k, v in CONTEXT.get(key, {}).items():
            context = _set(context, k, v)
        base = _leaves(_resolved(context).raw)
        after = _leaves(_resolved(_set(context, key, value)).raw)
        changed = {k for k in base.keys() | after.keys() if base.get(k) != after.get(k)}
        assert changed, f"params.yaml key {key} changes nothing in params.resolved.yaml"
        table[key] = reruns(changed)
    print("\n" + "\n".join(f"{k:32} -> {sorted(v)}" for k, v in table.items()))
    for key, stages in EXPECTED_RERUNS.items():
        assert table[key] == stages, key


def test_every_resolved_key_is_declared_or_informational() -> None:
    """No key of params.resolved.yaml falls through: each is declared by a stage, untracked on purpose, or
    informational (names no stage reads: the preset and graph names)."""
    informational = {"preset", "graph_name"}
    raw = yaml.safe_load(resolved_text(resolve(load_params(REPO / "params.yaml")), ""))
    for key in _leaves(raw):
        top = key.split(".")[0]
        covered = any(_declares(s, key) for s in STAGES) or key in UNTRACKED_PARAMS or top in informational
        assert covered, f"params.resolved.yaml key {key} is read by no stage's declared params"


def test_a_bad_params_yaml_stops_the_params_stage_with_one_line(tmp_path: Path) -> None:
    from pgnn.core.errors import one_line
    from pgnn.pipeline.steps.params import run

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value, where in (
        ("train.max_stepz", 3, "train.max_stepz"),
        ("train.max_steps", -1, "train.max_steps"),
        ("preset", "nosuch", "preset"),
        ("synthetic.frames", 1, "synthetic.frames"),
    ):
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(_set(raw, key, value)))
        with pytest.raises(ParamsError) as info:
            run(ParamsSource(tmp_path / "params.yaml"), Layout(tmp_path), None)
        text = one_line(info.value)
        assert text.startswith("params.yaml") or "/params.yaml" in text.split(":")[0], text
        assert where in text and "\n" not in str(info.value), text
        assert not (tmp_path / "params.resolved.yaml").exists()


def test_a_stage_refuses_a_stale_resolved_file(tmp_path: Path) -> None:
    from pgnn.core.errors import DataError
    from pgnn.pipeline.steps.params import run

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    run(ParamsSource(tmp_path / "params.yaml"), Layout(tmp_path), None)
    ResolvedReader.load(tmp_path / "params.resolved.yaml", tmp_path / "params.yaml")  # current: fine
    (tmp_path / "params.yaml").write_text("# a comment changes nothing\n" + yaml.safe_dump(raw))
    ResolvedReader.load(tmp_path / "params.resolved.yaml", tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_set(raw, "train.max_steps", 7)))
    with pytest.raises(DataError, match="dvc repro params"):
        ResolvedReader.load(tmp_path / "params.resolved.yaml", tmp_path / "params.yaml")
