"""The training config (torch-free: read by the presets and by params.yaml validation without torch).

:class:`TrainConfig` is consumed by :func:`pgnn.training.loop.train`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

OptimizerName = Literal["sgd", "momentum", "rmsprop", "adam"]

# The original's per-optimiser defaults, in torch's argument names. TF's RMSProp (decay 0.9, momentum 0.9,
# epsilon 1.0) maps to torch's alpha / momentum / eps; TF adds epsilon inside the square root and starts the
# mean square at 1, torch adds it outside and starts at 0: "rmsprop" is close to the original, not equal.
OPTIMIZER_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "sgd": {},
    "momentum": {"momentum": 0.9},
    "rmsprop": {"momentum": 0.9, "alpha": 0.9, "eps": 1.0},
    "adam": {},
}

# Settings that may change between a run and its resumption without breaking the exact continuation.
# They are not part of a run's key (pgnn.training.source.train_run_key): changing them resumes the run.
RESUMABLE_CHANGES = {
    "max_steps",
    "max_epoch",
    "checkpoint_every",
    "save_every_epoch",
    "keep_last",
    "log_every",
    "eval_every",
    "eval_frames",
    "num_workers",
    "device",
}


class TrainConfig(BaseModel):
    """Training settings; names and defaults follow the original's car train configs where it has them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: OptimizerName = "sgd"
    optimizer_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Overrides of :data:`OPTIMIZER_DEFAULTS` (torch names: ``momentum``, ``alpha``, ``eps``...)."""
    initial_lr: float = Field(0.125, gt=0.0)
    decay_step: int = Field(400_000, ge=1)
    decay_factor: float = Field(0.1, gt=0.0)
    staircase: bool = True
    batch_size: int = Field(4, ge=1)
    """Frames per micro-batch over all ranks (each rank gets batch_size / world_size)."""
    accumulation_steps: int = Field(1, ge=1)
    """Micro-batches whose gradients make one optimiser step (the original's pseudo-batch)."""
    max_steps: int | None = Field(1_400_000, ge=1)
    max_epoch: int | None = Field(1718, ge=1)
    checkpoint_every: int = Field(1000, ge=1)
    """Save a checkpoint every this many steps (and at the end)."""
    save_every_epoch: int | None = Field(None, ge=1)
    """Also save at the end of every this many epochs (the original's ``save_every_epoch``)."""
    keep_last: int = Field(3, ge=1)
    """Checkpoints kept per run (older ones of the same run are deleted; other runs are never touched)."""
    seed: int = 0
    class_filter: bool = True
    """Train only on frames with at least one object of the label method's classes (the original's
    ``train_car.txt`` / ``train_pedestrian_cyclist.txt``); False: every frame of the split."""
    resample_graph: bool = True
    """Draw a new random graph (keypoints, neighbour caps) for every frame in every epoch, seeded by (seed,
    epoch, frame), as the original's data provider does; False: train on the cached graph of each frame."""
    clip_grad_norm: float | None = Field(None, gt=0.0)
    """Clip the global gradient norm to this before each update; None (the original's choice): no clipping."""
    num_workers: int | Literal["auto"] = "auto"
    """Data-loading processes; "auto": 2 when samples are rebuilt every epoch (augmentation, resampling or
    ground-truth sampling), else 0 (reading the cached graphs is cheap)."""
    log_every: int = Field(100, ge=1)
    eval_every: int | None = Field(None, ge=1)
    """Every this many steps, the official KITTI AP on ``eval_frames`` frames of the val split (logged as
    ``val/...`` next to the losses); None: no validation during training."""
    eval_frames: int = Field(32, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.max_steps is None and self.max_epoch is None:
            raise ValueError("set max_steps, max_epoch or both")
        if isinstance(self.num_workers, int) and self.num_workers < 0:
            raise ValueError(f"num_workers: expected >= 0 or 'auto', got {self.num_workers}")
        return self
