"""The README's main job: run the whole DVC pipeline (``dvc repro``) and print the resulting metrics.

``python -m pgnn.pipeline.run [dvc repro args...]`` sets the offline/quiet environment (no DVC or Prefect
analytics, one thread per worker; the CPU numerics and OpenMP's wait come from importing pgnn,
:mod:`pgnn.core.cpu`), puts this interpreter's ``bin/`` on
PATH so DVC's stage commands find the same ``python``, repairs a ``dvc.lock`` or ``.dvc/tmp/rwlock`` that a
killed ``dvc`` left half-written (:func:`pgnn.pipeline.runner.dvc_record`: one line saying what it did),
runs ``dvc repro`` and then ``dvc metrics show``. It runs on the project in the current directory.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pgnn.pipeline.record import pipeline_env
from pgnn.pipeline.runner import dvc_record
from pgnn.pipeline.stages import Layout


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = pipeline_env()
    dvc_record(Path.cwd() / "params.yaml", Layout(Path.cwd()))
    dvc = [sys.executable, "-m", "dvc"]
    t0 = time.perf_counter()
    rc = subprocess.call([*dvc, "repro", *argv], env=env)
    print(f"dvc repro finished in {time.perf_counter() - t0:.1f} s (exit {rc})")
    if rc == 0:
        subprocess.call([*dvc, "metrics", "show"], env=env)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
