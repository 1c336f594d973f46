"""The project's experiments side by side: DVC's experiments (and the workspace) as rows a person can read.

``dvc exp show`` lists every param and metric of every file: on this project that is all ellipses at 120
columns, and the validation AP logged during training is no column at all. This module reads ``dvc exp show
--json`` (never its table) and keeps, per experiment, what answers "which experiment is better, and why": the
headline AP (the first two values of the ``ap`` metric file: Car 3D and BEV moderate R40), the best and last
validation AP logged during training (the dvclive curve under the ``live_plots`` folder: read from the
experiment's git commit, as dvclive's files are tracked by git here, or from disk for the workspace), the
final step, and only the params that differ between the rows shown. :func:`table` fits the rows into a width
(120 columns by default), dropping the params that do not fit and saying so.

Finished experiments whose params are equal except ``train.seed`` are one *seed group* (:func:`group_rows`):
one row whose figures are ``mean ± sd`` over its experiments (:mod:`pgnn.pipeline.spread`), and the table's
closing lines name each group's experiments and the pairs of rows (a group and a group, or a group and an
experiment) whose headline AP differs within noise.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pgnn.pipeline.experiments import DONE_STATES, SEED, Curve, Experiment, number
from pgnn.pipeline.spread import RULE, SD, Spread, spread, within_noise
from pgnn.pipeline.stages import PATHS

ABSENT = "-"  # a param cell of an experiment whose params lack the key (a null value is written "null")


class Each(tuple):
    """A group's value that differs between its experiments (their seeds, say): one per member, in order."""


@dataclass(frozen=True)
class GroupCurve:
    """A group's val curve as the table shows it: the spread of its experiments' best and last values."""

    name: str
    best_ap: Spread | None
    last_ap: Spread | None

    def best(self) -> Spread | None:
        return self.best_ap

    def last(self) -> Spread | None:
        return self.last_ap


@dataclass(frozen=True)
class Group:
    """A seed group: finished experiments whose params are equal except ``train.seed``, shown as one row."""

    label: str  # "1", "2", ... in the table's order
    members: tuple[Experiment, ...]
    rev: str = ""
    state: str | None = None

    @property
    def name(self) -> str:
        return f"group {self.label}"

    @property
    def params(self) -> dict[str, Any]:
        """The members' params (equal but for the seed), the seed as :class:`Each` of the members' seeds."""
        return {**self.members[0].params, SEED: Each(m.params[SEED] for m in self.members)}

    @property
    def metrics(self) -> dict[str, Spread | None]:
        keys = dict.fromkeys(k for m in self.members for k in m.metrics)
        return {k: spread(number(m.metrics.get(k)) for m in self.members) for k in keys}

    @property
    def headline(self) -> dict[str, Spread | None]:
        keys = dict.fromkeys(k for m in self.members for k in m.headline)
        return {k: spread(m.headline.get(k) for m in self.members) for k in keys}

    @property
    def val(self) -> GroupCurve:
        best = spread(None if (p := m.val.best()) is None else p[1] for m in self.members)
        last = spread(None if (p := m.val.last()) is None else p[1] for m in self.members)
        return GroupCurve(next((m.val.name for m in self.members if m.val.name), ""), best, last)

    def steps(self) -> int | None | Each:
        """The members' final step: one number when they agree, else :class:`Each` of them."""
        steps = [m.steps() for m in self.members]
        return steps[0] if len(set(steps)) == 1 else Each(steps)


Row = Experiment | Group


def curves(row: Row) -> tuple[Curve, Curve, tuple[float, ...]]:
    """(loss, val, val sd) of a row to plot: an experiment's own curves (no sd), a group's mean curves over
    the steps every one of its experiments logged, and the sample sd of its val AP at each of those steps."""
    if isinstance(row, Experiment):
        return row.loss, row.val, ()
    loss, val = (_mean_curve([getattr(m, kind) for m in row.members]) for kind in ("loss", "val"))
    return loss[0], val[0], val[1]


