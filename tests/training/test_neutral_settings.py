"""The train settings that are meant not to change the weights, each shown to leave them equal.

The cases are generated from :data:`pgnn.config.training.RESUMABLE_CHANGES` (the settings left out of a run's
key, so that changing one resumes the run): a key added there without a case here fails
:func:`test_every_resumable_setting_has_a_case`. Each is checked twice: a fresh run with the other value,
and a run of the first value resumed with the other. The logging, checkpoint and validation
settings (``log_every``, ``checkpoint_every``, ``save_every_epoch``, ``eval_every``, ``eval_frames``) are in
the run key, since they shape the logged curves (results too); they are shown not to change the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_loop import LOSS, META, TINY_MODEL, tiny_records, tiny_train_config

from pgnn.config.training import RESUMABLE_CHANGES
from pgnn.nn import gemm
from pgnn.nn.checkpoint import checkpoint_name, load_checkpoint
from pgnn.nn.graph_input import collate_graphs, graph_input_from_arrays
from pgnn.training.loop import train

STEPS = 6  # 8 records, batch 2: 4 steps an epoch, so a run crosses an epoch boundary
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # setting: (train settings of the reference, the changed ones); both runs end at step STEPS
    "max_steps": ({"max_steps": STEPS}, {"max_steps": STEPS + 2}),
    "max_epoch": ({"max_steps": STEPS}, {"max_steps": None, "max_epoch": 2}),
    "keep_last": ({"checkpoint_every": 1}, {"checkpoint_every": 1, "keep_last": 1}),
    "num_workers": ({"num_workers": 0}, {"num_workers": 2}),
    "device": ({"device": "cpu"}, {"device": "auto"}),
    "train_dataset": ({}, {"train_dataset": "train_car.txt"}),
    "threads": ({"threads": 1}, {"threads": 2}),
}
"""For max_steps and max_epoch the changed run goes further; its checkpoint at step STEPS is compared."""


@pytest.fixture(autouse=True)
def split_tiny_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny model's products are below a block's minimum cost: lower it, so 2 threads do split them."""
    monkeypatch.setattr(gemm, "MIN_BLOCK_FLOPS", 1)


def weights_at(out: Path, step: int) -> dict[str, torch.Tensor]:
    return load_checkpoint(out / checkpoint_name(step))["model"]


def run(out: Path, checkpoint_at: int = STEPS, validate: Any = None, **settings: Any) -> Path:
    cfg = tiny_train_config(**{"max_steps": STEPS, **settings})
    if cfg.checkpoint_every > checkpoint_at:  # a checkpoint at STEPS to compare, whatever the run's end
        cfg = cfg.model_copy(update={"checkpoint_every": checkpoint_at})
    return train(tiny_records(8), TINY_MODEL, cfg, LOSS, out, meta=META, validate=validate)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_every_resumable_setting_has_a_case() -> None:
    assert set(CASES) == set(RESUMABLE_CHANGES)


@pytest.mark.parametrize("setting", sorted(CASES))
def test_a_resumable_setting_leaves_the_weights_equal(tmp_path: Path, setting: str) -> None:
    reference, changed = CASES[setting]
    run(tmp_path / "ref", **reference)
    expected = weights_at(tmp_path / "ref", STEPS)
    run(tmp_path / "fresh", **changed)  # a fresh run with the changed value
    assert_same(weights_at(tmp_path / "fresh", STEPS), expected)
    half = {**reference, "max_steps": STEPS // 2, "max_epoch": None}
    run(tmp_path / "resumed", checkpoint_at=STEPS // 2, **half)  # the reference setting, half way ...
    run(tmp_path / "resumed", **changed)  # ... then resumed with the changed value
    assert_same(weights_at(tmp_path / "resumed", STEPS), expected)


@pytest.mark.parametrize(
    "settings",
    [{"log_every": 1}, {"checkpoint_every": 1}, {"save_every_epoch": 1}],
    ids=lambda d: next(iter(d)),
)
def test_logging_and_checkpoint_settings_leave_the_weights_equal(tmp_path: Path, settings: dict) -> None:
    """In the run key (they shape the logged curves), but the weights are the same."""
    run(tmp_path / "a", log_every=1000)
    run(tmp_path / "b", **{"log_every": 1000, **settings})
    assert_same(weights_at(tmp_path / "a", STEPS), weights_at(tmp_path / "b", STEPS))


def test_validation_during_training_leaves_the_weights_equal(tmp_path: Path) -> None:
    """``eval_every`` / ``eval_frames``: validating runs the model in eval mode between steps; it must not
    draw from the random streams training uses, or change the model's state."""
    records = tiny_records(3, seed=1)

    def validate(model: torch.nn.Module, step: int) -> dict[str, float]:
        graph = collate_graphs([graph_input_from_arrays(r) for r in records])
        logits, _ = model(graph)
        return {"val/score": float(logits.mean())}

    run(tmp_path / "a")
    run(tmp_path / "b", validate=validate, eval_every=2, eval_frames=3)
    assert_same(weights_at(tmp_path / "a", STEPS), weights_at(tmp_path / "b", STEPS))
