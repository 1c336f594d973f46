"""pgnn/training/run_folder.py: training claims its run folder (empty, or only checkpoints), marks it, and
holds its lock for the whole run; a folder of someone else's files and a second trainer are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_loop import LOSS, META, TINY_MODEL, tiny_records, tiny_train_config

from pgnn.core.lock import LockedError
from pgnn.core.outputs import OutputError, made_by
from pgnn.training.loop import train
from pgnn.training.run_folder import MAKER, is_run_folder, run_folder_lock


def test_a_legacy_run_folder_is_adopted_and_marked(tmp_path: Path) -> None:
    run = tmp_path / "abcd"
    run.mkdir()
    (run / "ckpt-00000002.pt").write_bytes(b"PK")
    (run / "ckpt-00000001.pt.corrupt").write_bytes(b"PK")  # quarantined by an earlier resume
    assert made_by(run) is None and not is_run_folder(run)
    with run_folder_lock(run):
        pass
    assert made_by(run) == MAKER and is_run_folder(run)


def test_training_refuses_a_folder_of_foreign_files(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("not a checkpoint\n")
    with pytest.raises(OutputError) as info:
        train(tiny_records(2), TINY_MODEL, tiny_train_config(max_steps=1), LOSS, out, meta=META)
    assert str(info.value) == (
        f"{out}: expected an empty folder or a pgnn training run folder (only ckpt-*.pt files), it holds 1 "
        "other entry: notes.txt; choose another checkpoint folder"
    )
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_second_trainer_of_the_same_run_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with run_folder_lock(out):
        with pytest.raises(LockedError, match=f"^{out}: expected no other pgnn writer, pid {os.getpid()}"):
            train(tiny_records(2), TINY_MODEL, tiny_train_config(max_steps=1), LOSS, out, meta=META)
    assert sorted(p.name for p in out.iterdir()) == [".pgnn-output"]  # nothing trained into it
