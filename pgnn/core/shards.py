"""Sharded, resumable, content-keyed artifact building.

A stage's output folder holds shards (``shard-0000.<ext>`` ...) and a ``manifest.json``::

    {"kind": "graphs", "params": {...}, "code_version": "9f2c...",
     "shards": [{"file": "shard-0000.npz", "frames": ["000000", ...], "key": "ab12...", "sha256": "..."}]}

A shard's *key* hashes everything its bytes depend on: the content of its inputs, the params, and the
version of the code that builds it. A rerun skips every shard whose key and bytes still match, so a killed
run resumes where it stopped (each shard and each manifest update is written atomically), and a changed
param rebuilds exactly the shards it affects. Files in the folder that the manifest does not list (stale
shards, temp files of a killed writer) are removed at the end.

:func:`run_plans` is the one shard loop of every driver: :func:`pending_tasks` (what is missing or stale),
the builds fanned out by the driver's :data:`ShardMap` (a process pool, Dask, Prefect's task map) with
:func:`record_shard` as each lands, and :func:`finalize_plan`.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from pgnn.core.errors import DataError
from pgnn.core.io import sha256_file, sha256_files, write_json_atomic
from pgnn.core.progress import Progress

MANIFEST = "manifest.json"


def stable_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def code_version(modules: Iterable[str]) -> str:
    """Hash of the source of ``modules`` and of every pgnn module they import (their static closure,
    :func:`pgnn.core.imports.closure_files`): any edit that can change what they build changes it, an
    unrelated edit does not."""
    from pgnn.core.imports import PACKAGE_ROOT, closure_files

    h = hashlib.sha256()
    for rel in closure_files(modules):
        h.update(rel.encode())
        h.update((PACKAGE_ROOT / rel).read_bytes())
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
    process pools, Dask and Prefect workers can run it. ``warm()``, if given, loads what every build needs
    (numba's compiled kernels): :func:`run_plan` calls it once before its process pool forks the workers,
    which then inherit it instead of each loading it again (measured: benchmarks/README.md, "Measurements
    behind the code").
    """

    out_dir: Path
    tasks: tuple[ShardTask, ...]
    build: Callable[[ShardTask, Path], None]
    kind: str
    params: dict[str, Any]
    code: str
    warm: Callable[[], None] | None = None


def _plain_name(name: str) -> str:
    if name in ("", ".", "..") or Path(name).name != name:
        raise ValueError("expected a file name inside the folder")
    return name


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _EntryShape(_Shape):
    """What the readers take from a shard entry (:func:`shard_entry` writes all four)."""

    file: Annotated[str, AfterValidator(_plain_name)]
    frames: list[str]
    key: str | None = None
    sha256: str | None = None


class _ManifestShape(_Shape):
    """The shape a manifest must have to be read (JSON of any other shape is treated as corrupt)."""

    kind: str | None = None
    params: dict[str, Any] | None = None
    code_version: str | None = None
    shards: list[_EntryShape]


