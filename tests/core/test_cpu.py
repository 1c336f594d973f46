"""pgnn.core.cpu: the numerics pin is set before torch and numpy load, replaces a user's own choice, and is
reported when a library loaded first. The emulated-CPU runs are in tests/pipeline/test_trajectory.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pgnn.core.cpu import OPENMP_DEFAULTS, PINNED, has_avx2, pin

REPO = Path(__file__).resolve().parents[2]
AVX2_FLAGS = "flags\t\t: fpu sse sse2 avx fma avx2 bmi2\n"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / f"cpuinfo-{len(list(tmp_path.iterdir()))}"
    path.write_text("processor\t: 0\n" + flags)
    return path


def test_pin_replaces_numerics_and_keeps_a_chosen_spin(tmp_path: Path) -> None:
    env = {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "default", "GOMP_SPINCOUNT": "5"}
    pin(env, _cpuinfo(tmp_path, AVX2_FLAGS))
    assert {k: env[k] for k in PINNED} == PINNED
    assert env["GOMP_SPINCOUNT"] == "5"
    fresh: dict[str, str] = {}
    pin(fresh, _cpuinfo(tmp_path, AVX2_FLAGS))
    assert fresh["GOMP_SPINCOUNT"] == OPENMP_DEFAULTS["GOMP_SPINCOUNT"]


def test_no_pin_on_a_cpu_without_avx2(tmp_path: Path) -> None:
    old = _cpuinfo(tmp_path, "flags\t\t: fpu sse sse2 sse4_2 avx\n")
    assert not has_avx2(old)
    assert has_avx2(_cpuinfo(tmp_path, AVX2_FLAGS))
    assert not has_avx2(tmp_path / "missing")
    env: dict[str, str] = {}
    pin(env, old)
    assert not set(PINNED) & set(env)


def _state_after(imports: str) -> str:
    code = f"{imports}\nfrom pgnn.core.cpu import pinned_state\nimport torch\ntorch.ones(3).exp()\n"
    code += "print(pinned_state())"
    env = {k: v for k, v in os.environ.items() if k not in PINNED}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_pinned_when_pgnn_comes_first_and_reported_when_numpy_came_before() -> None:
    assert _state_after("import pgnn") == "[]"
    late = _state_after("import numpy\nimport pgnn")
    assert "numpy dispatches" in late, late
