"""All-or-nothing outputs: ``pgnn predict`` replaces its folder only when every frame succeeded; ``pgnn eval``
refuses a prediction folder with missing result files unless ``--allow-missing``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pgnn.cli import main as cli_main
from pgnn.core.io import atomic_dir
from pgnn.core.outputs import write_marker
from pgnn.data.labels import read_labels, write_labels


def _root(kitti_sample: Path, tmp_path: Path, ids: tuple[str, ...]) -> Path:
    root = tmp_path / "kitti"
    for sub, ext in (("velodyne", "bin"), ("calib", "txt"), ("image_2", "png")):
        (root / "training" / sub).mkdir(parents=True)
        for frame_id in ids:
            shutil.copy(kitti_sample / "training" / sub / f"{frame_id}.{ext}", root / "training" / sub)
    return root


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_predict_replaces_its_folder_only_when_every_frame_succeeded(
    kitti_sample: Path, tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(kitti_sample, tmp_path, ("000000", "000001"))
    calib = root / "training" / "calib" / "000001.txt"
    good_calib = calib.read_text()
    calib.write_text(good_calib.replace("P2:", "P9:"))  # frame 1 cannot be read: no P2
    out = tmp_path / "predictions"
    out.mkdir()
    write_marker(out, "pgnn predict")  # an earlier pgnn predict folder (pgnn.core.outputs)
    (out / "000000.txt").write_text("previous run\n")
    (out / "000005.txt").write_text("previous run\n")
    before = _listing(out)
    argv = ["predict", "--root", str(root), "--ids", "0,1", "--checkpoint", str(tiny_checkpoint),
            "--out", str(out), "--device", "cpu", "--quiet"]  # fmt: skip
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"pgnn predict: error: {calib}: expected lines P2:")
    assert err[0].endswith(f"(frame 000001 of 2; nothing written, {out} left unchanged)")
    assert _listing(out) == before  # frame 0 succeeded, but nothing of this run landed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kitti", "predictions", "tiny.pt"]  # no temp folder

    calib.write_text(good_calib)
    assert cli_main(argv) == 0
    assert sorted(_listing(out)) == [".pgnn-output", "000000.txt", "000001.txt"]  # replaced whole: no 000005
    assert (out / "000000.txt").read_text() != "previous run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kitti", "predictions", "tiny.pt"]


def test_predict_refuses_to_replace_a_folder_it_did_not_write(
    kitti_sample: Path, tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _root(kitti_sample, tmp_path, ("000000",))
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.md").write_text("mine\n")
    argv = ["predict", "--root", str(root), "--ids", "0", "--checkpoint", str(tiny_checkpoint),
            "--out", str(out), "--device", "cpu", "--quiet"]  # fmt: skip
    assert cli_main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"pgnn predict: error: {out}: expected an empty folder or one pgnn predict made (it holds 1 entry "
        "that pgnn did not make: notes.md); pass --force to replace it"
    ]
    assert _listing(out) == {"notes.md": "mine\n"}


def test_atomic_dir_keeps_the_old_folder_on_failure(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(dest) as tmp:
        (tmp / "a.txt").write_text("new")
        raise RuntimeError("frame 2 failed")
    assert _listing(dest) == {"a.txt": "old"} and [p.name for p in tmp_path.iterdir()] == ["out"]
    with atomic_dir(dest) as tmp:
        (tmp / "b.txt").write_text("new")
    assert _listing(dest) == {"b.txt": "new"} and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_dir_of_a_path_ending_in_dot_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "out" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with atomic_dir(Path("out") / "sub" / "..") as tmp:  # its parent is not out/sub: the path means out
        (tmp / "b.txt").write_text("new")
    assert _listing(tmp_path / "out") == {"b.txt": "new"} and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_eval_refuses_missing_result_files_unless_allowed(
    kitti_sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ["000000", "000001", "000002", "000003", "000004", "000005", "000008"]
    gt, pred = tmp_path / "gt", tmp_path / "pred"
    for frame_id in ids:
        labels = read_labels(kitti_sample / "training" / "label_2" / f"{frame_id}.txt")
        write_labels(gt / f"{frame_id}.txt", labels)
    write_labels(pred / "000003.txt", [])  # an empty result file: no detections, not missing
    assert cli_main(["eval", str(gt), str(pred)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pgnn eval: error: {pred}: expected a result file for each of the 7 frames, 6 missing "
        "(000000, 000001, 000002, 000004, 000005, ...); --allow-missing counts them as no detections"
    ]
    split = tmp_path / "ids.txt"
    split.write_text("000003\n")
    assert cli_main(["eval", str(gt), str(pred), "--ids", str(split), "--classes", "Car"]) == 0
    assert cli_main(["eval", str(gt), str(pred), "--allow-missing", "--classes", "Car"]) == 0
    assert "7 frames, 0 detections" in capsys.readouterr().out
