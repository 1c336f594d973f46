"""KITTI frame ids as people type them: ``7`` means ``000007``.

Every command that takes a frame id (``pgnn inspect/crop/render/graph ROOT ID``, ``pgnn predict --ids``,
``pgnn eval --ids``) reads it with :func:`normalize_frame_id`: up to 6 decimal digits, zero-padded to the
6 of KITTI's file names.
"""

from __future__ import annotations

import argparse
import re

_FRAME_ID = re.compile(r"[0-9]{1,6}")


def normalize_frame_id(text: str | int) -> str:
    """``"7"`` / ``7`` / ``"0007"`` / ``"000007"`` -> ``"000007"``.

    Raises:
        ValueError: not 1 to 6 decimal digits (``"7a"``, ``"1234567"``, ``""``, a negative number).
    """
    s = str(text).strip()
    if not _FRAME_ID.fullmatch(s):
        raise ValueError(f"expected a frame id of 1 to 6 digits (7 or 000007), got {str(text)!r}")
    return s.zfill(6)


def parse_frame_ids(spec: str) -> list[str]:
    """``"0,1, 114"`` -> ``["000000", "000001", "000114"]`` (ValueError naming the bad part)."""
    return [normalize_frame_id(part) for part in spec.split(",")]


def frame_id_arg(text: str) -> str:
    """argparse ``type=`` of a frame id: :func:`normalize_frame_id`, its error as a usage error."""
    try:
        return normalize_frame_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