def _mean_curve(members: Sequence[Curve]) -> tuple[Curve, tuple[float, ...]]:
    """The mean of ``members`` at the steps all of them logged, and the sample sd there."""
    steps = sorted(set.intersection(*(set(c.steps) for c in members)))
    at = [dict(zip(c.steps, c.values, strict=True)) for c in members]
    spreads = [x for s in steps if (x := spread(a[s] for a in at))]  # 2+ members: none is None
    name = next((c.name for c in members if c.name), "")
    return Curve(name, tuple(steps), tuple(x.mean for x in spreads)), tuple(x.sd for x in spreads)


def group_rows(experiments: Sequence[Experiment]) -> list[Row]:
    """The table's rows: each seed group of ``experiments`` as one :class:`Group` in the place of its first
    experiment, the other experiments as they are, in ``experiments``' order.

    A seed group is two or more finished experiments (the baseline commit and DVC's experiments, not the
    workspace: it is a copy of one of them) that have ``train.seed`` and whose other params (of every params
    file) are all equal, ordered by seed. An experiment whose seed is already in its group (the first in
    ``experiments``' order has it: a `dvc exp run` of unchanged params reuses earlier results) stays a row of
    its own.
    """
    buckets: dict[str, list[int]] = {}
    for i, exp in enumerate(experiments):
        if exp.rev and exp.state in DONE_STATES and SEED in exp.params:
            others = {k: v for k, v in exp.params.items() if not _is_seed(k)}
            bucket = buckets.setdefault(json.dumps(others, sort_keys=True, default=str), [])
            if all(experiments[j].params[SEED] != exp.params[SEED] for j in bucket):
                bucket.append(i)
    groups = {
        b[0]: sorted(b, key=lambda j: _seed_order(experiments[j])) for b in buckets.values() if len(b) > 1
    }
    grouped = {i for b in groups.values() for i in b}
    rows: list[Row] = []
    for i, exp in enumerate(experiments):
        if i in groups:
            label = str(sum(isinstance(r, Group) for r in rows) + 1)
            rows.append(Group(label, tuple(experiments[j] for j in groups[i])))
        elif i not in grouped:
            rows.append(exp)
    return rows


def _is_seed(key: str) -> bool:
    """``train.seed`` of params.yaml or of another params file (``params.resolved.yaml:train.seed``: the
    pipeline's stages declare the resolved seed, so DVC shows it beside the one the user set)."""
    return key == SEED or key.endswith(f":{SEED}")


def _seed_order(exp: Experiment) -> tuple[int, int]:
    """A group's experiments in the order of their seeds (whole numbers; others after them, rows' order)."""
    seed = exp.params[SEED]
    return (0, seed) if isinstance(seed, int) and not isinstance(seed, bool) else (1, 0)


def param_keys(rows: Sequence[Row], everything: bool = False) -> list[str]:
    """The params shown: those of params.yaml whose values differ between ``rows``; all, ``everything``."""
    keys = list(dict.fromkeys(k for r in rows for k in r.params))
    if everything:
        return keys
    return [
        k
        for k in keys
        if ":" not in k
        and len({json.dumps(r.params.get(k, ABSENT), sort_keys=True, default=str) for r in rows}) > 1
    ]


@dataclass(frozen=True)
class Column:
    """One column of the comparison: its header, one raw value per row, and how a cell is written."""

    header: str
    values: list[Any]
    # text: left-aligned; ap: two decimals; point: a (step, AP) as "77.60 (2000)"; number: 4 significant
    # digits; param: as YAML would write it. A group's Spread: "mean ± sd" (ap, point: two decimals; number:
    # 4 digits); its Each: the members' cells joined by commas
    kind: Literal["text", "ap", "point", "number", "param"] = "param"

    def cell(self, value: Any) -> str:
        if value is None:
            return "null" if self.kind == "param" else "-"
        if isinstance(value, Spread):
            return value.text(".4g" if self.kind == "number" else ".2f")
        if isinstance(value, Each):
            return ",".join(map(self.cell, value))
        if self.kind == "ap" and isinstance(value, float):
            return f"{value:.2f}"
        if self.kind == "point":
            return f"{value[1]:.2f} ({value[0]})"
        if self.kind == "number" and isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, bool):
            return str(value).lower()
        return value if isinstance(value, str) else json.dumps(value, default=str)


