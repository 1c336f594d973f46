"""The original's optimisers and learning-rate schedule, with TensorFlow 1's exact update rules.

The original ``train.py`` picks ``tf.train.{GradientDescent,Momentum,RMSProp,Adam}Optimizer`` by the
train config's ``optimizer`` (``sgd``, ``momentum``, ``rmsprop``, ``adam``), passes ``optimizer_kwargs`` over
its own per-optimiser defaults (:data:`ORIGINAL_DEFAULT_KWARGS`) and feeds the learning rate of
``tf.train.exponential_decay`` at the global step *before* the step's increment.

TF1's rules differ from ``torch.optim``'s where it matters: RMSProp starts its mean square at **one** and
adds epsilon *inside* the square root, with the learning rate inside the momentum; Adam folds the bias
corrections into the step size and adds epsilon to the *uncorrected* second moment. The classes here follow
the TF1 kernels (``ApplyGradientDescent``, ``ApplyMomentum``, ``ApplyRMSProp``, ``ApplyCenteredRMSProp``,
``ApplyAdam``), including the order of their float32 operations, with each scalar hyper-parameter rounded to
the parameter's dtype as TF does. Every state tensor lives in ``Optimizer.state``, so ``state_dict``
round-trips them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from pgnn.config.training import TrainConfig, optimizer_kwargs


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A hyper-parameter as a 0-dim tensor of the parameter's dtype (TF converts them to the variable's)."""
    return torch.tensor(value, dtype=like.dtype, device=like.device)


class TF1GradientDescent(torch.optim.Optimizer):
    """``tf.train.GradientDescentOptimizer`` (``ApplyGradientDescent``), one rule for every parameter::

        w <- w - lr * g

    (``lr * g`` rounded to float32 first, as TF's kernel and numpy's ``w - lr * g`` do.)
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(p.grad * _scalar(group["lr"], p))


class TF1Momentum(torch.optim.Optimizer):
    """``tf.train.MomentumOptimizer`` (``ApplyMomentum``); the accumulator starts at zero::

        a <- momentum * a + g
        w <- w - lr * a                               (use_nesterov=False)
        w <- w - lr * g - lr * momentum * a           (use_nesterov=True, with the new a)

    The learning rate multiplies the accumulator when it is applied, so a change of rate acts at once.
    """

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, momentum: float, use_nesterov: bool = False
    ) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "use_nesterov": use_nesterov})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["accum"] = torch.zeros_like(p)
                a = state["accum"]
                lr, momentum = _scalar(group["lr"], p), _scalar(group["momentum"], p)
                a.mul_(momentum).add_(g)
                if group["use_nesterov"]:
                    p.sub_(g * lr + a * momentum * lr)
                else:
                    p.sub_(a * lr)


class TF1RMSProp(torch.optim.Optimizer):
    """``tf.train.RMSPropOptimizer`` (``ApplyRMSProp`` / ``ApplyCenteredRMSProp``).

    The mean square ``ms`` starts at **ones**, ``mg`` (centered only) and ``mom`` at zeros::

        ms  <- ms + (g^2 - ms) * (1 - decay)                 (= decay * ms + (1 - decay) * g^2)
        mg  <- mg + (g - mg) * (1 - decay)                   (centered only)
        den <- ms + epsilon,  or  ms - mg^2 + epsilon       (centered)
        mom <- momentum * mom + lr * g / sqrt(den)
        w   <- w - mom

    TF1's defaults: decay 0.9, momentum 0, epsilon 1e-10, centered False.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        decay: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-10,
        centered: bool = False,
    ) -> None:
        defaults = {"lr": lr, "decay": decay, "momentum": momentum, "epsilon": epsilon, "centered": centered}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["ms"] = torch.ones_like(p)
                    state["mom"] = torch.zeros_like(p)
                    if group["centered"]:
                        state["mg"] = torch.zeros_like(p)
                one = _scalar(1.0, p)
                rate = one - _scalar(group["decay"], p)
                lr, momentum, eps = (_scalar(group[k], p) for k in ("lr", "momentum", "epsilon"))
                ms, mom = state["ms"], state["mom"]
                ms.add_((g.square() - ms) * rate)
                if group["centered"]:
                    mg = state["mg"]
                    mg.add_((g - mg) * rate)
                    den = (ms - mg.square()) + eps
                else:
                    den = ms + eps
                mom.mul_(momentum).add_((g * lr) / den.sqrt())
                p.sub_(mom)


class TF1Adam(torch.optim.Optimizer):
    """``tf.train.AdamOptimizer`` (``ApplyAdam``); ``m``, ``v`` start at zeros, the powers at beta1, beta2::

        lr_t <- lr * sqrt(1 - beta2^t) / (1 - beta1^t)       (t = 1 on the first step)
        m    <- m + (g - m) * (1 - beta1)
        v    <- v + (g^2 - v) * (1 - beta2)
        w    <- w - lr_t * m / (sqrt(v) + epsilon)

    Unlike ``torch.optim.Adam`` epsilon is added to the uncorrected sqrt(v), so it weighs (1 - beta2^t)^-1/2
    times more. The powers ``beta1^t`` are float32 products updated after each step, as TF keeps them.
    TF1's defaults: beta1 0.9, beta2 0.999, epsilon 1e-8.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "epsilon": epsilon})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                beta1, beta2 = _scalar(group["beta1"], p), _scalar(group["beta2"], p)
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                    state["beta1_power"] = beta1.clone()
                    state["beta2_power"] = beta2.clone()
                one = _scalar(1.0, p)
                lr, eps = _scalar(group["lr"], p), _scalar(group["epsilon"], p)
                m, v = state["m"], state["v"]
                alpha = lr * torch.sqrt(one - state["beta2_power"]) / (one - state["beta1_power"])
                m.add_((g - m) * (one - beta1))
                v.add_((g.square() - v) * (one - beta2))
                p.sub_((m * alpha) / (v.sqrt() + eps))
                state["beta1_power"] = state["beta1_power"] * beta1
                state["beta2_power"] = state["beta2_power"] * beta2


# ----------------------------------------------------------------------------------------------------------
# The original's names, defaults and keyword arguments
# ----------------------------------------------------------------------------------------------------------


TF1_OPTIMIZERS: Mapping[str, type[torch.optim.Optimizer]] = {
    "sgd": TF1GradientDescent,
    "momentum": TF1Momentum,
    "rmsprop": TF1RMSProp,
    "adam": TF1Adam,
}


def make_optimizer(
    name: str, params: Iterable[torch.Tensor], lr: float, kwargs: Mapping[str, Any]
) -> torch.optim.Optimizer:
    """The original's optimiser ``name`` (sgd, momentum, rmsprop, adam) over ``params``, as its train.py
    builds it."""
    full = optimizer_kwargs(name, kwargs)  # a ValueError for an unknown name or key
    return TF1_OPTIMIZERS[name](params, lr=lr, **full)


def make_run_optimizer(params: Iterable[torch.Tensor], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser of a training run: ``cfg.optimizer`` with ``cfg.optimizer_kwargs`` at ``initial_lr``."""
    return make_optimizer(cfg.optimizer, params, cfg.initial_lr, cfg.optimizer_kwargs)
