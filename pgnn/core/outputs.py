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
* Never onto an input: an output equal to, inside, or holding one of the inputs a command names (paths
  compared resolved, and by ``os.path.samefile``) is refused, ``--force`` or not. Under ``pgnn.cli`` the
  inputs are also found without being named (:func:`command_inputs`): every value of the command's arguments
  that names an existing path (all options but those declared :class:`OutputPath`), and every path the
  process opened for reading or listed while the command ran (an audit hook, ``sys.addaudithook``). An
  output equal to or holding one of these is refused, checked again at the moment it is replaced (a folder:
  just before the rename; a file: the command checks before writing), so an input found late (a label file
  under ``--subset``) is never replaced.
* All or nothing: :func:`replace_folder` builds the new folder as a temporary sibling and renames it into
  place (``pgnn.core.io.atomic_dir``), under an exclusive lock (``pgnn.core.lock``, the lock file in the
  temporary folder: :func:`lock_path`): a failed or killed command leaves the earlier folder; a second
  writer is refused at once.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pgnn.core.errors import DataError, WriteError
from pgnn.core.io import atomic_dir, write_json_atomic
from pgnn.core.lock import exclusive_lock

MARKER = ".pgnn-output"
"""The file that marks a folder as pgnn's output."""
MARKER_FORMAT = 1
RECOGNISE_MAX_BYTES = 1 << 28
"""A larger existing file is not read to recognise it as pgnn's (it needs ``--force``): 256 MiB."""
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
        with _not_inputs():
            info = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    who = info.get("made_by") if isinstance(info, dict) else None
    return who if isinstance(who, str) else None


class OutputPath(argparse.Action):
    """``action=`` of an argument naming a path the command writes: :func:`argument_paths` leaves it out of
    the command's inputs (a value is stored as with the default action)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and those of its sub-parsers (``pgnn check train-step``)."""
    actions = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                actions += _all_actions(sub)
    return actions


def argument_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Path]:
    """Every value of ``args`` (strings and paths, also in lists) that names an existing path, except those
    of :class:`OutputPath` arguments: what the command may read, whatever option names it."""
    outputs = {a.dest for a in _all_actions(parser) if isinstance(a, OutputPath)}
    found: list[Path] = []
    for dest, value in vars(args).items():
        if dest in outputs:
            continue
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, str | Path) and str(v) and os.path.lexists(v):
                found.append(Path(v))
    return found


class _Record:
    """What the running command read: absolute paths opened for reading or listed, its path arguments."""

    def __init__(self, arguments: list[Path]) -> None:
        self.arguments = arguments
        self.reads: set[str] = set()
        self.real: dict[str, str] = {}  # realpath cache of the reads


_record: _Record | None = None
_paused = threading.local()  # pgnn's own look at an output (its marker, its content) is not an input
_hooked = False
_NOT_READ = os.O_CREAT | os.O_TRUNC


def _on_audit(event: str, args: tuple) -> None:
    record = _record
    if record is None or getattr(_paused, "depth", 0):
        return
    try:
        if event == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and (flags & _NOT_READ or flags & os.O_ACCMODE == os.O_WRONLY):
                return  # a file pgnn creates or truncates is an output, not an input
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args[0] is not None else "."
        else:
            return
        if isinstance(path, str | bytes | os.PathLike):
            record.reads.add(os.path.abspath(os.fsdecode(path)))
    except Exception:  # noqa: BLE001 (an audit hook must never break the operation it watches)
        return


@contextlib.contextmanager
def command_inputs(arguments: Iterable[str | Path] = ()) -> Iterator[None]:
    """While the block runs (one command), take as inputs ``arguments`` (:func:`argument_paths`) and every
    path the process opens for reading or lists (``open`` and ``os.listdir``/``os.scandir`` audit events,
    any thread): every output check (:func:`check_not_input`) then refuses an output equal to or holding one
    of them. Reads by C++ libraries (ONNX Runtime, Arrow) raise no event; their files are arguments."""
    global _record, _hooked
    if not _hooked:
        sys.addaudithook(_on_audit)
        _hooked = True
    previous = _record
    _record = _Record([Path(a) for a in arguments])
    try:
        yield
    finally:
        _record = previous


def inputs_read() -> list[Path]:
    """The paths read so far by the running command (:func:`command_inputs`; [] outside one)."""
    return sorted(Path(p) for p in _record.reads) if _record is not None else []


@contextlib.contextmanager
def _not_inputs() -> Iterator[None]:
    _paused.depth = getattr(_paused, "depth", 0) + 1
    try:
        yield
    finally:
        _paused.depth -= 1


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _read_conflict(dest: Path) -> Path | None:
    """The first argument or read path of the running command that ``dest`` is or holds (links followed,
    and as written; a hard link to a read file by inode), or None."""
    record = _record
    if record is None:
        return None
    with _not_inputs():
        seen = [*(os.path.abspath(a) for a in record.arguments), *sorted(record.reads)]
        out_abs, out_real = os.path.abspath(dest), os.path.realpath(dest)
        for path in seen:
            if _within(path, out_abs):
                if os.path.lexists(path):
                    return Path(path)
                continue
            real = record.real.get(path)
            if real is None:
                real = record.real[path] = os.path.realpath(path)
            if _within(real, out_real) and os.path.lexists(path):
                return Path(path)
        try:
            st = os.stat(dest)
        except OSError:
            return None
        if st.st_nlink > 1 and not os.path.isdir(dest):  # another name of the same file
            for path in seen:
                with contextlib.suppress(OSError):
                    other = os.stat(path)
                    if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                        return Path(path)
    return None


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
    """Raise OutputError when ``dest`` is, lies inside or holds one of ``inputs``, or is or holds a path the
    running command named or read (:func:`command_inputs`), ``--force`` or not."""
    conflict = input_conflict(dest, inputs) or _read_conflict(Path(dest))
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
    with _not_inputs():
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
    if dest.exists() and not force and not (ours is not None and _recognised(ours, dest)):
        raise OutputError(
            dest,
            "expected a new file (it exists and pgnn cannot tell it wrote it); pass --force to replace it",
        )


def _recognised(ours: Callable[[Path], bool], dest: Path) -> bool:
    """``ours(dest)``, for a file of at most :data:`RECOGNISE_MAX_BYTES` (what recognising may cost)."""
    if not dest.is_file() or dest.stat().st_size > RECOGNISE_MAX_BYTES:
        return False
    with _not_inputs():  # reading the earlier output to recognise it does not make it an input
        return ours(dest)


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
    with _not_inputs():
        siblings = sorted(dest.parent.iterdir()) if dest.parent.is_dir() else []
    for p in siblings:
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
    checked again; temporary siblings of a killed earlier writer are removed. When the block ends, ``dest``
    is checked against the inputs once more (what the command read meanwhile: :func:`command_inputs`) before
    it is replaced. On an exception ``dest`` keeps its previous content (or stays absent).

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
            check_not_input(dest, inputs)  # at the moment of replacing: everything read by now
