"""``pgnn runs`` on a real tiny git + DVC project with two experiments (tests/pipeline/fakeexp.py): the table
fits in 120 columns, shows the param that differs (and not the ones that do not), both experiments' headline
AP and their best and last validation AP read from each experiment's own commit; ``--csv``, ``--json`` and
``--plot`` give the same figures. Seed groups (fake ``dvc exp show --json`` records, fakeexp.SEED_RUNS): a
group is the experiments whose params differ in ``train.seed`` alone, one row of ``mean ± sd``, and the pairs
whose AP differs within noise are named. No KITTI data is used."""

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
from fakeexp import SEED_RUNS, expected, make_project, seed_records
from matplotlib.figure import Figure

from pgnn import cli
from pgnn.pipeline import experiments as exps
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
    experiments = [
        exps.Experiment(f"exp-{i}", f"{i}abcdef", None, params[i], {}, {"Car 3d": 50.0 + i}) for i in range(2)
    ]
    text = view.table(experiments)
    assert max(map(len, text.splitlines())) <= 120
    assert "layer_0.units" in text.splitlines()[0]  # the header keeps its last parts
    assert "differing params not shown" in text and "model.layer_29.units" in text
    wide = view.table(experiments, width=None, everything=True)
    assert "model.layer_29.units" in wide.splitlines()[0]


def test_queued_runs_null_and_absent_params_are_told_apart(tmp_path: Path) -> None:
    data = {
        "params": {"params.yaml": {"data": {"train": {"max_steps": None, "seed": 1}}}},
        "metrics": {"metrics/ap.json": {"data": {"Car": {"3d": 70.0, "bev": 80.0}}}},
    }
    waiting = exps.build_experiment(tmp_path, "waiting", "0123456789", "queued", data)  # reads no files
    assert (waiting.rev, waiting.headline, waiting.val.best()) == (
        "0123456",
        {"Car 3d": 70.0, "Car bev": 80.0},
        None,
    )
    done = exps.Experiment("done", "abcdef0", "success", {"train.max_steps": 400})
    text = view.table([waiting, done])
    head, first, second = text.splitlines()[:3]
    assert head.split()[-2:] == ["train.max_steps", "train.seed"]
    assert first.split()[:2] == ["waiting", "(queued)"] and first.split()[-2:] == ["null", "1"]
    assert second.split()[-2:] == ["400", "-"]


@pytest.fixture(scope="module")
def seed_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("seeds") / "proj"
    return root, seed_records(root)


