"""The one exception type for bad input data."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad or inconsistent input data.

    The message always names the file (and line, when there is one) and says what was expected, e.g.
    ``calib/000001.txt:3: expected 12 numbers after 'P2:', got 11``.
    """

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")