def columns(rows: Sequence[Row], everything: bool = False) -> tuple[list[Column], list[Column]]:
    """(the fixed columns, the param columns) of ``rows``; ``everything`` adds every metric and param. Among
    seed groups, an ``n`` column (the experiments in each row) follows the rev."""
    shown = [f"{r.name} ({r.state})" if r.state not in DONE_STATES else r.name for r in rows]
    fixed = [Column("experiment", shown, "text"), Column("rev", [r.rev for r in rows], "text")]
    if any(isinstance(r, Group) for r in rows):
        fixed.append(Column("n", [len(r.members) if isinstance(r, Group) else 1 for r in rows], "number"))
    for key in dict.fromkeys(k for r in rows for k in r.headline):
        fixed.append(Column(key, [r.headline.get(key) for r in rows], "ap"))
    fixed += [
        Column("val best", [r.val.best() for r in rows], "point"),
        Column("val last", [r.val.last() for r in rows], "point"),
        Column("steps", [r.steps() for r in rows]),
    ]
    if everything:
        for key in dict.fromkeys(k for r in rows for k in r.metrics):
            fixed.append(Column(key, [r.metrics.get(key) for r in rows], "number"))
    return fixed, [Column(k, [r.params.get(k, ABSENT) for r in rows]) for k in param_keys(rows, everything)]


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, keeping its end (a key's last parts say most): whole dotted
    parts dropped first (``model.layers.units`` -> ``layers.units``), else an ellipsis."""
    while len(text) > width and "." in text.strip("."):
        text = text.split(".", 1)[1]
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def table(
    experiments: Sequence[Experiment], width: int | None = 120, everything: bool = False, groups: bool = True
) -> str:
    """The comparison as aligned text, no line longer than ``width`` (None: no limit).

    With ``groups``, each seed group is one row (:func:`group_rows`). The fixed columns always come first;
    param columns follow while they fit, and a closing note names the ones left out. Unless ``everything``,
    headers and names are cut to 24 characters, other cells to 18.
    """
    rows = group_rows(experiments) if groups else list(experiments)
    fixed, params = columns(rows, everything)
    laid: list[tuple[list[str], int, bool]] = []  # (header + cells, width, left-aligned) of each column shown
    used = -2
    left_out: list[str] = []
    for i, col in enumerate([*fixed, *params]):
        limit = None if everything else 24 if col.kind == "text" else 18
        texts = [col.header, *map(col.cell, col.values)]
        texts = texts if limit is None else [_fit(texts[0], 24), *(_fit(t, limit) for t in texts[1:])]
        size = max(map(len, texts))
        if i >= len(fixed) and width is not None and used + 2 + size > width:
            left_out.append(col.header)
            continue
        laid.append((texts, size, col.kind == "text"))
        used += 2 + size
    lines = [
        "  ".join(t[row].ljust(n) if left else t[row].rjust(n) for t, n, left in laid).rstrip()
        for row in range(len(rows) + 1)
    ]
    lines = [line if width is None or len(line) <= width else line[: width - 1] + "…" for line in lines]
    for note in _notes(rows, left_out):
        lines += textwrap.wrap(note, width) if width is not None else [note]
    return "\n".join(lines)


def _notes(rows: Sequence[Row], left_out: Sequence[str]) -> list[str]:
    """What the columns mean, the differing params that did not fit, each seed group's experiments, and which
    headline AP differences between a group and another row lie within noise."""
    val = next((r.val.name for r in rows if r.val.name), None)
    notes = [f"AP: {PATHS['ap']}; steps: the last logged"]
    if val:
        notes[0] += f"; val best/last (step): {val} AP logged during training"
    if left_out:
        notes.append(
            f"{len(left_out)} differing params not shown (use --width or --all): {', '.join(left_out)}"
        )
    groups = [r for r in rows if isinstance(r, Group)]
    if not groups:
        return notes
    for g in groups:
        seeds = ",".join(json.dumps(m.params[SEED], default=str) for m in g.members)
        notes.append(f"{g.name} ({SEED} {seeds}): {', '.join(m.name for m in g.members)}")
    notes.append(f"group: mean ± sd over its runs ({SD}); within noise: {RULE}")
    for key in dict.fromkeys(k for r in rows for k in r.headline):
        pairs = [f"{a} ~ {b}" for a, b in noise_pairs(rows, key)]
        notes.append(f"{key} within noise: {', '.join(pairs) or 'none'}")
    return notes


def noise_pairs(rows: Sequence[Row], key: str) -> list[tuple[str, str]]:
    """The (name, name) of each pair of rows, one of them at least a seed group, whose headline AP ``key``
    differs within noise (:func:`pgnn.pipeline.spread.within_noise`), in the rows' order. Experiments not
    finished (queued, running, failed) have no AP of their own and are left out."""
    values = [(r.name, v) for r in rows if r.state in DONE_STATES and (v := r.headline.get(key)) is not None]
    return [
        (a, b)
        for i, (a, va) in enumerate(values)
        for b, vb in values[i + 1 :]
        if (isinstance(va, Spread) or isinstance(vb, Spread)) and within_noise(va, vb)
    ]


def group_labels(experiments: Sequence[Experiment]) -> list[str | None]:
    """The seed group (:func:`group_rows`) of each experiment: its label, or None."""
    labels: list[str | None] = [None] * len(experiments)
    for row in group_rows(experiments):
        if isinstance(row, Group):
            for member in row.members:
                labels[next(i for i, e in enumerate(experiments) if e is member)] = row.label
    return labels


def to_csv(experiments: Sequence[Experiment], everything: bool = False) -> str:
    """The comparison's columns, every differing param included, as CSV: one row per experiment, raw values
    (a val point as two columns, its AP and its step; a missing value empty); ``group``: the experiment's
    seed group."""
    fixed, params = columns(experiments, everything)
    fixed.insert(2, Column("group", group_labels(experiments), "text"))
    header: list[str] = []
    rows: list[list[Any]] = [[] for _ in experiments]
    for col in [*fixed, *params]:
        header += [col.header, f"{col.header} step"] if col.kind == "point" else [col.header]
        for row, value in zip(rows, col.values, strict=True):
            if col.kind == "point":
                row += ["", ""] if value is None else [value[1], value[0]]
            else:
                row.append(col.cell(value) if col.kind == "param" else "" if value is None else value)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows([header, *rows])
    return out.getvalue()


def to_json(experiments: Sequence[Experiment], everything: bool = False) -> str:
    """The comparison as a JSON list, one object per experiment: its seed group (``group``: a label, or
    null), its shown params (``everything``: all, and the metrics)."""
    keys = param_keys(experiments, everything)
    rows = []
    for r, group in zip(experiments, group_labels(experiments), strict=True):
        best, last = r.val.best(), r.val.last()
        row: dict[str, Any] = {
            "name": r.name,
            "rev": r.rev,
            "group": group,
            "state": r.state,
            "ap": r.headline,
            "val": {
                "series": r.val.name or None,
                "best": None if best is None else {"step": best[0], "ap": best[1]},
                "last": None if last is None else {"step": last[0], "ap": last[1]},
            },
            "steps": r.steps(),
            "params": {k: r.params.get(k) for k in keys},
        }
        if everything:
            row["metrics"] = r.metrics
        rows.append(row)
    return json.dumps(rows, indent=2, default=str)
