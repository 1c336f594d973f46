"""One optimiser step over a global batch."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import torch

from pgnn.config.network import LossConfig
from pgnn.nn.losses import LossNormaliser, compute_loss, loss_counts
from pgnn.training.batches import TrainBatch
from pgnn.training.distributed import Dist
from pgnn.training.live import IntervalStats
from pgnn.training.precision import FP32, StepPrecision


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    micro: Sequence[TrainBatch],
    reg_params: Sequence[torch.Tensor],
    loss_cfg: LossConfig,
    lr: float,
    dist: Dist,
    stats: IntervalStats,
    step: int,
    clip_grad_norm: float | None = None,
    *,
    precision: StepPrecision = FP32,
) -> None:
    """One optimiser step over a global batch's micro-batches (this rank's share), counted into ``stats``.

    Raises ``FloatingPointError`` before the update when the loss or the gradient is not finite (the
    original asserted a finite loss), naming the step: the parameters and the checkpoints on disk stay as
    they were, so the newest checkpoint is the last good state. DDP has summed the gradients of all ranks by
    then, so every rank sees the same gradient and stops together. ``clip_grad_norm`` scales the gradient
    down to that global norm before the update (the logged ``grad_norm`` is the norm before clipping).
    ``precision`` (:mod:`pgnn.training.precision`): the autocast region of the forward pass and the loss,
    and, for fp16, the grad scaler (a step whose scaled gradient overflows is skipped instead of an error).
    """
    counts = sum(loss_counts(b.cls_labels, b.valid, loss_cfg, b.graph.batch) for b in micro)
    counts = dist.all_reduce_sum(counts)  # (2,) the whole step's counts, over micro-batches and ranks
    normaliser = LossNormaliser(float(counts[0]), float(counts[1]))
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    reg_value = 0.0
    seen = []  # (detached terms, logits, labels) per micro-batch, counted once the step is known good
    for m, batch in enumerate(micro):
        last_micro = m == len(micro) - 1
        sync = model.no_sync() if dist.enabled and not last_micro else contextlib.nullcontext()
        with sync:
            with precision.autocast():
                logits, box_pred = model(batch.graph)
                terms = compute_loss(
                    logits,
                    box_pred,
                    batch.cls_labels,
                    batch.box_targets,
                    batch.valid,
                    reg_params if m == 0 else None,
                    loss_cfg,
                    normaliser,
                    frame_index=batch.graph.batch,
                )
            # DDP averages gradients over ranks; scale the data terms so that the ranks' parts add up instead
            objective = (terms["cls"] + terms["loc"]) * dist.world_size + terms["reg"]
            precision.backward(objective)
        if m == 0:
            reg_value = float(terms["reg"].detach())
        seen.append(({k: v.detach() for k, v in terms.items()}, logits.detach().float(), batch.cls_labels))
    precision.unscale(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.get_total_norm(grads))
    loss = sum(float(terms["cls"] + terms["loc"]) for terms, _, _ in seen) + reg_value
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"non-finite loss in step {step + 1} ({loss}, lr {lr:.4g}); nothing was updated and the newest "
            "checkpoint is the last good one: lower initial_lr or set train.clip_grad_norm"
        )
    if not math.isfinite(grad_norm) and not precision.skips(grad_norm):
        raise FloatingPointError(
            f"non-finite gradient in step {step + 1} (this rank's cls {float(seen[0][0]['cls']):.4g}, "
            f"loc {float(seen[0][0]['loc']):.4g}, lr {lr:.4g}); the last checkpoint is unchanged: "
            "lower initial_lr or set train.clip_grad_norm"
        )
    if clip_grad_norm is not None and math.isfinite(grad_norm):
        with_grad = [p for p in model.parameters() if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(with_grad, clip_grad_norm, torch.tensor(grad_norm))
    precision.step(optimizer)
    for terms, logits, labels in seen:
        stats.add_micro_batch(terms, logits, labels)
    stats.add_step(reg_value, grad_norm)
