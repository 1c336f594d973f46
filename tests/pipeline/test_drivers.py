"""A result belongs to its params, whatever the driver: ``dvc repro`` and the ``pgnn-full`` Prefect flow give
the same bytes, and ``dvc exp run`` with fewer or more steps than an earlier run gives a fresh run's model.

One tiny project (the default preset, 4 synthetic frames, validation during training) is committed to a
template git repo and cloned twice: ``dvc`` runs ``dvc repro`` and then the experiments, ``flow`` runs
``python -m flows --flow full``. The tests run in file order and build on each other.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from dvcrepo import dvc_in, run_in, tool_env

from pgnn.core.io import sha256_file
from pgnn.pipeline.runner import run_in_order
from pgnn.pipeline.stages import Layout

REPO = Path(__file__).resolve().parents[2]
COPY = ["dvc.yaml", "params.yaml", "stages", "pgnn", "flows", ".dvcignore", ".gitignore"]
TINY = {
    "synthetic": {"frames": 4, "seed": 3, "val_fraction": 0.5},
    "data": {"frames_per_shard": 1, "workers": 1},
    "train": {
        "max_steps": 8,
        "batch_size": 1,
        "checkpoint_every": 2,
        "keep_last": 10,
        "log_every": 2,
        "eval_every": 4,
        "eval_frames": 1,
    },
    "plots": {"bev_frames": 1},
}
LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d\d\d) \|")


def set_params(path: Path, sections: dict) -> None:
    params = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        params[section] = {**(params.get(section) or {}), **values}
    path.write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def clones(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("drivers")
    template = base / "template"
    template.mkdir()
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, template / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, template / name)
    set_params(template / "params.yaml", TINY)
    run_in(template, "git", "init", "-q")
    dvc_in(template, "init", "-q")
    dvc_in(template, "config", "core.analytics", "false")
    run_in(template, "git", "add", "-A")
    run_in(template, "git", "commit", "-qm", "init")
    out = {}
    for name in ("dvc", "flow"):
        run_in(base, "git", "clone", "-q", str(template), name)
        out[name] = base / name
    return out


def outputs(root: Path) -> dict[str, str]:
    """sha256 of every file of every stage output in dvc.lock, and of dvc.lock itself."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    paths = {o["path"] for st in lock["stages"].values() for o in st.get("outs", [])}
    digest = {"dvc.lock": sha256_file(root / "dvc.lock")}
    for rel in sorted(paths):
        p = root / rel
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        digest |= {f.relative_to(root).as_posix(): sha256_file(f) for f in files}
    return digest


def test_dvc_repro_and_the_full_flow_give_the_same_bytes(clones: dict[str, Path]) -> None:
    dvc, flow = clones["dvc"], clones["flow"]
    dvc_in(dvc, "repro")
    env = tool_env() | {"PREFECT_HOME": str(flow / ".prefect"), "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "flows", "--flow", "full"],
        cwd=flow,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    wall = time.monotonic() - t0
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    a, b = outputs(dvc), outputs(flow)
    assert sorted(a) == sorted(b)
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, differ
    assert any("dvclive/train/plots/metrics/val/" in k for k in a)  # the validation curve is compared too
    # DVC's record is true after the flow: nothing stale, and dvc repro reruns nothing
    status = dvc_in(flow, "status")
    assert "up to date" in status.stdout, status.stdout
    repro = dvc_in(flow, "repro")
    assert "Running stage" not in repro.stdout + repro.stderr
    git_status = [run_in(root, "git", "status", "--porcelain").stdout for root in (dvc, flow)]
    assert git_status[0] == git_status[1]  # the same files written, nothing else (checkpoints are ignored)
    # no step of the flow is silent for long: the largest gap between its log lines
    seconds = [
        int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000
        for h, m, s, ms in (
            LOG_TIME.match(line).groups() for line in log.splitlines() if LOG_TIME.match(line)
        )
    ]
    gaps = [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
    print(f"flow: {wall:.1f} s, {len(seconds)} log lines, largest gap {max(gaps):.1f} s")
    assert max(gaps) < 30, f"a flow step was silent for {max(gaps):.1f} s"


def test_train_evaluate_refuses_stale_preprocessing_in_one_line(clones: dict[str, Path]) -> None:
    """The GPU pool's flow never preprocesses: a changed graph param makes graphs stale, and it says so
    before Prefect starts (the params stage, which every flow runs, is brought up to date and recorded)."""
    flow = clones["flow"]
    set_params(flow / "params.yaml", {"graph": {"seed": 5}})
    proc = subprocess.run(
        [sys.executable, "-m", "flows", "--flow", "train-evaluate"],
        cwd=flow,
        env=tool_env() | {"PREFECT_HOME": str(flow / ".prefect")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("python -m flows: error: ") and "stale upstream stages graphs@train" in line, line
    assert "Beginning flow run" not in proc.stdout + proc.stderr  # no Prefect server, no flow run
    assert dvc_in(flow, "status", "params").stdout.strip().endswith("up to date.")


def fresh_run(project: Path, dest: Path) -> dict[str, bytes]:
    """The train stage's outputs of a fresh run of ``project``'s params: its preprocessed data copied, no
    checkpoints, then ``params`` and ``train`` through the one wiring."""
    dest.mkdir()
    shutil.copy(project / "params.yaml", dest / "params.yaml")
    shutil.copytree(project / "data", dest / "data", ignore=shutil.ignore_patterns("predictions"))
    run_in_order(Layout(dest), ["params", "train"])
    return train_outputs(dest)


def train_outputs(root: Path) -> dict[str, bytes]:
    """The train stage's outputs: the model, the metric, and every dvclive file."""
    live = root / "dvclive" / "train"
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(live.rglob("*")) if p.is_file()}
    return files | {f: (root / f).read_bytes() for f in ("models/model.pt", "metrics/train.json")}


@pytest.mark.parametrize(
    ("setting", "step", "resumes_from"),
    [
        ("train.max_steps=4", 4, 4),  # fewer than the 8 of the first run: its checkpoint at 4
        ("train.max_steps=12", 12, 8),  # more: resumes from the first run's last checkpoint
        ("train.max_epoch=3", 6, 6),  # 2 train frames of batch 1: 2 steps an epoch
    ],
)
def test_exp_run_with_fewer_or_more_steps_gives_a_fresh_runs_model(
    clones: dict[str, Path], tmp_path: Path, setting: str, step: int, resumes_from: int
) -> None:
    dvc = clones["dvc"]
    if "max_epoch" in setting:
        dvc_in(dvc, "exp", "run", "-S", "train.max_steps=1000", "-S", f"+{setting}")  # + adds a new key
    else:
        proc = dvc_in(dvc, "exp", "run", "-S", setting)
        assert f"ckpt-{resumes_from:08d}.pt" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    model = torch.load(dvc / "models" / "model.pt", weights_only=True)
    assert model["step"] == step
    assert train_outputs(dvc) == fresh_run(dvc, tmp_path / "fresh")
