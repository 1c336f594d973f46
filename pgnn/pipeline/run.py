"""The README's main job: run the whole DVC pipeline (``dvc repro``) and print the resulting metrics.

``python -m pgnn.pipeline.run [dvc repro args...]`` sets the offline/quiet environment (no DVC or Prefect
analytics, one thread per worker; the CPU numerics and OpenMP's wait come from importing pgnn,
:mod:`pgnn.core.cpu`), puts this interpreter's ``bin/`` on
PATH so DVC's stage commands find the same ``python``, repairs a ``dvc.lock`` or ``.dvc/tmp/rwlock`` that a
killed ``dvc`` left half-written (:func:`pgnn.pipeline.lockfile.repair_lock`: one line saying what it did),
runs ``dvc repro`` and then ``dvc metrics show``. It runs on the project in the current directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pgnn.pipeline.lockfile import repair_lock

QUIET_ENV = {
    "DVC_NO_ANALYTICS": "1",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def pipeline_env() -> dict[str, str]:
    """The environment the pipeline's subprocesses run in."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env.setdefault("OMP_NUM_THREADS", "1")
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = pipeline_env()
    repair_lock(Path.cwd())
    dvc = [sys.executable, "-m", "dvc"]
    t0 = time.perf_counter()
    rc = subprocess.call([*dvc, "repro", *argv], env=env)
    print(f"dvc repro finished in {time.perf_counter() - t0:.1f} s (exit {rc})")
    if rc == 0:
        subprocess.call([*dvc, "metrics", "show"], env=env)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
