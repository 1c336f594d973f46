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
``checkpoint_every`` steps, every ``save_every_epoch`` epochs and at the end, the ``keep_last`` newest of
the run kept) hold the model, optimiser, step,
epoch, position in the epoch, RNG states and the resolved configs. ``train`` resumes from the newest
checkpoint in ``out_dir`` by itself; on CPU the resumed run is bit-identical to an uninterrupted one.

Distributed: launched by ``torchrun`` (``WORLD_SIZE`` > 1) ``train`` joins the process group (NCCL on CUDA,
gloo on CPU), wraps the model in ``DistributedDataParallel`` and gives each rank its slice of every global
batch. DDP averages gradients over ranks, so each rank's data term is scaled by the world size.

Logging (rank 0): dvclive (``Live(live_dir, dvcyaml=False, save_dvc_exp=False)``) every ``log_every`` steps:
loss terms averaged over the interval, learning rate, epoch, and per class the vertex recall / precision /
PR-AUC (:class:`pgnn.training.metrics.VertexMetricsAccumulator`, all ranks' vertices) and the localisation
loss per
box dimension; progress on stderr (``pgnn.core.progress``: a bar on a terminal, plain lines in a log), one
log line per interval.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pgnn.config.network import LossConfig, ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import ParamsError
from pgnn.core.io import write_json_atomic
from pgnn.core.progress import Progress
from pgnn.graphs.targets import method_class_names
from pgnn.nn.checkpoint import checkpoint_name
from pgnn.nn.gemm import cpu_threads
from pgnn.nn.losses import regularized_parameters
from pgnn.training import precision
from pgnn.training.batches import RecordDataset, RecordSource, batch_loader
from pgnn.training.distributed import Dist, init_distributed
from pgnn.training.live import (
    TIME_PREFIX,
    IntervalStats,
    Validator,
    class_labels,
    live_history,
    log_interval,
    log_values,
    open_live,
    restore_live,
    write_summary,
)
from pgnn.training.run_folder import run_folder_lock
from pgnn.training.schedule import learning_rate, micro_batch_plan, steps_per_epoch, total_steps
from pgnn.training.state import META_KEYS, RunState, restore_run, save_run
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
    validate: Validator | None = None,
    timings_path: str | Path | None = None,
) -> Path:
    """Train a ``PointGNN(model_cfg)`` on the records; return the final checkpoint's path.

    Resumes from the newest good ``ckpt-*.pt`` in ``out_dir`` when there is one (then ``init_checkpoint``
    is ignored); otherwise starts from ``init_checkpoint``'s weights (fine-tuning) or from a seeded
    initialisation. ``meta`` goes into every checkpoint and must give the strings of :data:`META_KEYS`
    (``input_frame`` defaults to ``"rect"``, the frame of pgnn's own data); any further keys are stored as
    they are (plain data only). ``validate(model, step)``, when given, runs on rank 0 every
    ``train_cfg.eval_every`` steps and at the end; its values are logged next to the losses.

    The run stops at ``last_step`` (``max_steps`` / ``max_epoch``) and never resumes from past it: it
    resumes from its newest checkpoint at or before that step, so asking for fewer steps than an earlier
    run of the same key reached gives the model (and curves) of an uninterrupted run of that length. Every
    checkpoint step also ends a logging interval, so a resumed run logs what an uninterrupted one logs
    (``checkpoint_every`` and ``save_every_epoch`` are therefore in the run key). The dvclive folder
    ``live_dir`` then holds this run's curves up to its last step (restored from the checkpoint it resumed
    from) and a summary written from them. ``timings_path`` gets the last interval's seconds per step
    (wall-clock figures: never in ``live_dir``).
    """
    meta = {"input_frame": "rect", **(meta or {})}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"train(meta=...) needs {missing} for the checkpoints")
    out_dir = Path(out_dir)
    num_records = len(records_source)
    per_epoch = steps_per_epoch(num_records, train_cfg)
    if per_epoch == 0:  # the user's to fix in params.yaml: one line, no traceback
        raise ParamsError(
            "params.yaml",
            f"expected batch_size x accumulation_steps <= {num_records} (the train split's training frames), "
            f"got {train_cfg.batch_size} x {train_cfg.accumulation_steps}",
            key="train.batch_size",
        )
    last_step = total_steps(num_records, train_cfg)
    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 touches files
    lock = run_folder_lock(out_dir) if main_rank else contextlib.nullcontext()  # claimed, marked, locked
    with lock, cpu_threads(train_cfg.threads):
        dist = init_distributed(train_cfg.device)
        try:
            if train_cfg.batch_size % dist.world_size:
                raise ValueError(
                    f"batch_size {train_cfg.batch_size} is not a multiple of the world size {dist.world_size}"
                )
            run = restore_run(
                out_dir, model_cfg, train_cfg, loss_cfg, meta, dist, init_checkpoint, num_records, last_step
            )
            if run.resumed_from is not None and run.step >= last_step:  # nothing left to do
                if dist.rank == 0 and live_dir is not None:
                    _finish_restored(run, Path(live_dir), train_cfg, validate)
                return run.resumed_from
            _loop(
                run,
                records_source,
                model_cfg,
                train_cfg,
                loss_cfg,
                dist,
                last_step,
                per_epoch,
                live_dir,
                validate,
                timings_path,
            )
            if dist.enabled:
                torch.distributed.barrier()
            return out_dir / checkpoint_name(run.step)  # saved when the last step was done
        finally:
            if dist.owns_group:
                torch.distributed.destroy_process_group()


