"""Every ``pgnn`` sub-command that takes an output path, run against a folder of someone else's files (a fake
``.git/``, a KITTI root's labels, calibs, scans, images and ImageSets, sources, a ``params.yaml``): each is
refused with one clear line and a non-zero exit, and every file is byte-identical afterwards.

The cases are keyed by ``pgnn.cli.COMMANDS``: a command that is neither swept nor listed as writing nothing
fails the test, and so does an output option (its help says it writes, or deletes) that no case exercises.
The frame is one real KITTI frame of ../shared/data/kitti_sample (KITTI, CC BY-NC-SA 3.0: non-commercial).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pgnn.cli import COMMANDS, command_parser
from pgnn.cli import main as cli_main

# command -> why it has no output path
WRITES_NOTHING = {
    "inspect": "prints JSON or a table",
    "graph": "prints JSON or a table",
    "bench": "prints the table or --json to stdout",
    "check": "prints a summary or --json to stdout",
}

Case = Callable[[Path], list[str]]

# (command, output options it exercises (argparse dests), argv against the foreign root F)
CASES: list[tuple[str, set[str], Case]] = [
    ("synth", {"out_dir"}, lambda f: ["synth", str(f), "--frames", "1"]),
    ("synth", {"out_dir"}, lambda f: ["synth", str(f / ".git"), "--frames", "1"]),
    ("crop", {"out"}, lambda f: ["crop", str(f), "0", str(f / "training" / "velodyne" / "000000.bin")]),
    ("crop", {"out"}, lambda f: ["crop", str(f), "0", str(f / "params.yaml")]),
    ("render", {"out"}, lambda f: ["render", str(f), "0", str(f / "training" / "image_2" / "000000.png")]),
    ("render", {"out"}, lambda f: ["render", str(f), "0", str(f / "src" / "tool.py")]),
    ("eval", {"json_out"}, lambda f: ["eval", *_labels(f), "--json", str(_labels(f)[0] + "/000000.txt")]),
    ("eval", {"json_out"}, lambda f: ["eval", *_labels(f), "--json", str(f / "params.yaml")]),
    ("eval", {"curves"}, lambda f: ["eval", *_labels(f), "--curves", str(f / "ImageSets")]),
    ("eval", {"curves"}, lambda f: ["eval", *_labels(f), "--curves", str(f / "training")]),
    ("import-weights", {"out"}, lambda f: ["import-weights", _in(f, "src/tool.py"), _in(f, "params.yaml")]),
    ("import-weights", {"out"}, lambda f: ["import-weights", _in(f, "src/w.npz"), _in(f, "src/w.npz")]),
    ("import-config", {"out"}, lambda f: ["import-config", *_configs(f), "--out", _in(f, "params.yaml")]),
    ("import-config", {"out"}, lambda f: ["import-config", *_configs(f), "--out", _in(f, "src/tool.py")]),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f / "training" / "label_2"))),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f / "training" / "calib"))),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f / "ImageSets"))),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f))),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f / ".git"))),
    ("predict", {"out"}, lambda f: _predict(f, "--out", str(f / "src"), "--force")),  # --force: not the ckpt
    ("predict", {"timings_json"}, lambda f: _predict(f, "--out", _in(f, "x"), "--timings-json", f"{f}/a.md")),
    ("train", {"params"}, lambda f: ["train", "--params", str(f / "params.yaml")]),
    ("checkpoints", {"prune"}, lambda f: ["checkpoints", str(f), "--prune"]),
    ("checkpoints", {"prune"}, lambda f: ["checkpoints", str(f / "data"), "--prune"]),
    ("dvc-yaml", {"out"}, lambda f: ["dvc-yaml", "--out", str(f / "params.yaml")]),
    ("detect", {"out"}, lambda f: _detect(f, "--out", str(f / "training" / "label_2"))),
    ("detect", {"out"}, lambda f: _detect(f, "--out", str(f / "training"))),  # holds the input scan
    ("detect", {"out"}, lambda f: _detect(f, "--out", str(f / "src"), "--force")),  # --force: not the ckpt
    ("convert", {"dest"}, lambda f: ["convert", str(f / "data"), str(f / "training" / "label_2")]),
    ("convert", {"dest"}, lambda f: ["convert", str(f), str(f / "ImageSets"), "--force"]),  # in its input
    ("view", {"out"}, lambda f: ["view", "--root", str(f), "0", "--out", str(f / "training" / "calib")]),
    ("view", {"out"}, lambda f: ["view", "--root", str(f), "0", "--out", str(f / ".git"), "--force"]),
    ("export", {"out"}, lambda f: ["export", _in(f, "src/w.npz"), _in(f, "src/tool.py")]),
    ("export", {"out"}, lambda f: ["export", _in(f, "src/w.npz"), _in(f, "src/w.npz"), "--force"]),
    ("runs", {"plot"}, lambda f: ["runs", "--root", str(f), "--plot", _in(f, "a.md")]),
]  # fmt: skip

# output options written inside another one's output (covered with it)
WRITTEN_INSIDE = {("predict", "png"): "out", ("detect", "kitti"): "out", ("detect", "png"): "out"}

_WRITES = re.compile(r"\b(write|delete|to write|folder for)\b(?! nothing)", re.IGNORECASE)


def _in(f: Path, rel: str) -> str:
    return str(f / rel)


def _labels(f: Path) -> list[str]:
    return [str(f / "training" / "label_2"), str(f / "training" / "label_2")]


def _configs(f: Path) -> list[str]:
    return [str(f / "src" / "config.json"), str(f / "src" / "config.json")]


def _predict(f: Path, *extra: str) -> list[str]:
    checkpoint = f / "src" / "w.npz"
    return ["predict", "--checkpoint", str(checkpoint), "--root", str(f), "--ids", "0", *extra]


def _detect(f: Path, *extra: str) -> list[str]:
    scan = f / "training" / "velodyne" / "000000.bin"
    return ["detect", str(scan), "--checkpoint", str(f / "src" / "w.npz"), *extra]


def foreign_root(dest: Path, kitti_sample: Path) -> Path:
    """A KITTI root with one real frame, plus a fake .git, sources, a data/ folder and a params.yaml."""
    for sub, ext in (("velodyne", "bin"), ("calib", "txt"), ("image_2", "png"), ("label_2", "txt")):
        (dest / "training" / sub).mkdir(parents=True)
        shutil.copy(kitti_sample / "training" / sub / f"000000.{ext}", dest / "training" / sub)
    (dest / "ImageSets").mkdir()
    for split in ("train", "val", "trainval"):
        (dest / "ImageSets" / f"{split}.txt").write_text("000000\n")
    (dest / ".git" / "objects" / "ab").mkdir(parents=True)
    (dest / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (dest / ".git" / "objects" / "ab" / "cdef0123").write_bytes(b"x\x9c\x01\x02")
    (dest / "src").mkdir()
    (dest / "src" / "tool.py").write_text("print('mine')\n")
    (dest / "src" / "config.json").write_text('{"mine": true}\n')
    (dest / "src" / "w.npz").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (dest / "data" / "raw").mkdir(parents=True)
    (dest / "data" / "raw" / "drive_0001.bin").write_bytes(b"\1" * 64)
    (dest / "params.yaml").write_text("model: resnet50\nlearning_rate: 0.1\n")
    (dest / "a.md").write_text("# my notes\n")
    return dest


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def foreign(tmp_path: Path, kitti_sample: Path) -> Path:
    return foreign_root(tmp_path / "theirs", kitti_sample)


def test_every_command_is_swept_or_writes_nothing() -> None:
    swept = {name for name, _, _ in CASES}
    assert set(COMMANDS) == swept | set(WRITES_NOTHING), "add a case for the new command"
    assert not swept & set(WRITES_NOTHING)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_output_option_is_exercised(name: str) -> None:
    _, parser = command_parser(name)
    actions = list(parser._actions)
    subparsers = parser._subparsers._group_actions if parser._subparsers else []
    for action in subparsers:  # pgnn check's sub-commands
        for sub in getattr(action, "choices", {}).values():
            actions += sub._actions
    outputs = {a.dest for a in actions if a.help and _WRITES.search(a.help)}
    covered = {dest for n, dests, _ in CASES if n == name for dest in dests}
    covered |= {dest for (n, dest) in WRITTEN_INSIDE if n == name}
    assert outputs <= covered, (
        f"pgnn {name}: output options without a foreign-folder case: {outputs - covered}"
    )
    if name in WRITES_NOTHING:
        assert not outputs, f"pgnn {name} has output options {outputs}: sweep it"


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_foreign_files_are_never_touched(
    index: int, foreign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, _, argv = CASES[index]
    args = argv(foreign)
    before = tree(foreign.parent)
    code = cli_main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0, f"pgnn {' '.join(args)} succeeded"
    assert len(err) == 1 and err[0].startswith(f"pgnn {name}: error: "), err
    assert tree(foreign.parent) == before  # byte-identical, nothing added or removed
