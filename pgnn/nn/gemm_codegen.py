"""Writes ``pgnn/nn/gemm_tiles.py``: the straight-line register tiles of pgnn's matrix products.

A tile keeps ``ROWS x cols`` output elements in scalar locals across the whole sum, so that LLVM's SLP
vectorizer (switched on for these functions only, :func:`pgnn.nn.gemm.slp_vectorized`) holds them in vector
registers: each load of ``b`` then serves ``ROWS`` rows, and no partial sum goes through memory. numba has no
vector types or register arrays (a local array lives on the heap), so the locals are written out one by one;
this module writes them. Every element is still ``((0 + p_0) + p_1) + ...`` in the order of the sum, each
product and sum rounded once: the tiles change the speed, not a bit.

Run ``python -m pgnn.nn.gemm_codegen`` after changing it (``tests/nn/test_gemm.py`` checks the file is
current), then delete ``pgnn/nn/__pycache__/gemm.*.nb[ci]``: the tiles are inlined into pgnn.nn.gemm's
kernels, and numba keys their cache on gemm.py alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

ROWS = 4
"""Output rows per tile (rows of the product, columns of ``a`` for the row sum). Eight ran 5-25% faster but
took twice as long to compile (about 8 s on a fresh clone); pgnn.nn.gemm's loop for a tile's last columns
is written for four."""

COLS = (16, 8)
"""Output columns per tile: a wide tile, then one narrow tile for the remainder (the last ``< 8`` columns
are the caller's)."""

TARGET = Path(__file__).with_name("gemm_tiles.py")

HEADER = '''"""Register tiles of pgnn's matrix products (``python -m pgnn.nn.gemm_codegen`` writes this file).

Do not edit: change the generator. Plain Python functions; pgnn.nn.gemm compiles them with numba (SLP
vectorizer on, no fast-math). Each output element is summed from zero in the order of the sum, each product
and sum rounded once.
"""

import numpy as np
'''


PER_LINE = 4
"""Assignments per line (as one tuple assignment), so the file stays short and each line under 110 columns."""


def _accumulators(cols: int) -> list[str]:
    """The tile's locals, row by row: ``c{row}_{col}``."""
    return [f"c{r}_{c}" for r in range(ROWS) for c in range(cols)]


def _assign(targets: list[str], values: list[str], indent: str) -> list[str]:
    """``targets[n] = values[n]``, :data:`PER_LINE` to a line."""
    lines = []
    for n in range(0, len(targets), PER_LINE):
        lines.append(
            f"{indent}{', '.join(targets[n : n + PER_LINE])} = {', '.join(values[n : n + PER_LINE])}"
        )
    return lines


class Kind(NamedTuple):
    """One kind of tile; ``{cols}`` and ``{rows}`` in its texts are the tile's size."""

    signature: str
    doc: tuple[str, str]
    start: str
    """Each local's first value: ``ZERO``, or ``{store}`` (the ``out`` element it continues)."""
    loop: str
    x_of: str
    y_of: str


KINDS = (
    Kind(
        "product_tile_{cols}(a, b, out, i, j)",
        (
            "``out[i:i + {rows}, j:j + {cols}] = a[i:i + {rows}] @ b[:, j:j + {cols}]``, each element",
            "summed from zero over k in order.",
        ),
        "ZERO",
        "for k in range(b.shape[0]):",
        "a[i + {r}, k]",
        "b[k, j + {c}]",
    ),
    Kind(
        "row_sum_tile_{cols}(a, b, out, r0, r1, i, j)",
        (
            "``out[i:i + {rows}, j:j + {cols}] += a[r0:r1, i:i + {rows}].T @ b[r0:r1, j:j + {cols}]``,",
            "each element continuing its sum over the rows r0, r0 + 1, ... in order.",
        ),
        "{store}",
        "for r in range(r0, r1):",
        "a[r, i + {r}]",
        "b[r, j + {c}]",
    ),
)


def _tile(kind: Kind, cols: int) -> list[str]:
    """A tile function: the rows of ``out`` (``o0`` ...), ``kind.start`` in every local, the sum's loop
    (load the ``ROWS`` scalars of ``a`` and the ``cols`` of ``b``, add every product), then the stores."""
    acc = _accumulators(cols)
    rows = [f"o{r}" for r in range(ROWS)]
    stores = [f"o{r}[j + {c}]" for r in range(ROWS) for c in range(cols)]
    xs, ys = [f"x{r}" for r in range(ROWS)], [f"y{c}" for c in range(cols)]
    doc = [line.format(rows=ROWS, cols=cols) for line in kind.doc]
    lines = ["", "", f"def {kind.signature.format(cols=cols)}:", f'    """{doc[0]}', f'    {doc[1]}"""']
    lines += _assign(rows, [f"out[i + {r}]" for r in range(ROWS)], "    ")
    lines += _assign(acc, [kind.start.format(store=store) for store in stores], "    ")
    lines.append(f"    {kind.loop}")
    lines += _assign(xs, [kind.x_of.format(r=r) for r in range(ROWS)], "        ")
    lines += _assign(ys, [kind.y_of.format(c=c) for c in range(cols)], "        ")
    products = [f"{acc[r * cols + c]} + x{r} * y{c}" for r in range(ROWS) for c in range(cols)]
    lines += _assign(acc, products, "        ")
    lines += _assign(stores, acc, "    ")
    return lines


def source() -> str:
    """The text of ``gemm_tiles.py``."""
    lines = [HEADER.rstrip("\n"), "", f"ROWS = {ROWS}", f"COLS = {COLS}", "ZERO = np.float32(0.0)"]
    for kind in KINDS:
        for cols in COLS:
            lines += _tile(kind, cols)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    TARGET.write_text(source())
