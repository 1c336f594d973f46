"""Golden training-step parity: pgnn's training step against what the original TF training graph computed.

A *case* (``pointgnn_reference/train_step/case_*.npz``, see its README) holds, for one merged 2-frame batch,
the fed tensors (``input/*``), the loss terms and every gradient at the initial weights (``loss/*``,
``grad/<var>``), the initial weights (``init/<var>``), the weights after K optimiser steps (``final/<var>``)
and per-step history (``steps/*``: learning rates, loss terms, gradient and weight norms). Variables are
named as in TF (``layer2/extract_vertex_features/fully_connected/weights``, slim layout [in, out]).

:func:`check_train_step` builds pgnn's model, loss and optimiser from the two original-format JSON files
(:mod:`pgnn.recipe.original`), loads the case's initial weights, and runs K steps of pgnn's *own* training
step (``pgnn.training.step.train_step``, the function the training loop calls, with
``pgnn.training.schedule.learning_rate``
and the TF1 optimiser of :mod:`pgnn.training.tf1_optim`) on the saved batch. It reports relative errors::

    rel(a, ref) = ||a - ref|| / ||ref||        (||a - ref|| when ref is all zeros)

* ``loss_rel``: max over cls, loc, reg, total at the initial weights;
* ``grad_rel``: max over the stored ``grad/<var>`` (all variables; biases only in the T3 supplement);
* ``weights_rel``: max of the final weights' rel (``final/<var>``) and, at every step, the rel of each
  variable's norm against ``steps/param_norm/<var>``;
* ``replay_rel``: where the case stores later gradients ``grad_step1/<var>``, ``grad_step2/<var>``...: pgnn's
  optimiser and schedule applied to exactly the reference gradients, compared like ``weights_rel``;
  ``None`` otherwise;
* ``forced_rel``: like ``weights_rel``, for a run whose step 0 applies pgnn's optimiser to the reference
  gradient ``grad/`` (so it continues from the reference's own weights after step 1) and whose later steps
  are pgnn's own. It separates the update rule from the float32 noise of the step-0 gradient, which the
  max and ReLU kinks amplify over the following steps (case b: a 1e-6 gradient difference at step 1 moves
  the first layer's step-2 gradient by ~1e-4).

A case without ``init/`` weights for every variable (``case_b_T3``) is initialised with its README's
formula (``numpy.random.RandomState(0)``, Xavier-uniform weights in variable order, zero biases), checked
against its ``init_checksum/<var>`` ([sum w, sum |w|, first, last]); its ``grad_stats/<var>`` ([||g||,
sum g, sum |g|]) are compared as ``grad_stats_rel``. The output's ``compared`` lists what was compared.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import DataError
from pgnn.nn.losses import compute_loss, regularized_parameters
from pgnn.nn.model import PointGNN
from pgnn.nn.weights import tf_variable_names
from pgnn.recipe.original import (
    loss_config,
    model_config,
    read_original_config,
    read_original_train_config,
    train_config,
)
from pgnn.training.batches import TrainBatch
from pgnn.training.check_case import (
    as_tf,
    case_batch,
    load_case,
    load_tf_weights,
    need,
    rel,
    tf_shapes,
    xavier_init_from_formula,
)
from pgnn.training.distributed import Dist
from pgnn.training.live import IntervalStats
from pgnn.training.schedule import learning_rate
from pgnn.training.step import train_step
from pgnn.training.tf1_optim import make_optimizer

LOSS_TERMS = ("cls", "loc", "reg", "total")
CPU = torch.device("cpu")


# ----------------------------------------------------------------------------------------------------------
# The check
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What the two JSON files build."""

    model: ModelConfig
    loss: LossConfig
    train: TrainConfig


def setup_from_original(config_path: str | Path, train_config_path: str | Path) -> Setup:
    """pgnn's model, loss and training configs of an original config pair."""
    cfg = read_original_config(config_path)
    tcfg = read_original_train_config(train_config_path)
    return Setup(
        model=model_config(cfg, source=config_path),
        loss=loss_config(cfg, source=config_path),
        train=train_config(tcfg, source=train_config_path),
    )