def _finish_restored(
    run: RunState, live_dir: Path, train_cfg: TrainConfig, validate: Validator | None
) -> None:
    """The curves of a run that resumed at its last step: the checkpoint's, plus the validation a run ending
    there does at its last step (a longer run of the same key saved that checkpoint without it; the weights
    are the same, so the values are too), and the summary."""
    restore_live(live_dir, run.step, run.live_history)
    every = train_cfg.eval_every
    if validate is not None and every is not None and run.step % every != 0:
        live = open_live(live_dir, resume=True)
        run.model.eval()
        with torch.no_grad():
            log_values(live, run.step, dict(validate(run.model, run.step)))
        live.end()
    write_summary(live_dir, run.step)


def loader_workers(train_cfg: TrainConfig, source: RecordSource) -> int:
    """Data-loading processes: ``num_workers``, or for "auto" 2 when the source rebuilds its samples every
    epoch (augmentation, graph resampling, ground-truth sampling) and 0 for cached records."""
    if train_cfg.num_workers != "auto":
        return int(train_cfg.num_workers)
    return min(2, os.cpu_count() or 1) if getattr(source, "rebuilds", False) else 0


def _loop(
    run: RunState,
    records_source: RecordSource,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    loss_cfg: LossConfig,
    dist: Dist,
    last_step: int,
    per_epoch: int,
    live_dir: str | Path | None,
    validate: Validator | None,
    timings_path: str | Path | None,
) -> None:
    """Steps ``run.step .. last_step - 1``: load, step, log, validate, save (``run`` advances in place)."""
    model = run.model
    ddp_model: torch.nn.Module = model
    if dist.enabled:
        device_ids = [dist.device.index] if dist.device.type == "cuda" else None
        ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    ddp_model = precision.compile_model(ddp_model, train_cfg.compile)
    numerics = precision.step_precision(train_cfg.precision, dist.device)
    reg_params = regularized_parameters(model)
    live = None
    if dist.rank == 0 and live_dir is not None:
        live_dir = Path(live_dir)
        if run.resumed_from is not None:
            restore_live(live_dir, run.step, run.live_history)
        elif live_dir.exists():
            shutil.rmtree(live_dir)  # a fresh run: no curves of another run
        live = open_live(live_dir, resume=run.resumed_from is not None)
    progress = Progress(last_step, "train", "step", initial=run.step) if dist.rank == 0 else None
    try:
        labels: tuple[str, ...] | None = class_labels(method_class_names(str(run.meta["label_method"])))
    except ValueError:  # not a label method of pgnn's: metrics named class_<k>
        labels = None
    if labels is not None and len(labels) != model_cfg.num_classes:
        labels = None

    def new_stats() -> IntervalStats:
        return IntervalStats(model_cfg.num_classes, model_cfg.box_encoding_len, labels)

    stats = new_stats()
    model.train()
    plan = micro_batch_plan(
        len(records_source),
        train_cfg,
        dist.rank,
        dist.world_size,
        run.step,
        run.epoch,
        run.position,
        last_step,
        with_epoch=hasattr(records_source, "set_epoch"),
    )
    workers = loader_workers(train_cfg, records_source)
    loader = batch_loader(RecordDataset(records_source), plan, workers)
    while run.step < last_step:
        t0 = time.perf_counter()
        micro = [next(loader).to(dist.device) for _ in range(train_cfg.accumulation_steps)]
        t1 = time.perf_counter()
        lr = learning_rate(run.step, train_cfg)
        step_args = (reg_params, loss_cfg, lr, dist, stats, run.step, train_cfg.clip_grad_norm)
        with precision.matmul_precision(train_cfg.precision, dist.device):
            train_step(ddp_model, run.optimizer, micro, *step_args, precision=numerics)
        stats.add_time(t1 - t0, time.perf_counter() - t1)
        step_epoch = run.advance(per_epoch)
        if progress is not None:
            progress.update(1)
        done = run.step >= last_step
        epoch_end = run.position == 0 and train_cfg.save_every_epoch is not None
        save = (
            run.step % train_cfg.checkpoint_every == 0
            or done
            or (epoch_end and run.epoch % train_cfg.save_every_epoch == 0)
        )
        # a checkpoint ends a logging interval: a run resumed from it logs what an uninterrupted one logs
        if run.step % train_cfg.log_every == 0 or save:
            values = stats.reduce(dist)  # a collective: every rank calls it
            if dist.rank == 0:
                log_interval(live, run.step, last_step, {**values, "lr": lr, "epoch": step_epoch})
                if timings_path is not None:
                    times = {
                        k.removeprefix(TIME_PREFIX): v for k, v in values.items() if k.startswith(TIME_PREFIX)
                    }
                    write_json_atomic(timings_path, {"step": run.step, **times})
            stats = new_stats()
        every = train_cfg.eval_every
        if validate is not None and dist.rank == 0 and every is not None and (run.step % every == 0 or done):
            model.eval()
            with torch.no_grad():
                values = dict(validate(model, run.step))
            model.train()
            log_values(live, run.step, values)
        if save:
            history = live_history(Path(live_dir)) if live is not None else None
            save_run(run, train_cfg, loss_cfg, dist, len(records_source), history)
    if progress is not None:
        progress.close()
    if live is not None:
        live.end()
        write_summary(Path(live_dir), run.step)
