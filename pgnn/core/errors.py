"""The exceptions a user can cause and fix, and how they reach the user: one line, no traceback.

Every pgnn error names where the problem is (a file, its line, a params key) and what was expected::

    PgnnError                 base: ``path``, ``message``, ``line``
    +-- DataError (ValueError)   bad or inconsistent input data (a KITTI file, a checkpoint, a cached shard)
    |   +-- ParamsError          a bad ``params.yaml`` value: also ``key`` (``train.learning_rate``)
    +-- WriteError (OSError)     an output could not be written (``No space left on device``), ``errno``

They pickle with all their fields, so an error raised in a worker process (``data.workers > 1``) reaches the
parent intact.

:func:`user_errors` (the ``pgnn`` command) and :func:`install_user_errors` (the DVC stage scripts) turn a
user error (a pgnn error, or an ``OSError`` that names its file, e.g. a missing file) into ONE line on
stderr, ``<prog>: error: <file>[:<line>]: <what was expected>``, and exit status 1. ``--debug`` or the
environment variable ``PGNN_DEBUG=1`` shows the full traceback instead. Other exceptions (bugs) always keep
their traceback.

Input comes from strangers, so what an error says about it is tamed: the text of every pgnn error, and every
line reported, has its control characters escaped (:func:`escape`: a terminal escape sequence in a PLY
property name prints as ``\\x1b[31m``, not as red) and is at most :data:`MAX_MESSAGE` characters; a value
quoted from the input goes through :func:`excerpt` (a short ``repr``, however large or deep the value).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import reprlib
import sys
import typing
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

MAX_MESSAGE = 1000
"""The most characters of an error's message (the rest is cut: a message is one line a person reads)."""

MAX_EXCERPT = 80
"""The most characters of a value quoted from the input (:func:`excerpt`)."""

# Control characters (C0, DEL, C1), format characters (bidi overrides), line and paragraph separators and
# lone surrogates (undecodable bytes read with surrogateescape): none is printed raw.
_UNSAFE = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def escape(text: str) -> str:
    """``text`` with each control or format character written as its Python escape (``\\x1b``,
    ``\\u202e``); printable text, backslashes included, is unchanged."""
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(ch) in _UNSAFE
        else ch
        for ch in text
    )


def _cut(text: str, limit: int, say_how_much: bool = True) -> str:
    if len(text) <= limit:
        return text
    more = f"... ({len(text) - limit} more characters)" if say_how_much else "..."
    return text[: max(limit - len(more), 0)] + more


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxtuple = _REPR.maxlist = _REPR.maxarray = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_EXCERPT