def seed_table(
    project: tuple[Path, list[dict]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> str:
    """``pgnn runs --root ROOT ARGS`` (in this process) on the fake records of ``project``: its stdout."""
    root, records = project
    monkeypatch.setattr(exps, "exp_show", lambda where: records if where == root else pytest.fail(str(where)))
    assert cli.main(["runs", "--root", str(root), *args]) == 0
    return capsys.readouterr().out


def test_seed_groups_show_mean_and_sd_and_which_gaps_are_noise(
    seed_project: tuple[Path, list[dict]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = seed_table(seed_project, monkeypatch, capsys)
    print(out)
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120
    assert lines[0].split()[:3] == ["experiment", "rev", "n"]
    rows = {line[:12].strip(): line[12:].split() for line in lines[1:8]}
    # group 1: a-1..3 (lr 0.05, seeds 0, 1, 2); group 2: b-1..3 (lr 0.06); sample sd (n - 1)
    assert rows["group 1"][:14] == [*"3 51.00 ± 1.00 60.00 ± 0.00 50.00 ± 1.00 49.00 ± 1.00".split(), "60"]
    assert rows["group 2"][:14] == [*"3 54.00 ± 2.65 62.00 ± 1.00 53.00 ± 2.65 52.00 ± 2.65".split(), "60"]
    assert rows["group 1"][14] == "0.05" and rows["group 2"][14] == "0.06"  # the params that differ
    assert rows["main"][:4] == [rows["main"][0], "1", "11.00", "60.00"]
    # differing in train.seed alone: a-long (max_steps 100) and a-again (seed 2 again) stay rows of their own
    assert rows["a-long"][2] == "55.00" and rows["a-again"][2] == "52.50"
    assert not any(name in rows for name in ("a-1", "a-2", "a-3", "b-1", "b-2", "b-3"))
    assert "group 1 (train.seed 0,1,2): a-1, a-2, a-3" in lines
    assert "group 2 (train.seed 0,1,2): b-1, b-2, b-3" in lines
    assert any("sample sd, n-1" in line and "|mean a - mean b| <= sd a + sd b" in line for line in lines)
    noise = {
        line.split(" within noise: ")[0]: line.split(" within noise: ")[1].split(", ") for line in lines[-2:]
    }
    assert "group 1 ~ group 2" in noise["Car 3d"]  # |51 - 54| = 3 <= 1.00 + 2.65
    assert "group 1 ~ group 2" not in noise["Car bev"]  # |60 - 62| = 2 > 0.00 + 1.00
    assert "main ~ group 1" not in noise["Car 3d"]  # |11 - 51| = 40 > 1.00
    assert "main ~ group 1" in noise["Car bev"]  # a group and an experiment: |60 - 60| <= 0.00 + 0


def test_seed_groups_need_equal_params_and_leave_csv_json_per_run(
    seed_project: tuple[Path, list[dict]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(exps, "exp_show", lambda where: seed_project[1])
    experiments = exps.collect(seed_project[0])
    shown = [
        r.name if isinstance(r, exps.Experiment) else [m.name for m in r.members]
        for r in view.group_rows(experiments)
    ]
    assert shown == ["workspace", "main", "a-long", ["a-1", "a-2", "a-3"], "a-again", ["b-1", "b-2", "b-3"]]
    one = exps.Experiment("one", "0000001", None, {"train.lr": 0.05, "train.seed": 0})
    other = exps.Experiment("other", "0000002", None, {"train.lr": 0.05, "train.seed": 1, "data.root": "x"})
    queued = exps.Experiment("later", "0000003", "queued", {"train.lr": 0.05, "train.seed": 2})
    workspace = exps.Experiment("workspace", "", None, {"train.lr": 0.05, "train.seed": 5})  # a copy of one
    twin = exps.Experiment("twin", "0000004", "success", {"train.lr": 0.05, "train.seed": 3})
    # data.root differs; a queued experiment has no AP; the workspace is a copy: only one and twin are a group
    assert view.group_rows([workspace, one, other, queued, twin]) == [
        workspace,
        view.Group("1", (one, twin)),
        other,
        queued,
    ]
    flat = seed_table(seed_project, monkeypatch, capsys, "--no-groups")
    assert {line.split()[0] for line in flat.splitlines()[1:11]} == {"workspace", *SEED_RUNS}
    assert "±" not in flat
    rows = json.loads(seed_table(seed_project, monkeypatch, capsys, "--json"))
    assert {r["name"]: r["group"] for r in rows} == {
        "workspace": None,
        "main": None,
        "a-long": None,
        "a-again": None,
        **dict.fromkeys(["a-1", "a-2", "a-3"], "1"),
        **dict.fromkeys(["b-1", "b-2", "b-3"], "2"),
    }
    table = list(csv.DictReader(io.StringIO(seed_table(seed_project, monkeypatch, capsys, "--csv"))))
    assert {r["experiment"]: r["group"] for r in table}["b-3"] == "2" and len(table) == len(SEED_RUNS) + 1


def test_plot_draws_a_group_as_its_mean_with_a_band(
    seed_project: tuple[Path, list[dict]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    drawn: list[Figure] = []
    draw = compare.compare_figure
    monkeypatch.setattr(compare, "compare_figure", lambda *a, **k: drawn.append(draw(*a, **k)) or drawn[-1])
    out = tmp_path / "groups.png"
    seed_table(seed_project, monkeypatch, capsys, "main", "a-1", "a-2", "a-3", "--plot", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    val_ax = drawn[0].axes[1]
    assert [line.get_label() for line in val_ax.get_lines()] == ["main", "group 1"]
    mean = val_ax.get_lines()[1]
    assert list(mean.get_xdata()) == [20, 40, 60] and list(mean.get_ydata()) == [49.0, 50.0, 49.0]
    (band,) = val_ax.collections  # the group's ± sd (1.00 at each step); the single experiment has none
    ys = band.get_paths()[0].vertices[:, 1]
    assert (ys.min(), ys.max()) == (48.0, 51.0)
