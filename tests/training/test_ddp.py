"""Distributed training: 2 gloo processes under torchrun equal 1 process with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from test_loop import (
    CHILD_SCRIPT,
    LOSS,
    META,
    TINY_MODEL,
    TINY_MODEL_INIT,
    final_state,
    one_torch_thread,  # noqa: F401 (autouse fixture)
    tiny_records,
    tiny_train_config,
    write_job,
    write_records,
)

from pgnn.training.loop import train


def test_two_gloo_ranks_equal_one_process(tmp_path: Path) -> None:
    records = tiny_records(16)
    # global batch 8 per step: 2 ranks x 2 frames x 2 accumulated micro-batches vs one process x 8 frames;
    # 2 steps per epoch, so 3 steps cross an epoch boundary
    ddp_cfg = tiny_train_config(
        optimizer="momentum", initial_lr=0.05, batch_size=4, accumulation_steps=2, max_steps=3
    )
    single_cfg = ddp_cfg.model_copy(update={"batch_size": 8, "accumulation_steps": 1})

    script = tmp_path / "child.py"
    script.write_text(CHILD_SCRIPT)
    job = write_job(tmp_path / "job.json", ddp_cfg, tmp_path / "ddp", tmp_path / "live")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(script), str(write_records(records, tmp_path / "records")), str(job),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ddp = final_state(tmp_path / "ddp" / "ckpt-00000003.pt")
    assert ddp["world_size"] == 2 and ddp["step"] == 3 and (ddp["epoch"], ddp["position"]) == (1, 1)
    single_path = train(
        records, TINY_MODEL, single_cfg, LOSS, tmp_path / "single", live_dir=tmp_path / "live1", meta=META
    )
    single = final_state(single_path)
    assert single["world_size"] == 1
    for name, value in single["model"].items():
        assert not torch.equal(value, TINY_MODEL_INIT[name]) or name.endswith("bias"), name
        torch.testing.assert_close(ddp["model"][name], value, rtol=0, atol=1e-5, msg=name)
    momentum = [s["accum"] for s in single["optimizer"]["state"].values()]
    momentum_ddp = [s["accum"] for s in ddp["optimizer"]["state"].values()]
    for a, b in zip(momentum_ddp, momentum, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # rank 0 alone logged, with the losses and metrics of both ranks' vertices: the single process's numbers
    logged = json.loads((tmp_path / "live" / "metrics.json").read_text())
    expected = json.loads((tmp_path / "live1" / "metrics.json").read_text())
    assert "time" not in logged  # wall-clock figures are not results (timings/, git-ignored)
    assert logged.keys() == expected.keys() and logged["step"] == 3
    for group in ("loss", "Background", "Car_h", "Car_v"):
        for key, value in expected[group].items():
            assert abs(logged[group][key] - value) < 1e-5, (group, key)
    assert sorted((tmp_path / "ddp").iterdir()) == [
        tmp_path / "ddp" / n for n in (".pgnn-output", "ckpt-00000003.pt")
    ]
