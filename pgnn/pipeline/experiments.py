"""DVC's experiments as records: ``dvc exp show --json`` of a project read into :class:`Experiment` s.

Per experiment (or the baseline commit, or the workspace): its params as set in ``params.yaml``, its
metrics, the headline AP (the first two values of the ``ap`` metric file: Car 3D and BEV moderate R40), and
its loss and validation-AP curves (the dvclive files under the ``live_plots`` folder: read from the
experiment's git commit, as dvclive's files are tracked by git here, or from disk for the workspace).
:mod:`pgnn.pipeline.runs` puts them side by side.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgnn.core.errors import DataError
from pgnn.pipeline.stages import PATHS

PARAMS_FILE = "params.yaml"  # the file `dvc exp run -S` edits: its keys are the params people set
LOSS_SERIES = "loss/total"  # pgnn.training.live's total loss, under PATHS["live_plots"]
VAL_FOLDER = "val"  # pgnn.eval.validation's val/<class>/<metric>/<difficulty>, under PATHS["live_plots"]
HEADLINE_VALUES = 2  # the first values of the ap metric file shown (Car 3D and BEV moderate R40)
DONE_STATES = ("success", None)  # executor states whose commit holds the results (None: a plain run)
SEED = "train.seed"  # the one param in which the experiments of a seed group differ


@dataclass(frozen=True)
class Curve:
    """One dvclive history: ``steps[i]`` logged ``values[i]``; empty when the experiment logged none."""

    name: str = ""
    steps: tuple[int, ...] = ()
    values: tuple[float, ...] = ()

    def best(self) -> tuple[int, float] | None:
        """(step, value) of the highest value (the first one on ties)."""
        if not self.values:
            return None
        i = max(range(len(self.values)), key=lambda k: (self.values[k], -k))
        return self.steps[i], self.values[i]

    def last(self) -> tuple[int, float] | None:
        return (self.steps[-1], self.values[-1]) if self.values else None


@dataclass(frozen=True)
class Experiment:
    """One row: an experiment, the baseline commit or the workspace, with what the view shows of it."""

    name: str
    rev: str  # short commit; "" for the workspace
    state: str | None  # the queue's state (queued, running, failed, success); None for a plain run
    params: dict[str, Any] = field(default_factory=dict)  # "section.key" (params.yaml), else "file:key"
    metrics: dict[str, Any] = field(default_factory=dict)  # "<file stem>.<key path>"
    headline: dict[str, float | None] = field(default_factory=dict)  # "Car 3d" -> AP
    loss: Curve = Curve()
    val: Curve = Curve()

    def steps(self) -> int | None:
        """The final step: the last one logged (loss, else val curve), else ``train.max_steps``."""
        for curve in (self.loss, self.val):
            if curve.steps:
                return curve.steps[-1]
        value = self.params.get("train.max_steps")
        return value if isinstance(value, int) else None


def exp_show(root: Path) -> list[dict[str, Any]]:
    """``dvc exp show --json`` of the project at ``root`` (this interpreter's DVC), parsed."""
    cmd = [sys.executable, "-m", "dvc", "exp", "show", "--json"]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(root, f"expected a git + DVC project (`dvc exp show --json` failed: {why})")
    try:
        records = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        raise DataError(root, f"expected JSON from `dvc exp show --json`, got: {err}") from err
    if not isinstance(records, list):
        raise DataError(root, f"expected a list from `dvc exp show --json`, got {type(records).__name__}")
    return records


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping's leaves as ``{"a.b.c": value}``, in the file's order."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _entries(records: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str, str | None, Mapping]]:
    """(name, full rev, state, data) of each row, as DVC orders them: workspace, baseline, its experiments."""
    for record in records:
        rev = str(record.get("rev", ""))
        name = record.get("name") or ("workspace" if rev == "workspace" else rev[:7])
        yield name, rev, None, record.get("data") or {}
        for exp in record.get("experiments") or []:
            state = (exp.get("executor") or {}).get("state")
            for sub in exp.get("revs") or []:
                yield sub.get("name") or exp.get("name") or "", sub["rev"], state, sub.get("data") or {}


def _values(data: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """{file: flattened values} of one row's ``params`` or ``metrics`` (files DVC could not read: empty)."""
    return {f: flatten((v or {}).get("data") or {}) for f, v in (data.get(kind) or {}).items()}


def _params(files: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for file, values in files.items():
        out.update({(k if file == PARAMS_FILE else f"{file}:{k}"): v for k, v in values.items()})
    return out


def _metrics(files: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    return {f"{Path(file).stem}.{k}": v for file, values in files.items() for k, v in values.items()}


class RevFiles:
    """The files of one experiment: its git commit (``git show``), or the working tree for the workspace."""

    def __init__(self, root: Path, rev: str) -> None:
        self.root, self.rev = root, rev

    def _git(self, *args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    def files(self, folder: str) -> list[str]:
        """The files under ``folder`` (paths relative to the root), sorted."""
        if self.rev == "workspace":
            base = self.root / folder
            found = base.rglob("*") if base.is_dir() else iter(())
            return sorted(p.relative_to(self.root).as_posix() for p in found if p.is_file())
        out = self._git("ls-tree", "-r", "--name-only", self.rev, "--", folder)
        return sorted(out.splitlines()) if out else []

    def read(self, path: str) -> str | None:
        if self.rev == "workspace":
            file = self.root / path
            return file.read_text() if file.is_file() else None
        return self._git("show", f"{self.rev}:{path}")


def parse_tsv(text: str, name: str = "") -> Curve:
    """A dvclive history (``step``, then the value column; ``timestamp`` ignored) as a :class:`Curve`."""
    rows = list(csv.reader(io.StringIO(text), delimiter="\t"))
    if not rows or "step" not in rows[0] or len(rows[0]) < 2:
        return Curve(name)
    head = rows[0]
    s = head.index("step")
    v = next(i for i, col in enumerate(head) if col not in ("step", "timestamp"))
    good = [r for r in rows[1:] if len(r) > max(s, v) and r[v] != ""]
    return Curve(name, tuple(int(r[s]) for r in good), tuple(float(r[v]) for r in good))


def val_series(files: Iterable[str], headline: Sequence[str]) -> str | None:
    """The val curve that matches the headline AP (``<class>/<metric>/moderate``), else the first one."""
    prefix = f"{PATHS['live_plots']}/{VAL_FOLDER}/"
    names = [
        f.removeprefix(prefix).removesuffix(".tsv")
        for f in files
        if f.startswith(prefix) and f.endswith(".tsv")
    ]
    wanted = "/".join([*headline[:2], "moderate"])
    return wanted if wanted in names else (names[0] if names else None)


def build_experiment(
    root: Path, name: str, rev: str, state: str | None, data: Mapping[str, Any]
) -> Experiment:
    """One row: params and metrics from DVC's record, curves from its files (finished experiments only)."""
    metrics = _values(data, "metrics")
    ap = metrics.get(PATHS["ap"], {})
    headline_keys = list(ap)[:HEADLINE_VALUES]
    headline = {k.replace(".", " "): number(ap[k]) for k in headline_keys}
    loss = val = Curve()
    if state in DONE_STATES:
        files = RevFiles(root, rev)
        listed = files.files(PATHS["live_plots"])
        loss_text = files.read(f"{PATHS['live_plots']}/{LOSS_SERIES}.tsv")
        loss = parse_tsv(loss_text, LOSS_SERIES) if loss_text else Curve()
        series = val_series(listed, headline_keys[0].split(".") if headline_keys else [])
        val_text = files.read(f"{PATHS['live_plots']}/{VAL_FOLDER}/{series}.tsv") if series else None
        val = parse_tsv(val_text, str(series)) if val_text else Curve()
    short = "" if rev == "workspace" else rev[:7]
    params = _params(_values(data, "params"))
    return Experiment(name, short, state, params, _metrics(metrics), headline, loss, val)


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def collect(root: Path) -> list[Experiment]:
    """Every row of ``dvc exp show --json`` at ``root`` as an :class:`Experiment`, in DVC's order."""
    return [build_experiment(root, *entry) for entry in _entries(exp_show(root))]


def select(experiments: Sequence[Experiment], wanted: Sequence[str]) -> list[Experiment]:
    """The experiments named in ``wanted`` (a name, or a prefix of a rev), in ``experiments``' order."""
    if not wanted:
        return list(experiments)
    found = [e for e in experiments if any(w == e.name or (e.rev and e.rev.startswith(w)) for w in wanted)]
    missing = [
        w for w in wanted if not any(w == e.name or (e.rev and e.rev.startswith(w)) for e in experiments)
    ]
    if missing:
        names = ", ".join(e.name for e in experiments)
        raise DataError("dvc exp show", f"expected experiment names or revs among {names}, got {missing}")
    return found
