"""One writer at a time: an exclusive, non-blocking lock on a lock file that names its holder.

:func:`exclusive_lock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on a lock file and writes the holder's pid and
command into it. A second writer is refused at once (no waiting) with one line naming the holder::

    <lock file>: expected no other pgnn writer, pid 4242 holds it (pgnn train --params P.yaml); wait for
    it to end (or stop it)

The kernel releases a flock when its process dies, so a lock file left by a killed process (its pid dead) is
simply taken over: the flock is the truth, the pid only information. The lock file itself stays (removing it
would race with a process that just opened it). :func:`project_lock` is the lock of a project root,
``<root>/.pgnn/lock``, held by ``pgnn train --params`` (and the DVC stage runner and the flows).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pgnn.core.errors import PgnnError
from pgnn.core.io import write_error

PROJECT_LOCK = ".pgnn/lock"
"""The project root's lock file (relative to the root): gitignore ``.pgnn/``."""


class LockedError(PgnnError):
    """Another process holds the lock: ``holder`` is what its lock file says (pid, command), when known."""


def holder(path: str | Path) -> dict[str, object]:
    """What the lock file says about its holder (``{"pid": ..., "command": ...}``; {} when unreadable)."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _holder_text(info: dict[str, object]) -> str:
    pid = info.get("pid")
    command = info.get("command")
    who = f"pid {pid}" if pid is not None else "another process"
    return f"{who} holds it ({command})" if command else f"{who} holds it"


@contextlib.contextmanager
def exclusive_lock(
    path: str | Path, command: str | None = None, about: str | Path | None = None
) -> Iterator[Path]:
    """Hold an exclusive lock on the file ``path`` (created with its folders) for the block.

    ``command`` (default: this process's command line) is written into the file with the pid; ``about`` is
    the path the refusal names (default: the lock file).

    Raises:
        LockedError: another process holds the lock (the message names its pid and command).
        WriteError: the lock file cannot be created (no permission, a full disk).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise write_error(path, e) from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise write_error(path, e) from e
            raise LockedError(
                path if about is None else about,
                f"expected no other pgnn writer, {_holder_text(holder(path))}; "
                "wait for it to end (or stop it)",
            ) from None
        info = {"pid": os.getpid(), "command": command or " ".join(["pgnn", *sys.argv[1:]])}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield path
        # explicitly: a child forked inside the block (a DataLoader worker) shares the lock until it exits
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)  # releases the flock (when no forked child still holds a copy of the descriptor)


def project_lock(root: str | Path, what: str | None = None) -> contextlib.AbstractContextManager[Path]:
    """The lock of the project at ``root`` (``<root>/.pgnn/lock``): one writer of its stage outputs at a
    time. ``what`` says who holds it (``pgnn train --params P.yaml``, ``dvc stage train``)."""
    return exclusive_lock(Path(root) / PROJECT_LOCK, what)