def excerpt(value: Any, limit: int = MAX_EXCERPT) -> str:
    """A short, escaped ``repr`` of a value read from the input: at most ``limit`` characters, whatever its
    size or nesting (a YAML alias bomb's billion items, a megabyte string), control characters escaped."""
    return _cut(escape(_REPR.repr(value)), limit, say_how_much=False)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``word`` (``difflib``), or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_line_text(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one safe line: its lines joined with ``; ``, control characters escaped, at most ``limit``
    characters."""
    joined = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return _cut(escape(joined), limit)


def _rebuild(cls: type[PgnnError], args: tuple[Any, ...], kwargs: dict[str, Any]) -> PgnnError:
    """Unpickle a pgnn error by calling its constructor again (see :meth:`PgnnError.__reduce__`)."""
    return cls(*args, **kwargs)


class PgnnError(Exception):
    """Base of the errors a user can cause and fix; the text is ``<path>[:<line>]: <message>``."""

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.message = one_line_text(message)
        self.line = line
        super().__init__(f"{self.where()}: {self.message}")

    def where(self) -> str:
        """``path`` or ``path:line`` (control characters escaped): the place the message is about."""
        path = escape(self.path)
        return f"{path}:{self.line}" if self.line is not None else path

    def _ctor_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the constructor beyond ``(path, message, line)`` (subclasses add theirs)."""
        return {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's default reduce calls cls(*self.args), i.e. cls(formatted_text): a TypeError in the
        # process that unpickles it (a process pool's parent). Rebuild from the fields instead.
        return _rebuild, (type(self), (self.path, self.message, self.line), self._ctor_kwargs())


class DataError(PgnnError, ValueError):
    """Bad or inconsistent input data.

    The message always names the file (and line, when there is one) and says what was expected, e.g.
    ``calib/000001.txt:3: expected 12 numbers after 'P2:', got 11``.
    """


class ParamsError(DataError):
    """A bad value in ``params.yaml``: names the file, the key (``train.learning_rate``), what was wrong."""

    def __init__(self, path: str | Path, message: str, line: int | None = None, *, key: str = "") -> None:
        self.key = key
        super().__init__(path, message, line)

    def where(self) -> str:
        base = super().where()
        return f"{base}: {_cut(escape(self.key), MAX_EXCERPT, say_how_much=False)}" if self.key else base

    def _ctor_kwargs(self) -> dict[str, Any]:
        return {"key": self.key}


class WriteError(PgnnError, OSError):
    """An output file could not be written (a full disk, no permission): names the file it was writing."""

    def __init__(
        self, path: str | Path, message: str, line: int | None = None, *, errno: int | None = None
    ) -> None:
        super().__init__(path, message, line)
        self.errno = errno  # OSError's field; strerror stays unset so str() is our one line

    def _ctor_kwargs(self) -> dict[str, Any]:
        return {"errno": self.errno}


_KEY_PART = re.compile(r"[A-Za-z0-9_]+")


def _location(problem: dict[str, Any]) -> str:
    """A pydantic error location as a params key: ``("levels", 0, "radius")`` -> ``levels.0.radius``, without
    the tags pydantic adds for the alternatives of a union (``constrained-int``, ``literal['auto']``). The
    unknown key of an ``extra_forbidden`` problem is the user's and kept whatever it holds (``x-defs``)."""
    loc = tuple(problem.get("loc", ()))
    head, tail = (loc[:-1], loc[-1:]) if problem.get("type") == "extra_forbidden" else (loc, ())
    parts = [str(p) for p in head if isinstance(p, int) or _KEY_PART.fullmatch(str(p))]
    return ".".join(parts + [str(p) for p in tail])


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``X``, ``X | None``, ``tuple[X, ...]``), or None."""
    if hasattr(annotation, "model_fields"):
        return annotation
    return next((m for m in map(_model_in, typing.get_args(annotation)) if m is not None), None)


def _keys_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the pydantic model found at ``loc`` (list indexes skipped) inside ``model``."""
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return []
        model = _model_in(fields[part].annotation)
    return list(getattr(model, "model_fields", {}))


def params_error(path: str | Path, error: Any, prefix: str = "", model: Any = None) -> ParamsError:
    """A :class:`ParamsError` for the first problem of a pydantic ``ValidationError`` (one line).

    ``prefix`` is the params section the validated dict came from (``train``); the key is
    ``<prefix>.<field location>``. The problems of a union's alternatives (``num_workers``: an int or
    ``"auto"``) are one problem: ``expected A or B``. The value is quoted as a short :func:`excerpt`. With
    the validated ``model`` (a pydantic class), an unknown key gets the closest known one: ``(did you mean
    'initial_lr'?)``.
    """
    problems = error.errors()
    first = problems[0] if problems else {"loc": (), "msg": str(error), "input": None}
    loc = _location(first)
    key = ".".join(p for p in (prefix, loc) if p)
    same = [p for p in problems if _location(p) == loc] or [first]
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        where = tuple(first.get("loc", ())) or ("",)
        known = _keys_at(model, where[:-1]) if model is not None else []
        message = "unknown key (not a setting of this section)" + did_you_mean(str(where[-1]), known)
    elif kind == "missing":
        message = "expected a value, got none"
    else:
        alternatives = dict.fromkeys(
            p.get("msg", "invalid value").removeprefix("Value error, ") for p in same
        )
        message = f"{' or '.join(alternatives)}, got {excerpt(first.get('input'))}"
    others = len(problems) - len(same)
    if others > 0:
        message += f" (and {others} more problem{'s' if others > 1 else ''})"
    return ParamsError(path, message, key=key)


# ----------------------------------------------------------------------------------------------------
# reporting


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is one the user can fix from its message alone: a pgnn error, or an OSError that
    names its file (a missing input, no permission, a full disk)."""
    if isinstance(error, PgnnError):
        return True
    return isinstance(error, OSError) and error.filename is not None


def one_line(error: BaseException) -> str:
    """The error's text as one line (an OSError as ``<file>: <reason>``)."""
    if isinstance(error, OSError) and not isinstance(error, PgnnError) and error.filename is not None:
        text = f"{error.filename}: {error.strerror or error}"
    else:
        text = str(error)
    return one_line_text(text) or type(error).__name__


def debug_enabled(flag: bool | None = None) -> bool:
    """``flag`` (``--debug``) or, when it is not set, the environment variable ``PGNN_DEBUG`` (1/true/yes)."""
    if flag:
        return True
    return os.environ.get("PGNN_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def report(prog: str, error: BaseException) -> None:
    """Print ``<prog>: error: <one line>`` to stderr."""
    print(f"{prog}: error: {one_line(error)}", file=sys.stderr, flush=True)


@dataclass
class Outcome:
    """What :func:`user_errors` saw: ``exit_code`` 1 after a reported user error, else 0."""

    exit_code: int = 0
    error: BaseException | None = None


@contextlib.contextmanager
def user_errors(prog: str, debug: bool | None = None) -> Iterator[Outcome]:
    """Report a user error raised in the block as one line on stderr and swallow it (``outcome.exit_code``
    becomes 1); with ``debug`` (or ``PGNN_DEBUG=1``) it propagates with its traceback. Other exceptions
    always propagate::

        with user_errors("pgnn eval", args.debug) as outcome:
            return run(args)
        return outcome.exit_code
    """
    outcome = Outcome()
    try:
        yield outcome
    except Exception as e:
        if not is_user_error(e) or debug_enabled(debug):
            raise
        report(prog, e)
        outcome.exit_code, outcome.error = 1, e


def install_user_errors(prog: str | None = None) -> None:
    """Make an uncaught user error end this script with one line on stderr (exit status 1), not a
    traceback (unless ``PGNN_DEBUG=1``): a ``sys.excepthook`` for scripts such as ``stages/*.py``.

    ``prog`` names the script in the message (default: ``stages/<name>.py`` style, from ``sys.argv[0]``).
    """
    name = prog or _script_name()
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        if isinstance(error, Exception) and is_user_error(error) and not debug_enabled():
            report(name, error)
        else:
            previous(kind, error, tb)

    sys.excepthook = hook


def _script_name() -> str:
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    return f"{script.parent.name}/{script.name}" if script.parent.name else script.name
