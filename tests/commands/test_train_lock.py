"""One writer at a time: two concurrent ``pgnn train --params P.yaml`` on one project. The second is refused
at once (one line naming the first one's pid, exit 1) and the first one's exported model equals a lone
run's, byte for byte; a stale project lock (a dead pid in ``.pgnn/lock``) is taken over.

The project is the one of ``tests/pipeline/test_train_command.py``: links to real frames of
../shared/data/kitti_sample (KITTI, CC BY-NC-SA 3.0: non-commercial use only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from pgnn.core.lock import PROJECT_LOCK, holder

REPO = Path(__file__).resolve().parents[2]
IDS = ("000000", "000001")


def tiny_project(tmp_path: Path, sample: Path) -> Path:
    root = tmp_path / "kitti"
    (root / "training").mkdir(parents=True)
    for sub in ("velodyne", "calib", "label_2", "image_2"):
        (root / "training" / sub).symlink_to(sample / "training" / sub)
    (root / "ImageSets").mkdir()
    for split in ("train", "val"):
        (root / "ImageSets" / f"{split}.txt").write_text("".join(f"{i}\n" for i in IDS))
    params = {
        "preset": "small",
        "data": {"root": "kitti", "frames_per_shard": 4, "workers": 1},
        "train": {"batch_size": 1, "checkpoint_every": 1},
    }
    path = tmp_path / "P.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


_WAITING = """
import sys
import pgnn.pipeline.standalone  # torch and the training code: the slow imports, done before the go
from pgnn.cli import main
print("ready", flush=True)
sys.stdin.readline()
sys.exit(main(sys.argv[1:]))
"""


def _cmd(params: Path) -> list[str]:
    return [sys.executable, "-m", "pgnn.cli", "train", "--params", str(params), "--max-steps", "3"]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PGNN_TORCH_THREADS": "1"}


def test_two_concurrent_trains_one_refused_the_other_equal_to_a_lone_run(
    tmp_path: Path, kitti_sample: Path
) -> None:
    params = tiny_project(tmp_path, kitti_sample)
    lock = tmp_path / PROJECT_LOCK
    lock.parent.mkdir()
    lock.write_text(json.dumps({"pid": 2**22 + 4242, "command": "a killed pgnn train"}) + "\n")  # stale

    lone = subprocess.run(_cmd(params), capture_output=True, text=True, cwd=REPO, env=ENV, timeout=300)
    assert lone.returncode == 0, lone.stderr  # the stale lock was taken over
    lone_model = (tmp_path / "models" / "model.pt").read_bytes()
    (tmp_path / "models").rename(tmp_path / "models-lone")  # the next run starts afresh (reusing the data)

    # the second one is started first and waits, torch imported, so that it runs while the first one trains
    second = subprocess.Popen(
        [sys.executable, "-c", _WAITING, *_cmd(params)[3:]],
        cwd=REPO,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert second.stdout is not None and second.stdout.readline() == "ready\n"

    first = subprocess.Popen(
        _cmd(params), cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while holder(lock).get("pid") != first.pid:  # the first one holds the project
            assert first.poll() is None and time.monotonic() < deadline, "the first run ended too soon"
            time.sleep(0.02)
        start = time.monotonic()
        second_out, second_err = second.communicate("go\n", timeout=120)
        refused_after = time.monotonic() - start
        overlapped = first.poll() is None
    finally:
        second.kill()
        out, err = first.communicate(timeout=300)
    assert overlapped, "the first run ended before the second one was refused: no overlap to test"
    assert second.returncode == 1 and second_out == ""
    assert second_err.splitlines() == [
        f"pgnn train: error: {lock}: expected no other pgnn writer, pid {first.pid} holds it (pgnn train "
        f"--params {params}); wait for it to end (or stop it)"
    ]
    assert refused_after < 30  # at once: it never waits for the first one (which was still training)
    assert first.returncode == 0, err
    assert (tmp_path / "models" / "model.pt").read_bytes() == lone_model
