"""pgnn/errors.py: picklable errors (process pools), one-line user errors (CLI, stage scripts), write errors
naming their file (pgnn/io.py)."""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pgnn.core.io
from pgnn import cli
from pgnn.config.params import Params, load_params
from pgnn.core.errors import DataError, ParamsError, PgnnError, WriteError, one_line, user_errors
from pgnn.core.io import atomic_path, write_text_atomic
from pgnn.core.shards import run_plan
from pgnn.data.prepare import prepare_plan
from pgnn.graphs.npzstore import save_npz
from pgnn.recipe.presets import apply_preset

REPO = Path(__file__).resolve().parents[2]


def _subclasses(cls: type) -> list[type]:
    return [cls] + [s for sub in cls.__subclasses__() for s in _subclasses(sub)]


# ----------------------------------------------------------------------------------------------------------
# pickling: an error raised in a pool worker reaches the parent whole


def test_every_pgnn_error_pickles_with_its_fields() -> None:
    classes = _subclasses(PgnnError)
    assert {DataError, ParamsError, WriteError} <= set(classes)
    for cls in classes:
        kwargs = {"key": "train.initial_lr"} if issubclass(cls, ParamsError) else {}
        kwargs |= {"errno": errno.ENOSPC} if issubclass(cls, WriteError) else {}
        error = cls("some/file.txt", "expected x, got y", 7, **kwargs)
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is cls
        assert (back.path, back.message, back.line, str(back)) == (error.path, error.message, 7, str(error))
        assert vars(back) == vars(error)
    assert str(ParamsError("params.yaml", "bad", key="data.workers")) == "params.yaml: data.workers: bad"
    write = pickle.loads(pickle.dumps(WriteError("o.bin", "cannot write it", errno=errno.ENOSPC)))
    assert (
        isinstance(write, OSError) and write.errno == errno.ENOSPC and str(write) == "o.bin: cannot write it"
    )


def _copy_frames(kitti_sample: Path, root: Path, ids: tuple[str, ...]) -> Path:
    """A KITTI root with ``ids`` (their velodyne scans, calibs, images, labels) and no split files."""
    src = kitti_sample / "training"
    for sub, ext in (("velodyne", "bin"), ("calib", "txt"), ("image_2", "png"), ("label_2", "txt")):
        (root / "training" / sub).mkdir(parents=True, exist_ok=True)
        for frame_id in ids:
            shutil.copy(src / sub / f"{frame_id}.{ext}", root / "training" / sub / f"{frame_id}.{ext}")
    return root


def test_two_worker_prepare_raises_the_workers_data_error(kitti_sample: Path, tmp_path: Path) -> None:
    root = _copy_frames(kitti_sample, tmp_path / "kitti", ("000000", "000001", "000002"))
    bad = root / "training" / "label_2" / "000001.txt"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join([lines[0], " ".join(lines[1].split()[:14]), *lines[2:]]) + "\n")
    plan = prepare_plan(root, ["000000", "000001", "000002"], tmp_path / "prepared", frames_per_shard=1)
    with pytest.raises(DataError) as info:  # was: TypeError (missing 'message') + BrokenProcessPool
        run_plan(plan, workers=2, log=None)
    assert (info.value.path, info.value.line) == (str(bad), 2)
    assert "expected 15 fields, got 14" in str(info.value)


_UNPICKLABLE_WORKER_ERROR = """
import sys, threading
from pathlib import Path
from pgnn.core.shards import ShardPlan, ShardTask, run_plan

if sys.argv[2] == "tblib":  # what importing dask or distributed does: exceptions pickle with their chain
    from tblib import pickling_support
    pickling_support.install()

class TwoArgError(Exception):
    def __init__(self, a, b):  # pickles as cls(text): unpickling fails in the parent
        super().__init__(f"{a} {b}")
        self.held = threading.Lock()  # and a lock never pickles, even with tblib's support

def failing_build(task, path):
    raise TwoArgError("half", "way")

tasks = tuple(ShardTask(f"shard-{i}.npz", (f"{i:06d}",), f"k{i}") for i in range(2))
try:
    run_plan(ShardPlan(Path(sys.argv[1]), tasks, failing_build, "graphs", {}, "c"), workers=2, log=None)
except Exception as e:
    print(f"{type(e).__name__}: {e}")
"""


@pytest.mark.parametrize("pickling", ["plain", "tblib"])
def test_an_unpicklable_worker_error_still_names_its_shard(tmp_path: Path, pickling: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _UNPICKLABLE_WORKER_ERROR, str(tmp_path), pickling],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # was, with tblib: BrokenProcessPool (the replacement RuntimeError carried the original as its context)
    assert re.fullmatch(r"RuntimeError: building .*shard-\d\.npz: TwoArgError: half way\n", done.stdout)


# ----------------------------------------------------------------------------------------------------------
# one line, exit 1, traceback only when asked


def _pgnn(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgnn.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PGNN_DEBUG": "", **(env or {})},
    )


def test_cli_data_error_is_one_line_and_pgnn_debug_shows_the_traceback(
    kitti_sample: Path, tmp_path: Path
) -> None:
    root = _copy_frames(kitti_sample, tmp_path / "kitti", ("000000",))
    calib = root / "training" / "calib" / "000000.txt"
    lines = calib.read_text().splitlines()
    calib.write_text("\n".join([*lines[:2], lines[2].rsplit(" ", 1)[0], *lines[3:]]) + "\n")  # P2: 11 numbers
    out = tmp_path / "out.bin"
    done = _pgnn("crop", str(root), "000000", str(out))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"pgnn crop: error: {calib}:3: expected 12 numbers after 'P2:', got 11"
    ]
    assert done.stdout == "" and not out.exists()
    debug = _pgnn("crop", str(root), "000000", str(out), env={"PGNN_DEBUG": "1"})
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert f"pgnn.core.errors.DataError: {calib}:3: expected 12 numbers" in debug.stderr


