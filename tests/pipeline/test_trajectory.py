"""The committed reference trajectory (pgnn/pipeline/reference_trajectory.json) is what this machine trains,
to the last bit, natively and under emulated other CPUs: ``pgnn check cpu`` in a fresh process, the way a
user checks their machine.

The emulations select other code paths of the libraries the way another CPU would: MKL held to AVX2 or SSE4.2
(``MKL_ENABLE_INSTRUCTIONS``), glibc's libm without its AVX-512, AVX2 or FMA variants (``GLIBC_TUNABLES``),
oneDNN held to AVX2 or SSE4.1, numba compiling for Haswell or a generic x86-64; and a user's own choices of
the pinned switches (``MKL_CBWR=AVX2``, ``ATEN_CPU_CAPABILITY=default`` or ``avx512``, numpy without
AVX-512), which the pin replaces. Unpinned, ``ATEN_CPU_CAPABILITY=default`` alone changes the weights after
20 steps (docs/reproducibility.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgnn.pipeline.trajectory import Trajectory, differences, load_reference

REPO = Path(__file__).resolve().parents[2]

EMULATED = {
    "avx2-machine": {
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx512",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512DQ,-AVX512VL,-AVX512BW,-AVX512CD",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "NUMBA_CPU_NAME": "haswell",
    },
    "sse-machine-own-settings": {
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "MKL_CBWR": "AVX2",
        "ATEN_CPU_CAPABILITY": "default",
        "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F,-AVX512DQ,-AVX512VL,-AVX512BW",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "NUMBA_CPU_NAME": "generic",
    },
}


def check_cpu(tmp_path: Path, steps: int | None, extra_env: dict[str, str]) -> tuple[int, Trajectory, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra_env}
    args = [sys.executable, "-m", "pgnn.cli", "check", "cpu", "--json"]
    if steps is not None:
        args += ["--steps", str(steps)]
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, Trajectory.from_json(proc.stdout), proc.stderr


def test_this_machine_trains_the_reference_trajectory(tmp_path: Path) -> None:
    reference = load_reference()
    assert sorted(reference.losses) == list(range(20, 201, 20))
    assert sorted(reference.weights_sha256) == [100, 200]
    rc, run, err = check_cpu(tmp_path, None, {})
    assert differences(run, reference) == [], err
    assert run.losses == reference.losses and run.weights_sha256 == reference.weights_sha256
    assert rc == 0


@pytest.mark.parametrize("name", sorted(EMULATED))
def test_emulated_cpus_train_the_reference_weights(tmp_path: Path, name: str) -> None:
    reference = load_reference()
    rc, run, err = check_cpu(tmp_path, 100, EMULATED[name])
    assert run.weights_sha256[100] == reference.weights_sha256[100], (name, err)
    assert {s: run.losses[s] for s in range(20, 101, 20)} == {
        s: reference.losses[s] for s in range(20, 101, 20)
    }
    assert rc == 0


def test_a_changed_loss_is_reported() -> None:
    reference = load_reference()
    changed = Trajectory(
        reference.preset,
        reference.frames,
        {**reference.losses, 40: reference.losses[40] + 1e-12},
        reference.weights_sha256,
    )
    assert differences(changed, reference) == [
        f"loss at step 40: {changed.losses[40]!r} vs reference {reference.losses[40]!r}"
    ]
    assert json.loads(changed.to_json())["losses"]["40"] == changed.losses[40]
