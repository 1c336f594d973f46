"""The stage table: the one place where the pipeline's stages, their paths, params and outputs are written.

Everything else reads it: ``dvc.yaml`` is generated from it (``pgnn dvc-yaml``; a test fails when the
committed file differs); every driver (the thin scripts in ``stages/`` under ``dvc repro``, the Prefect flows,
``pgnn train``) runs a stage through :func:`pgnn.pipeline.runner.run_item`; paths come from :class:`Layout`;
the code versions in shard manifests come from each stage's ``shard_code``::

    params -> synth -> prepare@{train,val} -+-> gt_db ------------+-> train -> predict -> evaluate -> plots
                                            +-> graphs@{train,val} +

``params`` validates params.yaml and writes the effective params (``params.resolved.yaml``); every other
stage reads that file and declares the keys of it that its outputs depend on.

A stage's *entry* is a module of :mod:`pgnn.pipeline.steps` with ``run(params, layout, item)``. Its code deps
in ``dvc.yaml`` are exactly the static import closure of the stage script and the entry
(:func:`code_deps`), so editing a module reruns exactly the stages that import it.

To add a stage: write ``pgnn/pipeline/steps/<name>.py`` with ``run``, add a :class:`Stage` below (paths go
in :data:`PATHS`), add ``stages/<name>.py`` (two lines, as the others), run ``pgnn dvc-yaml`` and commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pgnn.core.imports import PACKAGE_ROOT, closure_files

SPLITS: tuple[str, ...] = ("train", "val")

PATHS: dict[str, str] = {
    "resolved": "params.resolved.yaml",
    "synthetic": "data/synthetic",
    "prepared": "data/prepared/{item}",
    "gt_db": "data/gt_db/gt_db.parquet",
    "graphs": "data/graphs/{item}",
    "checkpoints": "models/checkpoints",
    "model": "models/model.pt",
    "live": "dvclive/train",
    "live_plots": "dvclive/train/plots/metrics",
    "train_summary": "dvclive/train/metrics.json",
    "train_metrics": "metrics/train.json",
    "train_timings": "timings/train.json",
    "predictions": "data/predictions/{item}",
    "predict_timings": "timings/predict.json",
    "ap": "metrics/ap.json",
    "eval_metrics": "metrics/eval.json",
    "curves": "plots/pr",
    "images": "plots/images",
    "views": "plots/views",
}
"""Every artifact path, relative to the project root; ``{item}`` is the split of a ``foreach`` stage.

Not every artifact is a DVC output: ``checkpoints`` (a run's resumable state, ``models/checkpoints/<run
key>/``) and the wall-clock ``*_timings`` are written by their stages but neither hashed by DVC nor tracked by
git (``.gitignore``), so that two runs of the same params leave the same bytes in both."""


@dataclass(frozen=True)
class Layout:
    """The artifact paths of one project root (the :data:`PATHS` table, made absolute)."""

    root: Path

    def path(self, name: str, item: str | None = None) -> Path:
        """The path of artifact ``name`` (``item``: the split, for per-split artifacts)."""
        template = PATHS[name]
        if "{item}" in template and item is None:
            raise ValueError(f"artifact {name!r} is per split: give the split")
        return self.root / template.format(item=item)


@dataclass(frozen=True)
class Output:
    """One output of a stage: an artifact of :data:`PATHS` and how DVC treats it.

    ``kind``: ``out`` (cached), ``metric`` or ``plot`` (an image plot: DVC's vega charts load vega from a CDN
    and stay blank offline, so curves are plain outputs and the ``plots`` stage draws them); ``persist``:
    kept when the stage reruns (a killed run resumes from it); ``cache``: whether DVC caches it; ``plot``:
    the plot's options. Metrics hold results only (AP, losses), so that ``dvc metrics diff`` and ``dvc exp
    show`` are short; full tables and curves are plain outputs with ``cache: false`` (in git, not in DVC's
    cache).
    """

    artifact: str
    """A name of :data:`PATHS`, with ``:split`` for a per-split artifact of a stage without ``foreach``."""
    kind: Literal["out", "metric", "plot"] = "out"
    persist: bool = False
    cache: bool = True
    plot: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    ``deps`` are artifacts of :data:`PATHS` (``name`` or ``name:split``; ``{item}`` inside is the stage's
    split) or literal paths with ``${...}`` params templating (``${data.root}``). ``params`` are the keys
    of ``params.resolved.yaml`` (the effective params the ``params`` stage writes) that the stage's outputs
    depend on: exactly those it reads (``tests/pipeline/test_stage_params.py``). The ``params`` stage itself
    (``reads_params_yaml``) tracks the whole of ``params.yaml``. ``shard_code`` lists the modules whose import
    closure is the code version written in the stage's shard manifests (what forces a shard to be rebuilt);
    a stage that has them is a shard stage. ``flow`` is the deployment flow that runs it (:data:`FLOWS`;
    None for the ``params`` stage, which every flow runs).
    """

    name: str
    entry: str
    doc: str
    params: tuple[str, ...]
    outs: tuple[Output, ...]
    deps: tuple[str, ...] = ()
    foreach: tuple[str, ...] | None = None
    shard_code: tuple[str, ...] = field(default=())
    reads_params_yaml: bool = False
    flow: str | None = None

    @property
    def sharded(self) -> bool:
        """Whether the stage builds shards (its entry has ``plan``; drivers fan the shards out)."""
        return bool(self.shard_code)

    @property
    def script(self) -> str:
        return f"stages/{self.name}.py"


UNTRACKED_PARAMS: dict[str, str] = {
    "data.workers": "a process count: the shards are the same bytes with any value, so nothing reruns for it",
}
"""Keys of ``params.resolved.yaml`` that stages read but that do not change their outputs (not declared)."""

