"""The spread of a figure over runs that differ only in their seed, and the rule that calls a gap noise.

A group's figure is written ``mean ± sd``: the mean over its runs and the sample standard deviation (``n - 1``
in the denominator, :func:`statistics.stdev`). Two rows' figures differ *within noise* when
``|mean_a - mean_b| <= sd_a + sd_b``, a single run counting as its value with sd 0 (:func:`within_noise`).
That is a rough, stated rule, not a significance test: with 3 seeds an sd is itself uncertain, and a
difference beyond it is a hint worth more seeds, not a proof.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

RULE = "|mean a - mean b| <= sd a + sd b (a single run: sd 0)"  # within_noise's rule, as the help says it
SD = "sample sd, n-1"  # which standard deviation Spread.sd is


@dataclass(frozen=True)
class Spread:
    """A figure over ``n`` runs: its mean and sample standard deviation."""

    mean: float
    sd: float
    n: int

    def text(self, digits: str = ".2f") -> str:
        """``mean ± sd`` with each number in the format ``digits``: ``51.00 ± 1.00``."""
        return f"{self.mean:{digits}} ± {self.sd:{digits}}"


def spread(values: Iterable[float | None]) -> Spread | None:
    """The spread of the values given (None: a run that has none, left out); None under two values."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    return Spread(statistics.fmean(present), statistics.stdev(present), len(present))


def within_noise(a: Spread | float, b: Spread | float) -> bool:
    """Whether ``a`` and ``b`` (a group's spread, or a single run's value) differ by no more than their
    spreads added: ``|mean_a - mean_b| <= sd_a + sd_b`` (:data:`RULE`)."""
    mean_a, sd_a = (a.mean, a.sd) if isinstance(a, Spread) else (a, 0.0)
    mean_b, sd_b = (b.mean, b.sd) if isinstance(b, Spread) else (b, 0.0)
    return abs(mean_a - mean_b) <= sd_a + sd_b
