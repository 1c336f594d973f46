"""The training config (torch-free: read by the presets and by params.yaml validation without torch).

:class:`TrainConfig` is consumed by :func:`pgnn.training.loop.train`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pgnn.config.types import (
    MAX_BATCH,
    MAX_FRAMES,
    MAX_KEPT,
    MAX_WORKERS,
    BatchSize,
    Epochs,
    Flag,
    Int,
    Real,
    Seed,
    Steps,
)

OptimizerName = Literal["sgd", "momentum", "rmsprop", "adam"]


class _Kwargs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SgdKwargs(_Kwargs):
    """``sgd``: no keyword arguments."""


class MomentumKwargs(_Kwargs):
    """``momentum``: TF's arguments; the default momentum 0.9 is the original train.py's."""

    momentum: Real = Field(0.9, ge=0.0)
    use_nesterov: Flag = False


class RMSPropKwargs(_Kwargs):
    """``rmsprop``: TF's arguments; the defaults are the original train.py's (not TF's 0.9 / 0 / 1e-10)."""

    decay: Real = Field(0.9, ge=0.0, le=1.0)
    momentum: Real = Field(0.9, ge=0.0)
    epsilon: Real = Field(1.0, ge=0.0)
    centered: Flag = False


class AdamKwargs(_Kwargs):
    """``adam``: TF's arguments and defaults (the original passes none)."""

    beta1: Real = Field(0.9, ge=0.0, lt=1.0)
    beta2: Real = Field(0.999, ge=0.0, lt=1.0)
    epsilon: Real = Field(1e-8, ge=0.0)


OPTIMIZER_KWARGS: Mapping[str, type[_Kwargs]] = {
    "sgd": SgdKwargs,
    "momentum": MomentumKwargs,
    "rmsprop": RMSPropKwargs,
    "adam": AdamKwargs,
}
"""The keyword arguments of the original's optimisers (TF1's names; the updates: pgnn.training.tf1_optim)."""

# train.py's ``optimizer_kwargs_dict``: what the original passes when the config gives no optimizer_kwargs.
ORIGINAL_DEFAULT_KWARGS: Mapping[str, Mapping[str, Any]] = {
    name: kwargs_model().model_dump() for name, kwargs_model in OPTIMIZER_KWARGS.items()
}


def optimizer_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The full keyword arguments of optimiser ``name``: the original's defaults updated with ``kwargs``.

    Raises ``ValueError`` naming the optimiser and the key for an unknown optimiser or keyword.
    """
    if name not in OPTIMIZER_KWARGS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {sorted(OPTIMIZER_KWARGS)}")
    model = OPTIMIZER_KWARGS[name]
    unknown = sorted(set(kwargs) - set(model.model_fields))
    if unknown:
        raise ValueError(
            f"optimizer {name!r}: unsupported optimizer_kwargs {unknown}; expected some of "
            f"{sorted(model.model_fields)}"
        )
    try:
        return model.model_validate(dict(kwargs)).model_dump()
    except ValidationError as e:
        raise ValueError(f"optimizer {name!r}: invalid optimizer_kwargs: {e}") from e


RESUMABLE_CHANGES: dict[str, str] = {
    "max_steps": "where the run stops: a run asked for N steps resumes from its newest checkpoint at or "
    "before N, so it exports the step-N model of an uninterrupted N-step run",
    "max_epoch": "likewise: it only moves where the run stops",
    "keep_last": "how many checkpoints are kept on disk",
    "num_workers": "data-loading processes: the frames of a step depend only on (seed, epoch, step)",
    "device": "where the run computes (on one machine kind the result is the same; CPU and CUDA differ by "
    "float rounding)",
    "train_dataset": "a label: the original's split file the recipe was written for; pgnn does not read it",
    "threads": "how many CPU threads the products run on: their row blocks have the bytes of one "
    "single-threaded call (pgnn.nn.gemm), so a run on a busy machine can resume on fewer",
}
"""Train settings that may change between a run and its resumption without changing its weights or its
logged curves: they are not part of a run's key (:func:`pgnn.training.source.train_run_key`), so a change
resumes the run. Each has a test that the weights are equal with and without the change
(tests/training/test_neutral_settings.py). ``log_every``, ``eval_every`` and ``eval_frames`` change the
logged curves (results too), and so do ``checkpoint_every`` and ``save_every_epoch`` (a checkpoint ends a
logging interval, so that a resumed run logs what an uninterrupted one logs): they are in the key; the same
test shows they leave the weights equal."""


class TrainConfig(BaseModel):
    """Training settings; names and defaults follow the original's car train configs where it has them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: OptimizerName = "sgd"
    optimizer_kwargs: dict[str, Any] = Field(default_factory=dict)
    """TF1's keyword arguments over the original's defaults (:data:`ORIGINAL_DEFAULT_KWARGS`):
    momentum: ``momentum``, ``use_nesterov``; rmsprop: ``decay``, ``momentum``, ``epsilon``, ``centered``;
    adam: ``beta1``, ``beta2``, ``epsilon``. The update rules are TF1's (:mod:`pgnn.training.tf1_optim`)."""
    initial_lr: Real = Field(0.125, gt=0.0)
    decay_step: Steps = 400_000
    decay_factor: Real = Field(0.1, gt=0.0)
    staircase: Flag = True
    batch_size: BatchSize = 4
    """Frames per micro-batch over all ranks (each rank gets batch_size / world_size)."""
    accumulation_steps: Int = Field(1, ge=1, le=MAX_BATCH)
    """Micro-batches whose gradients make one optimiser step (the original's pseudo-batch)."""
    max_steps: Steps | None = 1_400_000
    max_epoch: Epochs | None = 1718
    checkpoint_every: Steps = 1000
    """Save a checkpoint every this many steps (and at the end)."""
    save_every_epoch: Epochs | None = None
    """Also save at the end of every this many epochs (the original's ``save_every_epoch``)."""
    keep_last: Int = Field(3, ge=1, le=MAX_KEPT)
    """Checkpoints kept per run (older ones of the same run are deleted; other runs are never touched)."""
    seed: Seed = 0
    train_dataset: str | None = None
    """The original's split file the recipe trained on (e.g. ``train_car.txt``), recorded with the recipe;
    pgnn reads ``data.train_split`` and, with ``class_filter``, keeps the frames the original's file lists."""
    class_filter: Flag = True
    """Train only on frames with at least one object of the label method's classes (the original's
    ``train_car.txt`` / ``train_pedestrian_cyclist.txt``); False: every frame of the split."""
    resample_graph: Flag = True
    """Draw a new random graph (keypoints, neighbour caps) for every frame in every epoch, seeded by (seed,
    epoch, frame), as the original's data provider does; False: train on the cached graph of each frame."""
    clip_grad_norm: Real | None = Field(None, gt=0.0)
    """Clip the global gradient norm to this before each update; None (the original's choice): no clipping."""
    num_workers: Annotated[Int, Field(ge=0, le=MAX_WORKERS)] | Literal["auto"] = "auto"
    """Data-loading processes; "auto": 2 when samples are rebuilt every epoch (augmentation, resampling or
    ground-truth sampling), else 0 (reading the cached graphs is cheap)."""
    log_every: Steps = 100
    eval_every: Steps | None = None
    """Every this many steps, the official KITTI AP on ``eval_frames`` frames of the val split (logged as
    ``val/...`` next to the losses); None: no validation during training."""
    eval_frames: Int = Field(32, ge=1, le=MAX_FRAMES)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: Annotated[Int, Field(ge=1, le=MAX_WORKERS)] = 1
    """CPU threads of the training step's matrix products (:func:`pgnn.nn.gemm.cpu_threads`; torch's other
    kernels run on one). The weights are the same bytes on any count: it changes only the time
    (benchmarks/README.md, "Threads that do not change a byte"), so it is not part of the run key."""
    precision: Literal["fp32", "tf32", "bf16", "fp16"] = "fp32"
    """Numerics of the training step (:mod:`pgnn.training.precision`): ``fp32`` the seed's numbers (TF32 off);
    ``tf32`` TF32 matmuls on Ampere and later GPUs (elsewhere fp32); ``bf16`` autocast to bfloat16 (CUDA and
    CPU); ``fp16`` autocast to float16 with a grad scaler (CUDA only). The max aggregation and the losses stay
    float32, the weights too. Part of the run key: it changes the weights."""
    compile: Flag = False
    """``torch.compile`` the model for training (falls back to eager with a warning where compiling fails).
    Part of the run key: compiled kernels round differently."""

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.max_steps is None and self.max_epoch is None:
            raise ValueError("set max_steps, max_epoch or both")
        optimizer_kwargs(self.optimizer, self.optimizer_kwargs)  # a ValueError naming a bad key
        return self
