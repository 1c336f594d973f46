"""pgnn's optimisers follow TF1's documented update rules (``pgnn.tf1_optim``), checked against a small numpy
re-implementation of those rules on synthetic gradients, with the original's staircase schedule."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from pgnn.config.training import ORIGINAL_DEFAULT_KWARGS, TrainConfig, optimizer_kwargs
from pgnn.training.schedule import exponential_decay, learning_rate
from pgnn.training.tf1_optim import (
    TF1Adam,
    TF1GradientDescent,
    TF1Momentum,
    TF1RMSProp,
    make_optimizer,
    make_run_optimizer,
)

F32 = np.float32
Rule = Callable[[np.ndarray, np.ndarray, dict, float, dict], np.ndarray]


# numpy versions of the TF1 kernels, in float32 like TF (each scalar a float32 as TF converts it) ----------


def np_sgd(w: np.ndarray, g: np.ndarray, state: dict, lr: float, kw: dict) -> np.ndarray:
    return w - F32(lr) * g


def np_momentum(w: np.ndarray, g: np.ndarray, state: dict, lr: float, kw: dict) -> np.ndarray:
    m = F32(kw["momentum"])
    a = state.get("a", np.zeros_like(w)) * m + g
    state["a"] = a
    if kw["use_nesterov"]:
        return w - (g * F32(lr) + a * m * F32(lr))
    return w - a * F32(lr)


def np_rmsprop(w: np.ndarray, g: np.ndarray, state: dict, lr: float, kw: dict) -> np.ndarray:
    rate = F32(1) - F32(kw["decay"])
    ms = state.get("ms", np.ones_like(w))  # TF1 starts the mean square at one
    ms = ms + (g * g - ms) * rate
    if kw["centered"]:
        mg = state.get("mg", np.zeros_like(w))
        mg = mg + (g - mg) * rate
        state["mg"] = mg
        den = ms - mg * mg + F32(kw["epsilon"])
    else:
        den = ms + F32(kw["epsilon"])
    mom = state.get("mom", np.zeros_like(w)) * F32(kw["momentum"]) + g * F32(lr) / np.sqrt(den)
    state["ms"], state["mom"] = ms, mom
    return w - mom


def np_adam(w: np.ndarray, g: np.ndarray, state: dict, lr: float, kw: dict) -> np.ndarray:
    b1, b2 = F32(kw["beta1"]), F32(kw["beta2"])
    t = state.get("t", 0) + 1
    p1, p2 = state.get("p1", b1), state.get("p2", b2)  # beta^t, float32 products as TF keeps them
    alpha = F32(lr) * np.sqrt(F32(1) - p2) / (F32(1) - p1)
    m = state.get("m", np.zeros_like(w))
    v = state.get("v", np.zeros_like(w))
    m = m + (g - m) * (F32(1) - b1)
    v = v + (g * g - v) * (F32(1) - b2)
    state.update(t=t, m=m, v=v, p1=p1 * b1, p2=p2 * b2)
    return w - m * alpha / (np.sqrt(v) + F32(kw["epsilon"]))


def np_adam_float64_textbook(w: np.ndarray, g: np.ndarray, state: dict, lr: float, kw: dict) -> np.ndarray:
    """TF1's documented formula in float64: lr_t = lr sqrt(1 - b2^t) / (1 - b1^t),
    w -= lr_t m / (sqrt(v) + eps)."""
    t = state.get("t", 0) + 1
    m = kw["beta1"] * state.get("m", 0.0) + (1 - kw["beta1"]) * g
    v = kw["beta2"] * state.get("v", 0.0) + (1 - kw["beta2"]) * g * g
    state.update(t=t, m=m, v=v)
    lr_t = lr * math.sqrt(1 - kw["beta2"] ** t) / (1 - kw["beta1"] ** t)
    return w - lr_t * m / (np.sqrt(v) + kw["epsilon"])


RULES: dict[str, Rule] = {"sgd": np_sgd, "momentum": np_momentum, "rmsprop": np_rmsprop, "adam": np_adam}

CASES = [
    ("sgd", {}),
    ("momentum", {}),
    ("momentum", {"momentum": 0.5, "use_nesterov": True}),
    ("rmsprop", {}),  # the original's defaults: decay 0.9, momentum 0.9, epsilon 1.0
    ("rmsprop", {"momentum": 0.0, "epsilon": 1e-10}),
    ("rmsprop", {"centered": True, "epsilon": 1e-3}),
    ("adam", {}),
    ("adam", {"beta1": 0.5, "beta2": 0.9, "epsilon": 1e-4}),
]


def synthetic_gradients(steps: int, shapes: list[tuple[int, ...]], seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    # gradients over 4 orders of magnitude, so that epsilon and the mean-square start matter
    return [
        [(rng.normal(size=s) * 10.0 ** rng.uniform(-3, 1, size=s)).astype(np.float32) for s in shapes]
        for _ in range(steps)
    ]


def max_rel(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(
        float(np.linalg.norm(x.astype(np.float64) - y) / np.linalg.norm(np.asarray(y, np.float64)))
        for x, y in zip(a, b, strict=True)
    )


def run_torch(
    name: str, kwargs: dict, init: list[np.ndarray], grads: list[list[np.ndarray]], cfg: TrainConfig
):
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in init]
    opt = make_optimizer(name, params, cfg.initial_lr, kwargs)
    for k, step_grads in enumerate(grads):
        for group in opt.param_groups:
            group["lr"] = learning_rate(k, cfg)
        for p, g in zip(params, step_grads, strict=True):
            p.grad = torch.from_numpy(g)
        opt.step()
    return [p.detach().numpy() for p in params]


@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_optimizer_follows_tf1_rule(name: str, kwargs: dict) -> None:
    shapes = [(5, 3), (3,), (7,)]
    rng = np.random.default_rng(1)
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = synthetic_gradients(9, shapes)
    cfg = TrainConfig(
        optimizer=name, optimizer_kwargs=kwargs, initial_lr=0.05, decay_step=3, decay_factor=0.5
    )
    ours = run_torch(name, kwargs, init, grads, cfg)

    full = {**ORIGINAL_DEFAULT_KWARGS[name], **kwargs}
    states: list[dict] = [{} for _ in shapes]
    ref = [w.copy() for w in init]
    for k, step_grads in enumerate(grads):
        lr = 0.05 * 0.5 ** (k // 3)
        ref = [RULES[name](w, g, st, lr, full) for w, g, st in zip(ref, step_grads, states, strict=True)]
    replay_rel = max_rel(ours, ref)
    assert replay_rel <= 1e-5, replay_rel
    moved = max_rel(init, ref)
    assert moved > 1e-3  # the weights did move: the comparison is not vacuous


def test_adam_matches_the_documented_float64_formula_and_not_torch_adam() -> None:
    shapes = [(6,)]
    init = [np.linspace(-1, 1, 6).astype(np.float32)]
    grads = synthetic_gradients(5, shapes, seed=3)
    kwargs = {"epsilon": 1e-3}  # large enough that where epsilon goes matters
    cfg = TrainConfig(optimizer="adam", optimizer_kwargs=kwargs, initial_lr=0.01, decay_step=100)
    ours = run_torch("adam", kwargs, init, grads, cfg)
    state: dict = {}
    w = init[0].astype(np.float64)
    for g in grads:
        w = np_adam_float64_textbook(
            w, g[0].astype(np.float64), state, 0.01, {**ORIGINAL_DEFAULT_KWARGS["adam"], **kwargs}
        )
    assert max_rel(ours, [w]) <= 1e-5
    p = torch.nn.Parameter(torch.from_numpy(init[0].copy()))
    torch_adam = torch.optim.Adam([p], lr=0.01, eps=1e-3)
    for g in grads:
        p.grad = torch.from_numpy(g[0])
        torch_adam.step()
    assert max_rel([p.detach().numpy()], [w]) > 1e-3  # torch's epsilon placement differs


def test_rmsprop_starts_its_mean_square_at_one() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = TF1RMSProp([p], lr=1.0, decay=0.9, momentum=0.0, epsilon=0.0)
    p.grad = torch.tensor([1.0])
    opt.step()
    # ms = 1 + (1 - 1) * 0.1 = 1 -> step 1 / sqrt(1); torch's RMSprop (ms from 0) would step 1 / sqrt(0.1)
    assert float(p.detach()) == pytest.approx(-1.0, rel=1e-6)


def test_momentum_and_nesterov_first_steps() -> None:
    for nesterov, expected in (
        (False, [-0.1, -0.1 - 0.1 * 1.5]),
        (True, [-0.15, -0.15 - 0.1 - 0.1 * 0.5 * 1.5]),
    ):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = TF1Momentum([p], lr=0.1, momentum=0.5, use_nesterov=nesterov)
        for want in expected:
            p.grad = torch.tensor([1.0])
            opt.step()
            assert float(p.detach()) == pytest.approx(want, rel=1e-6)


def test_sgd_is_bit_identical_to_numpy_float32() -> None:
    rng = np.random.default_rng(0)
    w, g = rng.normal(size=1000).astype(np.float32), rng.normal(size=1000).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(w.copy()))
    opt = TF1GradientDescent([p], lr=0.0125)
    p.grad = torch.from_numpy(g)
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), w - np.float32(0.0125) * g)


def test_state_dict_round_trip_continues_identically() -> None:
    grads = synthetic_gradients(4, [(4,)], seed=5)
    for cls, kwargs in (
        (TF1Adam, {}),
        (TF1RMSProp, {"momentum": 0.9, "centered": True}),
        (TF1Momentum, {"momentum": 0.9}),
    ):
        a = torch.nn.Parameter(torch.ones(4))
        opt_a = cls([a], lr=0.1, **kwargs)
        for g in grads[:2]:
            a.grad = torch.from_numpy(g[0])
            opt_a.step()
        b = torch.nn.Parameter(a.detach().clone())
        opt_b = cls([b], lr=0.1, **kwargs)
        opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as a checkpoint file would
        for g in grads[2:]:
            for p, o in ((a, opt_a), (b, opt_b)):
                p.grad = torch.from_numpy(g[0])
                o.step()
        assert torch.equal(a, b), cls.__name__


def test_original_defaults_and_kwarg_errors() -> None:
    # the original train.py's optimizer_kwargs_dict, merged under TF's own defaults
    assert ORIGINAL_DEFAULT_KWARGS["momentum"] == {"momentum": 0.9, "use_nesterov": False}
    assert ORIGINAL_DEFAULT_KWARGS["rmsprop"] == {
        "decay": 0.9,
        "momentum": 0.9,
        "epsilon": 1.0,
        "centered": False,
    }
    assert ORIGINAL_DEFAULT_KWARGS["adam"] == {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
    assert optimizer_kwargs("rmsprop", {"epsilon": 1e-10}) == {
        **ORIGINAL_DEFAULT_KWARGS["rmsprop"],
        "epsilon": 1e-10,
    }
    with pytest.raises(ValueError, match=r"optimizer 'adam': unsupported optimizer_kwargs \['eps'\]"):
        optimizer_kwargs("adam", {"eps": 1e-3})
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'"):
        optimizer_kwargs("adagrad", {})
    with pytest.raises(ValueError, match="alpha"):
        TrainConfig(optimizer="rmsprop", optimizer_kwargs={"alpha": 0.9})


@pytest.mark.parametrize(
    ("name", "cls"),
    [("sgd", TF1GradientDescent), ("momentum", TF1Momentum), ("rmsprop", TF1RMSProp), ("adam", TF1Adam)],
)
def test_training_loop_builds_the_tf1_optimizer(name: str, cls: type) -> None:
    opt = make_run_optimizer([torch.nn.Parameter(torch.zeros(2))], TrainConfig(optimizer=name))
    assert type(opt) is cls


def test_exponential_decay_staircase_and_smooth() -> None:
    # the train-step reference: 0.125, 0.125, 0.0125 (float32) with decay_step 2
    assert [exponential_decay(k, 0.125, 2, 0.1) for k in range(3)] == [
        0.125,
        0.125,
        float(np.float32(0.0125)),
    ]
    assert exponential_decay(399_999, 0.125, 400_000, 0.1) == 0.125
    assert exponential_decay(400_000, 0.125, 400_000, 0.1) == float(np.float32(0.125) * np.float32(0.1))
    assert exponential_decay(1_400_000, 0.125, 400_000, 0.1) == pytest.approx(0.125e-3, rel=1e-6)
    assert exponential_decay(200_000, 0.125, 400_000, 0.1, staircase=False) == pytest.approx(
        0.125 * math.sqrt(0.1), rel=1e-6
    )
