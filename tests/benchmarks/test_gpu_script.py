"""``benchmarks/gpu.py --device cpu --tiny``: the prepared device check runs end to end on CPU, writes JSON.

Its golden section reads ``pointgnn_reference/train_step`` and its frames are synthetic (the full check also
reads the KITTI sample, CC BY-NC-SA 3.0, non-commercial use only). Every section must be there, every figure
finite, the training-step figures positive, CPU-vs-CPU agreement exact, the projection consistent with the
measured rate, and no figure over its bound (the exit status says the same).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("golden", "agree", "step", "painted", "infer")


def test_gpu_script_tiny_on_cpu(pointgnn_reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PGNN_SHARED": str(pointgnn_reference.parents[1]),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "gpu.py"),
        "--device",
        "cpu",
        "--tiny",
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["tiny"] is True

    rows = result["rows"]
    assert {r["section"] for r in rows} == set(SECTIONS)
    assert all(r["value"] is not None and math.isfinite(r["value"]) for r in rows)
    assert all(r["ok"] is not False for r in rows)
    assert all(r["ok"] is True for r in rows if r["section"] in ("golden", "agree"))
    printed = proc.stdout.splitlines()
    assert sum(line.startswith(SECTIONS) for line in printed) == len(rows)  # one table, a line a figure

    assert result["golden"]["case_a"]["loss_rel"] <= 1e-4 and result["golden"]["case_a"]["grad_rel"] <= 1e-3
    assert result["agree"]["weights_rel"] == 0.0 and result["agree"]["loss_rel"] == 0.0
    steps = {s["variant"]: s for s in result["step"]}
    assert set(steps) == {"fp32", "bf16"}
    assert all(s["ms"] > 0 and s["peak_mb"] > 0 and s["batch_size"] == 2 for s in steps.values())
    painted = result["painted"]
    assert painted["steps_per_s"] > 0 and 0.0 <= painted["data_wait_share"] < 1.0 and painted["workers"] == 1
    hours = result["projection"]["hours"]
    assert hours == 245_000 / painted["steps_per_s"] / 3600
    stages = result["infer"]["mean_ms"]
    assert set(stages) == {"read", "graph", "gnn", "decode", "nms", "total"}
    assert stages["total"] >= stages["gnn"] > 0 and result["infer"]["frames"] == 1
