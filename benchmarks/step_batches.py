"""Training batches and the real training step of a preset, for profile_train.py and gpu.py.

Frames are synthetic KITTI (``pgnn.data.synthetic``, seed 0, painted points) or real ones (a KITTI root such
as ``../shared/data/kitti_sample``: KITTI is CC BY-NC-SA 3.0, non-commercial use only), turned into records by
the pipeline's own ``graph_record`` with the preset's graph and targets settings, collated by the loop's
``collate_records``. :func:`make_step` returns one call of ``pgnn.training.step.train_step`` (the function the
loop runs) with the preset's TF1 optimiser, learning rate and loss: the work of one step of the real run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from pgnn.config.params import DataConfig, Params
from pgnn.data.frames import load_frame
from pgnn.graphs.records import graph_record
from pgnn.nn.losses import regularized_parameters
from pgnn.nn.model import PointGNN
from pgnn.recipe.presets import Recipe, apply_preset
from pgnn.training.batches import TrainBatch, collate_records
from pgnn.training.distributed import Dist
from pgnn.training.live import IntervalStats
from pgnn.training.precision import FP32, StepPrecision
from pgnn.training.schedule import learning_rate
from pgnn.training.step import train_step
from pgnn.training.tf1_optim import make_optimizer

PAINTED_PRESETS = frozenset({"small_painted_car", "painted_car_T3"})


def recipe_of(preset: str, **train: Any) -> Recipe:
    """The resolved recipe of ``preset`` (painted inputs for the painted presets), ``train`` overridden."""
    data = DataConfig(painted=preset in PAINTED_PRESETS)
    return apply_preset(Params(preset=preset, data=data, train=train))


def synthetic_root(num_frames: int) -> tempfile.TemporaryDirectory:
    """A temporary synthetic KITTI root of ``num_frames`` training frames (seed 0; painted_lidar included)."""
    from pgnn.data.synthetic.dataset import generate_dataset

    root = tempfile.TemporaryDirectory(prefix="pgnn-bench-")
    generate_dataset(root.name, num_frames, 0)
    return root


def frame_ids(root: str | Path) -> list[str]:
    """The training frame ids of a KITTI root (the names of ``training/label_2/*.txt``), sorted."""
    return sorted(p.stem for p in (Path(root) / "training" / "label_2").glob("*.txt"))


def records(root: str | Path, recipe: Recipe, ids: Sequence[str], seed: int = 0) -> list[dict[str, Any]]:
    """The cached-graph records of ``ids`` under ``recipe`` (painted frames when its inputs are ``is``)."""
    painted = recipe.targets.input_features == "is"
    return [
        graph_record(load_frame(root, i, painted=painted), recipe.graph, recipe.targets, seed) for i in ids
    ]


def batches(recs: Sequence[dict[str, Any]], batch_size: int) -> list[TrainBatch]:
    """Consecutive batches of ``batch_size`` records (wrapping around), ``len(recs)`` // size at least one."""
    n = max(1, len(recs) // batch_size)
    return [
        collate_records([(k, recs[k % len(recs)]) for k in range(b * batch_size, (b + 1) * batch_size)])
        for b in range(n)
    ]


def make_model(recipe: Recipe, device: torch.device, seed: int = 0) -> PointGNN:
    """``PointGNN(recipe.model)`` seeded with ``seed``, in training mode on ``device``."""
    model = PointGNN(recipe.model, generator=torch.Generator().manual_seed(seed)).to(device)
    return model.train()


def make_step(
    recipe: Recipe,
    model: torch.nn.Module,
    device: torch.device,
    precision: StepPrecision = FP32,
) -> Callable[[TrainBatch, int], IntervalStats]:
    """``step(batch, k)``: step k of the recipe's schedule on ``batch`` (moved to ``device``); returns its
    stats (loss terms: ``stats.data_terms``, ``stats.reg``)."""
    params = [p for p in model.parameters()]
    optimizer = make_optimizer(
        recipe.train.optimizer, params, recipe.train.initial_lr, recipe.train.optimizer_kwargs
    )
    reg = regularized_parameters(model)
    dist = Dist(rank=0, world_size=1, device=device, owns_group=False)
    cfg = recipe.model

    def step(batch: TrainBatch, k: int) -> IntervalStats:
        stats = IntervalStats(cfg.num_classes, cfg.box_encoding_len)
        lr = learning_rate(k, recipe.train)
        train_step(
            model,
            optimizer,
            [batch.to(device)],
            reg,
            recipe.loss,
            lr,
            dist,
            stats,
            k,
            recipe.train.clip_grad_norm,
            precision=precision,
        )
        return stats

    return step
