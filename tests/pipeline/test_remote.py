"""The DVC remote in .dvc/config: ``local``, a folder beside the repository (``../pgnn-dvc-remote``), the
default, so ``dvc push`` in one clone and ``dvc pull`` in another clone beside it move the cached outputs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        DVC_NO_ANALYTICS="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    return env


def _run(cwd: Path, *cmd: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_the_default_remote_is_a_folder_beside_the_repo() -> None:
    dvc = (sys.executable, "-m", "dvc")
    assert _run(REPO, *dvc, "remote", "default").strip() == "local"
    # written relative to .dvc/ (../../pgnn-dvc-remote): the folder beside the repository, in any clone
    url = _run(REPO, *dvc, "config", "--project", "remote.local.url").strip()
    assert Path(url) == REPO.parent / "pgnn-dvc-remote"


def test_push_in_one_clone_pull_in_another(tmp_path: Path) -> None:
    repo = tmp_path / "pgnn"
    repo.mkdir()
    _run(repo, "git", "init", "-q")
    _run(repo, sys.executable, "-m", "dvc", "init", "-q")
    shutil.copy(REPO / ".dvc" / "config", repo / ".dvc" / "config")
    (repo / "data").mkdir()
    (repo / "data" / "blob.bin").write_bytes(os.urandom(4096))
    _run(repo, sys.executable, "-m", "dvc", "add", "-q", "data/blob.bin")
    _run(repo, "git", "add", "-A")
    _run(repo, "git", "commit", "-qm", "data")
    out = _run(repo, sys.executable, "-m", "dvc", "push")
    assert "1 file pushed" in out, out
    assert (tmp_path / "pgnn-dvc-remote" / "files" / "md5").is_dir()

    clone = tmp_path / "clone"
    _run(tmp_path, "git", "clone", "-q", str(repo), str(clone))
    assert not (clone / "data" / "blob.bin").exists()
    _run(clone, sys.executable, "-m", "dvc", "pull")
    assert (clone / "data" / "blob.bin").read_bytes() == (repo / "data" / "blob.bin").read_bytes()
