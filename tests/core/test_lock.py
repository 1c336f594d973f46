"""pgnn/core/lock.py: one writer at a time. A second writer is refused at once with a message naming the
holder's pid; a lock left by a dead process (its pid in the file, no flock held) is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pgnn.core.lock import PROJECT_LOCK, LockedError, exclusive_lock, holder, project_lock

_HOLD = """
import sys, time
from pgnn.core.lock import exclusive_lock
with exclusive_lock(sys.argv[1], "pgnn test-holder"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder_process(lock: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lock)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / "run" / ".pgnn-lock"
    proc = _holder_process(lock)
    try:
        start = time.perf_counter()
        with pytest.raises(LockedError) as info, exclusive_lock(lock, "second"):
            pass
        assert time.perf_counter() - start < 1.0  # refused, not waiting
        assert str(info.value) == (
            f"{lock}: expected no other pgnn writer, pid {proc.pid} holds it (pgnn test-holder); "
            "wait for it to end (or stop it)"
        )
        assert holder(lock) == {"pid": proc.pid, "command": "pgnn test-holder"}  # the refusal wrote nothing
    finally:
        proc.kill()
        proc.wait()


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    proc = _holder_process(lock)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert holder(lock)["pid"] == proc.pid  # the dead holder's pid is still in the file
    with exclusive_lock(lock, "after the kill"):
        assert holder(lock) == {"pid": os.getpid(), "command": "after the kill"}


def test_a_stale_pid_in_the_file_is_information_only(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.write_text(
        json.dumps({"pid": 2**22 + 12345, "command": "a long dead pgnn train"}) + "\n" + "x" * 200
    )
    with exclusive_lock(lock, "pgnn train --params P.yaml"):
        assert holder(lock) == {
            "pid": os.getpid(),
            "command": "pgnn train --params P.yaml",
        }  # rewritten whole


def test_one_process_cannot_hold_a_lock_twice_and_it_is_released_after_the_block(tmp_path: Path) -> None:
    with project_lock(tmp_path, "first") as path:
        assert path == tmp_path / PROJECT_LOCK
        with pytest.raises(LockedError, match=f"pid {os.getpid()} holds it \\(first\\)"):
            with project_lock(tmp_path, "second"):
                pass
    with project_lock(tmp_path, "again"):  # released: taken at once
        pass
    with pytest.raises(LockedError) as info, exclusive_lock(path), exclusive_lock(path, about=tmp_path):
        pass
    assert info.value.path == str(tmp_path)  # the refusal names the folder it protects, not the lock file