def test_cli_debug_flag_reraises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGNN_DEBUG", raising=False)
    missing = tmp_path / "nowhere"
    assert cli.main(["inspect", str(missing), "000000"]) == 1
    with pytest.raises(DataError, match="nowhere"):
        cli.main(["--debug", "inspect", str(missing), "000000"])
    with pytest.raises(DataError, match="nowhere"):
        cli.main(["inspect", str(missing), "000000", "--debug"])


def test_user_errors_reports_user_errors_and_passes_bugs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGNN_DEBUG", raising=False)
    with user_errors("pgnn x") as outcome:
        open(tmp_path / "missing.txt")  # a missing file names itself
    assert outcome.exit_code == 1
    assert (
        capsys.readouterr().err == f"pgnn x: error: {tmp_path / 'missing.txt'}: No such file or directory\n"
    )
    with user_errors("pgnn x") as outcome:
        raise DataError("f.txt", "expected a\nmultiline\nthing", 3)
    assert capsys.readouterr().err == "pgnn x: error: f.txt:3: expected a; multiline; thing\n"
    with pytest.raises(ZeroDivisionError), user_errors("pgnn x"):
        _ = 1 / 0  # a bug keeps its traceback
    monkeypatch.setenv("PGNN_DEBUG", "1")
    with pytest.raises(DataError), user_errors("pgnn x"):
        raise DataError("f.txt", "bad")
    assert one_line(WriteError("o.npz", "cannot write it: No space left on device")) == (
        "o.npz: cannot write it: No space left on device"
    )


def test_params_errors_name_the_file_and_key(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("data:\n  workers: 0\n")
    with pytest.raises(ParamsError) as info:
        load_params(params)
    assert info.value.key == "data.workers" and "\n" not in str(info.value)
    assert str(info.value).startswith(f"{params}: data.workers: Input should be greater than or equal to 1")
    params.write_text("data:\n  wrokers: 2\n")
    with pytest.raises(ParamsError, match=r"params.yaml: data.wrokers: unknown key"):
        load_params(params)
    with pytest.raises(ParamsError, match=r"params.yaml: train.initial_lr: Input should be greater than 0"):
        apply_preset(Params(train={"initial_lr": -1.0}))
    with pytest.raises(ParamsError, match=r"params.yaml: preset: unknown preset 'nope'"):
        apply_preset(Params(preset="nope"))


def test_stage_script_reports_a_params_error_in_one_line(tmp_path: Path) -> None:
    """The ``params`` stage validates params.yaml before any other stage; a stage run without its output
    says so in one line."""
    shutil.copytree(REPO / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "params.yaml").write_text("synthetic:\n  frames: 1\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PGNN_DEBUG": ""}
    run = [sys.executable, str(tmp_path / "stages" / "params.py")]
    done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"stages/params.py: error: {tmp_path / 'params.yaml'}: synthetic.frames: "
        "Input should be greater than or equal to 2, got 1"
    ]
    assert not (tmp_path / "params.resolved.yaml").exists()
    debug = subprocess.run(run, capture_output=True, text=True, env={**env, "PGNN_DEBUG": "1"}, timeout=120)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ParamsError" in debug.stderr
    synth = [sys.executable, str(tmp_path / "stages" / "synth.py")]
    done = subprocess.run(synth, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"stages/synth.py: error: {tmp_path / 'params.resolved.yaml'}: missing: run `dvc repro params` (or "
        "`python stages/params.py`) first"
    ]
    assert not (tmp_path / "data").exists()


# ----------------------------------------------------------------------------------------------------------
# a full disk names the file being written


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_during_an_npz_write_names_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    import numpy as np

    monkeypatch.setattr(zipfile.ZipFile, "writestr", _no_space)  # either way of writing a member
    monkeypatch.setattr(zipfile.ZipFile, "open", _no_space)
    dest = tmp_path / "graphs" / "shard-0003.npz"
    with pytest.raises(WriteError) as info:
        save_npz(dest, {"a": np.zeros(3)})
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    assert str(info.value) == f"{dest}: cannot write it: No space left on device (errno 28)"
    assert list(dest.parent.iterdir()) == []  # neither the shard nor a temp file


class _FullFile:
    def __init__(self, path: str | Path, mode: str = "r") -> None:
        self.path = path

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_during_a_text_write_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "metrics" / "eval.json"
    dest.parent.mkdir()
    dest.write_text("previous\n")
    monkeypatch.setattr(pgnn.core.io, "open", _FullFile, raising=False)
    with user_errors("pgnn eval") as outcome:
        write_text_atomic(dest, "new\n")
    assert outcome.exit_code == 1 and isinstance(outcome.error, WriteError)
    err = capsys.readouterr().err
    assert err == f"pgnn eval: error: {dest}: cannot write it: No space left on device (errno 28)\n"
    assert dest.read_text() == "previous\n" and sorted(p.name for p in dest.parent.iterdir()) == ["eval.json"]


def test_an_input_error_inside_an_atomic_write_keeps_its_own_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info, atomic_path(tmp_path / "out.txt"):
        open(tmp_path / "input.txt")
    assert not isinstance(info.value, WriteError) and info.value.filename == str(tmp_path / "input.txt")
