"""The training schedule: learning rate, epoch permutations and which records each step reads.

One optimiser step consumes ``batch_size * accumulation_steps`` frames (the *global* batch)::

    epoch e:  perm = default_rng([seed, e]).permutation(num_records)        # pure function of (seed, e)
    step s of the epoch, micro-batch m, rank r of W:
              frames = perm[(s*A + m)*B : (s*A + m + 1)*B][r*B/W : (r+1)*B/W]

so the frames a step sees depend only on (seed, epoch, step), never on ``num_workers``, the world size or
where a run was interrupted.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pgnn.config.training import TrainConfig


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """The learning rate of the update after ``step`` completed steps (:func:`exponential_decay`)."""
    return exponential_decay(step, cfg.initial_lr, cfg.decay_step, cfg.decay_factor, cfg.staircase)


def exponential_decay(
    step: int, initial_lr: float, decay_step: int, decay_factor: float, staircase: bool = True
) -> float:
    """``tf.train.exponential_decay`` at global step ``step`` (the steps completed before this update)::

        lr = initial_lr * decay_factor ** (step / decay_step)        (floor of the ratio when staircase)

    computed in float32 as TF does (0.125 * 0.1 -> 0.012500000186...).
    """
    f32 = np.float32
    ratio = f32(step) / f32(decay_step)
    if staircase:
        ratio = np.floor(ratio)
    return float(f32(initial_lr) * np.power(f32(decay_factor), f32(ratio)))


def epoch_permutation(seed: int, epoch: int, num_records: int) -> np.ndarray:
    """The order of the records in ``epoch``: a pure function of (seed, epoch).

    Shapes: -> (num_records,) int64
    """
    return np.random.default_rng([seed, epoch]).permutation(num_records)


def steps_per_epoch(num_records: int, cfg: TrainConfig) -> int:
    """Whole optimiser steps in one pass over the records (the remainder is dropped, as in the original)."""
    return num_records // (cfg.batch_size * cfg.accumulation_steps)


def total_steps(num_records: int, cfg: TrainConfig) -> int:
    """Where training stops: ``max_steps`` or ``max_epoch`` epochs, whichever comes first."""
    limits = []
    if cfg.max_steps is not None:
        limits.append(cfg.max_steps)
    if cfg.max_epoch is not None:
        limits.append(cfg.max_epoch * steps_per_epoch(num_records, cfg))
    return min(limits)


def rank_micro_batches(
    perm: np.ndarray, first_step: int, end_step: int, cfg: TrainConfig, rank: int, world_size: int
) -> list[list[int]]:
    """This rank's record indices for each micro-batch of steps ``first_step .. end_step - 1`` of an epoch.

    Shapes: perm (num_records,) -> (end_step - first_step) * accumulation_steps lists of batch_size / world
    """
    b, a = cfg.batch_size, cfg.accumulation_steps
    per_rank = b // world_size
    out = []
    for s in range(first_step, end_step):
        for m in range(a):
            start = (s * a + m) * b + rank * per_rank
            out.append([int(i) for i in perm[start : start + per_rank]])
    return out


def micro_batch_plan(
    num_records: int,
    cfg: TrainConfig,
    rank: int,
    world_size: int,
    step: int,
    epoch: int,
    position: int,
    last_step: int,
    with_epoch: bool = False,
) -> Iterator[list[int] | list[tuple[int, int]]]:
    """This rank's micro-batches from (step, epoch, position) to ``last_step``, across epoch boundaries.

    ``with_epoch``: items are ``(epoch, record index)`` pairs (for a source with ``set_epoch``).
    """
    per_epoch = steps_per_epoch(num_records, cfg)
    while step < last_step:
        end = min(per_epoch, position + (last_step - step))
        perm = epoch_permutation(cfg.seed, epoch, num_records)
        batches = rank_micro_batches(perm, position, end, cfg, rank, world_size)
        yield from ([(epoch, i) for i in b] for b in batches) if with_epoch else batches
        step += end - position
        epoch, position = epoch + 1, 0
