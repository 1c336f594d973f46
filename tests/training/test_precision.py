"""``train.precision`` and ``train.compile`` (pgnn.training.precision) on CPU, on test_loop's tiny graphs.

* bf16 autocast runs a few training steps and stays near fp32: the summed loss terms within 1 % (seen: 0.09 %)
  and the weights within 2 % (relative L2 over all parameters; seen: 0.7 %) after 5 Adam steps from the same
  initialisation;
* the fp32 default is today's step bit for bit (the same weights as a step without a precision argument; the
  golden reference cases of test_train_step_reference.py check today's numbers against TF);
* fp16 on CPU is refused with a one-line ParamsError naming ``train.precision``;
* both fields are part of the training run key (they change the weights);
* ``compile``: a compiler failure falls back to eager with a warning and the eager result;
* the training loop runs bf16 with ``compile`` (its compiler failing) to a float32 checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from test_loop import LOSS, META, TINY_MODEL, final_state, tiny_records, tiny_train_config

from pgnn.config.params import Params
from pgnn.config.training import TrainConfig
from pgnn.core.errors import ParamsError
from pgnn.nn.losses import regularized_parameters
from pgnn.nn.model import PointGNN
from pgnn.nn.segment import segment_max
from pgnn.recipe.presets import apply_preset
from pgnn.training.batches import collate_records
from pgnn.training.distributed import Dist
from pgnn.training.live import IntervalStats
from pgnn.training.loop import train
from pgnn.training.precision import FP32, StepPrecision, compile_model, step_precision
from pgnn.training.source import train_run_key
from pgnn.training.step import train_step
from pgnn.training.tf1_optim import make_optimizer

CPU = torch.device("cpu")
STEPS = 5


def _run(precision: StepPrecision | None, steps: int = STEPS) -> tuple[list[float], torch.Tensor]:
    """``steps`` Adam steps of the tiny model on batches of 2 tiny frames: the losses, the final weights."""
    records = tiny_records(2 * steps)
    model = PointGNN(TINY_MODEL, generator=torch.Generator().manual_seed(0)).train()
    optimizer = make_optimizer("adam", list(model.parameters()), 0.01, {})
    dist = Dist(rank=0, world_size=1, device=CPU, owns_group=False)
    reg = regularized_parameters(model)
    losses = []
    for k in range(steps):
        batch = collate_records([(2 * k, records[2 * k]), (2 * k + 1, records[2 * k + 1])])
        stats = IntervalStats(TINY_MODEL.num_classes, TINY_MODEL.box_encoding_len)
        extra = {} if precision is None else {"precision": precision}
        train_step(model, optimizer, [batch], reg, LOSS, 0.01, dist, stats, k, **extra)
        losses.append(float(sum(stats.data_terms)))
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return losses, weights


def test_bf16_autocast_stays_near_fp32() -> None:
    fp32_losses, fp32_w = _run(step_precision("fp32", CPU))
    bf16_losses, bf16_w = _run(step_precision("bf16", CPU))
    assert bf16_w.dtype == torch.float32  # the weights stay float32
    for a, b in zip(bf16_losses, fp32_losses, strict=True):
        assert abs(a - b) <= 0.01 * abs(b), (bf16_losses, fp32_losses)
    rel = float((bf16_w - fp32_w).norm() / fp32_w.norm())
    assert 0 < rel <= 0.02  # bf16 did change the numbers (autocast ran), but only a little


def test_fp32_default_is_todays_step_bit_for_bit() -> None:
    _, default_w = _run(None)
    _, fp32_w = _run(step_precision("fp32", CPU))
    _, tf32_w = _run(step_precision("tf32", CPU))  # tf32 is fp32 on CPU
    assert torch.equal(default_w, fp32_w) and torch.equal(default_w, tf32_w)
    assert TrainConfig().precision == "fp32" and TrainConfig().compile is False
    assert step_precision("fp32", CPU) == FP32


def test_segment_max_and_losses_run_in_float32_under_autocast() -> None:
    values = torch.randn(6, 4).bfloat16()
    out = segment_max(values, torch.tensor([0, 0, 1, 1, 1, 2]), 3)
    assert out.dtype == torch.float32
    assert torch.equal(out[0], values[:2].float().amax(0))


def test_fp16_on_cpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="fp16 needs CUDA") as e:
        step_precision("fp16", CPU)
    assert e.value.key == "train.precision" and "\n" not in str(e.value)
    cfg = TrainConfig(precision="fp16", device="cpu", max_steps=1, batch_size=2, num_workers=0)
    with pytest.raises(ParamsError, match="train.precision"):
        train(tiny_records(2), TINY_MODEL, cfg, LOSS, tmp_path / "ckpt", meta=META)


def test_precision_and_compile_are_in_the_run_key(tmp_path: Path) -> None:
    recipe = apply_preset(Params())
    changes = ({}, {"precision": "bf16"}, {"precision": "tf32"}, {"compile": True})
    keys = {
        train_run_key(recipe.model_copy(update={"train": recipe.train.model_copy(update=u)}), tmp_path, {})
        for u in changes
    }
    assert len(keys) == 4


def test_compile_failure_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", lambda model, **kw: broken)
    model = torch.nn.Linear(3, 2)
    wrapped = compile_model(model, True)
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING):
        assert torch.equal(wrapped(x), model(x))
        assert torch.equal(wrapped(x), model(x))  # the second call goes straight to eager
    assert sum("torch.compile failed" in r.getMessage() for r in caplog.records) == 1
    assert wrapped.compiled is False
    assert compile_model(model, False) is model


def test_the_loop_trains_bf16_compiled_with_the_fallback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", lambda model, **kw: broken)
    cfg = tiny_train_config(max_steps=3, precision="bf16", compile=True)
    with caplog.at_level(logging.WARNING):
        final = train(tiny_records(6), TINY_MODEL, cfg, LOSS, tmp_path / "ckpt", meta=META)
    ckpt = final_state(final)
    assert ckpt["step"] == 3 and ckpt["train_config"]["precision"] == "bf16"
    assert all(v.dtype == torch.float32 for v in ckpt["model"].values() if v.is_floating_point())
    assert sum("torch.compile failed" in r.getMessage() for r in caplog.records) == 1
