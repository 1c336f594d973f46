"""The ``pgnn`` command: dispatch, per-command help, error handling; and ``pgnn bench``'s loader."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgnn import cli
from pgnn.commands import bench
from pgnn.core.errors import DataError

REPO = Path(__file__).resolve().parents[1]
AVAILABLE = [name for name, (module, _) in cli.COMMANDS.items() if importlib.util.find_spec(module)]


def pgnn(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pgnn.cli ARGS`` with this interpreter (the venv's), in the repo root."""
    return subprocess.run(
        [sys.executable, "-m", "pgnn.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_help_lists_every_available_command() -> None:
    done = pgnn("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: pgnn")
    for name in AVAILABLE:
        assert f"\n    {name}" in done.stdout, f"{name} missing from pgnn --help"
    assert "synth" in AVAILABLE and "bench" in AVAILABLE


def test_help_shows_the_workflow_in_plain_text() -> None:
    """``pgnn --help`` ends with the workflow, naming its commands, and has no reStructuredText markup."""
    text = pgnn("--help").stdout
    assert "``" not in text
    workflow = text[text.index("workflow") :]
    for step in ("make pipeline", "dvc exp run", "pgnn runs", "pgnn train", "pgnn predict", "pgnn eval"):
        assert step in workflow, step


def test_no_arguments_prints_help() -> None:
    done = pgnn()
    assert "usage: pgnn" in done.stdout


def test_unknown_command_fails() -> None:
    done = pgnn("no-such-command")
    assert done.returncode != 0
    assert "invalid choice" in done.stderr


def test_every_command_module_is_registered() -> None:
    files = {p.stem for p in (REPO / "pgnn" / "commands").glob("*.py") if p.stem != "__init__"}
    registered = {module.rsplit(".", 1)[1] for module, _ in cli.COMMANDS.values()}
    assert files <= registered, f"command modules pgnn/cli.py does not dispatch: {sorted(files - registered)}"


@pytest.mark.parametrize("name", AVAILABLE)
def test_each_command_prints_its_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: pgnn {name}")
    assert cli.COMMANDS[name][1] in " ".join(out.split())  # the one-line description


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["inspect"])  # root and frame id missing
    assert exit_info.value.code == 2
    assert "required" in capsys.readouterr().err


def test_data_error_becomes_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "no-kitti-here"
    done = pgnn("inspect", str(missing), "000000")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pgnn inspect: error: ")
    assert str(missing) in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


# ----------------------------------------------------------------------------------------------------------
# pgnn bench


def test_bench_scripts_exist() -> None:
    for stem in bench.BENCHMARKS.values():
        assert (bench.benchmarks_dir() / f"{stem}.py").is_file(), stem
    assert bench.benchmarks_dir() == REPO / "benchmarks"


def test_load_benchmark_without_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="benchmarks/ folder"):
        bench.load_benchmark("cache_io", tmp_path / "benchmarks")
    with pytest.raises(DataError, match="expected a benchmark script"):
        bench.load_benchmark("no_such_script", tmp_path)


FAKE = """
from dataclasses import dataclass
import numpy as np

@dataclass(frozen=True)
class Row:  # a dataclass: loading must register the module in sys.modules
    ms: float

def run_benchmark(repeat: int = 1, label: str = "x") -> dict:
    return {"repeat": repeat, "label": label, "ms": np.float32(1.5), "sizes": np.arange(2)}

def format_table(result: dict) -> str:
    return f"TABLE repeat={result['repeat']} label={result['label']}"
"""


@pytest.fixture
def fake_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A benchmarks folder with a fake cache benchmark and an eval script without a run function."""
    (tmp_path / "cache_io.py").write_text(FAKE)
    (tmp_path / "eval_speed.py").write_text("def main() -> None:\n    pass\n")
    monkeypatch.setattr(bench, "benchmarks_dir", lambda: tmp_path)
    yield tmp_path
    for stem in ("cache_io", "eval_speed"):
        sys.modules.pop(f"pgnn_benchmarks_{stem}", None)


def test_bench_prints_the_table_or_json(fake_benchmarks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "cache", "--arg", "repeat=3", "--arg", "label=fast"]) == 0
    assert capsys.readouterr().out.strip() == "TABLE repeat=3 label=fast"
    assert cli.main(["bench", "cache", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {"repeat": 1, "label": "x", "ms": 1.5, "sizes": [0, 1]}


def test_bench_unknown_option_exits_2(fake_benchmarks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "cache", "--arg", "repeats=3"]) == 2
    err = capsys.readouterr().err
    assert "no option 'repeats'" in err and "repeat, label" in err


def test_bench_script_without_run_function_exits_1(
    fake_benchmarks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "eval"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run_benchmark" in err[0] and err[0].startswith("pgnn bench: error:")


def test_parse_options_reads_json_or_text() -> None:
    def fn(repeat: int = 1, frame_ids: tuple[str, ...] = (), root: str = "") -> dict:
        return {}

    opts = bench.parse_options(["repeat=4", 'frame_ids=["000000", "000114"]', "root=/data/kitti"], fn)
    assert opts == {"repeat": 4, "frame_ids": ["000000", "000114"], "root": "/data/kitti"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        bench.parse_options(["repeat"], fn)


@pytest.mark.parametrize("name", AVAILABLE)
def test_help_shows_every_default(name: str) -> None:
    """Every option whose default is a value (not None, a flag's False or []) says it in ``--help``."""
    import argparse

    _module, parser = cli.command_parser(name)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.default in (None, False, [], argparse.SUPPRESS):
            continue
        assert action.help, f"pgnn {name} {action.option_strings or action.dest}: no help"
        shown = formatter._get_help_string(action) or ""
        assert "default" in shown.lower(), f"pgnn {name} {action.option_strings or action.dest}: {shown!r}"


def test_help_text_has_the_default_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["synth", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: 0)" in out and "(default: 0.5)" in out
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: params.yaml)" in out


def test_short_frame_ids_in_frame_commands(
    kitti_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["inspect", str(kitti_sample), "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frame_id"] == "000003"
    assert cli.main(["crop", str(kitti_sample), "0", str(tmp_path / "short.bin")]) == 0
    assert cli.main(["crop", str(kitti_sample), "000000", str(tmp_path / "long.bin")]) == 0
    assert (tmp_path / "short.bin").read_bytes() == (tmp_path / "long.bin").read_bytes()
    assert cli.main(["graph", str(kitti_sample), "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["frame_id"] == "000003"
    assert cli.main(["render", str(kitti_sample), "114", str(tmp_path / "bev.png")]) == 0
    assert (tmp_path / "bev.png").stat().st_size > 0
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["inspect", str(kitti_sample), "3a"])
    assert exit_info.value.code == 2
    assert "expected a frame id of 1 to 6 digits (7 or 000007), got '3a'" in capsys.readouterr().err


def test_predict_ids_accept_short_ids(tmp_path: Path) -> None:
    from pgnn.commands.predict import parse_ids

    assert parse_ids("0,1", tmp_path) == (["000000", "000001"], None)
    assert parse_ids("000114, 7", tmp_path) == (["000114", "000007"], None)
    with pytest.raises(DataError, match="comma-separated frame ids"):
        parse_ids("0,x", tmp_path)
