"""Where pgnn may write: decide whether an output path may be (re)placed, and replace a folder safely.

The rules every command follows (``docs/outputs.md`` lists each output path):

* A folder pgnn made carries a marker, ``.pgnn-output`` (JSON: ``{"made_by": "pgnn synth", "format": 1}``).
  pgnn writes a folder output only when the folder is absent, empty, or marked as made by the same command;
  anything else (a KITTI root, a ``.git``, a folder of label files) is refused with one line naming the folder
  and the flag that overrides it::

      <folder>: expected an empty folder or one pgnn predict made (it holds 3 entries that are not pgnn's:
      .git/, 000000.txt, calib/); pass --force to replace it

* A lone output file (a JSON, a ``.bin``, a PNG) carries no marker: an existing one is replaced only when the
  command recognises it as its own output (``ours``) or with ``--force``.
* Never onto an input: an output equal to, inside, or holding one of the command's inputs (paths compared
  resolved, and by ``os.path.samefile``) is refused, ``--force`` or not.
* All or nothing: :func:`replace_folder` builds the new folder as a temporary sibling and renames it into
  place (``pgnn.core.io.atomic_dir``), under an exclusive lock (``pgnn.core.lock``, the lock file in the
  temporary folder: :func:`lock_path`): a failed or killed command leaves the earlier folder; a second
  writer is refused at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pgnn.core.errors import DataError, WriteError
from pgnn.core.io import atomic_dir, write_json_atomic
from pgnn.core.lock import exclusive_lock

MARKER = ".pgnn-output"
"""The file that marks a folder as pgnn's output."""
MARKER_FORMAT = 1
FORCE_HELP = "replace an existing output that pgnn cannot tell it made (never one of the command's inputs)"
"""The help of every command's ``--force``."""


class OutputError(DataError):
    """An output path pgnn may not write: someone else's files, or one of the command's own inputs."""


def write_marker(folder: str | Path, made_by: str) -> None:
    """Mark ``folder`` as made by ``made_by`` (``pgnn synth``, ``pgnn train``)."""
    write_json_atomic(Path(folder) / MARKER, {"format": MARKER_FORMAT, "made_by": made_by})


def made_by(folder: str | Path) -> str | None:
    """Which pgnn command made ``folder`` according to its marker (None: no readable marker)."""
    try:
        info = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    who = info.get("made_by") if isinstance(info, dict) else None
    return who if isinstance(who, str) else None


