"""Atomic file writes: nothing half-written is ever left at the destination path.

Every artifact the pipeline produces is written to a temporary file in the destination's folder and then
renamed over the destination (``os.replace`` is atomic on POSIX within one file system). A killed process
leaves at most a ``.tmp-*`` file behind, which readers ignore and the next writer overwrites.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


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
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{dest.name}-", suffix=suffix, dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


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
