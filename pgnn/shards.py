"""Sharded, resumable, content-keyed artifact building.

A stage's output folder holds shards (``shard-0000.<ext>`` ...) and a ``manifest.json``::

    {"kind": "graphs", "params": {...}, "code_version": "9f2c...",
     "shards": [{"file": "shard-0000.npz", "frames": ["000000", ...], "key": "ab12...", "sha256": "..."}]}

A shard's *key* hashes everything its bytes depend on: the content of its inputs, the params, and the
version of the code that builds it. A rerun skips every shard whose key and bytes still match, so a killed
run resumes where it stopped (each shard and each manifest update is written atomically), and a changed
param rebuilds exactly the shards it affects. Files in the folder that the manifest does not list (stale
shards, temp files of a killed writer) are removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgnn.io import sha256_file, write_json_atomic

MANIFEST = "manifest.json"


def stable_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def code_version(modules: Iterable[str]) -> str:
    """Hash of the source files of the given ``pgnn`` modules (e.g. ``["pgnn.graph", "pgnn.targets"]``).

    Only the modules that shape an artifact's bytes are listed, so an unrelated edit keeps caches valid.
    """
    import importlib.util

    h = hashlib.sha256()
    for name in sorted(modules):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"cannot find module {name}")
        h.update(name.encode())
        h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()[:16]


def chunk_ids(ids: Sequence[str], per_shard: int) -> list[list[str]]:
    """Split frame ids (in order) into consecutive chunks of ``per_shard``."""
    if per_shard < 1:
        raise ValueError(f"frames per shard must be >= 1, got {per_shard}")
    return [list(ids[i : i + per_shard]) for i in range(0, len(ids), per_shard)]


@dataclass(frozen=True)
class ShardTask:
    """One shard to build: its file name, its frames and the key of everything its bytes depend on."""

    file: str
    frames: tuple[str, ...]
    key: str


@dataclass(frozen=True)
class ShardPlan:
    """Everything needed to build one artifact folder: its shards, how to build one, and its manifest fields.

    ``build(task, path)`` must be picklable (a module-level function or ``functools.partial`` of one) so that
    process pools, Dask and Prefect workers can run it.
    """

    out_dir: Path
    tasks: tuple[ShardTask, ...]
    build: Callable[[ShardTask, Path], None]
    kind: str
    params: dict[str, Any]
    code: str


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of ``out_dir``, or None if absent or unreadable (then everything is rebuilt)."""
    path = Path(out_dir) / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _is_current(out_dir: Path, task: ShardTask, entries: dict[str, dict[str, Any]]) -> bool:
    entry = entries.get(task.file)
    path = out_dir / task.file
    return (
        entry is not None
        and entry.get("key") == task.key
        and path.exists()
        and entry.get("sha256") == sha256_file(path)
    )


def build_shards(
    out_dir: str | Path,
    tasks: Sequence[ShardTask],
    build: Callable[[ShardTask, Path], None],
    *,
    kind: str,
    params: dict[str, Any],
    code: str,
    workers: int = 1,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Build the shards of ``out_dir`` that are missing or stale; return the final manifest.

    Args:
        build: ``build(task, path)`` writes the shard for ``task`` to ``path`` (atomically; see pgnn.io).
            With ``workers > 1`` it must be picklable (a module-level function or ``functools.partial``).
        workers: processes building shards in parallel (1 = in this process).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    old = read_manifest(out) or {}
    entries: dict[str, dict[str, Any]] = {e["file"]: e for e in old.get("shards", []) if "file" in e}
    todo = [t for t in tasks if not _is_current(out, t, entries)]
    if log:
        log(f"{kind}: {len(tasks) - len(todo)} of {len(tasks)} shards current, building {len(todo)}")

    def manifest() -> dict[str, Any]:
        listed = [entries[t.file] for t in tasks if t.file in entries and entries[t.file].get("key") == t.key]
        return {"kind": kind, "params": params, "code_version": code, "shards": listed}

    def done(task: ShardTask) -> None:
        entries[task.file] = {
            "file": task.file,
            "frames": list(task.frames),
            "key": task.key,
            "sha256": sha256_file(out / task.file),
        }
        write_json_atomic(out / MANIFEST, manifest())
        if log:
            log(f"{kind}: wrote {task.file} ({len(task.frames)} frames)")

    if workers > 1 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=workers, initializer=_one_thread) as pool:
            futures = {pool.submit(build, t, out / t.file): t for t in todo}
            for fut in as_completed(futures):
                fut.result()
                done(futures[fut])
    else:
        for t in todo:
            build(t, out / t.file)
            done(t)

    final = manifest()
    write_json_atomic(out / MANIFEST, final)
    keep = {t.file for t in tasks} | {MANIFEST}
    for p in out.iterdir():
        if p.is_file() and p.name not in keep:
            p.unlink()
    return final


def run_plan(plan: ShardPlan, workers: int = 1, log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """:func:`build_shards` of a :class:`ShardPlan`."""
    return build_shards(
        plan.out_dir,
        plan.tasks,
        plan.build,
        kind=plan.kind,
        params=plan.params,
        code=plan.code,
        workers=workers,
        log=log,
    )


def _one_thread() -> None:
    """Worker initialiser: one BLAS/numba/torch thread per process (the fast setting on this machine)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["NUMBA_NUM_THREADS"] = "1"