def _resolved(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _same(a: Path, b: Path) -> bool:
    if _resolved(a) == _resolved(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def input_conflict(dest: str | Path, inputs: Iterable[str | Path]) -> Path | None:
    """The first existing path of ``inputs`` that ``dest`` is, lies inside, or holds (None: no conflict; an
    input that does not exist has nothing to lose, and its reader names it)."""
    for given in inputs:
        if not os.path.lexists(given):
            continue
        if _same(Path(dest), Path(given)):
            return Path(given)
        for view in (_resolved, os.path.abspath):  # the links followed, and as written (a linked label_2/)
            out, path = Path(view(dest)), Path(view(given))
            if out.is_relative_to(path) or path.is_relative_to(out):
                return Path(given)
    return None


def check_not_input(dest: str | Path, inputs: Iterable[str | Path]) -> None:
    """Raise OutputError when ``dest`` is, lies inside or holds one of ``inputs`` (``--force`` or not)."""
    conflict = input_conflict(dest, inputs)
    if conflict is not None:
        raise OutputError(
            dest,
            f"expected an output path apart from this command's inputs, it would overwrite {conflict}; "
            "choose another path",
        )


def _listing(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def foreign_entries(folder: Path, maker: str) -> list[str]:
    """The entries of ``folder`` that stop pgnn ``maker`` from replacing it: all of them, unless the folder is
    marked as ``maker``'s (``name/`` for a folder); [] for an absent or empty folder."""
    if not folder.is_dir() or made_by(folder) == maker:
        return []
    return sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())


def check_output_folder(
    dest: str | Path, maker: str, *, force: bool = False, inputs: Iterable[str | Path] = ()
) -> None:
    """Raise OutputError unless ``maker`` may replace the folder ``dest`` whole (see the module docstring);
    ``force`` allows replacing a folder someone else made, never an input."""
    dest = Path(dest)
    check_not_input(dest, inputs)
    if dest.exists() and not dest.is_dir():
        raise OutputError(dest, "expected a folder (or no such path), got a file")
    entries = foreign_entries(dest, maker)
    if entries and not force:
        other = made_by(dest)
        n = len(entries)
        what = f"{n} entr{'y' if n == 1 else 'ies'}"
        whose = f"{other}'s output, not {maker}'s" if other else f"{what} that pgnn did not make"
        raise OutputError(
            dest,
            f"expected an empty folder or one {maker} made (it holds {whose}: {_listing(entries)}); "
            "pass --force to replace it",
        )


def check_output_file(
    dest: str | Path,
    *,
    force: bool = False,
    inputs: Iterable[str | Path] = (),
    ours: Callable[[Path], bool] | None = None,
) -> None:
    """Raise OutputError unless the file ``dest`` may be written: not an input, not a folder, and absent,
    recognised by ``ours`` as this command's own earlier output, or ``force``."""
    dest = Path(dest)
    check_not_input(dest, inputs)
    if dest.is_dir():
        raise OutputError(dest, "expected a file path, got a folder")
    if dest.exists() and not force and not (ours is not None and ours(dest)):
        raise OutputError(
            dest,
            "expected a new file (it exists and pgnn cannot tell it wrote it); pass --force to replace it",
        )


def json_object_with_keys(path: Path, keys: Callable[[set[str]], bool]) -> bool:
    """Whether ``path`` holds a JSON object whose key set passes ``keys`` (a recogniser for ``ours``)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and keys(set(obj))


def starts_with(prefix: str) -> Callable[[Path], bool]:
    """A recogniser for ``ours``: the file's text starts with ``prefix`` (a header pgnn writes)."""

    def check(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(len(prefix)) == prefix
        except OSError:
            return False

    return check


def clean_stale_siblings(dest: Path) -> None:
    """Tidy what a killed writer of ``dest`` left beside it (``pgnn.core.io.atomic_dir``), with the lock held:
    a marked temporary ``.tmp-<name>-*`` folder is removed; a marked earlier output ``.old-<name>-*/<name>``
    goes back to ``dest`` when the kill came between the two renames, else it is removed."""
    pattern = re.compile(rf"\.(tmp|old)-{re.escape(dest.name)}-[a-z0-9_]{{8}}")
    for p in sorted(dest.parent.iterdir()) if dest.parent.is_dir() else ():
        if not (pattern.fullmatch(p.name) and p.is_dir()):
            continue
        inner = p / dest.name if p.name.startswith(".old-") else p
        if made_by(inner) is None:
            continue  # not pgnn's: left alone
        if inner is not p and not dest.exists():
            os.replace(inner, dest)
        shutil.rmtree(p, ignore_errors=True)


def lock_path(dest: str | Path) -> Path:
    """The lock file of the folder output ``dest``, kept outside it and its folder (nothing is left beside the
    user's files): ``<temp dir>/pgnn-locks-<uid>/<name>-<hash of the resolved path>.lock``."""
    resolved = _resolved(dest)
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pgnn-locks-{os.getuid()}" / f"{resolved.name}-{key}.lock"


@contextlib.contextmanager
def replace_folder(
    dest: str | Path, maker: str, *, force: bool = False, inputs: Iterable[str | Path] = ()
) -> Iterator[Path]:
    """Yield an empty, marked temporary folder that replaces ``dest`` whole when the block exits cleanly.

    ``dest`` is checked (:func:`check_output_folder`), then locked (a second writer is refused at once) and
    checked again; temporary siblings of a killed earlier writer are removed. On an exception ``dest`` keeps
    its previous content (or stays absent).

    Raises:
        OutputError: ``dest`` holds what ``maker`` did not make (without ``force``) or is an input.
        pgnn.core.lock.LockedError: another process is writing ``dest``.
    """
    inputs = list(inputs)
    dest = Path(os.path.abspath(dest))
    check_output_folder(dest, maker, force=force, inputs=inputs)
    with exclusive_lock(lock_path(dest), None, about=dest):
        check_output_folder(dest, maker, force=force, inputs=inputs)
        clean_stale_siblings(dest)
        with atomic_dir(dest) as tmp:
            write_marker(tmp, maker)
            try:
                yield tmp
            except WriteError as e:  # name the file at its final place, not inside the temporary folder
                if not Path(e.path).is_relative_to(tmp):
                    raise
                where = dest / Path(e.path).relative_to(tmp)
                raise WriteError(where, f"{e.message}; {dest} left unchanged", errno=e.errno) from e
