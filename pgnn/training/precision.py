"""The numerics of a training step: autocast (``train.precision``), the fp16 grad scaler, TF32 matmuls, and
``torch.compile`` of the model (``train.compile``).

``train.precision``:

* ``fp32`` (the default): float32 everywhere, TF32 off (PyTorch's default ``"highest"`` matmul precision):
  the seed's numbers, bit for bit on CPU.
* ``tf32``: float32 tensors, matmuls in TF32 on CUDA devices of compute capability 8.0 (Ampere) and later
  (``torch.set_float32_matmul_precision("high")`` for the run); on CPU and older GPUs the same as ``fp32``.
* ``bf16``: ``torch.autocast`` to bfloat16 on CUDA and CPU; no scaler (bf16 has float32's range).
* ``fp16``: ``torch.autocast`` to float16 with a ``torch.amp.GradScaler`` (CUDA only: refused on CPU, whose
  float16 matmuls are slow and whose autocast has no scaler use). A step whose scaled gradient overflows is
  skipped and the scale halved, as ``GradScaler`` does; the scaler's state is not checkpointed, so a resumed
  fp16 run starts again at the initial scale.

Under autocast, the ops that must stay in float32 cast their inputs themselves: the max aggregation
(:func:`pgnn.nn.segment.segment_max`: its tie counts are sums of 0/1 values), the first edge layer on
coordinate differences (:func:`pgnn.nn.segment.relative_edge_layer`: coordinates and per-destination sums)
and the losses (:func:`pgnn.nn.losses.compute_loss`). Parameters and optimiser state stay float32.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pgnn.core.errors import ParamsError

log = logging.getLogger(__name__)

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None,
    "tf32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
"""The autocast dtype of each ``train.precision`` (None: no autocast)."""


@dataclass(frozen=True)
class StepPrecision:
    """How one training step computes: the autocast region of the forward pass and loss, and the scaler."""

    device_type: str
    dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The region of the forward pass and the loss: ``torch.autocast`` to ``dtype``, or nothing."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, objective: torch.Tensor) -> None:
        """``objective.backward()``, scaled by the grad scaler when there is one."""
        (self.scaler.scale(objective) if self.scaler is not None else objective).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the scale (before the gradient norm and clipping); no-op without one."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def skips(self, grad_norm: float) -> bool:
        """Whether a non-finite gradient is the scaler's overflow (then the step is skipped, not an error)."""
        return self.scaler is not None and not math.isfinite(grad_norm)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; with the scaler, its step (skipped on overflow) and its scale update."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()


FP32 = StepPrecision("cpu")
"""Plain float32 (what ``train_step`` does without a ``precision``)."""


def step_precision(precision: str, device: torch.device, source: str = "params.yaml") -> StepPrecision:
    """The :class:`StepPrecision` of ``train.precision`` on ``device``.

    Raises ``ParamsError`` (``train.precision``) for fp16 on a device other than CUDA.
    """
    if precision not in AUTOCAST_DTYPES:
        raise ParamsError(
            source, f"expected one of {sorted(AUTOCAST_DTYPES)}, got {precision!r}", key="train.precision"
        )
    if precision == "fp16" and device.type != "cuda":
        raise ParamsError(
            source,
            f"expected fp32, tf32 or bf16 on {device.type} (fp16 needs CUDA and its grad scaler), got fp16",
            key="train.precision",
        )
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    return StepPrecision(device.type, AUTOCAST_DTYPES[precision], scaler)


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device) -> Iterator[None]:
    """TF32 matmuls for the duration (``"high"``) when ``precision`` is ``tf32`` on CUDA; else unchanged.

    Restores the previous setting on exit (it is process-wide).
    """
    if precision != "tf32" or device.type != "cuda":
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class _EagerFallback(torch.nn.Module):
    """``torch.compile(module)`` that falls back to ``module`` itself, with one warning, when compiling
    fails on the first call (the compiled and the eager module share their parameters)."""

    def __init__(self, module: torch.nn.Module, compiled: Callable[..., Any]) -> None:
        super().__init__()
        self.module = module
        self._compiled: Callable[..., Any] | None = compiled

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._compiled is not None:
            try:
                return self._compiled(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 (any compiler failure: fall back to eager)
                log.warning(
                    "train.compile: torch.compile failed (%s: %s); training eagerly", type(e).__name__, e
                )
                self._compiled = None
        return self.module(*args, **kwargs)

    @property
    def compiled(self) -> bool:
        """False once compiling has failed and the module runs eagerly."""
        return self._compiled is not None

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync`` of the wrapped module (accumulation micro-batches)."""
        return self.module.no_sync()


def compile_model(model: torch.nn.Module, enabled: bool) -> torch.nn.Module:
    """``model`` compiled with ``torch.compile(dynamic=True)`` (every batch has its own vertex and edge
    counts) when ``enabled``, falling back to eager with a warning if compiling fails; else ``model``."""
    if not enabled:
        return model
    return _EagerFallback(model, torch.compile(model, dynamic=True))
