"""Detect and repair a ``dvc.lock`` (or ``.dvc/tmp/rwlock``) that a killed ``dvc`` left half-written.

DVC rewrites ``dvc.lock`` in place (``open(path, "w+")`` then a YAML dump), after every stage it runs. A
SIGKILL (OOM killer, a cancelled CI job, a closed laptop) between the truncation and the end of the dump
leaves a 0-byte or truncated file, and from then on *every* ``dvc`` command fails (``'dvc.lock' validation
failed``) until someone repairs it by hand. ``.dvc/tmp/rwlock``, DVC's JSON record of the running ``dvc``
processes, is rewritten in place the same way at the start and end of every stage; an unreadable one
fails every command too (``Unable to read RWLock-file``). A *stale* rwlock entry (a killed process's PID)
is harmless: DVC notices the PID is gone and drops the entry itself.

:func:`check_lock` says whether ``dvc.lock`` is unusable; :func:`repair_lock` fixes what it finds, printing
one line per file: the committed ``dvc.lock`` (``git show HEAD:dvc.lock``) is written back atomically, so DVC
reruns only the stages whose deps or outputs differ from that commit (persistent outputs resume from their
finished shards and checkpoints); without a usable committed version the broken file is moved aside to
``dvc.lock.corrupt-<timestamp>`` and DVC recomputes every stage. The project's entry points call
:func:`repair_lock` before they run DVC: ``make pipeline`` (:mod:`pgnn.pipeline.run`) and the Prefect flows.

A truncation that still parses and passes DVC's lock-file schema (a file cut between two stages, or inside
a hash) is not reported: DVC reads it, sees the missing or shortened records, and reruns those stages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from pgnn.core.io import write_bytes_atomic

LOCK_NAME = "dvc.lock"
RWLOCK = Path(".dvc") / "tmp" / "rwlock"


def _problem(data: Any) -> str | None:
    """What makes the parsed ``dvc.lock`` content unusable by DVC, or None."""
    if not isinstance(data, dict):
        return f"holds a YAML {type(data).__name__}, not a mapping"
    if data.get("schema") != "2.0":
        return f"has schema {data.get('schema')!r}, not '2.0'"
    stages = data.get("stages")
    if not isinstance(stages, dict):
        return "has no 'stages' mapping"
    for name, entry in stages.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("cmd"), str | list):
            return f"stage {name!r} has no 'cmd'"
        for key in ("deps", "outs"):
            items = entry.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) and "path" in i for i in items):
                return f"stage {name!r}: '{key}' is not a list of paths"
    return _dvc_schema_problem(data)


def _dvc_schema_problem(data: dict[str, Any]) -> str | None:
    """DVC's own lock-file schema check (what ``dvc`` refuses: e.g. ``md5:`` cut to nothing), when DVC is
    importable here."""
    try:
        import voluptuous
        from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    except ImportError:  # the checks above still catch empty, unparsable and structurally broken files
        return None
    try:
        COMPILED_LOCKFILE_SCHEMA(data)
    except voluptuous.Invalid as e:
        return f"fails DVC's lock-file schema ({e})"
    return None


def lock_text_problem(raw: bytes) -> str | None:
    """Why the bytes of a ``dvc.lock`` are unusable (0 bytes, not UTF-8, not YAML, not DVC's schema), or
    None when DVC can read them."""
    if not raw.strip():
        return f"is empty ({len(raw)} bytes)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"is not valid YAML{where} (truncated?)"
    return _problem(data)


def check_lock(root: str | Path) -> str | None:
    """Why ``<root>/dvc.lock`` is corrupt (one phrase, e.g. ``"is empty (0 bytes)"``), or None when it is
    usable or absent (DVC then computes every stage)."""
    path = Path(root) / LOCK_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return lock_text_problem(raw)


def check_rwlock(root: str | Path) -> str | None:
    """Why ``<root>/.dvc/tmp/rwlock`` is unreadable (DVC then refuses every command), or None."""
    path = Path(root) / RWLOCK
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"is not valid JSON ({len(raw)} bytes; truncated?)"
    if not isinstance(data, dict):
        return "is not a JSON object"
    return None


def _committed_lock(root: Path) -> bytes | None:
    """``dvc.lock`` as committed at git HEAD, or None (no git, no repo, no commit, not tracked)."""
    try:
        proc = subprocess.run(
            ["git", "show", f"HEAD:./{LOCK_NAME}"], cwd=root, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    path.rename(dest)
    return dest


def repair_lock(root: str | Path) -> list[str]:
    """Repair a corrupt ``dvc.lock`` and an unreadable ``.dvc/tmp/rwlock`` under ``root``.

    ``dvc.lock``: written back from ``git show HEAD:dvc.lock`` (atomically) when git has a usable version,
    otherwise moved aside to ``dvc.lock.corrupt-<timestamp>``. ``rwlock``: deleted (it only records running
    ``dvc`` processes, and DVC cannot read it). Prints one line to stderr per file repaired and returns the
    lines (empty: nothing to repair).
    """
    root = Path(root)
    done: list[str] = []
    path = root / LOCK_NAME
    problem = check_lock(root)
    if problem is not None:
        committed = _committed_lock(root)
        if committed is not None and lock_text_problem(committed) is None:
            write_bytes_atomic(path, committed)
            done.append(
                f"{path}: {problem} (a killed dvc?); restored the committed version (git HEAD:{LOCK_NAME}); "
                "dvc repro reruns only the stages that differ from it"
            )
        else:
            why = "git has no usable committed version" if committed is None else "the committed one is too"
            dest = _aside(path)
            done.append(
                f"{path}: {problem} (a killed dvc?); {why}: moved it to {dest.name}; "
                "dvc repro recomputes every stage (persistent outputs resume from their shards)"
            )
    rw = root / RWLOCK
    problem = check_rwlock(root)
    if problem is not None:
        rw.unlink(missing_ok=True)
        done.append(f"{rw}: {problem} (a killed dvc?); deleted it (DVC recreates it)")
    for line in done:
        print(line, file=sys.stderr, flush=True)
    return done
