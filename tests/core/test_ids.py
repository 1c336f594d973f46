"""Short frame ids: ``7`` is ``000007`` wherever a frame id is given."""

from __future__ import annotations

import argparse

import pytest

from pgnn.core.ids import frame_id_arg, normalize_frame_id, parse_frame_ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", "000007"),
        (7, "000007"),
        ("0007", "000007"),
        ("000114", "000114"),
        (" 12 ", "000012"),
        ("0", "000000"),
    ],
)
def test_normalize_frame_id(text: str | int, expected: str) -> None:
    assert normalize_frame_id(text) == expected


@pytest.mark.parametrize("bad", ["", "7a", "1234567", "-1", "1.0", "٣"])
def test_normalize_frame_id_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="expected a frame id of 1 to 6 digits"):
        normalize_frame_id(bad)


def test_parse_frame_ids_and_argparse_type() -> None:
    assert parse_frame_ids("0,1, 114") == ["000000", "000001", "000114"]
    with pytest.raises(ValueError):
        parse_frame_ids("0,,1")
    assert frame_id_arg("3") == "000003"
    with pytest.raises(argparse.ArgumentTypeError, match="got 'x'"):
        frame_id_arg("x")
