"""``pgnn bench NAME [--json] [--arg KEY=VALUE ...]``: run one of the repo's benchmarks and print its table.

The benchmarks are the scripts in the source repository's ``benchmarks/`` folder (next to the ``pgnn``
package; a wheel install has none). Each exposes ``run_benchmark(**options) -> dict`` and usually
``format_table(result) -> str``; ``--json`` prints the dict instead of the table. ``--arg`` passes one of
``run_benchmark``'s keyword arguments (the value is read as JSON when it parses, else as a string), e.g.
``pgnn bench cache --arg repeat=3 --arg synthetic=4``. Benchmarks run on one thread (``NUMBA_NUM_THREADS``
and ``OMP_NUM_THREADS`` default to 1).

| NAME  | script                       | measures                                                        |
|-------|------------------------------|-----------------------------------------------------------------|
| graph | benchmarks/graph_build.py    | graph + targets per frame, pgnn vs the original's approach       |
| synth | benchmarks/synth_speed.py    | synthetic frame generation per stage                             |
| cache | benchmarks/cache_io.py       | graph cache layouts: size, write, read                           |
| eval  | benchmarks/eval_speed.py     | KITTI evaluation on the full val split                           |
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from pgnn.core.errors import DataError

# NAME -> script stem in benchmarks/
BENCHMARKS: dict[str, str] = {
    "graph": "graph_build",
    "synth": "synth_speed",
    "cache": "cache_io",
    "eval": "eval_speed",
    "export": "export",
}
RUN_FUNCTION = "run_benchmark"
TABLE_FUNCTION = "format_table"


def benchmarks_dir() -> Path:
    """The repo's ``benchmarks/`` folder: a sibling of the ``pgnn`` package folder."""
    return Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(stem: str, folder: Path | None = None) -> ModuleType:
    """Import ``<folder>/<stem>.py`` (default: :func:`benchmarks_dir`) as a module.

    Raises:
        DataError: the folder or the script is missing (e.g. pgnn installed from a wheel).
    """
    folder = benchmarks_dir() if folder is None else Path(folder)
    path = folder / f"{stem}.py"
    if not folder.is_dir():
        raise DataError(
            folder,
            "expected the source repo's benchmarks/ folder next to the pgnn package "
            "(a wheel install has none: run from a clone)",
        )
    if not path.is_file():
        raise DataError(path, "expected a benchmark script here")
    name = f"pgnn_benchmarks_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DataError(path, "expected an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def run_function(module: ModuleType) -> Callable[..., dict[str, Any]]:
    """The module's ``run_benchmark``. Raises DataError when the script has none."""
    fn = getattr(module, RUN_FUNCTION, None)
    if not callable(fn):
        where = module.__file__ or module.__name__
        raise DataError(where, f"expected a {RUN_FUNCTION}(...) -> dict function; it only runs as a program")
    return fn


def parse_options(pairs: list[str], fn: Callable[..., Any]) -> dict[str, Any]:
    """``["repeat=3", "root=/data"]`` -> {"repeat": 3, "root": "/data"}, names checked against ``fn``.

    Raises:
        ValueError: a pair without ``=``, or a name ``fn`` does not take.
    """
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        if key not in params and not takes_any:
            raise ValueError(f"{RUN_FUNCTION} takes no option {key!r}; it takes: {', '.join(params)}")
        try:
            options[key] = json.loads(text)
        except json.JSONDecodeError:
            options[key] = text
    return options


def _jsonable(value: Any) -> Any:
    """numpy scalars and arrays, paths -> plain JSON values (for ``json.dumps(default=...)``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=list(BENCHMARKS), help="which benchmark")
    parser.add_argument("--json", action="store_true", help="print the result dict as JSON, not the table")
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of the benchmark's run_benchmark (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    module = load_benchmark(BENCHMARKS[args.name])
    fn = run_function(module)
    try:
        options = parse_options(args.arg, fn)
    except ValueError as e:
        print(f"pgnn bench: error: {e}", file=sys.stderr)
        return 2
    result = fn(**options)
    table = getattr(module, TABLE_FUNCTION, None)
    if args.json or not callable(table):
        print(json.dumps(result, default=_jsonable, indent=None if args.json else 2))
    else:
        print(table(result))
    return 0
