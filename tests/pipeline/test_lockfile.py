"""A dvc.lock (or .dvc/tmp/rwlock) left half-written by a killed dvc is detected and repaired
(pgnn/pipeline/lockfile.py), and `python -m pgnn.pipeline.run` (make pipeline) does it before `dvc repro`."""

from __future__ import annotations

from pathlib import Path

import pytest
from dvcrepo import dvc_in as _dvc
from dvcrepo import run_in as _run

from pgnn.pipeline import run
from pgnn.pipeline.lockfile import check_lock, check_rwlock, lock_text_problem, repair_lock

VALID = """\
schema: '2.0'
stages:
  a:
    cmd: python a.py
    outs:
    - path: a.txt
      hash: md5
      md5: 0cc175b9c0f1b6a831c399e269772661
      size: 1
"""

DVC_YAML = """\
stages:
  a:
    cmd: python -c "open('a.txt', 'w').write(open('src.txt').read() + 'a')"
    deps: [src.txt]
    outs: [a.txt]
  b:
    cmd: python -c "open('b.txt', 'w').write(open('a.txt').read() + 'b')"
    deps: [a.txt]
    outs: [b.txt]
"""


def test_valid_and_missing_lock_are_fine(tmp_path: Path) -> None:
    assert check_lock(tmp_path) is None  # no dvc.lock: DVC computes every stage
    (tmp_path / "dvc.lock").write_text(VALID)
    assert check_lock(tmp_path) is None
    assert repair_lock(tmp_path) == []
    assert (tmp_path / "dvc.lock").read_text() == VALID


def test_zero_byte_lock_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / "dvc.lock").write_bytes(b"")
    assert check_lock(tmp_path) == "is empty (0 bytes)"


@pytest.mark.parametrize(
    "cut",
    [
        VALID.index("hash: md5") + 2,  # "      ha": not YAML
        VALID.index("    outs:") + 12,  # "outs:" with nothing after it: not a list
        VALID.index("md5: 0cc") + 7,  # "md5: 0c": YAML, but DVC's schema wants 3+ characters
        VALID.index("  a:") + 9,  # a stage without "cmd"
        VALID.index("stages:"),  # no stages
    ],
)
def test_truncated_lock_is_corrupt(tmp_path: Path, cut: int) -> None:
    (tmp_path / "dvc.lock").write_text(VALID[:cut])
    assert check_lock(tmp_path) is not None


def test_other_garbage_is_corrupt() -> None:
    assert "not UTF-8" in lock_text_problem(b"\xff\xfe\x00schema")
    assert "mapping" in lock_text_problem(b"- a\n- b\n")
    assert "schema" in lock_text_problem(b"schema: '1.0'\nstages: {}\n")


def test_broken_lock_without_git_is_moved_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dvc.lock").write_text(VALID[:30])
    lines = repair_lock(tmp_path)
    assert len(lines) == 1 and "moved it to dvc.lock.corrupt-" in lines[0]
    assert str(tmp_path / "dvc.lock") in capsys.readouterr().err
    assert not (tmp_path / "dvc.lock").exists()
    (aside,) = tmp_path.glob("dvc.lock.corrupt-*")
    assert aside.read_text() == VALID[:30]


def test_corrupt_rwlock_is_deleted(tmp_path: Path) -> None:
    rw = tmp_path / ".dvc" / "tmp" / "rwlock"
    rw.parent.mkdir(parents=True)
    rw.write_text('{"read": {}, "write": {}}')
    assert check_rwlock(tmp_path) is None
    rw.write_text("")
    assert check_rwlock(tmp_path) is not None
    (line,) = repair_lock(tmp_path)
    assert "rwlock" in line and not rw.exists()


def test_make_pipeline_repairs_a_lock_truncated_by_a_killed_repro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny git + DVC project: commit a finished run, change the first stage's input, `dvc repro` it and
    leave dvc.lock as a SIGKILL during DVC's in-place lock write does (0 bytes); every dvc command then
    fails, and `python -m pgnn.pipeline.run` restores the committed lock and reruns what changed."""
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / "src.txt").write_text("1")
    _run(repo, "git", "init", "-q")
    _dvc(repo, "init", "-q")
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-qm", "init")
    _dvc(repo, "repro")
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-qm", "run")
    committed = (repo / "dvc.lock").read_bytes()

    (repo / "src.txt").write_text("2")
    _dvc(repo, "repro")
    (repo / "dvc.lock").write_bytes(b"")  # what a SIGKILL inside DVC's open("w+") + dump leaves
    broken = _dvc(repo, "status", check=False)
    assert broken.returncode != 0 and "dvc.lock" in broken.stdout + broken.stderr

    monkeypatch.chdir(repo)
    capsys.readouterr()
    assert run.main([]) == 0
    err = capsys.readouterr().err
    assert f"{repo / 'dvc.lock'}: is empty (0 bytes)" in err and "restored the committed version" in err
    assert check_lock(repo) is None
    assert (repo / "b.txt").read_text() == "2ab"
    assert (repo / "dvc.lock").read_bytes() != committed  # DVC recorded the new run over the restored lock
    assert _dvc(repo, "status").returncode == 0
    assert "up to date" in _dvc(repo, "status").stdout
