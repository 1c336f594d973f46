"""Shared by the pipeline tests that drive git and DVC in a temporary repository: the environment (this
interpreter's bin first on PATH, analytics off, one thread, a git identity) and command runners that fail with
the command's output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        DVC_NO_ANALYTICS="1",
        DO_NOT_TRACK="1",
        OMP_NUM_THREADS="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    return env


def run_in(
    repo: Path, *cmd: str, check: bool = True, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in ``repo``; with ``check``, an AssertionError holding its output when it fails."""
    proc = subprocess.run(cmd, cwd=repo, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc_in(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``python -m dvc <args>`` in ``repo`` (this interpreter's DVC)."""
    return run_in(repo, sys.executable, "-m", "dvc", *args, check=check)
