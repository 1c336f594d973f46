"""A tiny git + DVC project whose one stage fakes pgnn's training outputs from its params, for the tests of
``pgnn runs`` and of DVC's experiment queue: no pgnn code runs in it, only the paths of
:data:`pgnn.pipeline.stages.PATHS` (the ``ap`` metric file and the dvclive curves under ``live_plots``).

The fake run with ``train.lr = lr`` and ``train.max_steps = n`` logs the total loss ``1 / (1 + lr * step)``
every 10 steps and the val AP ``1000 * lr - |step - 40| / 10`` every 20 steps (best at step 40), and writes
``{"Car": {"3d": 1000 * lr + 1, "bev": 60.0}}`` to the ap file (see :func:`expected`).
"""

from __future__ import annotations

from pathlib import Path

from dvcrepo import dvc_in, run_in

from pgnn.pipeline.stages import PATHS

STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))["train"]
lr, n = p["lr"], p["max_steps"]
os.makedirs(os.path.dirname("@AP@"), exist_ok=True)
os.makedirs("@LIVE@/loss", exist_ok=True)
os.makedirs("@LIVE@/val/Car/3d", exist_ok=True)
loss = [f"{s}\\t{1 / (1 + lr * s)}\\n" for s in range(10, n + 1, 10)]
val = [f"{s}\\t{1000 * lr - abs(s - 40) / 10}\\n" for s in range(20, n + 1, 20)]
with open("@LIVE@/loss/total.tsv", "w") as f:
    f.write("step\\ttotal\\n" + "".join(loss))
with open("@LIVE@/val/Car/3d/moderate.tsv", "w") as f:
    f.write("step\\tmoderate\\n" + "".join(val))
with open("@AP@", "w") as f:
    json.dump({"Car": {"3d": 1000 * lr + 1, "bev": 60.0}}, f)
"""

DVC_YAML = """\
metrics:
- {ap}
stages:
  train:
    cmd: python train.py
    deps:
    - train.py
    params:
    - train
    outs:
    - {ap}:
        cache: false
    - {live}:
        cache: false
        persist: true
"""

PARAMS = "train:\n  lr: 0.01\n  max_steps: 60\n  seed: 7\n"


def expected(lr: float, max_steps: int = 60) -> dict[str, float]:
    """What the fake run with these params logs: headline AP, best and last val AP and their steps."""
    val = {s: 1000 * lr - abs(s - 40) / 10 for s in range(20, max_steps + 1, 20)}
    best = max(val, key=lambda s: (val[s], -s))
    last = max(val)
    return {
        "3d": 1000 * lr + 1,
        "bev": 60.0,
        "best": val[best],
        "best_step": best,
        "last": val[last],
        "last_step": last,
    }


def make_project(root: Path) -> Path:
    """The project at ``root`` (git + DVC, the baseline run done and committed with lr 0.01, 60 steps)."""
    root.mkdir(parents=True, exist_ok=True)
    stage = STAGE.replace("@AP@", PATHS["ap"]).replace("@LIVE@", PATHS["live_plots"])
    (root / "train.py").write_text(stage)
    (root / "dvc.yaml").write_text(DVC_YAML.format(ap=PATHS["ap"], live=PATHS["live_plots"]))
    (root / "params.yaml").write_text(PARAMS)
    run_in(root, "git", "init", "-q", "-b", "main")
    dvc_in(root, "init", "-q")
    dvc_in(root, "config", "core.analytics", "false")
    dvc_in(root, "repro", "-q")
    run_in(root, "git", "add", "-A")
    run_in(root, "git", "commit", "-qm", "baseline")
    return root
