"""Resuming: a run stopped, or killed with SIGKILL, continues bit-for-bit like a straight one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_loop import (
    CHILD_SCRIPT,
    LOSS,
    META,
    TINY_MODEL,
    final_state,
    one_torch_thread,  # noqa: F401 (autouse fixture)
    tiny_records,
    tiny_train_config,
    write_job,
    write_records,
)

from pgnn.nn.checkpoint import latest_checkpoint
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
    for name in ("loss/total.tsv", "lr.tsv", "Car_h/recall.tsv", "time/data_wait.tsv"):
        rows = (live / "plots" / "metrics" / name).read_text().splitlines()
        assert [int(r.split("\t")[0]) for r in rows[1:]] == [1, 2, 3, 4, 5, 6], name


def test_sigkill_mid_run_then_resume_matches_a_straight_run(tmp_path: Path) -> None:
    records = tiny_records(8)
    records_dir = write_records(records, tmp_path / "records")
    out = tmp_path / "killed"
    endless = tiny_train_config(max_steps=1_000_000, checkpoint_every=3)
    job = write_job(tmp_path / "job.json", endless, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_SCRIPT, str(records_dir), str(job)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 50
        while latest_checkpoint(out) is None:
            assert child.poll() is None, child.stdout.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 50 s"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    killed_at = final_state(latest_checkpoint(out))["step"]
    assert killed_at % 3 == 0 and killed_at < 1_000_000

    stop = killed_at + 5
    resumed = train(
        records, TINY_MODEL, tiny_train_config(max_steps=stop, checkpoint_every=3), LOSS, out, meta=META
    )
    straight = train(
        records,
        TINY_MODEL,
        tiny_train_config(max_steps=stop, checkpoint_every=3),
        LOSS,
        tmp_path / "straight",
        meta=META,
    )
    assert_same_state(final_state(straight), final_state(resumed))
