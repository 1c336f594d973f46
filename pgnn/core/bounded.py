"""Bounded reading of files from strangers: no input costs more than a small multiple of its own size.

Every reader of a user's file (params and sensor YAML, own-format labels JSON, KITTI text files, ``.npy``,
``.pcd``, ``.ply`` point clouds) goes through these helpers and limits::

    MAX_TEXT_BYTES    4 MiB    a text file read whole (a KITTI label, calib or split file: 40000 label lines)
    MAX_JSON_BYTES    1 MiB    a JSON file (an own-format labels file: 7000 objects at ~150 bytes each)
    MAX_YAML_BYTES  256 KiB    a YAML file (params and sensor files are a few KiB; PyYAML is pure Python)
    MAX_DEPTH            64    nesting of a YAML or JSON document (params nest 4 deep)
    MAX_YAML_NODES    20000    values of a YAML document, and with every alias expanded (pgnn.core.yamlfile;
                               a resolved params file has ~500)

A file whose header declares more data than the file holds (a ``.npy`` of 10^10 rows in 192 bytes, an
ASCII ``.pcd`` of 4e9 points holding 4) is refused by :func:`check_declared_size` before anything is
allocated. Every refusal is a :class:`pgnn.core.errors.DataError` naming the file: one line, no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from pgnn.core.errors import DataError

MAX_TEXT_BYTES = 4 << 20
MAX_JSON_BYTES = 1 << 20
MAX_YAML_BYTES = 256 << 10
MAX_DEPTH = 64
MAX_YAML_NODES = 20_000


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as e:
        raise DataError(path, f"cannot read it: {e.strerror or e}") from None


def read_bytes(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of ``path`` (``what`` it should be, for the message), refused beyond ``limit`` bytes."""
    path = Path(path)
    size = _size(path)
    if size > limit:
        raise DataError(path, f"expected {what} of at most {limit >> 10} KiB, got {size} bytes")
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot read it: {e.strerror or e}") from None


def read_text(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES, encoding: str = "utf-8") -> str:
    """The text of ``path`` (at most ``limit`` bytes); a DataError naming the first byte that is not
    ``encoding`` (``ascii`` for KITTI's files)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        bad = f"byte {data[e.start]:#x} at offset {e.start}"
        raise DataError(path, f"expected {what} ({encoding.upper()} text), got {bad}") from None


def check_declared_size(path: str | Path, declared: int, available: int, what: str) -> None:
    """Refuse a file whose header declares ``declared`` bytes (at least) of data where ``available`` follow
    the header: it is cut off, or lies about its size (call it before allocating the declared amount)."""
    if declared > available:
        raise DataError(
            path,
            f"expected {what}: its header declares {declared} bytes of data or more, the file holds "
            f"{available} (it is cut off, or not what it claims)",
        )


# ----------------------------------------------------------------------------------------------------
# JSON


def depth(data: Any) -> int:
    """How deep the lists and dicts of parsed JSON nest (a scalar: 0), walked without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def read_json(path: str | Path, what: str, limit: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The data of the JSON file ``path``: at most ``limit`` bytes, nested at most ``max_depth`` deep; a
    DataError with the line on bad JSON."""
    data = read_bytes(path, what, limit)
    try:
        value = json.loads(data)
    except RecursionError:  # the parser recurses; past Python's limit it stops cleanly
        value = None
    except UnicodeDecodeError as e:
        raise DataError(path, f"expected {what} in UTF-8, got byte {data[e.start]:#x}") from None
    except json.JSONDecodeError as e:
        raise DataError(path, f"expected {what}, got {e.msg} (column {e.colno})", e.lineno) from None
    levels = depth(value) if value is not None else max_depth + 1
    if levels > max_depth:
        raise DataError(path, f"expected {what} nested at most {max_depth} deep, got deeper")
    return value


# ----------------------------------------------------------------------------------------------------
# .npy


_NPY_HEADERS = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}


def read_npy(path: str | Path, what: str) -> np.ndarray:
    """A ``.npy`` array without pickles, its header checked against the file's size before any allocation.

    Raises:
        DataError: naming ``path``: not a ``.npy`` file (versions 1.0 and 2.0, as ``np.save`` writes them),
            an object (pickled) dtype, or a header declaring more (or less) data than the file holds.
    """
    path = Path(path)
    size = _size(path)
    try:
        with open(path, "rb") as f:
            version = npy_format.read_magic(f)
            if version not in _NPY_HEADERS:
                raise ValueError(f"unsupported .npy version {version[0]}.{version[1]}")
            shape, fortran, dtype = _NPY_HEADERS[version](f)
            count = int(np.prod(shape, dtype=object))
            available = size - f.tell()
            if not dtype.hasobject and count * dtype.itemsize == available:
                array = np.fromfile(f, dtype=dtype, count=count)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(path, f"expected {what}, could not read it: {e}") from None
    if dtype.hasobject:
        raise DataError(path, f"expected {what} of numbers, got dtype {dtype} (pickled objects)")
    check_declared_size(path, count * dtype.itemsize, available, what)
    if count * dtype.itemsize != available:
        raise DataError(path, f"expected {what}, got {available - count * dtype.itemsize} bytes after it")
    return array.reshape(shape, order="F" if fortran else "C")
