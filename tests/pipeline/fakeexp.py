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


# Two seed groups of 3 and the runs that must not join them, for `pgnn runs`' spread: name -> (params, Car 3d
# AP, Car bev AP), oldest first. Group 1 (lr 0.05: a-1..3) has 3d 50, 51, 52 (51.00 ± 1.00) and bev 60 each
# (60.00 ± 0.00); group 2 (lr 0.06: b-1..3) 3d 52, 53, 57 (54.00 ± 2.65) and bev 61, 62, 63 (62.00 ± 1.00).
# So on Car 3d group 1 ~ group 2 lies within noise (3 <= 1.00 + 2.65) and group 1 ~ main (11) does not; on
# Car bev group 1 ~ group 2 does not (2 > 1.00 + 1.00) and group 1 ~ main (60) does.
SEED_RUNS: dict[str, tuple[dict[str, float | int], float, float]] = {
    "main": ({"lr": 0.01, "max_steps": 60, "seed": 0}, 11.0, 60.0),
    "b-1": ({"lr": 0.06, "max_steps": 60, "seed": 0}, 52.0, 61.0),
    "b-2": ({"lr": 0.06, "max_steps": 60, "seed": 1}, 53.0, 62.0),
    "b-3": ({"lr": 0.06, "max_steps": 60, "seed": 2}, 57.0, 63.0),
    "a-again": ({"lr": 0.05, "max_steps": 60, "seed": 2}, 52.5, 60.0),  # seed 2 again: a row of its own
    "a-1": ({"lr": 0.05, "max_steps": 60, "seed": 0}, 50.0, 60.0),
    "a-2": ({"lr": 0.05, "max_steps": 60, "seed": 1}, 51.0, 60.0),
    "a-3": ({"lr": 0.05, "max_steps": 60, "seed": 2}, 52.0, 60.0),
    "a-long": ({"lr": 0.05, "max_steps": 100, "seed": 3}, 55.0, 60.0),  # differs in max_steps too
}


def seed_val(ap3d: float, max_steps: int) -> dict[int, float]:
    """The val curve of a :data:`SEED_RUNS` run: ``ap3d - 1`` at step 40 (its best), 1 less per 20 steps."""
    return {s: ap3d - 1 - abs(s - 40) / 20 for s in range(20, max_steps + 1, 20)}


def seed_records(root: Path) -> list[dict]:
    """What ``dvc exp show --json`` says of :data:`SEED_RUNS`: the workspace (main's params and files), then
    the baseline ``main`` with its experiments, newest first; each run's dvclive val curve is committed in a
    git repository at ``root`` (one commit per run), where ``pgnn runs`` reads it. No DVC runs: only git."""
    root.mkdir(parents=True, exist_ok=True)
    run_in(root, "git", "init", "-q", "-b", "main")
    records: dict[str, dict] = {}
    for name, (train, ap3d, bev) in SEED_RUNS.items():
        val = seed_val(ap3d, int(train["max_steps"]))
        curve = root / PATHS["live_plots"] / "val" / "Car" / "3d" / "moderate.tsv"
        curve.parent.mkdir(parents=True, exist_ok=True)
        curve.write_text("step\tmoderate\n" + "".join(f"{s}\t{v}\n" for s, v in val.items()))
        run_in(root, "git", "add", "-A")
        run_in(root, "git", "commit", "-qm", name)
        rev = run_in(root, "git", "rev-parse", "HEAD").stdout.strip()
        data = {
            "params": {  # as in the pipeline: the stages' resolved keys beside params.yaml's
                "params.yaml": {"data": {"train": dict(train)}},
                "params.resolved.yaml": {"data": {"train": {**train, "decay_step": 750}}},
            },
            "metrics": {PATHS["ap"]: {"data": {"Car": {"3d": ap3d, "bev": bev}}}},
        }
        records[name] = {"rev": rev, "name": name, "data": data}
    main = records.pop("main")
    run_in(root, "git", "checkout", "-q", main["rev"], "--", ".")  # the workspace: main's files
    experiments = [{"executor": None, "name": r["name"], "revs": [r]} for r in reversed(records.values())]
    workspace = {"rev": "workspace", "name": None, "data": main["data"], "experiments": None}
    return [workspace, {**main, "experiments": experiments}]
