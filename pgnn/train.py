"""The Point-GNN training loop: deterministic, resumable, optionally distributed (DDP).

One optimiser step consumes ``batch_size * accumulation_steps`` frames (the *global* batch; the original's
``batch_size`` over its GPU towers times its ``pseudo_batch_factor``)::

    epoch e:  perm = default_rng([seed, e]).permutation(num_records)        # pure function of (seed, e)
    step s of the epoch, micro-batch m, rank r of W:
              frames = perm[(s*A + m)*B : (s*A + m + 1)*B][r*B/W : (r+1)*B/W]

so the frames a step sees depend only on (seed, epoch, step), never on ``num_workers``, the world size or
where a run was interrupted. Within a step the losses are sums over vertices divided by counts taken over
the whole global batch (:func:`pgnn.losses.loss_counts`, summed over micro-batches and ranks), which makes
W ranks x B/W frames, or A micro-batches of B frames, the same step as one process with the global batch
(up to float summation order). The original's ``unify_copies`` did this re-weighting for its towers.

Learning rate: the original's ``tf.train.exponential_decay``:
``lr(step) = initial_lr * decay_factor ** (step / decay_step)`` (integer division when ``staircase``).

Checkpoints (``pgnn.checkpoint``; ``ckpt-<step>.pt``, written atomically by rank 0 every
``checkpoint_every`` steps and at the end, the ``keep_last`` newest kept) hold the model, optimiser, step,
epoch, position in the epoch, RNG states and the resolved configs. ``train`` resumes from the newest
checkpoint in ``out_dir`` by itself; on CPU the resumed run is bit-identical to an uninterrupted one.

Distributed: launched by ``torchrun`` (``WORLD_SIZE`` > 1) ``train`` joins the process group (NCCL on CUDA,
gloo on CPU), wraps the model in ``DistributedDataParallel`` and gives each rank its slice of every global
batch. DDP averages gradients over ranks, so each rank's data term is scaled by the world size.

Logging (rank 0): dvclive (``Live(live_dir, dvcyaml=False, save_dvc_exp=False)``) every ``log_every`` steps:
loss terms averaged over the interval, learning rate, epoch, and per class the vertex recall / precision /
PR-AUC (:class:`pgnn.metrics.VertexMetricsAccumulator`, all ranks' vertices) and the localisation loss per
box dimension; a progress bar on a terminal, one log line per interval.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgnn.errors import DataError
from pgnn.io import atomic_open
from pgnn.losses import LossConfig, LossNormaliser, compute_loss, loss_counts, regularized_parameters
from pgnn.metrics import VertexMetricsAccumulator

if TYPE_CHECKING:  # pgnn.model imports torch_geometric: loaded when training starts, not on import
    from pgnn.model import GraphInput, ModelConfig

log = logging.getLogger(__name__)

OptimizerName = Literal["sgd", "momentum", "rmsprop", "adam"]

# The original's per-optimiser defaults, in torch's argument names. TF's RMSProp (decay 0.9, momentum 0.9,
# epsilon 1.0) maps to torch's alpha / momentum / eps; TF adds epsilon inside the square root and starts the
# mean square at 1, torch adds it outside and starts at 0: "rmsprop" is close to the original, not equal.
OPTIMIZER_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "sgd": {},
    "momentum": {"momentum": 0.9},
    "rmsprop": {"momentum": 0.9, "alpha": 0.9, "eps": 1.0},
    "adam": {},
}

METRIC_BINS = 1000
BOX_DIM_NAMES = ("x", "y", "z", "l", "h", "w", "ry")
META_KEYS = ("input_frame", "graph_preset", "encoding", "label_method", "input_features")
# Settings that may change between a run and its resumption without breaking the exact continuation.
RESUMABLE_CHANGES = {
    "max_steps",
    "max_epoch",
    "checkpoint_every",
    "keep_last",
    "log_every",
    "num_workers",
    "device",
}


class TrainConfig(BaseModel):
    """Training settings; names and defaults follow the original's car train configs where it has them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: OptimizerName = "sgd"
    optimizer_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Overrides of :data:`OPTIMIZER_DEFAULTS` (torch names: ``momentum``, ``alpha``, ``eps``...)."""
    initial_lr: float = Field(0.125, gt=0.0)
    decay_step: int = Field(400_000, ge=1)
    decay_factor: float = Field(0.1, gt=0.0)
    staircase: bool = True
    batch_size: int = Field(4, ge=1)
    """Frames per micro-batch over all ranks (each rank gets batch_size / world_size)."""
    accumulation_steps: int = Field(1, ge=1)
    """Micro-batches whose gradients make one optimiser step (the original's pseudo-batch)."""
    max_steps: int | None = Field(1_400_000, ge=1)
    max_epoch: int | None = Field(1718, ge=1)
    checkpoint_every: int = Field(1000, ge=1)
    keep_last: int = Field(3, ge=1)
    seed: int = 0
    num_workers: int = Field(0, ge=0)
    log_every: int = Field(100, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.max_steps is None and self.max_epoch is None:
            raise ValueError("set max_steps, max_epoch or both")
        return self


class RecordSource(Protocol):
    """Training records: ``source[i]`` is one frame's dict of numpy arrays (see :func:`collate_records`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Mapping[str, np.ndarray]: ...


# ----------------------------------------------------------------------------------------------------
# Schedule, sampling
# ----------------------------------------------------------------------------------------------------


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """``tf.train.exponential_decay``: the learning rate of the update after ``step`` completed steps."""
    exponent = step // cfg.decay_step if cfg.staircase else step / cfg.decay_step
    return cfg.initial_lr * cfg.decay_factor**exponent


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


# ----------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainBatch:
    """A collated micro-batch: the graph and the targets of its output vertices (rows of ``vertex_coord[1]``).

    Shapes: cls_labels (N,) int64, box_targets (N, D) float32, valid (N,) bool; graph.batch (N,) frame of each
    """

    graph: GraphInput
    cls_labels: torch.Tensor
    box_targets: torch.Tensor
    valid: torch.Tensor
    indices: tuple[int, ...]

    def to(self, device: torch.device) -> TrainBatch:
        return TrainBatch(
            graph=self.graph.to(device),
            cls_labels=self.cls_labels.to(device),
            box_targets=self.box_targets.to(device),
            valid=self.valid.to(device),
            indices=self.indices,
        )


class RecordDataset(torch.utils.data.Dataset):
    """A torch ``Dataset`` over a record source; item i is ``(i, source[i])``.

    A source whose samples change with the epoch (``pgnn.dataset.AugmentedRecords``) has ``set_epoch``; its
    items are asked for as ``(epoch, i)`` and the epoch is set, in the process that builds the record, first.
    """

    def __init__(self, source: RecordSource) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[int, Mapping[str, np.ndarray]]:
        if isinstance(key, tuple):
            epoch, i = key
            self.source.set_epoch(epoch)  # type: ignore[attr-defined]
            return i, self.source[i]
        return key, self.source[key]


def _targets(
    record: Mapping[str, np.ndarray], n: int, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for key in ("cls_labels", "box_targets", "valid_box"):
        if key not in record:
            raise DataError(where, f"expected a {key!r} array in the training record, got none")
    cls_labels = np.asarray(record["cls_labels"]).reshape(-1)
    box_targets = np.asarray(record["box_targets"])
    box_targets = box_targets.reshape(box_targets.shape[0], -1) if box_targets.ndim == 3 else box_targets
    valid = np.asarray(record["valid_box"]).reshape(-1)
    if cls_labels.shape != (n,) or valid.shape != (n,) or box_targets.ndim != 2 or box_targets.shape[0] != n:
        raise DataError(
            where,
            f"expected targets for the {n} output vertices (cls_labels (N,), box_targets (N, D), "
            f"valid_box (N,)), got {cls_labels.shape}, {box_targets.shape}, {valid.shape}",
        )
    return cls_labels, box_targets, valid


def collate_records(items: Sequence[tuple[int, Mapping[str, np.ndarray]]]) -> TrainBatch:
    """Frames -> one batch: graphs via ``collate_graphs``, targets concatenated in the same vertex order.

    Each record holds the graph arrays read by :func:`pgnn.model.graph_input_from_arrays` (``features``,
    ``vertex_coord_i``, ``keypoint_indices_i``, ``edges_i``) and targets over the output vertices (the rows
    of ``vertex_coord_1``, which the last level repeats): ``cls_labels`` (N,), ``box_targets`` (N, D),
    ``valid_box`` (N,).
    """
    from pgnn.model import collate_graphs, graph_input_from_arrays

    graphs, labels, boxes, valids = [], [], [], []
    for index, record in items:
        frame = f" (frame {record['frame_id']})" if "frame_id" in record else ""
        where = f"training record {index}{frame}"
        g = graph_input_from_arrays(record, "cpu", source=where)
        c, b, v = _targets(record, g.vertex_coord[1].shape[0], where)
        graphs.append(g)
        labels.append(torch.from_numpy(c.astype(np.int64)))
        boxes.append(torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32)))
        valids.append(torch.from_numpy(v.astype(bool)))
    return TrainBatch(
        graph=collate_graphs(graphs),
        cls_labels=torch.cat(labels),
        box_targets=torch.cat(boxes),
        valid=torch.cat(valids),
        indices=tuple(i for i, _ in items),
    )


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


def _worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)


def _loader(dataset: RecordDataset, plan: Iterator[list[int]], num_workers: int) -> Iterator[TrainBatch]:
    """Load and collate the planned micro-batches in order, ``num_workers`` processes ahead (one loader, and
    one set of workers, for the whole run)."""
    return iter(
        torch.utils.data.DataLoader(
            dataset,
            batch_sampler=plan,
            collate_fn=collate_records,
            num_workers=num_workers,
            worker_init_fn=_worker_init if num_workers > 0 else None,
        )
    )


# ----------------------------------------------------------------------------------------------------
# Distributed context
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dist:
    """Where this process sits: rank / world size, its device, whether ``train`` made the process group."""

    rank: int
    world_size: int
    device: torch.device
    owns_group: bool

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (identity on one process); returns a CPU tensor."""
        if not self.enabled:
            return t.cpu()
        t = t.to(self.device)
        torch.distributed.all_reduce(t)
        return t.cpu()


def _resolve_device(pref: str, local_rank: int) -> torch.device:
    if pref == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train device 'cuda' requested but CUDA is not available")
    if pref == "cpu" or (pref == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(device_pref: str) -> Dist:
    """Join (or make, under torchrun) the process group; pick this rank's device."""
    dist = torch.distributed
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        device = _resolve_device(device_pref, local_rank)
        return Dist(dist.get_rank(), dist.get_world_size(), device, owns_group=False)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = _resolve_device(device_pref, local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        return Dist(dist.get_rank(), dist.get_world_size(), device, owns_group=True)
    return Dist(0, 1, _resolve_device(device_pref, 0), owns_group=False)


# ----------------------------------------------------------------------------------------------------
# Checkpoint state
# ----------------------------------------------------------------------------------------------------


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["torch_cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    if "torch_cpu" in state:
        torch.set_rng_state(state["torch_cpu"].cpu())
    cuda = state.get("torch_cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def _prune_checkpoints(directory: Path, keep_last: int) -> None:
    from pgnn.checkpoint import checkpoint_name

    steps = []
    for p in directory.glob("ckpt-*.pt"):
        digits = p.stem.removeprefix("ckpt-")
        if digits.isdigit() and p.name == checkpoint_name(int(digits)):
            steps.append(int(digits))
    for step in sorted(steps)[:-keep_last]:
        (directory / checkpoint_name(step)).unlink(missing_ok=True)


def _check_resume_configs(
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


# ----------------------------------------------------------------------------------------------------
# Logging
# ----------------------------------------------------------------------------------------------------


class IntervalStats:
    """What one rank accumulates between two log points."""

    def __init__(self, num_classes: int, box_dim: int) -> None:
        self.num_classes, self.box_dim = num_classes, box_dim
        self.steps = 0
        self.data_terms = torch.zeros(2, dtype=torch.float64)  # this rank's (cls, loc) parts, summed
        self.reg = 0.0  # sum over steps (the same on every rank)
        self.grad_norm = 0.0  # sum over steps (the same on every rank: DDP has summed the gradients)
        self.loc_class_dim = torch.zeros(num_classes, box_dim, dtype=torch.float64)
        self.loc_class_count = torch.zeros(num_classes, dtype=torch.float64)
        self.meter = VertexMetricsAccumulator.empty(num_classes, METRIC_BINS)
        self.started = time.perf_counter()

    def add_micro_batch(
        self, terms: Mapping[str, torch.Tensor], logits: torch.Tensor, labels: torch.Tensor
    ) -> None:
        self.data_terms += torch.stack([terms["cls"].detach(), terms["loc"].detach()]).double().cpu()
        self.loc_class_dim += terms["loc_class_dim"].double().cpu()
        self.loc_class_count += terms["loc_class_count"].double().cpu()
        probs = torch.softmax(logits.detach().float(), dim=1).cpu().numpy()
        self.meter.update(labels.cpu().numpy(), probs)

    def add_step(self, reg: float, grad_norm: float) -> None:
        self.steps += 1
        self.reg += reg
        self.grad_norm += grad_norm

    def reduce(self, dist: Dist) -> dict[str, float]:
        """Sum over ranks; the metrics of the interval, by dvclive name."""
        floats = torch.cat([self.data_terms, self.loc_class_dim.ravel(), self.loc_class_count])
        floats = dist.all_reduce_sum(floats)
        counts = dist.all_reduce_sum(torch.from_numpy(self.meter.to_array()))
        c, d, n = self.num_classes, self.box_dim, max(self.steps, 1)
        cls, loc = float(floats[0]) / n, float(floats[1]) / n
        reg = self.reg / n
        out = {"loss/total": cls + loc + reg, "loss/cls": cls, "loss/loc": loc, "loss/reg": reg}
        out["grad_norm"] = self.grad_norm / n
        loc_class_dim = floats[2 : 2 + c * d].reshape(c, d).numpy()
        loc_class_count = floats[2 + c * d :].numpy()
        meter = VertexMetricsAccumulator.from_array(counts.numpy(), c, METRIC_BINS).compute()
        dims = BOX_DIM_NAMES if d == len(BOX_DIM_NAMES) else tuple(f"d{i}" for i in range(d))
        for k in range(c):
            for name in ("recall", "precision", "pr_auc"):
                out[f"class_{k}/{name}"] = float(meter[name][k])
            if loc_class_count[k] > 0:
                per_dim = loc_class_dim[k] / loc_class_count[k]
                out[f"class_{k}/loc_loss"] = float(per_dim.mean())
                for name, value in zip(dims, per_dim, strict=True):
                    out[f"class_{k}/loc_{name}"] = float(value)
        out["time/sec_per_step"] = (time.perf_counter() - self.started) / n
        return out


def _truncate_live_history(live_dir: Path, last_step: int) -> None:
    """Drop the dvclive history rows after ``last_step`` (logged by a run killed after its checkpoint)."""
    for tsv in (live_dir / "plots" / "metrics").rglob("*.tsv"):
        with open(tsv, newline="") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        if not rows or "step" not in rows[0]:
            continue
        col = rows[0].index("step")
        kept = [rows[0]] + [r for r in rows[1:] if len(r) > col and int(r[col]) <= last_step]
        if len(kept) != len(rows):
            with atomic_open(tsv, "w") as f:
                csv.writer(f, delimiter="\t", lineterminator=os.linesep).writerows(kept)


def _open_live(live_dir: Path, resume_step: int | None) -> Any:
    from dvclive import Live

    if resume_step is not None:
        _truncate_live_history(live_dir, resume_step)
    return Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, resume=resume_step is not None)


# ----------------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------------


def _make_optimizer(params: Sequence[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    kwargs = {**OPTIMIZER_DEFAULTS[cfg.optimizer], **cfg.optimizer_kwargs}
    lr = cfg.initial_lr
    if cfg.optimizer in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, **kwargs)
    if cfg.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, **kwargs)
    return torch.optim.Adam(params, lr=lr, **kwargs)


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
    from pgnn.checkpoint import (
        checkpoint_name,
        latest_good_checkpoint,
        load_checkpoint,
        make_checkpoint,
        save_checkpoint,
    )
    from pgnn.model import PointGNN

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
        resume_path = latest_good_checkpoint(out_dir, log.warning) if dist.rank == 0 else None  # verified
        if dist.enabled:  # every rank resumes from what rank 0 saw
            shared = [str(resume_path) if resume_path else None]
            torch.distributed.broadcast_object_list(shared, src=0)
            resume_path = Path(shared[0]) if shared[0] else None
        model = PointGNN(model_cfg, generator=torch.Generator().manual_seed(train_cfg.seed))
        model.to(dist.device)
        optimizer = _make_optimizer(list(model.parameters()), train_cfg)
        step, epoch, position = 0, 0, 0
        if resume_path is not None:
            ckpt = load_checkpoint(resume_path, map_location=dist.device)
            if ckpt["model_config"] != model_cfg.model_dump(mode="json"):
                raise ValueError(f"{resume_path} holds a different model_config than this run's")
            _check_resume_configs(ckpt, train_cfg, loss_cfg, meta, resume_path)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            _set_rng_state(ckpt.get("rng", {}))
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
                    rng=_rng_state(),
                    train_config=train_cfg.model_dump(mode="json"),
                    loss_config=loss_cfg.model_dump(mode="json"),
                    num_records=num_records,
                    world_size=dist.world_size,
                    **meta,
                )
                save_checkpoint(out_dir / checkpoint_name(at_step), ckpt)
                _prune_checkpoints(out_dir, train_cfg.keep_last)

        live = None
        if dist.rank == 0 and live_dir is not None:
            live = _open_live(Path(live_dir), step if resume_path is not None else None)
        progress = None
        if dist.rank == 0:
            from tqdm import tqdm

            progress = tqdm(total=last_step, initial=step, disable=None, leave=False, unit="step")

        stats = IntervalStats(model_cfg.num_classes, model_cfg.box_encoding_len)
        model.train()
        plan = micro_batch_plan(
            num_records, train_cfg, dist.rank, dist.world_size, step, epoch, position, last_step,
            with_epoch=hasattr(records_source, "set_epoch"),
        )
        loader = _loader(RecordDataset(records_source), plan, train_cfg.num_workers)
        while step < last_step:
            micro = [next(loader).to(dist.device) for _ in range(train_cfg.accumulation_steps)]
            lr = learning_rate(step, train_cfg)
            _train_step(ddp_model, optimizer, micro, reg_params, loss_cfg, lr, dist, stats, step)
            step += 1
            step_epoch = epoch
            epoch, position = (epoch + 1, 0) if position + 1 == per_epoch else (epoch, position + 1)
            if progress is not None:
                progress.update(1)
            done = step >= last_step
            if step % train_cfg.log_every == 0 or done:
                values = stats.reduce(dist)  # a collective: every rank calls it
                if dist.rank == 0:
                    _log_interval(live, step, last_step, {**values, "lr": lr, "epoch": step_epoch})
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


def _train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    micro: Sequence[TrainBatch],
    reg_params: Sequence[torch.Tensor],
    loss_cfg: LossConfig,
    lr: float,
    dist: Dist,
    stats: IntervalStats,
    step: int,
) -> None:
    """One optimiser step over a global batch's micro-batches (this rank's share), counted into ``stats``.

    Raises ``FloatingPointError`` before the update when the gradient is not finite (the original asserted
    a finite loss): the parameters and the checkpoints on disk stay as they were. DDP has summed the
    gradients of all ranks by then, so every rank sees the same gradient and stops together.
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
            objective.backward()
        if m == 0:
            reg_value = float(terms["reg"].detach())
        seen.append(({k: v.detach() for k, v in terms.items()}, logits.detach(), batch.cls_labels))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.get_total_norm(grads))
    if not math.isfinite(grad_norm):
        raise FloatingPointError(
            f"non-finite gradient in step {step + 1} (this rank's cls {float(seen[0][0]['cls']):.4g}, "
            f"loc {float(seen[0][0]['loc']):.4g}, lr {lr:.4g}); the last checkpoint is unchanged: "
            "a smaller initial_lr may help"
        )
    optimizer.step()
    for terms, logits, labels in seen:
        stats.add_micro_batch(terms, logits, labels)
    stats.add_step(reg_value, grad_norm)


def _log_interval(live: Any, step: int, last_step: int, values: Mapping[str, float]) -> None:
    log.info(
        "step %d/%d epoch %d lr %.4g loss %.4f (cls %.4f loc %.4f reg %.4f) %.2fs/step",
        step,
        last_step,
        values["epoch"],
        values["lr"],
        values["loss/total"],
        values["loss/cls"],
        values["loss/loc"],
        values["loss/reg"],
        values["time/sec_per_step"],
    )
    if live is None:
        return
    live.step = step
    for name, value in values.items():
        if math.isfinite(value):
            live.log_metric(name, value)
    live.sync()
