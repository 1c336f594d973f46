"""pgnn/core/outputs.py: pgnn writes only into folders it made (or empty / absent ones), never onto its own
inputs, replaces a lone file only when it recognises it or with --force, and replaces a folder all or nothing
(a failure, a full disk or a kill leaves the earlier folder). Also ``generate_dataset`` (``pgnn synth``) under
these rules: a full disk and a kill leave the earlier root."""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pgnn.cli import main as cli_main
from pgnn.core.errors import WriteError
from pgnn.core.lock import LockedError
from pgnn.core.outputs import (
    MARKER,
    OutputError,
    OutputPath,
    argument_paths,
    check_output_file,
    check_output_folder,
    command_inputs,
    inputs_read,
    made_by,
    replace_folder,
    starts_with,
    write_marker,
)
from pgnn.data.synthetic.dataset import generate_dataset

REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (and its folders, as "dir")."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_a_folder_may_be_replaced_when_absent_empty_or_made_by_the_same_command(tmp_path: Path) -> None:
    check_output_folder(tmp_path / "absent", "pgnn predict")
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty", "pgnn predict")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "000000.txt").write_text("Car ...\n")
    write_marker(ours, "pgnn predict")
    assert made_by(ours) == "pgnn predict"
    check_output_folder(ours, "pgnn predict")
    with pytest.raises(OutputError) as info:
        check_output_folder(ours, "pgnn synth")
    assert str(info.value) == (
        f"{ours}: expected an empty folder or one pgnn synth made (it holds pgnn predict's output, not pgnn "
        f"synth's: {MARKER}, 000000.txt); pass --force to replace it"
    )


def test_a_foreign_folder_is_refused_naming_it_and_the_flag(tmp_path: Path) -> None:
    labels = tmp_path / "training" / "label_2"
    labels.mkdir(parents=True)
    for i in range(5):
        (labels / f"{i:06d}.txt").write_text("Car 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    with pytest.raises(OutputError) as info:
        check_output_folder(labels, "pgnn predict")
    assert str(info.value) == (
        f"{labels}: expected an empty folder or one pgnn predict made (it holds 5 entries that pgnn did not "
        "make: 000000.txt, 000001.txt, 000002.txt and 2 more); pass --force to replace it"
    )
    check_output_folder(labels, "pgnn predict", force=True)  # the user says so explicitly
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="expected a folder \\(or no such path\\), got a file"):
        check_output_folder(tmp_path / "file", "pgnn predict", force=True)


def test_never_onto_an_input_even_with_force(tmp_path: Path) -> None:
    root = tmp_path / "kitti"
    (root / "training" / "label_2").mkdir(parents=True)
    scan = root / "training" / "velodyne" / "000000.bin"
    scan.parent.mkdir(parents=True)
    scan.write_bytes(b"\0" * 16)
    inputs = [root / "training", scan]
    for dest in (
        root / "training" / "label_2",
        root,
        root / "training",
        tmp_path / "kitti" / "training" / "x",
    ):
        with pytest.raises(OutputError, match="expected an output path apart from this command's inputs"):
            check_output_folder(dest, "pgnn predict", force=True, inputs=inputs)
    link = tmp_path / "link.bin"
    link.symlink_to(scan)
    hard = tmp_path / "hard.bin"
    os.link(scan, hard)
    for dest in (scan, link, hard):
        with pytest.raises(OutputError, match=f"it would overwrite {scan}; choose another path"):
            check_output_file(dest, force=True, inputs=[scan])
    check_output_folder(root / "results", "pgnn predict", inputs=inputs)  # beside the inputs: fine
    linked = tmp_path / "linked"  # a root of links to the real folders (tests/pipeline/test_train_command.py)
    (linked / "training").mkdir(parents=True)
    (linked / "training" / "label_2").symlink_to(root / "training" / "label_2")
    with pytest.raises(OutputError, match=f"it would overwrite {linked / 'training'};"):
        check_output_folder(linked / "training" / "label_2", "x", force=True, inputs=[linked / "training"])


