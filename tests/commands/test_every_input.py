"""Nothing a command reads is ever replaced, whatever option names it (issue #28: ``pgnn view --subset``
outside the root let ``--out ... --force`` replace the label files it had just read).

The walk: for every sub-command of ``pgnn.cli.COMMANDS`` (its parser as the cli builds it), every argument
that takes a string or a path is pointed at a file or folder of its own (``in-<dest>/``; a valid input where
the command has one, see ``VALID``), and each of the command's outputs (its ``OutputPath`` arguments) at that
same path and at the folder holding it, with ``--force``. Each run must be refused in one line, and the
input folder keep every byte. A new argument is walked without being listed here; a command with no output
argument is listed in ``NO_OUTPUT`` with the reason. Synthetic data only (``pgnn synth``, one frame) and a
tiny random checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TINY_MODEL, save_random_checkpoint

from pgnn.cli import COMMANDS, command_parser
from pgnn.cli import main as cli_main
from pgnn.core.outputs import OutputPath

# command -> why it has no output argument to point at an input
NO_OUTPUT = {
    "inspect": "prints JSON or a table",
    "graph": "prints JSON or a table",
    "bench": "prints the table or --json",
    "check": "prints a summary or --json",
    "train": "writes the stage outputs of its --params project (docs/outputs.md), under the project lock",
    "checkpoints": "--prune deletes only pgnn run folders by marker and content (test_checkpoints_prune.py)",
}


class Materials:
    """Valid inputs, each made on demand in a folder of its own: ``<tmp>/in-<dest>/<name>``."""

    def __init__(self, tmp: Path, synth_root: Path, checkpoint: Path) -> None:
        self.tmp, self.synth, self.ckpt = tmp, synth_root, checkpoint

    def folder(self, dest: str) -> Path:
        path = self.tmp / f"in-{dest}"
        path.mkdir(exist_ok=True)
        return path

    def copy(self, dest: str, src: Path, name: str | None = None) -> str:
        target = self.folder(dest) / (name or src.name)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, target)
        return str(target)

    def text(self, dest: str, name: str, text: str) -> str:
        target = self.folder(dest) / name
        target.write_text(text)
        return str(target)

    def root(self, dest: str = "root") -> str:
        return self.copy(dest, self.synth, "kitti")

    def training(self, dest: str, sub: str = "") -> str:
        return self.copy(dest, self.synth / "training" / sub if sub else self.synth / "training")

    def frame_file(self, dest: str, sub: str, ext: str) -> str:
        return self.copy(dest, self.synth / "training" / sub / f"000000.{ext}")

    def checkpoint(self, dest: str = "checkpoint") -> str:
        return self.copy(dest, self.ckpt)

    def split(self, dest: str) -> str:
        return self.text(dest, "split.txt", "000000\n")


Valid = dict[str, Callable[[Materials], object]]

# command -> the values of a run that would succeed (dest -> value; a string or a list for nargs="+"); the
# inputs among them are made by Materials in their own folder. The outputs are set by the walk.
VALID: dict[str, list[Valid]] = {
    "synth": [{"frames": lambda m: "1"}],
    "crop": [{"root": Materials.root, "frame_id": lambda m: "0", "subset": lambda m: m.training("subset")}],
    "render": [{"root": Materials.root, "frame_id": lambda m: "0", "subset": lambda m: m.training("subset")}],
    "eval": [
        {
            "gt_dir": lambda m: m.training("gt_dir", "label_2"),
            "pred_dir": lambda m: m.training("pred_dir", "label_2"),
            "ids": lambda m: m.split("ids"),
        }
    ],
    "import-weights": [
        {
            "weights": lambda m: m.text("weights", "w.npz", "PK"),
            "config": lambda m: m.text("config", "c.json", "{}"),
        }
    ],
    "import-config": [
        {
            "config": lambda m: m.text("config", "c.json", "{}"),
            "train_config": lambda m: m.text("train_config", "t.json", "{}"),
        }
    ],
    "predict": [
        {"checkpoint": Materials.checkpoint, "root": Materials.root, "ids": lambda m: m.split("ids")},
        {
            "checkpoint": Materials.checkpoint,
            "bin": lambda m: m.frame_file("bin", "velodyne", "bin"),
            "calib": lambda m: m.frame_file("calib", "calib", "txt"),
            "image": lambda m: m.frame_file("image", "image_2", "png"),
            "label": lambda m: m.frame_file("label", "label_2", "txt"),
        },
    ],
    "dvc-yaml": [{}],
    "detect": [
        {
            "files": lambda m: [m.frame_file("files", "velodyne", "bin")],
            "checkpoint": Materials.checkpoint,
            "sensor": lambda m: m.text("sensor", "front.yaml", "field_of_view: 90.0\n"),
        }
    ],
    "convert": [{"src": lambda m: m.training("src")}],
    "view": [
        {
            "root": Materials.root,
            "ids": lambda m: ["0"],
            "split": lambda m: m.split("split"),
            "subset": lambda m: m.training("subset"),
            "checkpoint": Materials.checkpoint,
        }
    ],
    "export": [{"checkpoint": Materials.checkpoint}],
    "runs": [{"root": lambda m: str(m.folder("root"))}],
}  # fmt: skip


def _actions(name: str) -> list[argparse.Action]:
    _, parser = command_parser(name)
    return [a for a in parser._actions if a.dest not in ("help", "debug")]


def _takes_a_path(action: argparse.Action) -> bool:
    """An argument whose value may name a file: a string or a path, not a flag, not a fixed choice."""
    return (
        action.nargs != 0
        and action.choices is None
        and action.type in (None, str, Path)
        and not isinstance(action, OutputPath | argparse._SubParsersAction)
    )


def _argv(name: str, values: dict[str, object]) -> list[str]:
    argv = [name]
    for action in _actions(name):
        if action.dest not in values:
            continue
        value = values[action.dest]
        tokens = list(value) if isinstance(value, list) else [str(value)]
        argv += tokens if not action.option_strings else [action.option_strings[0], *tokens]
    return [*argv, "--force"]


def _cases() -> list[tuple[str, int, str, str, str]]:
    cases = []
    for name in COMMANDS:
        actions = _actions(name)
        outputs = [a.dest for a in actions if isinstance(a, OutputPath)]
        if not outputs:
            continue
        for dest in (a.dest for a in actions if _takes_a_path(a)):
            template = next((i for i, v in enumerate(VALID[name]) if dest in v), 0)
            for out in outputs:
                cases += [(name, template, dest, out, where) for where in ("same", "parent")]
    return cases


CASES = _cases()


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def synth_and_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from pgnn.data.synthetic.dataset import generate_dataset

    tmp = tmp_path_factory.mktemp("inputs")
    generate_dataset(tmp / "synthetic", 1, seed=0)
    save_random_checkpoint(tmp / "tiny.pt", TINY_MODEL, graph_preset="car")
    return tmp / "synthetic", tmp / "tiny.pt"


def test_every_command_with_an_output_is_walked() -> None:
    for name in COMMANDS:
        has_output = any(isinstance(a, OutputPath) for a in _actions(name))
        assert has_output != (name in NO_OUTPUT), f"pgnn {name}: list it in NO_OUTPUT or in VALID"
        if has_output:
            assert name in VALID, f"pgnn {name}: add the values of a run that succeeds to VALID"
    walked = {(n, d) for n, _, d, _, _ in CASES}
    assert ("view", "subset") in walked and ("predict", "label") in walked and ("eval", "ids") in walked


@pytest.mark.parametrize(
    ("name", "template", "dest", "out", "where"), CASES, ids=["-".join(c[:1] + c[2:]) for c in CASES]
)
def test_no_output_replaces_an_input(
    name: str,
    template: int,
    dest: str,
    out: str,
    where: str,
    synth_and_checkpoint: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    m = Materials(tmp_path, *synth_and_checkpoint)
    values = {k: make(m) for k, make in VALID[name][template].items()}
    if dest not in values:  # any other string argument: a file of its own
        values[dest] = m.text(dest, "value.txt", "mine\n")
    value = values[dest]
    path = Path(value[0] if isinstance(value, list) else value)
    for other in (a.dest for a in _actions(name) if isinstance(a, OutputPath)):
        values[other] = str(tmp_path / f"out-{other}")
    values[out] = str(path if where == "same" else path.parent)
    held = path.parent if path.parent != tmp_path else path
    before = tree(held)
    code = cli_main(_argv(name, values))
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0, f"pgnn {' '.join(_argv(name, values))} succeeded"
    assert len(err) == 1 and err[0].startswith(f"pgnn {name}: error: "), err
    assert held.exists() and tree(held) == before, f"{held} changed"
    assert os.path.lexists(path)


def test_a_subset_outside_the_root_is_never_replaced(
    synth_and_checkpoint: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: ``--subset ../theirs`` (relative to the root, so no argument names the folder) is
    found by what ``pgnn view`` read, at the moment ``--out`` would replace it."""
    synth, _ = synth_and_checkpoint
    shutil.copytree(synth, tmp_path / "kitti")
    theirs = tmp_path / "theirs"
    shutil.copytree(synth / "training", theirs)
    (tmp_path / "cwd").mkdir()
    before = tree(theirs)
    argv = ["view", "--root", str(tmp_path / "kitti"), "0", "--subset", "../theirs", "--out", str(theirs)]
    cwd = Path.cwd()
    os.chdir(tmp_path / "cwd")  # "../theirs" names nothing from here
    try:
        code = cli_main([*argv, "--force", "--max-points", "100"])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and tree(theirs) == before
    assert err[-1].startswith(f"pgnn view: error: {theirs}: expected an output path apart from this")
    assert f"it would overwrite {theirs}" in err[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "kitti", "theirs"]  # no temporary left