FLOWS: tuple[str, ...] = ("preprocess", "train-evaluate")
"""The deployment flows, one a work pool (CPU preprocessing, GPU training and evaluation): each stage names
its own (``Stage.flow``); the full flow runs them all."""

STAGES: tuple[Stage, ...] = (
    Stage(
        "params",
        "pgnn.pipeline.steps.params",
        "validate params.yaml as a whole, resolve its preset, write the effective params",
        params=(),
        outs=(Output("resolved", cache=False),),
        reads_params_yaml=True,
    ),
    Stage(
        "synth",
        "pgnn.pipeline.steps.synth",
        "the built-in synthetic KITTI root",
        params=("synthetic",),
        outs=(Output("synthetic"),),
        flow="preprocess",
    ),
    Stage(
        "prepare",
        "pgnn.pipeline.steps.prepare",
        "FOV-cropped points, features and labels of one split (parquet shards)",
        params=("data.root", "data.painted", "data.train_split", "data.val_split", "data.frames_per_shard"),
        deps=("${data.root}",),
        outs=(Output("prepared", persist=True),),
        foreach=SPLITS,
        shard_code=("pgnn.data.prepare",),
        flow="preprocess",
    ),
    Stage(
        "gt_db",
        "pgnn.pipeline.steps.gt_db",
        "object point crops of the train split (ground-truth sampling database)",
        params=(),
        deps=("prepared:train",),
        outs=(Output("gt_db"),),
        flow="preprocess",
    ),
    Stage(
        "graphs",
        "pgnn.pipeline.steps.graphs",
        "graphs, input features and vertex targets of one split (npz shards)",
        params=("graph", "graph_seed", "runtime_graph", "targets", "data.frames_per_shard"),
        deps=("prepared:{item}",),
        outs=(Output("graphs", persist=True),),
        foreach=SPLITS,
        shard_code=("pgnn.graphs.records", "pgnn.graphs.cache"),
        flow="preprocess",
    ),
    Stage(
        "train",
        "pgnn.pipeline.steps.train",
        "train (resumable checkpoints) and export the model",
        params=(
            "graph",
            "runtime_graph_name",
            "runtime_graph",
            "targets",
            "model",
            "train",
            "loss",
            "augment",
            "gt_sampling",
            "postprocess",
            "validation",
        ),
        deps=("graphs:train", "prepared:train", "gt_db", "graphs:val", "prepared:val"),
        outs=(
            Output("model"),
            Output("train_metrics", kind="metric", cache=False),
            Output("train_summary", cache=False),
            Output("live_plots", cache=False),
        ),
        flow="train-evaluate",
    ),
    Stage(
        "predict",
        "pgnn.pipeline.steps.predict",
        "KITTI result files of the val split from the cached runtime graphs",
        params=(),
        deps=("model", "graphs:val", "prepared:val"),
        outs=(Output("predictions:val"),),
        foreach=None,
        flow="train-evaluate",
    ),
    Stage(
        "evaluate",
        "pgnn.pipeline.steps.evaluate",
        "official KITTI AP of the val predictions: headline AP (metric), full table, PR curves",
        params=("eval",),
        deps=("predictions:val", "prepared:val"),
        outs=(
            Output("ap", kind="metric", cache=False),
            Output("eval_metrics", cache=False),
            Output("curves", cache=False),
        ),
        flow="train-evaluate",
    ),
    Stage(
        "plots",
        "pgnn.pipeline.steps.plots",
        "PNG charts (losses, val AP vs step, PR curves), BEV pictures and 3D pages of val frames (offline)",
        params=("plots",),
        deps=("live_plots", "curves", "predictions:val", "prepared:val"),
        outs=(Output("images", kind="plot", cache=False), Output("views", cache=False)),
        flow="train-evaluate",
    ),
)

STAGE_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
PARAMS_STAGE: Stage = next(s for s in STAGES if s.reads_params_yaml)
"""The stage every other stage reads (``params.resolved.yaml``) and every driver may run."""
RUNNER_MODULE = "pgnn.pipeline.runner"


def flow_stages(flow: str) -> tuple[str, ...]:
    """The stages a flow runs, in the table's order: ``params`` and the stages of ``flow`` (one of
    :data:`FLOWS`), or every stage for ``full``."""
    if flow != "full" and flow not in FLOWS:
        raise ValueError(f"unknown flow {flow!r}; expected full or one of {list(FLOWS)}")
    return tuple(s.name for s in STAGES if flow == "full" or s.flow in (None, flow))


def stage(name: str) -> Stage:
    """The stage called ``name`` (a clear error listing the stages otherwise)."""
    if name not in STAGE_BY_NAME:
        raise ValueError(f"unknown stage {name!r}; expected one of {[s.name for s in STAGES]}")
    return STAGE_BY_NAME[name]


def artifact_path(ref: str, item: str | None) -> str:
    """A dep or out reference as a path relative to the root: ``name``, ``name:split``, ``name:{item}``
    (the stage's split) or a literal path."""
    name, _, split = ref.partition(":")
    if name not in PATHS:
        return ref
    if split == "{item}":
        split = item or ""
    split = split or item
    if "{item}" in PATHS[name] and not split:
        raise ValueError(f"artifact {ref!r} is per split: write it as '{name}:<split>'")
    return PATHS[name].format(item=split)


def code_deps(s: Stage, root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """The stage's code deps: its script, ``stages/_common.py`` and the import closure of the runner
    (this module) and the entry, relative to ``root``."""
    return (s.script, "stages/_common.py", *closure_files([RUNNER_MODULE, s.entry], root))