def _load_manifest(out_dir: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``(manifest, "")``, or ``(None, what is wrong with it)``."""
    path = Path(out_dir) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, "no such file"
    except OSError as e:
        return None, f"an unreadable file ({e.strerror or e})"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return None, f"invalid JSON ({e})"
    try:
        _ManifestShape.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        return None, f"JSON of the wrong shape ({where or 'top level'}: {first['msg']})"
    return data, ""


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of ``out_dir``, or None if absent, unreadable or of the wrong shape (not an object with a
    ``shards`` list of ``{file, frames[, key, sha256]}``): then everything is rebuilt."""
    return _load_manifest(out_dir)[0]


def require_manifest(out_dir: str | Path, expected: str) -> dict[str, Any]:
    """The manifest of ``out_dir`` for a reader: a DataError naming ``manifest.json`` when it is absent,
    unreadable or of the wrong shape (``expected`` says what the folder should be)."""
    manifest, problem = _load_manifest(out_dir)
    if manifest is None:
        raise DataError(Path(out_dir) / MANIFEST, f"expected {expected}, got {problem}")
    return manifest


def manifest_entries(out_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The shard entries of ``out_dir``'s manifest by file name ({} when there is no readable manifest)."""
    old = read_manifest(out_dir) or {}
    return {e["file"]: e for e in old.get("shards", []) if isinstance(e, dict) and "file" in e}


def is_current(plan: ShardPlan, task: ShardTask, entries: dict[str, dict[str, Any]] | None = None) -> bool:
    """Whether ``task``'s shard needs no build: the manifest lists it with the same key, and the file on disk
    still has the listed sha256 (so a deleted, truncated or foreign file is rebuilt).

    ``entries`` (from :func:`manifest_entries`) saves re-reading the manifest for every shard.
    """
    entry = (manifest_entries(plan.out_dir) if entries is None else entries).get(task.file)
    path = Path(plan.out_dir) / task.file
    return (
        entry is not None
        and entry.get("key") == task.key
        and path.is_file()
        and entry.get("sha256") == sha256_file(path)
    )


def pending_tasks(plan: ShardPlan) -> list[ShardTask]:
    """The shards of ``plan`` that are missing or stale (not :func:`is_current`), in plan order."""
    entries = manifest_entries(plan.out_dir)
    out = Path(plan.out_dir)
    # is_current's test, with the listed files hashed by parallel threads
    listed = [
        t for t in plan.tasks if entries.get(t.file, {}).get("key") == t.key and (out / t.file).is_file()
    ]
    sha = dict(zip((t.file for t in listed), sha256_files(out / t.file for t in listed), strict=True))
    return [t for t in plan.tasks if t.file not in sha or entries[t.file].get("sha256") != sha[t.file]]


def shard_entry(plan: ShardPlan, task: ShardTask, sha256: str | None = None) -> dict[str, Any]:
    """The manifest entry of a built shard; hashes the file unless its ``sha256`` is given."""
    return {
        "file": task.file,
        "frames": list(task.frames),
        "key": task.key,
        "sha256": sha256_file(Path(plan.out_dir) / task.file) if sha256 is None else sha256,
    }


def _plan_manifest(plan: ShardPlan, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The manifest listing, in plan order, the entries whose key is the plan's key for that file."""
    listed = [entries[t.file] for t in plan.tasks if entries.get(t.file, {}).get("key") == t.key]
    return {"kind": plan.kind, "params": plan.params, "code_version": plan.code, "shards": listed}


def record_shard(plan: ShardPlan, task: ShardTask, sha256: str | None = None) -> dict[str, Any]:
    """Add a freshly built shard to the manifest (atomically); return the manifest written.

    Call it from one process per folder (the one driving the build): the manifest is read, updated and
    replaced, so a killed run keeps every shard recorded so far.
    """
    entries = manifest_entries(plan.out_dir)
    entries[task.file] = shard_entry(plan, task, sha256)
    manifest = _plan_manifest(plan, entries)
    write_json_atomic(Path(plan.out_dir) / MANIFEST, manifest)
    return manifest


def finalize_plan(plan: ShardPlan) -> dict[str, Any]:
    """Write the final manifest (only the plan's shards, in plan order) and delete every other file of the
    folder (stale shards, temp files of a killed writer). Return the manifest.

    Raises:
        RuntimeError: if a shard of the plan is not recorded with its current key (build it first).
    """
    out = Path(plan.out_dir)
    manifest = _plan_manifest(plan, manifest_entries(out))
    listed = {e["file"] for e in manifest["shards"]}
    missing = [t.file for t in plan.tasks if t.file not in listed]
    if missing:
        raise RuntimeError(f"{plan.kind} in {out}: shards not built yet: {', '.join(missing)}")
    if read_manifest(out) != manifest:  # an unchanged folder keeps its manifest file untouched
        write_json_atomic(out / MANIFEST, manifest)
    keep = listed | {MANIFEST}
    for p in out.iterdir():
        if p.is_file() and p.name not in keep:
            p.unlink()
    return manifest


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
        build: ``build(task, path)`` writes the shard for ``task`` to ``path`` (atomically; see pgnn.core.io).
            With ``workers > 1`` it must be picklable (a module-level function or ``functools.partial``).
        workers: processes building shards in parallel (1 = in this process).
    """
    return run_plan(ShardPlan(Path(out_dir), tuple(tasks), build, kind, params, code), workers, log)


@dataclass(frozen=True)
class Built:
    """What a :data:`ShardMap` reports for one shard it was handed: its position in the list, the built
    file's sha256 (None: hash it here), whether it came from a verified cache, or why it failed."""

    index: int
    sha256: str | None = None
    cached: bool = False
    error: str | None = None


ShardJob = tuple[str, ShardPlan, ShardTask]
"""One shard to build: the label of its plan (``graphs@val``), the plan, the shard."""

ShardMap = Callable[[Sequence[ShardJob]], Iterable[Built]]
"""How a driver fans shard builds out: build each job (``plan.build(task, out_dir / task.file)``) and
yield a :class:`Built` as each lands, in any order (a failure is reported once the map's own retries are
spent). :func:`pool_map` is the process pool of the DVC stages;
the Prefect flows hand in their task map (``flows/tasks.py``). A map may raise instead of reporting a
failure (the pool does, so the first error stops the run with its own message)."""


class ShardBuildError(RuntimeError):
    """Some shards failed (every other shard was built and recorded): a rerun builds only those."""


def run_plans(
    plans: Mapping[str, ShardPlan], map_shards: ShardMap, log: Callable[[str], None] | None = print
) -> dict[str, dict[str, Any]]:
    """Build the pending shards (:func:`pending_tasks`) of several plans, keyed by label, with ``map_shards``;
    :func:`record_shard` each as it lands (a killed run resumes), then :func:`finalize_plan` each plan whose
    shards all landed. Returns per label: ``shards``, ``current`` and the sorted ``built``, ``cached`` and
    ``failed`` files. Every driver's shard loop (the stage scripts through :func:`run_plan`, the Prefect
    flows).

    Raises:
        ShardBuildError: naming the failed shards, after every other one was recorded.
    """
    jobs: list[ShardJob] = []
    stats: dict[str, dict[str, Any]] = {}
    for label, plan in plans.items():
        Path(plan.out_dir).mkdir(parents=True, exist_ok=True)
        todo = pending_tasks(plan)
        current = len(plan.tasks) - len(todo)
        stats[label] = {
            "shards": len(plan.tasks),
            "current": current,
            "built": [],
            "cached": [],
            "failed": [],
        }
        if log:
            names = ": " + ", ".join(t.file for t in todo) if todo else ""
            log(f"{label}: {current} of {len(plan.tasks)} shards current, building {len(todo)}{names}")
        jobs += [(label, plan, task) for task in todo]
    progress = Progress(len(jobs), ", ".join(plans), "shard", log=log, enabled=bool(log and jobs))
    with progress:
        for built in map_shards(jobs) if jobs else ():
            label, plan, task = jobs[built.index]
            if built.error is not None:
                stats[label]["failed"].append(task.file)
                if log:
                    log(f"{label}: {task.file} failed after retries: {built.error}")
                continue
            record_shard(plan, task, built.sha256)
            stats[label]["cached" if built.cached else "built"].append(task.file)
            if log:
                verb = "reused verified cache of" if built.cached else "wrote"
                log(f"{label}: {verb} {task.file} ({len(task.frames)} frames)")
            progress.update()
    for label, plan in plans.items():
        for k in ("built", "cached", "failed"):
            stats[label][k].sort()
        if not stats[label]["failed"]:
            finalize_plan(plan)
    failed = [f"{label}:{f}" for label, st in stats.items() for f in st["failed"]]
    if failed:
        raise ShardBuildError(
            f"{len(failed)} shard(s) failed: {', '.join(failed)}; a rerun builds only those"
        )
    return stats


def pool_map(workers: int) -> ShardMap:
    """The :data:`ShardMap` of the stage scripts: in this process, or a pool of ``workers`` processes (one
    thread each) when ``workers > 1`` and there is more than one job. Each plan's ``warm()`` runs once
    before the pool forks, so the workers inherit it. The first failure cancels the shards not yet started
    and is raised as it is (a :class:`pgnn.core.errors.DataError` keeps its file and line)."""

    def map_shards(jobs: Sequence[ShardJob]) -> Iterator[Built]:
        if workers <= 1 or len(jobs) <= 1:
            for i, (_, plan, task) in enumerate(jobs):
                plan.build(task, Path(plan.out_dir) / task.file)
                yield Built(i)
            return
        for plan in {id(p): p for _, p, _ in jobs}.values():
            if plan.warm is not None:
                plan.warm()
        with ProcessPoolExecutor(max_workers=workers, initializer=one_thread_per_process) as pool:
            futures = {
                pool.submit(_build_in_worker, plan.build, task, Path(plan.out_dir) / task.file): i
                for i, (_, plan, task) in enumerate(jobs)
            }
            for fut in as_completed(futures):
                try:
                    fut.result()  # re-raises the worker's exception itself
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)  # no new shards after the first failure
                    raise
                yield Built(futures[fut])

    return map_shards


def run_plan(plan: ShardPlan, workers: int = 1, log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Build the pending shards of ``plan`` (:func:`run_plans` with :func:`pool_map`); return its final
    manifest."""
    run_plans({plan.kind: plan}, pool_map(workers), log)
    return require_manifest(plan.out_dir, plan.kind)


def _build_in_worker(build: Callable[[ShardTask, Path], None], task: ShardTask, path: Path) -> None:
    """``build(task, path)`` in a pool worker. An exception that would not survive the trip back to the
    parent (one that cannot be pickled and unpickled, which the pool reports only as ``BrokenProcessPool``) is
    replaced by a RuntimeError that names the shard and keeps the original's type and text. The replacement
    is raised outside the handler, so it carries no ``__context__``: where tblib's pickling support is
    installed (dask and distributed install it on import), a chained exception is pickled with its chain."""
    try:
        build(task, path)
        return
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))  # round trip of our own object, not untrusted data
        except Exception:
            replacement = RuntimeError(f"building {path}: {type(e).__name__}: {e}")
        else:
            raise
    raise replacement


def one_thread_per_process() -> None:
    """Worker initialiser: one BLAS/numba/torch thread per process (the fast setting on this machine)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["NUMBA_NUM_THREADS"] = "1"
