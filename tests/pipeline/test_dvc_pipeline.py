"""The DVC pipeline's promises, checked in a temporary git + DVC repo on a tiny synthetic dataset.

One module-scoped repo; the tests run in file order and build on each other (fresh repro, no-op repro,
param changes, experiments, determinism, a killed run resuming).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dvcrepo import dvc_in as _dvc
from dvcrepo import run_in as _run
from dvcrepo import tool_env as _env

REPO = Path(__file__).resolve().parents[2]
COPY = ["dvc.yaml", "params.yaml", "stages", "pgnn", ".dvcignore"]
STAGES = {
    "params",
    "synth",
    "prepare@train",
    "prepare@val",
    "gt_db",
    "graphs@train",
    "graphs@val",
    "train",
    "predict",
    "evaluate",
    "plots",
}


def _ran(proc: subprocess.CompletedProcess[str]) -> set[str]:
    """Stages a `dvc repro` ran (from its "Running stage 'x':" lines)."""
    out = proc.stdout + proc.stderr
    return {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")}


def _lock_outs(repo: Path) -> dict[str, str]:
    """path -> md5 of every stage output in dvc.lock."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {o["path"]: o["md5"] for st in lock["stages"].values() for o in st.get("outs", [])}


def _set_params(repo: Path, **sections: dict) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for section, values in sections.items():
        params[section] = {**(params.get(section) or {}), **values}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dvcrepo")
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy(src, root / name)
    _set_params(
        root,
        synthetic={"frames": 4, "seed": 3, "val_fraction": 0.5},
        data={"frames_per_shard": 1, "workers": 1},
        train={"max_steps": 4, "batch_size": 1, "checkpoint_every": 2, "log_every": 2},
    )
    _run(root, "git", "init", "-q")
    _dvc(root, "init", "-q")
    _dvc(root, "config", "core.analytics", "false")
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-qm", "init")
    return root


def test_fresh_repro_runs_every_stage(repo: Path) -> None:
    proc = _dvc(repo, "repro")
    assert _ran(proc) == STAGES
    metrics = json.loads((repo / "metrics" / "eval.json").read_text())
    assert "Car/3d/moderate/R40" in metrics
    headline = json.loads((repo / "metrics" / "ap.json").read_text())
    assert list(headline["Car"]) == ["3d", "bev", "2d", "aos"]
    assert headline["Car"]["3d"] == round(metrics["Car/3d/moderate/R40"], 2)
    assert (repo / "models" / "model.pt").exists()
    images = {p.name for p in (repo / "plots" / "images").iterdir()}
    assert {"train_loss.png", "val_ap.png", "pr_Car_3d.png"} <= images, images
    assert any(name.startswith("bev_") for name in images), images
    resolved = yaml.safe_load((repo / "params.resolved.yaml").read_text())
    assert resolved["train"]["max_steps"] == 4 and resolved["model"]["num_classes"] == 6  # Car_heading
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-qm", "first run")


def test_second_repro_does_nothing(repo: Path) -> None:
    t0 = time.perf_counter()
    proc = _dvc(repo, "repro")
    seconds = time.perf_counter() - t0
    print(f"\nno-op dvc repro: {seconds:.2f} s")
    assert _ran(proc) == set()
    assert "didn't change" in proc.stdout + proc.stderr


def test_training_param_reruns_only_train_predict_evaluate(repo: Path) -> None:
    before = _lock_outs(repo)
    _set_params(repo, train={"max_steps": 6})
    proc = _dvc(repo, "repro")
    ran = _ran(proc)
    # evaluate reruns only if the predictions changed (a few steps of training may leave them identical)
    assert {"params", "train", "predict", "plots"} <= ran
    assert ran <= {"params", "train", "predict", "evaluate", "plots"}
    after = _lock_outs(repo)
    assert after["data/graphs/train"] == before["data/graphs/train"]  # graphs were not recomputed
    assert after["models/model.pt"] != before["models/model.pt"]
    diff = _dvc(repo, "params", "diff", "--md").stdout
    assert "train.max_steps" in diff and "4" in diff and "6" in diff
    assert "params.resolved.yaml" in diff  # the effective values, next to params.yaml's
    mdiff = _dvc(repo, "metrics", "diff", "--all", "--md").stdout
    assert "metrics/ap.json" in mdiff and "metrics/train.json" in mdiff and "loss.total" in mdiff, mdiff
    assert "ms_" not in mdiff and "time" not in mdiff and "eval.json" not in mdiff, mdiff  # results only


def test_a_bad_param_stops_repro_before_any_stage_with_one_line(repo: Path) -> None:
    original = (repo / "params.yaml").read_text()
    _set_params(repo, train={"max_stepz": 5})
    try:
        proc = _dvc(repo, "repro", check=False)
    finally:
        (repo / "params.yaml").write_text(original)
    assert proc.returncode != 0
    assert _ran(proc) == {"params"}
    out = proc.stdout + proc.stderr
    assert f"stages/params.py: error: {repo}/params.yaml: train.max_stepz: unknown key" in out, out
    assert "(did you mean 'max_steps'?)" in out, out
    assert "Traceback" not in out


def test_graph_param_does_not_rerun_prepare(repo: Path) -> None:
    _set_params(repo, graph={"seed": 1})
    proc = _dvc(repo, "repro")
    ran = _ran(proc)
    assert {"graphs@train", "graphs@val"} <= ran
    assert not ran & {"synth", "prepare@train", "prepare@val", "gt_db"}


def test_same_params_give_the_same_bytes(repo: Path) -> None:
    before = _lock_outs(repo)
    proc = _dvc(repo, "repro", "--force", "graphs@train", "graphs@val", "train", "predict", "evaluate")
    assert {"graphs@train", "train", "predict"} <= _ran(proc)
    after = _lock_outs(repo)
    for path in ("data/graphs/train", "data/graphs/val", "models/model.pt", "data/predictions/val"):
        assert after[path] == before[path], path


def test_experiment_shows_param_and_ap(repo: Path) -> None:
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-qm", "params")
    _dvc(repo, "exp", "run", "-S", "train.max_steps=3")
    show = _dvc(repo, "exp", "show", "--md").stdout
    assert "train.max_steps" in show and "Car.3d" in show
    header = show.splitlines()[0]
    assert header.index("Car.3d") < header.index("loss.total") < header.index("train.max_steps")  # AP first
    assert "ms_" not in header and "sec_per_step" not in header  # timings are not metrics
    # (3 steps < the 6 already trained: the run resumes the finished run, so only the params change)
    changed = _dvc(repo, "exp", "show", "--only-changed", "--md").stdout
    assert "params.resolved.yaml:train.max_steps" in changed and "ms_" not in changed


def test_killed_repro_resumes_with_the_same_hashes(repo: Path) -> None:
    _dvc(repo, "exp", "apply", "HEAD", check=False)  # back to the committed params (max_steps 6)
    _run(repo, "git", "checkout", "--", "params.yaml")
    _dvc(repo, "repro")
    reference = _lock_outs(repo)["models/model.pt"]
    ckpts = repo / "models" / "checkpoints"
    shutil.rmtree(ckpts)  # start the run from scratch so that the kill lands mid-training
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvc", "repro", "--force", "train"],
        cwd=repo,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if any(p.name.startswith("ckpt-") for p in ckpts.rglob("ckpt-*.pt")):
                break
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    proc2 = _dvc(repo, "repro")
    assert "train" in _ran(proc2)
    assert _lock_outs(repo)["models/model.pt"] == reference
