"""Atomic file writes: nothing half-written is ever left at the destination path.

Every artifact the pipeline produces is written to a temporary file in the destination's folder and then
renamed over the destination (``os.replace`` is atomic on POSIX within one file system). A killed process
leaves at most a ``.tmp-*`` file behind, which readers ignore and the next writer overwrites. A write that
fails (``No space left on device``, no permission) raises :class:`pgnn.errors.WriteError` naming the
destination. :func:`atomic_dir` does the same for a whole folder of outputs; :func:`verify_zip` checks the
CRC-32 of every member of a zip archive (``.npz`` shards, ``torch.save`` checkpoints).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from pgnn.core.errors import DataError, WriteError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(dest: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it onto ``dest`` if the block exits cleanly.

    ``suffix`` lets writers that key on the extension (``np.savez`` adds ``.npz``, pyarrow checks none)
    see the right one.
    """
    dest = Path(dest)
    tmp_path: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{dest.name}-", suffix=suffix, dir=dest.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp_path, dest)
    except OSError as e:
        if isinstance(e, WriteError) or not _about_output(e, dest, tmp_path):
            raise
        raise write_error(dest, e) from e
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


def write_error(dest: str | Path, error: OSError) -> WriteError:
    """A :class:`WriteError` naming ``dest`` for an OSError met while writing it (errno kept)."""
    reason = error.strerror or str(error) or type(error).__name__
    code = f" (errno {error.errno})" if error.errno is not None else ""
    return WriteError(dest, f"cannot write it: {reason}{code}", errno=error.errno)


def _about_output(error: OSError, dest: Path, tmp: Path | None) -> bool:
    """Whether an OSError met inside :func:`atomic_path` is about writing ``dest``: it names no file, or the
    temporary file, ``dest`` or a folder on the way to it (an OSError naming some other file, e.g. an input
    read inside the block, keeps its own name)."""
    if error.filename is None:
        return True
    named = {Path(str(name)) for name in (error.filename, error.filename2) if name is not None}
    ours = {dest, *dest.parents} | ({tmp} if tmp is not None else set())
    return bool(named & ours)


@contextlib.contextmanager
def atomic_open(dest: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file for writing; it replaces ``dest`` only when the block exits cleanly."""
    with atomic_path(dest) as tmp, open(tmp, mode) as f:
        yield f


def write_text_atomic(dest: str | Path, text: str) -> None:
    """Write ``text`` to ``dest`` atomically."""
    with atomic_open(dest, "w") as f:
        f.write(text)


def write_bytes_atomic(dest: str | Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` atomically."""
    with atomic_open(dest, "wb") as f:
        f.write(data)


def write_json_atomic(dest: str | Path, obj: Any) -> None:
    """Write ``obj`` as sorted, indented JSON atomically (stable bytes for equal content)."""
    write_text_atomic(dest, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_files(paths: Iterable[str | Path], threads: int | None = None) -> list[str]:
    """:func:`sha256_file` of each path, in order, hashed by ``threads`` threads (default: one a CPU, at
    most 4). hashlib and file reads release the GIL, so the threads hash in parallel: a step's input hashing
    no longer keeps all but one core idle before its process pool starts (measured: benchmarks/README.md,
    "Measurements behind the code")."""
    paths = list(paths)
    n = min(4, os.cpu_count() or 1) if threads is None else threads
    if n <= 1 or len(paths) < 2:
        return [sha256_file(p) for p in paths]
    chunks = [paths[i : i + 32] for i in range(0, len(paths), 32)]
    with ThreadPoolExecutor(max_workers=min(n, len(chunks))) as pool:
        return [h for hashes in pool.map(_sha256_list, chunks) for h in hashes]


def _sha256_list(paths: list[str | Path]) -> list[str]:
    return [sha256_file(p) for p in paths]


@contextlib.contextmanager
def atomic_dir(dest: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``dest``; it becomes ``dest`` only if the block exits cleanly.

    On success a previous ``dest`` is moved aside, the new folder renamed into place and the old one
    deleted (two renames: a reader sees the old folder, then the new one; a crash between them leaves the old
    one as ``.old-<name>-*`` beside it). On an exception ``dest`` is untouched and the temporary folder
    removed. The caller decides whether replacing ``dest`` is safe (it is replaced whole).
    """
    dest = Path(os.path.abspath(dest))  # "." or "out/.." would otherwise put the temporary folder inside it
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    except OSError as e:
        raise write_error(dest, e) from e
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
        yield tmp
        old: Path | None = None
        try:
            if dest.exists():
                old = Path(tempfile.mkdtemp(prefix=f".old-{dest.name}-", dir=dest.parent))
                os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
        except OSError as e:
            if old is not None and (old / dest.name).exists() and not dest.exists():
                os.replace(old / dest.name, dest)  # put the previous output back
            raise write_error(dest, e) from e
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def verify_zip(path: str | Path, what: str = "zip archive") -> None:
    """Check every member of a zip archive against the CRC-32 its headers record (reads the whole file).

    Raises:
        DataError: naming ``path`` (and the member) when the archive is unreadable or a member's bytes
            changed since it was written (bit rot, a partial copy, an edited file).
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except FileNotFoundError:
        raise DataError(path, f"expected a {what}, got no such file") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError, OSError) as e:
        raise DataError(path, f"expected an intact {what}, it is corrupted: {e}") from None
    if bad is not None:
        raise DataError(
            path, f"expected an intact {what}, it is corrupted: member {bad!r} fails its CRC-32 check"
        )
