"""Resuming: a run stopped, or killed with SIGKILL, continues bit-for-bit like a straight one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_loop import (
    LOSS,
    META,
    TINY_MODEL,
    final_state,
    one_torch_thread,  # noqa: F401 (autouse fixture)
    tiny_records,
    tiny_train_config,
)

from pgnn.nn.checkpoint import latest_checkpoint, load_checkpoint
from pgnn.training.loop import train


def assert_same_state(a: dict, b: dict) -> None:
    """Model parameters and the whole optimiser state are bit-identical."""
    assert a["step"] == b["step"] and (a["epoch"], a["position"]) == (b["epoch"], b["position"])
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and len(sa) == len(a["model"])
    for k in sa:
        for field in sa[k]:
            assert torch.equal(torch.as_tensor(sa[k][field]), torch.as_tensor(sb[k][field])), (k, field)
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]


def test_stop_and_resume_is_bit_identical(tmp_path: Path) -> None:
    records = tiny_records(8)  # 4 steps per epoch: the resumed part crosses an epoch boundary
    straight = train(
        records, TINY_MODEL, tiny_train_config(max_steps=10), LOSS, tmp_path / "straight", meta=META
    )

    out = tmp_path / "resumed"
    first = train(records, TINY_MODEL, tiny_train_config(max_steps=5), LOSS, out, meta=META)
    assert final_state(first)["step"] == 5 and (
        final_state(first)["epoch"],
        final_state(first)["position"],
    ) == (1, 1)
    stale = out / ".tmp-ckpt-00000006.pt-x1y2.pt"  # as a run killed while writing a checkpoint leaves
    stale.write_bytes(b"half")
    resumed = train(records, TINY_MODEL, tiny_train_config(max_steps=10), LOSS, out, meta=META)
    assert resumed == out / "ckpt-00000010.pt"
    assert not stale.exists()
    assert_same_state(final_state(straight), final_state(resumed))
    # a run that is already complete returns its checkpoint and does nothing
    mtime = resumed.stat().st_mtime_ns
    assert train(records, TINY_MODEL, tiny_train_config(max_steps=10), LOSS, out, meta=META) == resumed
    assert resumed.stat().st_mtime_ns == mtime


def test_momentum_sgd_with_accumulation_resumes_exactly(tmp_path: Path) -> None:
    records = tiny_records(12)
    cfg = {
        "optimizer": "momentum",
        "initial_lr": 0.05,
        "decay_step": 3,
        "decay_factor": 0.5,
        "accumulation_steps": 2,
    }
    straight = train(
        records, TINY_MODEL, tiny_train_config(max_steps=7, **cfg), LOSS, tmp_path / "a", meta=META
    )
    train(records, TINY_MODEL, tiny_train_config(max_steps=4, **cfg), LOSS, tmp_path / "b", meta=META)
    resumed = train(
        records, TINY_MODEL, tiny_train_config(max_steps=7, **cfg), LOSS, tmp_path / "b", meta=META
    )
    assert_same_state(final_state(straight), final_state(resumed))
    assert final_state(resumed)["scheduler"]["next_lr"] == pytest.approx(0.05 * 0.5**2, rel=1e-7)


def test_dvclive_history_has_no_duplicate_steps_after_resume(tmp_path: Path) -> None:
    records = tiny_records(8)
    out, live = tmp_path / "ckpt", tmp_path / "live"
    train(
        records,
        TINY_MODEL,
        tiny_train_config(max_steps=3, checkpoint_every=2, log_every=1),
        LOSS,
        out,
        live_dir=live,
        meta=META,
    )
    # simulate a kill after step 3 was logged but before its checkpoint was written
    (out / "ckpt-00000003.pt").unlink()
    assert latest_checkpoint(out) == out / "ckpt-00000002.pt"
    train(
        records,
        TINY_MODEL,
        tiny_train_config(max_steps=6, checkpoint_every=2, log_every=1),
        LOSS,
        out,
        live_dir=live,
        meta=META,
    )
    for name in ("loss/total.tsv", "lr.tsv", "Car_h/recall.tsv"):
        rows = (live / "plots" / "metrics" / name).read_text().splitlines()
        assert [int(r.split("\t")[0]) for r in rows[1:]] == [1, 2, 3, 4, 5, 6], name
    assert not (live / "plots" / "metrics" / "time").exists()  # wall-clock figures are not results


def _outputs_at(out: Path, step: int, live: Path) -> dict[str, bytes]:
    """The weights of the checkpoint at ``step`` in ``out`` and every dvclive file in ``live``."""
    files = {p.relative_to(live).as_posix(): p.read_bytes() for p in sorted(live.rglob("*")) if p.is_file()}
    ckpt = load_checkpoint(out / f"ckpt-{step:08d}.pt")
    return {**files, "weights": b"".join(t.numpy().tobytes() for t in ckpt["model"].values())}


@pytest.mark.parametrize("steps", [4, 6, 9])
def test_a_run_asked_for_n_steps_equals_a_fresh_n_step_run_whatever_ran_before(
    tmp_path: Path, steps: int
) -> None:
    """A longer run (8 steps), then another run of the same key, with another run's curves left in the
    dvclive folder: fewer steps (4: the checkpoint exists, nothing left to do; 6: restart from 4), or more
    (9: resume from 8). The weights and every dvclive file equal a fresh N-step run's."""
    records = tiny_records(8)

    def run(out: Path, live: Path, max_steps: int) -> Path:
        cfg = tiny_train_config(max_steps=max_steps, checkpoint_every=2, log_every=2, keep_last=1)
        return train(records, TINY_MODEL, cfg, LOSS, out, live_dir=live, meta=META)

    out, live = tmp_path / "ckpt", tmp_path / "live"
    run(out, live, 8)
    assert sorted(p.name for p in out.glob("ckpt-*.pt")) == ["ckpt-00000008.pt"]  # keep_last 1
    run(out, live, 4)  # nothing at or before 4: a fresh start, which keeps 8 (a later step of the same run)
    assert sorted(p.name for p in out.glob("ckpt-*.pt")) == ["ckpt-00000004.pt", "ckpt-00000008.pt"]
    run(tmp_path / "other", live, 2)  # another run writes the dvclive folder meanwhile
    final = run(out, live, steps)
    assert final == out / f"ckpt-{steps:08d}.pt" and load_checkpoint(final)["step"] == steps
    fresh_out, fresh_live = tmp_path / "fresh", tmp_path / "fresh-live"
    run(fresh_out, fresh_live, steps)
    assert _outputs_at(out, steps, live) == _outputs_at(fresh_out, steps, fresh_live)
