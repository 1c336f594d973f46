"""``pgnn checkpoints --prune`` removes only pgnn run folders by their own marker and content, each under its
lock: a project's ``.git``, ``data`` and ``src`` beside them (or inside a run folder) stay byte-identical."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from pgnn.cli import main as cli_main
from pgnn.core.lock import exclusive_lock
from pgnn.core.outputs import lock_path
from pgnn.training.run_folder import is_run_folder, run_folder_lock


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def run_folder(root: Path, key: str, step: int, age: float) -> Path:
    """A run folder as training leaves it (claimed: its marker), its checkpoint ``age`` s old."""
    with run_folder_lock(root / key) as folder:
        ckpt = folder / f"ckpt-{step:08d}.pt"
        ckpt.write_bytes(b"PK\x05\x06" + b"\0" * 18)
        t = time.time() - age
        os.utime(ckpt, (t, t))
    return folder


def project(root: Path) -> Path:
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "data").mkdir()
    (root / "data" / "frames.bin").write_bytes(b"\1" * 32)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('mine')\n")
    return root


def test_prune_keeps_everything_that_is_not_a_pgnn_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "proj")
    old = run_folder(root, "aaaa1111", 2, age=100)
    new = run_folder(root, "bbbb2222", 4, age=10)
    mixed = run_folder(root, "cccc3333", 1, age=200)
    (mixed / "notes.txt").write_text("the user put this here\n")  # no longer only checkpoints
    legacy = root / "dddd4444"  # checkpoints, but no marker
    legacy.mkdir()
    (legacy / "ckpt-00000001.pt").write_bytes(b"PK")
    os.utime(legacy / "ckpt-00000001.pt", (time.time() - 300, time.time() - 300))
    kept = {k: v for k, v in tree(root).items() if not k.startswith("aaaa1111")}
    assert [is_run_folder(p) for p in (old, new, mixed, legacy)] == [True, True, False, False]

    assert cli_main(["checkpoints", str(root), "--prune"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"removed {old}" in out
    assert f"left {mixed}: not a pgnn run folder (it holds notes.txt)" in out
    assert f"left {legacy}: not a pgnn run folder (it has no .pgnn-output marker)" in out
    assert not old.exists() and tree(root) == kept  # .git, data, src, the others: byte-identical


def test_prune_of_a_project_root_without_runs_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "proj")
    before = tree(root)
    assert cli_main(["checkpoints", str(root), "--prune"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"pgnn checkpoints: error: {root}: expected a folder of pgnn training runs (<key>/ with ckpt-*.pt "
        "and .pgnn-output), it holds none; nothing removed"
    ]
    assert tree(root) == before


def test_prune_refuses_a_run_that_is_being_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "checkpoints"
    busy = run_folder(root, "aaaa1111", 2, age=100)
    run_folder(root, "bbbb2222", 4, age=10)
    with exclusive_lock(lock_path(busy), "pgnn train --params P.yaml"):
        assert cli_main(["checkpoints", str(root), "--prune"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pgnn checkpoints: error: {busy}: expected no other pgnn writer, pid {os.getpid()} holds it "
        "(pgnn train --params P.yaml); wait for it to end (or stop it)"
    ]
    assert (busy / "ckpt-00000002.pt").is_file()