def test_what_a_command_reads_or_names_is_an_input(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "label_2").mkdir(parents=True)
    label = theirs / "label_2" / "000000.txt"
    label.write_text("Car 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    ours = tmp_path / "ours"
    with replace_folder(ours, "pgnn test") as tmp:
        (tmp / "a.txt").write_text("first\n")
    with command_inputs():
        check_output_folder(theirs, "pgnn test", force=True)  # nothing read yet
        label.read_text()  # any reader, any option that named it
        assert inputs_read() == [label]
        for dest in (theirs, theirs / "label_2", label, tmp_path):
            with pytest.raises(OutputError, match=f"it would overwrite {label};"):
                check_output_folder(dest, "pgnn test", force=True)
        with (
            pytest.raises(OutputError, match=f"it would overwrite {label};"),
            replace_folder(tmp_path / "late", "pgnn test", force=True),
        ):
            os.link(label, tmp_path / "late.txt")  # read first, then replaced under another name
            check_output_file(tmp_path / "late.txt", force=True)
        check_output_folder(ours, "pgnn test")  # its marker, read to recognise it, is no input
        with replace_folder(ours, "pgnn test") as tmp:
            (tmp / "a.txt").write_text("second\n")
        assert (ours / "a.txt").read_text() == "second\n"
        check_output_folder(theirs / "results", "pgnn test")  # beside what it read: fine
    check_output_folder(theirs, "pgnn test", force=True)  # the command ended: its reads are forgotten

    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--subset")
    parser.add_argument("--out", action=OutputPath)
    args = parser.parse_args([str(tmp_path), "--subset", str(theirs), "--out", str(ours)])
    assert argument_paths(parser, args) == [tmp_path, theirs]
    with command_inputs(argument_paths(parser, args)):
        with pytest.raises(OutputError, match=f"it would overwrite {theirs};"):
            check_output_folder(theirs, "pgnn test", force=True)
        check_output_folder(ours, "pgnn test")  # inside an argument's folder, holding none: fine


def test_a_lone_file_is_replaced_only_when_recognised_or_forced(tmp_path: Path) -> None:
    dest = tmp_path / "out.yaml"
    check_output_file(dest)
    dest.write_text("someone: else\n")
    with pytest.raises(OutputError) as info:
        check_output_file(dest, ours=starts_with("# pgnn import-config "))
    assert str(info.value) == (
        f"{dest}: expected a new file (it exists and pgnn cannot tell it wrote it); "
        "pass --force to replace it"
    )
    check_output_file(dest, force=True)
    dest.write_text("# pgnn import-config a b: ...\n")
    check_output_file(dest, ours=starts_with("# pgnn import-config "))
    with pytest.raises(OutputError, match="expected a file path, got a folder"):
        check_output_file(tmp_path, force=True)


def test_replace_folder_is_all_or_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with replace_folder(dest, "pgnn test") as tmp:
        (tmp / "a.txt").write_text("first\n")
    assert sorted(p.name for p in dest.iterdir()) == [MARKER, "a.txt"]
    before = tree(tmp_path)
    with pytest.raises(RuntimeError), replace_folder(dest, "pgnn test") as tmp:
        (tmp / "b.txt").write_text("half\n")
        raise RuntimeError("killed half-way")
    assert tree(tmp_path) == before  # the earlier folder, no temporary sibling


def test_a_full_disk_names_the_final_file_and_leaves_the_earlier_folder(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with replace_folder(dest, "pgnn test") as tmp:
        (tmp / "a.txt").write_text("first\n")
    before = tree(tmp_path)
    with pytest.raises(WriteError) as info, replace_folder(dest, "pgnn test") as tmp:
        raise WriteError(
            tmp / "sub" / "b.bin", "cannot write it: No space left on device (errno 28)", errno=28
        )
    assert str(info.value) == (
        f"{dest / 'sub' / 'b.bin'}: cannot write it: No space left on device (errno 28); "
        f"{dest} left unchanged"
    )
    assert tree(tmp_path) == before


def test_what_a_killed_writer_left_is_tidied_only_when_pgnn_marked_it(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with replace_folder(dest, "pgnn test") as tmp:
        (tmp / "a.txt").write_text("first\n")
    stale = tmp_path / ".tmp-out-abcd1234"  # a killed run's temporary folder: marked, so pgnn's
    stale.mkdir()
    write_marker(stale, "pgnn test")
    foreign = tmp_path / ".tmp-out-zzzz9999"  # same name pattern, not pgnn's
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine\n")
    with replace_folder(dest, "pgnn test") as tmp:
        (tmp / "a.txt").write_text("second\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-out-zzzz9999", "out"]
    assert (foreign / "keep.txt").read_text() == "mine\n"
    # killed between atomic_dir's two renames: the earlier output is beside it as .old-out-*/out
    old = tmp_path / ".old-out-qwer5678"
    old.mkdir()
    dest.rename(old / "out")
    with pytest.raises(RuntimeError), replace_folder(dest, "pgnn test"):
        raise RuntimeError("fails")
    assert (dest / "a.txt").read_text() == "second\n" and not old.exists()  # put back


def test_a_second_writer_of_a_folder_is_refused_at_once(tmp_path: Path) -> None:
    dest = tmp_path / "predictions"
    with replace_folder(dest, "pgnn predict") as tmp:
        (tmp / "000000.txt").write_text("first\n")
        with pytest.raises(LockedError) as info, replace_folder(dest, "pgnn predict"):
            pass
        assert str(info.value).startswith(f"{dest}: expected no other pgnn writer, pid {os.getpid()} ")
    assert (dest / "000000.txt").read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions"]  # the lock file is elsewhere


# ----------------------------------------------------------------------------------------------------------
# pgnn synth (generate_dataset): an existing root it did not make, a full disk, a kill


def test_synth_refuses_an_existing_kitti_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "kitti"
    (root / "training" / "label_2").mkdir(parents=True)
    (root / "training" / "label_2" / "000000.txt").write_text("Car 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    (root / "ImageSets").mkdir()
    (root / "ImageSets" / "val.txt").write_text("000000\n")
    before = tree(root)
    assert cli_main(["synth", str(root), "--frames", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"pgnn synth: error: {root}: expected an empty folder or one pgnn synth made (it holds 2 entries "
        "that pgnn did not make: ImageSets/, training/); pass --force to replace it"
    ]
    assert tree(root) == before
    assert cli_main(["synth", str(root), "--frames", "1", "--force"]) == 0
    assert made_by(root) == "pgnn synth" and tree(root) != before  # replaced whole: asked for explicitly
    assert not (root / "ImageSets" / "val.txt").read_text()  # 1 frame: all in train


def test_synth_on_a_full_disk_leaves_the_earlier_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    root = tmp_path / "synthetic"
    generate_dataset(root, 1, seed=3)
    capsys.readouterr()
    before = tree(tmp_path)
    saves = []
    real_save = Image.Image.save

    def save(self: Image.Image, *args: object, **kwargs: object) -> None:
        saves.append(1)
        if len(saves) == 2:  # the second frame's image: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_save(self, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "save", save)
    assert cli_main(["synth", str(root), "--frames", "3", "--seed", "4"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pgnn synth: error: {root / 'training' / 'image_2' / '000001.png'}: cannot write it: No space left "
        f"on device (errno 28); {root} left unchanged"
    ]
    assert tree(tmp_path) == before  # the earlier root exactly: no frame of the new one, no temp folder


def test_a_killed_synth_leaves_the_earlier_root_and_the_next_run_tidies_up(tmp_path: Path) -> None:
    root = tmp_path / "synthetic"
    generate_dataset(root, 1, seed=3)
    before = tree(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pgnn.cli", "synth", str(root), "--frames", "200", "--seed", "5"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".tmp-synthetic-*/training/velodyne/*.bin")):  # half-way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith(".tmp-")} == before
    generate_dataset(root, 1, seed=6)  # the next writer removes the killed one's temporary folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synthetic"]