def _fresh_model(
    setup: Setup, names: Mapping[str, str], init: Mapping[str, np.ndarray], device: torch.device
) -> PointGNN:
    model = PointGNN(setup.model).to(device)
    load_tf_weights(model, names, init)
    return model


def _norms(model: PointGNN, names: Mapping[str, str]) -> dict[str, float]:
    params = dict(model.named_parameters())
    return {
        tf: float(np.linalg.norm(params[key].detach().cpu().double().numpy())) for tf, key in names.items()
    }


def _norm_rel(history: list[dict[str, float]], arrays: Mapping[str, np.ndarray], prefix: str) -> float | None:
    """max over steps and variables of |norm - ref| / ref against ``<prefix><var>`` (entry k = step k)."""
    worst = None
    for k, norms in enumerate(history):
        for tf, value in norms.items():
            key = prefix + tf
            if key not in arrays or k >= len(arrays[key]):
                continue
            ref = float(arrays[key][k])
            err = abs(value - ref) / ref if ref > 0 else abs(value - ref)
            worst = err if worst is None else max(worst, err)
    return worst


def _max(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _run_on_reference_gradients(
    setup: Setup,
    names: Mapping[str, str],
    init: Mapping[str, np.ndarray],
    arrays: Mapping[str, np.ndarray],
    steps: int,
    source: Path,
    batch: TrainBatch | None = None,
    only: frozenset[str] | None = None,
    device: torch.device = CPU,
) -> float | None:
    """Steps 0..steps-1 from ``init`` where each step whose reference gradient is stored (``grad/`` for step
    0, ``grad_step<k>/`` for step k) applies pgnn's optimiser and schedule to it, and, given ``batch``, each
    other step is pgnn's own training step on it (without ``batch`` a missing gradient is a DataError).
    ``only`` (with ``batch``): at step 0 only these variables take the reference gradient, the others
    pgnn's own. Returns the max rel of the final weights (``final/``) and of the per-step norms
    (``steps/param_norm/``).
    """
    model = _fresh_model(setup, names, init, device)
    params = dict(model.named_parameters())
    own_first: dict[str, np.ndarray] = {}
    if only is not None:
        if batch is None:
            raise ValueError("only= needs the batch (pgnn's own step-0 gradient of the other variables)")
        scratch = _fresh_model(setup, names, init, device)
        scratch_opt = make_optimizer(
            setup.train.optimizer, list(scratch.parameters()), 0.0, setup.train.optimizer_kwargs
        )
        stats = IntervalStats(setup.model.num_classes, setup.model.box_encoding_len)
        dist0 = Dist(rank=0, world_size=1, device=device, owns_group=False)
        reg = regularized_parameters(scratch)
        train_step(scratch, scratch_opt, [batch], reg, setup.loss, 0.0, dist0, stats, 0)
        scratch_params = dict(scratch.named_parameters())
        own_first = {tf: as_tf(scratch_params[key].grad, tf) for tf, key in names.items() if tf not in only}
    optimizer = make_optimizer(
        setup.train.optimizer, list(model.parameters()), setup.train.initial_lr, setup.train.optimizer_kwargs
    )
    reg_params = regularized_parameters(model)
    dist = Dist(rank=0, world_size=1, device=device, owns_group=False)
    history = [_norms(model, names)]
    for k in range(steps):
        prefix = "grad/" if k == 0 else f"grad_step{k}/"
        lr = learning_rate(k, setup.train)
        if batch is not None and any(prefix + tf not in arrays for tf in names):
            stats = IntervalStats(setup.model.num_classes, setup.model.box_encoding_len)
            train_step(model, optimizer, [batch], reg_params, setup.loss, lr, dist, stats, k)
        else:
            for group in optimizer.param_groups:
                group["lr"] = lr
            for tf, key in names.items():
                g = own_first.get(tf) if k == 0 else None
                if g is None:
                    g = need(arrays, prefix + tf, source, f" (the reference gradient of step {k})")
                g = g.T if tf.endswith("/weights") else g
                params[key].grad = torch.from_numpy(np.ascontiguousarray(g, dtype=np.float32)).to(device)
            optimizer.step()
        history.append(_norms(model, names))
    final = [
        rel(as_tf(params[names[tf]], tf), arrays["final/" + tf]) for tf in names if "final/" + tf in arrays
    ]
    return _max(max(final) if final else None, _norm_rel(history, arrays, "steps/param_norm/"))


def check_train_step(
    case_path: str | Path,
    config_path: str | Path,
    train_config_path: str | Path,
    *,
    inputs_path: str | Path | None = None,
    max_steps: int | None = None,
    forced: bool = True,
    forced_only: Sequence[str] = (),
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Run pgnn's training step on a reference case and compare (see the module docstring).

    ``inputs_path``: an npz with the ``input/*`` arrays when the case has none (``case_b_T3`` takes
    ``case_b.npz``'s). ``max_steps``: run at most this many of the case's steps (the ``final/`` weights are
    then not compared). ``forced``: also report ``forced_rel`` (see the module docstring).
    ``forced_only``: also report ``forced_only_rel``, the same run where only these variables (TF names) take
    the reference step-0 gradient and all others pgnn's own (which variable's float noise drives the rest).
    ``device``: where the model and the batch live (``cuda``: the same comparisons, and bounds, as on CPU).
    """
    device = torch.device(device)
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 (step 0 gives the compared gradients), got {max_steps}")
    started = time.perf_counter()
    case_path = Path(case_path)
    arrays = load_case(case_path)
    setup = setup_from_original(config_path, train_config_path)
    compared: list[str] = []

    if "input/initial_vertex_features" in arrays:
        batch_source, batch_arrays = case_path, arrays
    elif inputs_path is not None:
        batch_source, batch_arrays = Path(inputs_path), load_case(inputs_path)
    else:
        raise DataError(
            case_path, "expected input/* arrays in the case, or an --inputs npz that has them, got neither"
        )
    batch = case_batch(batch_arrays, batch_source).to(device)

    model = PointGNN(setup.model).to(device)
    names = tf_variable_names(setup.model)
    shapes = tf_shapes(model, names)
    stored = {k[len("init/") :] for k in arrays if k.startswith("init/")}
    if stored == set(names):
        init = {tf: need(arrays, "init/" + tf, case_path) for tf in names}
        for tf in names:
            if tuple(init[tf].shape) != shapes[tf]:
                raise DataError(case_path, f"expected init/{tf} of shape {shapes[tf]}, got {init[tf].shape}")
        init_source = "init/<var> of the case"
    else:
        unknown = sorted(stored - set(names))
        if unknown:
            raise DataError(
                case_path, f"expected init/<var> of the configured model, got unknown {unknown[:5]}"
            )
        init = xavier_init_from_formula(shapes, seed=0)
        init_source = "RandomState(0) Xavier-uniform formula (README), zero biases"
    init_checksum_rel = None
    if any(k.startswith("init_checksum/") for k in arrays):
        errs = []
        for tf in names:
            ref = np.asarray(need(arrays, "init_checksum/" + tf, case_path), np.float64)
            w = init[tf].astype(np.float64).ravel()
            ours = np.array([w.sum(), np.abs(w).sum(), w[0], w[-1]])
            errs.append(float(np.max(np.abs(ours - ref)) / max(float(ref[1]), 1e-30)))
        init_checksum_rel = max(errs)
        compared.append("init_checksum/<var> [sum, sum|w|, first, last] of the initial weights")
    for tf in stored & set(names):
        if tf not in init or not np.array_equal(arrays["init/" + tf], init[tf]):
            raise DataError(case_path, f"expected init/{tf} to equal the initial weights used, it differs")
    load_tf_weights(model, names, init)

    ref_lrs = [float(x) for x in need(arrays, "steps/learning_rate", case_path)]
    steps = len(ref_lrs) if max_steps is None else min(max_steps, len(ref_lrs))
    params = dict(model.named_parameters())
    optimizer = make_optimizer(
        setup.train.optimizer, list(model.parameters()), setup.train.initial_lr, setup.train.optimizer_kwargs
    )
    reg_params = regularized_parameters(model)
    dist = Dist(rank=0, world_size=1, device=device, owns_group=False)
    model.train()

    lrs: list[float] = []
    losses: list[dict[str, float]] = []
    grad_norms: list[dict[str, float]] = []
    weight_norms = [_norms(model, names)]
    first_grads: dict[str, np.ndarray] = {}
    for k in range(steps):
        lr = learning_rate(k, setup.train)
        stats = IntervalStats(setup.model.num_classes, setup.model.box_encoding_len)
        train_step(model, optimizer, [batch], reg_params, setup.loss, lr, dist, stats, k)
        cls, loc = (float(x) for x in stats.data_terms)
        losses.append({"cls": cls, "loc": loc, "reg": stats.reg, "total": cls + loc + stats.reg})
        grads = {tf: as_tf(params[key].grad, tf) for tf, key in names.items()}
        if k == 0:
            first_grads = grads
        grad_norms.append({tf: float(np.linalg.norm(g.astype(np.float64))) for tf, g in grads.items()})
        weight_norms.append(_norms(model, names))
        lrs.append(lr)
    with torch.no_grad():
        logits, boxes = model(batch.graph)
        terms = compute_loss(
            logits, boxes, batch.cls_labels, batch.box_targets, batch.valid, reg_params, setup.loss
        )
    losses.append({t: float(terms[t]) for t in LOSS_TERMS})

    ref_loss = {t: float(need(arrays, f"loss/{t}_loss", case_path)) for t in LOSS_TERMS}
    loss_rel = max(abs(losses[0][t] - ref_loss[t]) / abs(ref_loss[t]) for t in LOSS_TERMS)
    compared.append("loss/{cls,loc,reg,total}_loss at the initial weights")
    grad_keys = [tf for tf in names if "grad/" + tf in arrays]
    grad_rel = max(rel(first_grads[tf], arrays["grad/" + tf]) for tf in grad_keys) if grad_keys else None
    if grad_keys:
        biases_only = len(grad_keys) < len(names) and all(k.endswith("/biases") for k in grad_keys)
        which = f"the {len(grad_keys)} biases" if biases_only else f"{len(grad_keys)} variables"
        compared.append(f"grad/<var> at the initial weights for {which} (of {len(names)})")
    grad_stats_rel = None
    if any(k.startswith("grad_stats/") for k in arrays):
        errs = []
        for tf in names:
            ref = np.asarray(need(arrays, "grad_stats/" + tf, case_path), np.float64)
            g = first_grads[tf].astype(np.float64)
            ours = np.array([np.linalg.norm(g), g.sum(), np.abs(g).sum()])
            scale = np.array([ref[0], ref[2], ref[2]])  # sum g relative to sum |g|
            diff = np.abs(ours - ref)
            errs.append(float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), diff))))
        grad_stats_rel = max(errs)
        compared.append("grad_stats/<var> [||g||, sum g, sum|g|] (errors relative to ||g||, sum|g|)")

    final_keys = [tf for tf in names if "final/" + tf in arrays]
    weights_final_rel = None
    update_rel = None
    if final_keys and steps == len(ref_lrs):
        weights_final_rel = max(rel(as_tf(params[names[tf]], tf), arrays["final/" + tf]) for tf in final_keys)
        updates = [
            rel(as_tf(params[names[tf]], tf) - init[tf], arrays["final/" + tf] - init[tf])
            for tf in final_keys
            if np.any(arrays["final/" + tf] != init[tf])
        ]
        update_rel = max(updates) if updates else None
        compared.append(f"final/<var> after {steps} steps for {len(final_keys)} variables")
    weights_norm_rel = _norm_rel(weight_norms, arrays, "steps/param_norm/")
    if weights_norm_rel is not None:
        compared.append(f"steps/param_norm/<var> after each of {steps} steps (and at init)")
    weights_rel = _max(weights_final_rel, weights_norm_rel)

    steps_loss_rel = None
    if "steps/total_loss" in arrays:
        errs = []
        for k, values in enumerate(losses):  # entry k: at the weights after k steps
            for t in LOSS_TERMS:
                ref_series = arrays[f"steps/{t}_loss"]
                if k < len(ref_series):
                    errs.append(abs(values[t] - float(ref_series[k])) / abs(float(ref_series[k])))
        steps_loss_rel = max(errs)
        compared.append("steps/{cls,loc,reg,total}_loss before each step and after the last")
    step_grad_norm_rel = _norm_rel(grad_norms, arrays, "steps/grad_norm/")
    if step_grad_norm_rel is not None:
        compared.append("steps/grad_norm/<var> at each step")
    lr_rel = max(abs(a - b) / b for a, b in zip(lrs, ref_lrs, strict=False)) if lrs else None
    compared.append("steps/learning_rate")

    replay_rel = None
    if any(k.startswith("grad_step") for k in arrays):
        replay_rel = _run_on_reference_gradients(
            setup, names, init, arrays, len(ref_lrs), case_path, device=device
        )
        compared.append("replay: pgnn's optimizer on grad/ and grad_step<k>/ vs final/ and param norms")
    forced_rel = None
    if forced and steps == len(ref_lrs) > 1 and len(grad_keys) == len(names) and final_keys:
        forced_rel = _run_on_reference_gradients(
            setup, names, init, arrays, steps, case_path, batch, device=device
        )
        compared.append(
            "forced: pgnn's optimizer on grad/ for step 0, then pgnn's own steps, vs final/ and param norms"
        )

    forced_only_rel = None
    if forced_only:
        unknown = sorted(set(forced_only) - set(grad_keys))
        if unknown or not final_keys or steps != len(ref_lrs):
            raise ValueError(
                f"forced_only needs variables with a stored grad/ and the case's final/ weights; "
                f"unknown or without grad/: {unknown[:5]}"
            )
        forced_only_rel = _run_on_reference_gradients(
            setup, names, init, arrays, steps, case_path, batch, only=frozenset(forced_only), device=device
        )
        compared.append(f"forced_only: the reference step-0 gradient for {len(forced_only)} variable(s) only")

    return {
        "case": str(case_path),
        "inputs": str(batch_source),
        "config": str(config_path),
        "train_config": str(train_config_path),
        "optimizer": setup.train.optimizer,
        "optimizer_kwargs": setup.train.optimizer_kwargs,
        "variables": len(names),
        "parameters": sum(p.numel() for p in model.parameters()),
        "init": init_source,
        "steps": steps,
        "lr": lrs,
        "lr_ref": ref_lrs[:steps],
        "lr_rel": lr_rel,
        "loss": {t: [losses[0][t], ref_loss[t]] for t in LOSS_TERMS},
        "loss_rel": loss_rel,
        "grad_rel": grad_rel,
        "weights_rel": weights_rel,
        "replay_rel": replay_rel,
        "weights_final_rel": weights_final_rel,
        "weights_norm_rel": weights_norm_rel,
        "update_rel": update_rel,
        "forced_rel": forced_rel,
        "forced_only": list(forced_only),
        "forced_only_rel": forced_only_rel,
        "grad_stats_rel": grad_stats_rel,
        "init_checksum_rel": init_checksum_rel,
        "steps_loss_rel": steps_loss_rel,
        "step_grad_norm_rel": step_grad_norm_rel,
        "step_losses": losses,
        "compared": compared,
        "device": str(device),
        "seconds": round(time.perf_counter() - started, 2),
    }
