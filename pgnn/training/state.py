"""The state of a training run and its checkpoints: restore (resume, fine-tune, fresh), save, prune, RNG."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.training import RESUMABLE_CHANGES, TrainConfig
from pgnn.nn.card import TRAINING_FACTS
from pgnn.nn.checkpoint import (
    checkpoint_name,
    checkpoint_step,
    latest_good_checkpoint,
    load_checkpoint,
    make_checkpoint,
    save_checkpoint,
)
from pgnn.nn.model import PointGNN
from pgnn.training.distributed import Dist
from pgnn.training.schedule import learning_rate
from pgnn.training.tf1_optim import make_run_optimizer

log = logging.getLogger(__name__)

META_KEYS = TRAINING_FACTS
"""The strings every checkpoint of a run states about its data (:data:`pgnn.nn.card.TRAINING_FACTS`)."""


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["torch_cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    if "torch_cpu" in state:
        torch.set_rng_state(state["torch_cpu"].cpu())
    cuda = state.get("torch_cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def prune_checkpoints(directory: Path, keep_last: int, step: int) -> None:
    """Keep the ``keep_last`` newest checkpoints at or before ``step`` and every later one.

    Later ones are checkpoints of the same run key saved by a run asked for more steps (a run key leaves out
    ``max_steps``): the same trajectory, so a later run asked for more steps resumes from them.
    """
    earlier = sorted(
        s for p in directory.glob("ckpt-*.pt") if (s := checkpoint_step(p)) is not None and s <= step
    )
    for old in earlier[:-keep_last]:
        (directory / checkpoint_name(old)).unlink(missing_ok=True)


def check_resume_configs(
    ckpt: Mapping[str, Any], train_cfg: TrainConfig, loss_cfg: LossConfig, meta: Mapping[str, Any], path: Path
) -> None:
    """Warn about changes that make a resumed run differ from an uninterrupted one."""
    old_train = ckpt.get("train_config") or {}
    new_train = train_cfg.model_dump(mode="json")
    changed = sorted(k for k in new_train if k in old_train and old_train[k] != new_train[k])
    if set(changed) - set(RESUMABLE_CHANGES):
        log.warning(
            "resuming %s with changed train settings %s: the run will not equal an uninterrupted one",
            path,
            [k for k in changed if k not in RESUMABLE_CHANGES],
        )
    if ckpt.get("loss_config") not in (None, loss_cfg.model_dump(mode="json")):
        log.warning("resuming %s with a changed loss config", path)
    changed_meta = [k for k in META_KEYS if ckpt.get(k) != meta[k]]
    if changed_meta:
        log.warning("resuming %s with different %s", path, changed_meta)


@dataclass
class RunState:
    """A run in progress: the model and optimiser, where the run is (step, epoch, position in the epoch),
    the checkpoint folder and meta, and the checkpoint it resumed from (None for a fresh run)."""

    model: PointGNN
    optimizer: torch.optim.Optimizer
    out_dir: Path
    meta: dict[str, Any]
    step: int = 0
    epoch: int = 0
    position: int = 0
    resumed_from: Path | None = None
    live_history: dict[str, str] | None = None
    """The resumed checkpoint's dvclive curves (None: fresh, or a checkpoint older than this field)."""

    def advance(self, per_epoch: int) -> int:
        """Count one finished step; return the epoch it belonged to."""
        epoch = self.epoch
        self.step += 1
        self.epoch, self.position = (
            (epoch + 1, 0) if self.position + 1 == per_epoch else (epoch, self.position + 1)
        )
        return epoch


def restore_run(
    out_dir: Path,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    loss_cfg: LossConfig,
    meta: dict[str, Any],
    dist: Dist,
    init_checkpoint: str | Path | None,
    num_records: int,
    last_step: int,
) -> RunState:
    """The run's state: resumed from the newest checkpoint in ``out_dir`` at or before ``last_step`` (a run
    never goes past the step it is asked for), initialised from ``init_checkpoint`` (fine-tuning), or fresh
    (seeded by ``train.seed``)."""
    if dist.rank == 0 and out_dir.is_dir():  # half-written checkpoints of a killed run
        for stale in out_dir.glob(".tmp-ckpt-*"):
            stale.unlink(missing_ok=True)
    resume_path = (
        latest_good_checkpoint(out_dir, log.warning, max_step=last_step) if dist.rank == 0 else None
    )  # verified
    if dist.enabled:  # every rank resumes from what rank 0 saw
        shared = [str(resume_path) if resume_path else None]
        torch.distributed.broadcast_object_list(shared, src=0)
        resume_path = Path(shared[0]) if shared[0] else None
    model = PointGNN(model_cfg, generator=torch.Generator().manual_seed(train_cfg.seed))
    model.to(dist.device)
    run = RunState(model, make_run_optimizer(list(model.parameters()), train_cfg), out_dir, meta)
    if resume_path is not None:
        ckpt = load_checkpoint(resume_path, map_location=dist.device)
        if ckpt["model_config"] != model_cfg.model_dump(mode="json"):
            raise ValueError(f"{resume_path} holds a different model_config than this run's")
        check_resume_configs(ckpt, train_cfg, loss_cfg, meta, resume_path)
        model.load_state_dict(ckpt["model"])
        run.optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt.get("rng", {}))
        run.step, run.epoch, run.position = int(ckpt["step"]), int(ckpt["epoch"]), int(ckpt["position"])
        run.resumed_from = resume_path
        run.live_history = ckpt.get("live_history")
        if int(ckpt.get("num_records", num_records)) != num_records:
            log.warning(
                "resuming %s with %d records instead of %d", resume_path, num_records, ckpt["num_records"]
            )
        log.info("resuming from %s (step %d, epoch %d)", resume_path, run.step, run.epoch)
    elif init_checkpoint is not None:
        init = load_checkpoint(init_checkpoint, map_location=dist.device)
        model.load_state_dict(init["model"])
        log.info("initialised from %s", init_checkpoint)
        if init["input_frame"] != meta["input_frame"]:
            log.warning(
                "%s expects points in the %r frame, the training data is in the %r frame",
                init_checkpoint,
                init["input_frame"],
                meta["input_frame"],
            )
    return run


def save_run(
    run: RunState,
    train_cfg: TrainConfig,
    loss_cfg: LossConfig,
    dist: Dist,
    num_records: int,
    live_history: dict[str, str] | None = None,
) -> None:
    """Rank 0 writes ``ckpt-<step>.pt`` (model, optimiser, position, RNG, configs, meta and the dvclive
    curves so far) and prunes the run's older checkpoints (:func:`prune_checkpoints`)."""
    if dist.rank != 0:
        return
    ckpt = make_checkpoint(
        run.model,
        step=run.step,
        epoch=run.epoch,
        position=run.position,
        optimizer=run.optimizer.state_dict(),
        scheduler={"name": "exponential_decay", "next_lr": learning_rate(run.step, train_cfg)},
        rng=rng_state(),
        train_config=train_cfg.model_dump(mode="json"),
        loss_config=loss_cfg.model_dump(mode="json"),
        num_records=num_records,
        world_size=dist.world_size,
        live_history=live_history or {},
        **run.meta,
    )
    save_checkpoint(run.out_dir / checkpoint_name(run.step), ckpt)
    prune_checkpoints(run.out_dir, train_cfg.keep_last, run.step)
