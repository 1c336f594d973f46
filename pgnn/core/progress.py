"""Progress that both a terminal and a log can read.

On a terminal (``stream`` is a TTY) a tqdm bar. Anywhere else (a log file, a pipe, the output DVC, Prefect or
CI capture) a plain line every ``every`` items (default: a tenth of the total; at most one a second) or every
``seconds`` (default 10 s), whichever comes first, and one line at the end, on both::

    graphs@train: 12/48 shards, 3.1 s/shard, eta 1m51s
    graphs@train: 48/48 shards, 3.0 s/shard, done in 2m24s

(tqdm's own ``disable=None`` hides the bar off a terminal and leaves a log with no progress at all.)
``PGNN_PROGRESS=0`` turns all of it off. The rate
and the eta count only the items done by this run, so a resumed run (``initial``) is not credited with the
work of the one before.

    with Progress(len(todo), "graphs@train", "shard", log=print) as progress:
        for task in todo:
            ...
            progress.update()

    for frame in track(frames, "predict", "frame"):
        ...
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from types import TracebackType
from typing import IO, Any, TypeVar

T = TypeVar("T")

DEFAULT_SECONDS = 10.0
MIN_SECONDS = 1.0  # no two lines closer than this (a fast loop writes its last line only)
_SILENCED = 0


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """No progress from anything started inside (``pgnn predict --quiet``)."""
    global _SILENCED
    _SILENCED += 1
    try:
        yield
    finally:
        _SILENCED -= 1


def format_duration(seconds: float) -> str:
    """``7.4`` -> ``7s``, ``111`` -> ``1m51s``, ``7500`` -> ``2h05m``."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Count items; show a bar on a terminal, write plain lines elsewhere (see the module doc).

    Args:
        total: items expected (None: unknown, then no eta and no count-based lines).
        desc: what is progressing, the start of every line (``graphs@train``).
        unit: one item (``shard``; lines say ``shards``).
        initial: items already done before this run (a resumed training run's step).
        every: a line every this many items (default: a tenth of ``total``), but not within
            :data:`MIN_SECONDS` of the previous one; and a line after ``seconds`` without one.
        stream: the bar's stream, and the lines' when ``log`` is None (default: ``sys.stderr`` at the time
            of the call, so pytest's capsys sees it).
        log: where the plain lines go instead of ``stream`` (e.g. ``print``, or a logger's ``info``).
        enabled: False shows nothing (a silent run); so does :func:`silenced` around the work, or the
            environment variable ``PGNN_PROGRESS=0``.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "item",
        *,
        initial: int = 0,
        every: int | None = None,
        seconds: float = DEFAULT_SECONDS,
        stream: IO[str] | None = None,
        log: Callable[[str], None] | None = None,
        enabled: bool = True,
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = initial
        self.every = every if every is not None else (max(1, math.ceil(total / 10)) if total else None)
        self.seconds = seconds
        self.enabled = enabled and _SILENCED == 0 and os.environ.get("PGNN_PROGRESS", "1") != "0"
        self._stream = stream if stream is not None else sys.stderr
        self._log = log
        self._initial = initial
        self._start = self._last_time = time.monotonic()
        self._last_n = initial
        self._closed = False
        self._bar: Any = None
        if self.enabled and _is_tty(self._stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                file=self._stream,
                leave=False,
                dynamic_ncols=True,
            )

    def update(self, n: int = 1) -> None:
        """``n`` more items done."""
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        if self.total is not None and self.n >= self.total:
            return  # close() writes the last line
        now = time.monotonic()
        since = now - self._last_time
        by_count = self.every is not None and self.n - self._last_n >= self.every and since >= MIN_SECONDS
        if by_count or since >= self.seconds:
            self._emit(self.line(now))
            self._last_time, self._last_n = now, self.n

    def line(self, now: float | None = None, finished: bool = False) -> str:
        """The plain progress line: ``desc: n/total units, rate, eta`` (``done in`` when finished)."""
        now = time.monotonic() if now is None else now
        elapsed = now - self._start
        plural = f"{self.unit}s"
        parts = [f"{self.n}/{self.total} {plural}" if self.total is not None else f"{self.n} {plural}"]
        done = self.n - self._initial
        if done > 0 and elapsed > 0:
            per_item = elapsed / done
            rate = f"{per_item:.1f} s/{self.unit}" if per_item >= 1 else f"{1 / per_item:.1f} {plural}/s"
            parts.append(rate)
            if finished:
                parts.append(f"done in {format_duration(elapsed)}")
            elif self.total is not None:
                parts.append(f"eta {format_duration(max(self.total - self.n, 0) * per_item)}")
        elif finished:
            parts.append(f"done in {format_duration(elapsed)}")
        return f"{self.desc}: " + ", ".join(parts)

    def close(self, finished: bool = True) -> None:
        """Remove the bar; write the last line (unless ``finished`` is False: the work stopped early)."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        if self.enabled and finished and self.n > self._initial:
            self._emit(self.line(finished=True))

    def _emit(self, text: str) -> None:
        if self._log is not None:
            self._log(text)
        else:
            print(text, file=self._stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(finished=exc_type is None)


def track(
    items: Iterable[T],
    desc: str,
    unit: str = "item",
    *,
    total: int | None = None,
    **kwargs: Any,
) -> Iterator[T]:
    """Yield ``items`` with a :class:`Progress` (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    progress = Progress(total, desc, unit, **kwargs)
    finished = False
    try:
        for item in items:
            yield item
            progress.update()
        finished = True
    finally:
        progress.close(finished)


class WithLength(Iterable[T]):
    """An iterable with a known length: lets :func:`track` show ``n/total`` and an eta for a generator."""

    def __init__(self, items: Iterable[T], length: int) -> None:
        self._items = items
        self._length = length

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return self._length


def with_length(items: Iterable[T], length: int) -> WithLength[T]:
    """``items`` (e.g. a generator) that says it has ``length`` items, for :func:`track`."""
    return WithLength(items, length)
