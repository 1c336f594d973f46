"""The value types of the configs: numbers that are what they say, counts bounded by what a real run needs.

pydantic's lax mode reads ``true`` as the integer 1 (and ``"600"`` as 600, ``.inf`` as a learning rate), so a
``max_steps: true`` in ``params.yaml`` would train one step. These aliases are strict scalars (``Strict()``:
a bool is never an int or a float, a string never a number); an int is still a fine float. They are scalar
types only, so a tuple field of them (``tuple[Int, ...]``) still takes the list YAML writes.

Each count's upper bound (its reason in its comment) is far above anything a run on one machine needs: a
value beyond it is a typo (``10**30`` steps, an ETA of 10^19 hours), refused with the key's name.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, AllowInfNan, Field, Strict

Int = Annotated[int, Strict()]
"""An integer: not a bool, a float or a numeric string."""

Real = Annotated[float, Strict(), AllowInfNan(False)]
"""A finite number (an int is fine): not a bool, a string, ``.nan`` or ``.inf``."""

Flag = Annotated[bool, Strict()]
"""``true`` or ``false``: not 0/1 or ``"yes"``."""

MAX_STEPS = 10**8
"""Optimiser steps (and step intervals, decay steps): 70x the original's longest recipe (1.4M steps)."""

MAX_EPOCHS = 10**6
"""Epochs: 580x the original's 1718 (its Car recipe's epoch cap)."""

MAX_BATCH = 4096
"""Frames per step, micro-batches per step: 1000x the original's 4 frames a step."""

MAX_FRAMES = 10**6
"""Frames of a dataset or a subset of one: 130x KITTI's 7,481 training frames."""

MAX_WORKERS = 1024
"""Processes or threads: more than the cores of any one machine that runs pgnn."""

MAX_SHARD_FRAMES = 10**4
"""Frames per shard: a shard of 10^4 graph frames is already about 6.5 GB (a train-config frame: 646 KB)."""

MAX_KEPT = 10**4
"""Checkpoints kept per run (the original kept 3)."""

MAX_WIDTH = 1 << 16
"""An MLP width, a class count or a feature width: 128x the widest layer of the original (512)."""

MAX_POINTS = 1 << 20
"""A count of points (a neighbour cap per vertex, the original's 256; points allowed in a pasted box): more
than the ~10^5 points of a whole scan."""

MAX_TRIES = 10**6
"""Objects to paste per class, placement tries per object (the original's 100)."""

MAX_SEED = 2**63 - 1
"""Seeds go to numpy's ``SeedSequence`` (>= 0) and ``torch.manual_seed`` (< 2^64): both take 0..2^63-1."""

Seed = Annotated[int, Strict(), Field(ge=0, le=MAX_SEED)]
Steps = Annotated[int, Strict(), Field(ge=1, le=MAX_STEPS)]
Epochs = Annotated[int, Strict(), Field(ge=1, le=MAX_EPOCHS)]
BatchSize = Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH)]
Workers = Annotated[int, Strict(), Field(ge=1, le=MAX_WORKERS)]
Width = Annotated[int, Strict(), Field(ge=1, le=MAX_WIDTH)]

SPLIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""An ``ImageSets/<name>.txt`` split name: a plain file name (letters, digits, ``_ . -``, not starting with a
dot), so it cannot leave ImageSets (``../x``, ``/etc/x``, ``.``)."""

SPLIT_NAME_RULE = "a split file name inside ImageSets/ (letters, digits, _ . -; no leading dot)"


def _split_name(name: str) -> str:
    if not SPLIT_NAME.fullmatch(name):
        raise ValueError(f"expected {SPLIT_NAME_RULE}")
    return name


SplitName = Annotated[str, Strict(), AfterValidator(_split_name)]
