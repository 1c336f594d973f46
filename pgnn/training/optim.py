"""The optimiser of a training run."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pgnn.config.training import OPTIMIZER_DEFAULTS, TrainConfig


def make_optimizer(params: Sequence[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    kwargs = {**OPTIMIZER_DEFAULTS[cfg.optimizer], **cfg.optimizer_kwargs}
    lr = cfg.initial_lr
    if cfg.optimizer in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, **kwargs)
    if cfg.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, **kwargs)
    return torch.optim.Adam(params, lr=lr, **kwargs)
