"""What training logs: interval statistics (losses, vertex metrics, timings) to dvclive and the log."""

from __future__ import annotations

import csv
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from pgnn.core.io import atomic_open, write_json_atomic
from pgnn.training.distributed import Dist
from pgnn.training.metrics import VertexMetricsAccumulator

log = logging.getLogger(__name__)

METRIC_BINS = 1000
BOX_DIM_NAMES = ("x", "y", "z", "l", "h", "w", "ry")


def class_labels(names: tuple[str, ...]) -> tuple[str, ...]:
    """Metric names of the class ids: the label method's names, an object's two yaw classes as ``Car_h`` and
    ``Car_v`` (e.g. ("Background", "Car", "Car", "DontCare") -> Background, Car_h, Car_v, DontCare)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        k = seen.get(name, 0)
        seen[name] = k + 1
        out.append(name if names.count(name) == 1 else f"{name}_{'hv'[k] if k < 2 else k}")
    return tuple(out)


class IntervalStats:
    """What one rank accumulates between two log points (``labels``: the metric name of each class id)."""

    def __init__(self, num_classes: int, box_dim: int, labels: tuple[str, ...] | None = None) -> None:
        self.num_classes, self.box_dim = num_classes, box_dim
        self.labels = labels or tuple(f"class_{k}" for k in range(num_classes))
        if len(self.labels) != num_classes:
            raise ValueError(f"expected {num_classes} class labels, got {self.labels}")
        self.data_wait = 0.0  # seconds this rank waited for batches
        self.compute = 0.0  # seconds of forward, backward and update
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

    def add_time(self, data_wait: float, compute: float) -> None:
        self.data_wait += data_wait
        self.compute += compute

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
                out[f"{self.labels[k]}/{name}"] = float(meter[name][k])
            if loc_class_count[k] > 0:
                per_dim = loc_class_dim[k] / loc_class_count[k]
                out[f"{self.labels[k]}/loc_loss"] = float(per_dim.mean())
                for name, value in zip(dims, per_dim, strict=True):
                    out[f"{self.labels[k]}/loc_{name}"] = float(value)
        out["time/sec_per_step"] = (time.perf_counter() - self.started) / n
        out["time/data_wait"] = self.data_wait / n
        out["time/compute"] = self.compute / n
        return out


TIME_PREFIX = "time/"
"""Interval values that are wall-clock figures: logged to the log and the timings file, never to dvclive
(whose files are results: two runs of the same params write the same bytes)."""


def _metric_files(live_dir: Path) -> list[Path]:
    root = live_dir / "plots" / "metrics"
    return sorted(root.rglob("*.tsv")) if root.is_dir() else []


def live_history(live_dir: Path) -> dict[str, str]:
    """The run's dvclive curves: ``{path relative to live_dir: TSV text}`` (saved in every checkpoint)."""
    return {p.relative_to(live_dir).as_posix(): p.read_text() for p in _metric_files(live_dir)}


def truncate_live_history(live_dir: Path, last_step: int) -> None:
    """Drop the dvclive history rows after ``last_step`` (for checkpoints saved before they held the
    history)."""
    for tsv in _metric_files(live_dir):
        with open(tsv, newline="") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        if not rows or "step" not in rows[0]:
            continue
        col = rows[0].index("step")
        kept = [rows[0]] + [r for r in rows[1:] if len(r) > col and int(r[col]) <= last_step]
        if len(kept) != len(rows):
            with atomic_open(tsv, "w") as f:
                csv.writer(f, delimiter="\t", lineterminator=os.linesep).writerows(kept)


def restore_live(live_dir: Path, step: int, history: Mapping[str, str] | None) -> None:
    """Make ``live_dir`` hold the curves of the checkpoint at ``step``: its saved history (whatever another
    run left in the folder), or, for a checkpoint without one, the folder's rows up to ``step``."""
    if history is None:
        truncate_live_history(live_dir, step)
        return
    if live_dir.exists():
        shutil.rmtree(live_dir)
    for rel, text in history.items():
        path = live_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_summary(live_dir: Path, step: int) -> None:
    """``live_dir/metrics.json`` from the curves: each metric's last value, nested by its path, and ``step``.

    Written from the TSV files rather than kept from dvclive's session, so that it is the same for an
    uninterrupted run and one resumed (or one that had nothing left to do)."""
    summary: dict[str, Any] = {"step": step}
    root = live_dir / "plots" / "metrics"
    for tsv in _metric_files(live_dir):
        with open(tsv, newline="") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        if len(rows) < 2:
            continue
        header, last = rows[0], rows[-1]
        value = float(last[header.index(tsv.stem)])
        *parents, name = tsv.relative_to(root).with_suffix("").parts
        node = summary
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = value
    write_json_atomic(live_dir / "metrics.json", summary)


def open_live(live_dir: Path, resume: bool) -> Any:
    """dvclive's ``Live`` on ``live_dir``: a fresh one (clearing the folder) or, with ``resume``, one that
    appends to the curves :func:`restore_live` put there."""
    from dvclive import Live

    return Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, resume=resume)


Validator = Callable[[torch.nn.Module, int], Mapping[str, float]]
"""``validate(model, step)``: metrics of the model on held-out frames (``{"val/Car/3d/moderate": ...}``)."""


def log_values(live: Any, step: int, values: Mapping[str, float], quiet: bool = False) -> None:
    """Log named values at ``step`` (to the log unless ``quiet``, and to dvclive when ``live`` is open;
    wall-clock values, ``time/...``, never go to dvclive)."""
    if not quiet:
        log.info("step %d: %s", step, ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
    if live is None:
        return
    live.step = step
    for name, value in values.items():
        if math.isfinite(value) and not name.startswith(TIME_PREFIX):
            live.log_metric(name, value)
    live.sync()


def log_interval(live: Any, step: int, last_step: int, values: Mapping[str, float]) -> None:
    log.info(
        "step %d/%d epoch %d lr %.4g loss %.4f (cls %.4f loc %.4f reg %.4f) %.2fs/step (data wait %.3fs)",
        step,
        last_step,
        values["epoch"],
        values["lr"],
        values["loss/total"],
        values["loss/cls"],
        values["loss/loc"],
        values["loss/reg"],
        values["time/sec_per_step"],
        values.get("time/data_wait", 0.0),
    )
    log_values(live, step, values, quiet=True)
