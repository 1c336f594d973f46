"""The Point-GNN training loop: deterministic, resumable, optionally distributed (DDP).

One optimiser step consumes ``batch_size * accumulation_steps`` frames (the *global* batch; the original's
``batch_size`` over its GPU towers times its ``pseudo_batch_factor``)::

    epoch e:  perm = default_rng([seed, e]).permutation(num_records)        # pure function of (seed, e)
    step s of the epoch, micro-batch m, rank r of W:
              frames = perm[(s*A + m)*B : (s*A + m + 1)*B][r*B/W : (r+1)*B/W]

so the frames a step sees depend only on (seed, epoch, step), never on ``num_workers``, the world size or
where a run was interrupted. Within a step the losses are sums over vertices divided by counts taken over
the whole global batch (:func:`pgnn.nn.losses.loss_counts`, summed over micro-batches and ranks), which makes
W ranks x B/W frames, or A micro-batches of B frames, the same step as one process with the global batch
(up to float summation order). The original's ``unify_copies`` did this re-weighting for its towers.

Learning rate: the original's ``tf.train.exponential_decay``:
``lr(step) = initial_lr * decay_factor ** (step / decay_step)`` (integer division when ``staircase``).

Checkpoints (``pgnn.nn.checkpoint``; ``ckpt-<step>.pt``, written atomically by rank 0 every
``checkpoint_every`` steps and at the end, the ``keep_last`` newest kept) hold the model, optimiser, step,
epoch, position in the epoch, RNG states and the resolved configs. ``train`` resumes from the newest
checkpoint in ``out_dir`` by itself; on CPU the resumed run is bit-identical to an uninterrupted one.

Distributed: launched by ``torchrun`` (``WORLD_SIZE`` > 1) ``train`` joins the process group (NCCL on CUDA,
gloo on CPU), wraps the model in ``DistributedDataParallel`` and gives each rank its slice of every global
batch. DDP averages gradients over ranks, so each rank's data term is scaled by the world size.

Logging (rank 0): dvclive (``Live(live_dir, dvcyaml=False, save_dvc_exp=False)``) every ``log_every`` steps:
loss terms averaged over the interval, learning rate, epoch, and per class the vertex recall / precision /
PR-AUC (:class:`pgnn.training.metrics.VertexMetricsAccumulator`, all ranks' vertices) and the localisation
loss per
box dimension; a progress bar on a terminal, one log line per interval.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.nn.losses import regularized_parameters
from pgnn.training.batches import RecordDataset, RecordSource, batch_loader
from pgnn.training.distributed import init_distributed
from pgnn.training.live import IntervalStats, log_interval, open_live
from pgnn.training.optim import make_optimizer
from pgnn.training.schedule import learning_rate, micro_batch_plan, steps_per_epoch, total_steps
from pgnn.training.state import META_KEYS, check_resume_configs, prune_checkpoints, rng_state, set_rng_state
from pgnn.training.step import train_step

log = logging.getLogger(__name__)


def train(
    records_source: RecordSource,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    loss_cfg: LossConfig,
    out_dir: str | Path,
    *,
    live_dir: str | Path | None = None,
    init_checkpoint: str | Path | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Train a ``PointGNN(model_cfg)`` on the records; return the final checkpoint's path.

    Resumes from the newest ``ckpt-*.pt`` in ``out_dir`` when there is one (then ``init_checkpoint`` is
    ignored); otherwise starts from ``init_checkpoint``'s weights (fine-tuning) or from a seeded
    initialisation. ``meta`` goes into every checkpoint and must give the strings of
    :data:`META_KEYS` (``input_frame`` defaults to ``"rect"``, the frame of pgnn's own data); any further keys
    are stored as they are (plain data only).
    """
    from pgnn.nn.checkpoint import (
        checkpoint_name,
        latest_checkpoint,
        load_checkpoint,
        make_checkpoint,
        save_checkpoint,
    )
    from pgnn.nn.model import PointGNN

    meta = {"input_frame": "rect", **(meta or {})}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"train(meta=...) needs {missing} for the checkpoints")
    out_dir = Path(out_dir)
    num_records = len(records_source)
    per_epoch = steps_per_epoch(num_records, train_cfg)
    if per_epoch == 0:
        raise ValueError(
            f"{num_records} records cannot fill one step of batch_size {train_cfg.batch_size} x "
            f"accumulation_steps {train_cfg.accumulation_steps}"
        )
    last_step = total_steps(num_records, train_cfg)

    dist = init_distributed(train_cfg.device)
    try:
        if train_cfg.batch_size % dist.world_size:
            raise ValueError(
                f"batch_size {train_cfg.batch_size} is not a multiple of the world size {dist.world_size}"
            )

        # -- state: resume, fine-tune or fresh ------------------------------------------------------------
        if dist.rank == 0 and out_dir.is_dir():  # half-written checkpoints of a killed run
            for stale in out_dir.glob(".tmp-ckpt-*"):
                stale.unlink(missing_ok=True)
        resume_path = latest_checkpoint(out_dir)
        if dist.enabled:  # every rank resumes from what rank 0 saw
            shared = [str(resume_path) if resume_path else None]
            torch.distributed.broadcast_object_list(shared, src=0)
            resume_path = Path(shared[0]) if shared[0] else None
        model = PointGNN(model_cfg, generator=torch.Generator().manual_seed(train_cfg.seed))
        model.to(dist.device)
        optimizer = make_optimizer(list(model.parameters()), train_cfg)
        step, epoch, position = 0, 0, 0
        if resume_path is not None:
            ckpt = load_checkpoint(resume_path, map_location=dist.device)
            if ckpt["model_config"] != model_cfg.model_dump(mode="json"):
                raise ValueError(f"{resume_path} holds a different model_config than this run's")
            check_resume_configs(ckpt, train_cfg, loss_cfg, meta, resume_path)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            set_rng_state(ckpt.get("rng", {}))
            step, epoch, position = int(ckpt["step"]), int(ckpt["epoch"]), int(ckpt["position"])
            if int(ckpt.get("num_records", num_records)) != num_records:
                log.warning(
                    "resuming %s with %d records instead of %d", resume_path, num_records, ckpt["num_records"]
                )
            log.info("resuming from %s (step %d, epoch %d)", resume_path, step, epoch)
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
        if resume_path is not None and step >= last_step:
            return resume_path  # nothing left to do

        ddp_model: torch.nn.Module = model
        if dist.enabled:
            device_ids = [dist.device.index] if dist.device.type == "cuda" else None
            ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        reg_params = regularized_parameters(model)

        def save(at_step: int, at_epoch: int, at_position: int) -> None:
            if dist.rank == 0:
                ckpt = make_checkpoint(
                    model,
                    step=at_step,
                    epoch=at_epoch,
                    position=at_position,
                    optimizer=optimizer.state_dict(),
                    scheduler={"name": "exponential_decay", "next_lr": learning_rate(at_step, train_cfg)},
                    rng=rng_state(),
                    train_config=train_cfg.model_dump(mode="json"),
                    loss_config=loss_cfg.model_dump(mode="json"),
                    num_records=num_records,
                    world_size=dist.world_size,
                    **meta,
                )
                save_checkpoint(out_dir / checkpoint_name(at_step), ckpt)
                prune_checkpoints(out_dir, train_cfg.keep_last)

        live = None
        if dist.rank == 0 and live_dir is not None:
            live = open_live(Path(live_dir), step if resume_path is not None else None)
        progress = None
        if dist.rank == 0:
            from tqdm import tqdm

            progress = tqdm(total=last_step, initial=step, disable=None, leave=False, unit="step")

        stats = IntervalStats(model_cfg.num_classes, model_cfg.box_encoding_len)
        model.train()
        plan = micro_batch_plan(
            num_records,
            train_cfg,
            dist.rank,
            dist.world_size,
            step,
            epoch,
            position,
            last_step,
            with_epoch=hasattr(records_source, "set_epoch"),
        )
        loader = batch_loader(RecordDataset(records_source), plan, train_cfg.num_workers)
        while step < last_step:
            micro = [next(loader).to(dist.device) for _ in range(train_cfg.accumulation_steps)]
            lr = learning_rate(step, train_cfg)
            train_step(ddp_model, optimizer, micro, reg_params, loss_cfg, lr, dist, stats, step)
            step += 1
            step_epoch = epoch
            epoch, position = (epoch + 1, 0) if position + 1 == per_epoch else (epoch, position + 1)
            if progress is not None:
                progress.update(1)
            done = step >= last_step
            if step % train_cfg.log_every == 0 or done:
                values = stats.reduce(dist)  # a collective: every rank calls it
                if dist.rank == 0:
                    log_interval(live, step, last_step, {**values, "lr": lr, "epoch": step_epoch})
                stats = IntervalStats(model_cfg.num_classes, model_cfg.box_encoding_len)
            if step % train_cfg.checkpoint_every == 0 or done:
                save(step, epoch, position)
        if progress is not None:
            progress.close()
        if live is not None:
            live.end()
        if dist.enabled:
            torch.distributed.barrier()
        return out_dir / checkpoint_name(step)  # saved when the last step was done
    finally:
        if dist.owns_group:
            torch.distributed.destroy_process_group()
