"""Checkpoint housekeeping of a run: RNG states, pruning old checkpoints, checks on resume."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pgnn.config.network import LossConfig
from pgnn.config.training import RESUMABLE_CHANGES, TrainConfig

log = logging.getLogger(__name__)

META_KEYS = ("input_frame", "graph_preset", "encoding", "label_method", "input_features")
"""The strings every checkpoint states about its data (see :func:`pgnn.nn.checkpoint.make_checkpoint`)."""


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


def prune_checkpoints(directory: Path, keep_last: int) -> None:
    from pgnn.nn.checkpoint import checkpoint_name

    steps = []
    for p in directory.glob("ckpt-*.pt"):
        digits = p.stem.removeprefix("ckpt-")
        if digits.isdigit() and p.name == checkpoint_name(int(digits)):
            steps.append(int(digits))
    for step in sorted(steps)[:-keep_last]:
        (directory / checkpoint_name(step)).unlink(missing_ok=True)


def check_resume_configs(
    ckpt: Mapping[str, Any], train_cfg: TrainConfig, loss_cfg: LossConfig, meta: Mapping[str, Any], path: Path
) -> None:
    """Warn about changes that make a resumed run differ from an uninterrupted one."""
    old_train = ckpt.get("train_config") or {}
    new_train = train_cfg.model_dump(mode="json")
    changed = sorted(k for k in new_train if k in old_train and old_train[k] != new_train[k])
    if set(changed) - RESUMABLE_CHANGES:
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
