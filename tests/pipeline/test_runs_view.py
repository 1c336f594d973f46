"""``pgnn runs`` on a real tiny git + DVC project with two experiments (tests/pipeline/fakeexp.py): the table
fits in 120 columns, shows the param that differs (and not the ones that do not), both experiments' headline
AP and their best and last validation AP read from each experiment's own commit; ``--csv``, ``--json`` and
``--plot`` give the same figures. No KITTI data is used."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dvcrepo import dvc_in, tool_env
from fakeexp import expected, make_project
from matplotlib.figure import Figure

from pgnn import cli
from pgnn.pipeline import runs as view
from pgnn.viz import compare

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = {"fast": 0.05, "slow": 0.02}  # name -> train.lr (the baseline has 0.01)


def pgnn_runs(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pgnn.cli runs --root ROOT ARGS`` from this checkout (its pgnn first on the path)."""
    env = tool_env() | {"PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pgnn.cli", "runs", "--root", str(root), *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(tmp_path_factory.mktemp("runs") / "proj")
    for name, lr in EXPERIMENTS.items():
        dvc_in(root, "exp", "run", "-q", "-n", name, "-S", f"train.lr={lr}")
    return root


def test_table_fits_120_columns_and_shows_what_differs(project: Path) -> None:
    done = pgnn_runs(project)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    print(done.stdout)
    assert max(map(len, lines)) <= 120
    header = lines[0].split()
    assert header[:2] == ["experiment", "rev"]
    assert "train.lr" in header  # the param that differs ...
    assert "train.seed" not in lines[0] and "train.max_steps" not in lines[0]  # ... and only it
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.split()[0] in (*EXPERIMENTS, "main")}
    assert set(rows) == {*EXPERIMENTS, "main"}
    for name, lr in {**EXPERIMENTS, "main": 0.01}.items():
        want = expected(lr)
        row = rows[name]
        assert len(row[1]) == 7  # the short rev
        assert row[2:4] == [f"{want['3d']:.2f}", f"{want['bev']:.2f}"]
        assert row[4:6] == [f"{want['best']:.2f}", f"({want['best_step']})"]
        assert row[6:8] == [f"{want['last']:.2f}", f"({want['last_step']})"]
        assert row[8] == "60"  # steps
        assert row[9] == str(lr)
    assert any(line.startswith("workspace") for line in lines)


def test_json_and_csv_carry_the_same_figures(project: Path) -> None:
    done = pgnn_runs(project, "fast", "slow", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert set(rows) == set(EXPERIMENTS)
    for name, lr in EXPERIMENTS.items():
        want = expected(lr)
        assert rows[name]["ap"] == {"Car 3d": want["3d"], "Car bev": want["bev"]}
        assert rows[name]["val"]["best"] == {"step": want["best_step"], "ap": want["best"]}
        assert rows[name]["val"]["last"] == {"step": want["last_step"], "ap": want["last"]}
        assert rows[name]["params"] == {"train.lr": lr}
    done = pgnn_runs(project, "fast", "slow", "--csv")
    table = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["experiment"] for r in table] == list(rows)
    assert {r["experiment"]: float(r["val best"]) for r in table} == {
        n: expected(lr)["best"] for n, lr in EXPERIMENTS.items()
    }


def test_plot_overlays_the_shown_experiments(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Figure] = []
    draw = compare.compare_figure

    def keep(*args: Any, **kwargs: Any) -> Figure:  # the figure the command draws, kept for the asserts
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(compare, "compare_figure", keep)
    for key, value in tool_env().items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "compare.png"
    assert cli.main(["runs", "--root", str(project), "fast", "slow", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    loss_ax, val_ax = fig.axes
    for ax in (loss_ax, val_ax):
        assert [line.get_label() for line in ax.get_lines()] == ["slow", "fast"]  # DVC's order: newest first
    for line in val_ax.get_lines():
        want = expected(EXPERIMENTS[str(line.get_label())])
        assert max(line.get_ydata()) == want["best"] and line.get_ydata()[-1] == want["last"]


def test_unknown_experiment_and_not_a_project_are_one_line_errors(project: Path, tmp_path: Path) -> None:
    done = pgnn_runs(project, "no-such-run")
    assert done.returncode == 1 and "no-such-run" in done.stderr
    done = pgnn_runs(tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("pgnn runs: error: ")
    assert "Traceback" not in done.stderr


def test_params_that_do_not_fit_are_named_not_cut() -> None:
    params = [{f"model.layer_{k}.units": 100 * k + i for k in range(30)} for i in range(2)]
    runs = [view.Run(f"exp-{i}", f"{i}abcdef", None, params[i], {}, {"Car 3d": 50.0 + i}) for i in range(2)]
    text = view.table(runs)
    assert max(map(len, text.splitlines())) <= 120
    assert "layer_0.units" in text.splitlines()[0]  # the header keeps its last parts
    assert "differing params not shown" in text and "model.layer_29.units" in text
    wide = view.table(runs, width=None, everything=True)
    assert "model.layer_29.units" in wide.splitlines()[0]


def test_queued_runs_null_and_absent_params_are_told_apart(tmp_path: Path) -> None:
    data = {
        "params": {"params.yaml": {"data": {"train": {"max_steps": None, "seed": 1}}}},
        "metrics": {"metrics/ap.json": {"data": {"Car": {"3d": 70.0, "bev": 80.0}}}},
    }
    waiting = view.build_run(tmp_path, "waiting", "0123456789", "queued", data)  # reads no files
    assert (waiting.rev, waiting.headline, waiting.val.best()) == (
        "0123456",
        {"Car 3d": 70.0, "Car bev": 80.0},
        None,
    )
    done = view.Run("done", "abcdef0", "success", {"train.max_steps": 400})
    text = view.table([waiting, done])
    head, first, second = text.splitlines()[:3]
    assert head.split()[-2:] == ["train.max_steps", "train.seed"]
    assert first.split()[:2] == ["waiting", "(queued)"] and first.split()[-2:] == ["null", "1"]
    assert second.split()[-2:] == ["400", "-"]
