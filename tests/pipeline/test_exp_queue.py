"""DVC's experiment queue on a tiny project (tests/pipeline/fakeexp.py): two ``dvc exp run --queue -S ...``
then ``dvc queue start -j 1`` run both, and each experiment shows its own params and metrics in ``dvc exp
show --json`` (and in ``pgnn runs``). A seed sweep (``-S 'train.seed=range(8,10)'``) queues one experiment
per seed, named ``s-1``, ``s-2`` (removed before the queue starts).

DVC 3.67's queue runs a local Celery worker over a filesystem broker (kombu's, under ``.dvc/tmp/exps``):
nothing in it needs a network, and the whole test runs in a new network namespace when it can
(``unshare -n``, as root), so an attempt to reach one fails. No KITTI data is used.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from dvcrepo import run_in
from fakeexp import expected, make_project

from pgnn.pipeline.experiments import collect

QUEUED = {"q-fast": 0.05, "q-slow": 0.02}  # name -> train.lr


def offline(*cmd: str) -> tuple[str, ...]:
    """``cmd`` in a namespace with no network (only loopback, down) where this user may make one."""
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0:
        return (unshare, "-n", *cmd)
    return cmd


def dvc(root: Path, *args: str) -> str:
    return run_in(root, *offline(sys.executable, "-m", "dvc", *args)).stdout


def test_queued_experiments_run_with_their_own_params(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    for name, lr in QUEUED.items():
        dvc(root, "exp", "run", "--queue", "-n", name, "-S", f"train.lr={lr}")
    # a seed group as docs/experiments.md queues one: a hydra sweep, an experiment per seed, named s-1, s-2
    said = dvc(root, "exp", "run", "--queue", "-n", "s", "-S", "train.seed=range(8,10)")
    assert "['train.seed=8']" in said and "['train.seed=9']" in said and "'s-2'" in said, said
    dvc(root, "queue", "remove", "s-1", "s-2")  # not run here: the fake stage ignores the seed
    status = dvc(root, "queue", "status")
    assert all(f"{name}" in status for name in QUEUED) and status.count("Queued") == 2, status
    dvc(root, "queue", "start", "-j", "1")
    deadline = time.monotonic() + 60
    while True:
        status = dvc(root, "queue", "status")
        if "Queued" not in status and "Running" not in status:
            break
        assert time.monotonic() < deadline, f"queue still busy after 60 s:\n{status}"
        time.sleep(1)
    assert status.count("Success") == 2, status + dvc(root, "queue", "logs", next(iter(QUEUED)))
    shown = json.loads(dvc(root, "exp", "show", "--json"))
    found = {}
    for exp in shown[1]["experiments"]:
        for rev in exp["revs"]:
            found[rev["name"]] = rev["data"]
    assert set(found) == set(QUEUED)
    for name, lr in QUEUED.items():
        assert found[name]["params"]["params.yaml"]["data"]["train"]["lr"] == lr
        assert found[name]["metrics"]["metrics/ap.json"]["data"]["Car"]["3d"] == expected(lr)["3d"]
    experiments = {r.name: r for r in collect(root)}
    for name, lr in QUEUED.items():
        assert (experiments[name].state, experiments[name].params["train.lr"]) == ("success", lr)
        assert experiments[name].val.best() == (expected(lr)["best_step"], expected(lr)["best"])
    dvc(root, "queue", "stop")  # the idle worker exits now, not when it times out
    assert run_in(root, "git", "status", "--porcelain").stdout == ""  # the workspace was not touched
