"""pgnn/core/yamlfile.py: a user's YAML read safely, a key written twice is an error naming both lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pgnn.core.errors import DataError
from pgnn.core.yamlfile import UniqueKeyLoader, parse_yaml, read_yaml


@pytest.mark.parametrize(
    ("text", "line", "first"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, 1),  # a top-level key (a params section)
        ("train:\n  lr: 1\n  steps: 2\n  lr: 3\n", 4, 2),  # a key inside a section
        ("x: [{k: 1, k: 2}]\n", 1, 1),  # inside a flow mapping in a list
        ("1: a\n1: b\n", 2, 1),  # any hashable key
    ],
)
def test_a_key_written_twice_names_its_line_and_the_first(text: str, line: int, first: int) -> None:
    assert yaml.safe_load(text) is not None  # PyYAML alone keeps the last value without a word
    with pytest.raises(DataError) as info:
        parse_yaml(text, "p.yaml")
    assert info.value.line == line and info.value.message.endswith(f"again (first on line {first})")
    assert str(info.value).startswith(f"p.yaml:{line}: expected each key once, got ")


def test_merge_keys_still_override_and_equal_keys_in_other_mappings_are_fine() -> None:
    text = "base: &b\n  a: 1\n  b: 2\nx:\n  <<: *b\n  a: 3\ny:\n  a: 4\n"
    assert parse_yaml(text, "p.yaml") == {"base": {"a": 1, "b": 2}, "x": {"a": 3, "b": 2}, "y": {"a": 4}}


def test_it_is_a_safe_loader() -> None:
    assert issubclass(UniqueKeyLoader, yaml.SafeLoader)
    with pytest.raises(
        DataError, match=r"p.yaml:1: expected valid YAML, got could not determine a constructor"
    ):
        parse_yaml("!!python/object/apply:os.system ['true']\n", "p.yaml")


def test_bad_yaml_and_unreadable_files_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(DataError) as info:
        read_yaml(path)
    assert (
        info.value.path == str(path) and info.value.line == 3 and "expected valid YAML" in info.value.message
    )
    assert "\n" not in str(info.value)
    with pytest.raises(DataError, match=r"missing.yaml: cannot read it: "):
        read_yaml(tmp_path / "missing.yaml")
    path.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(DataError, match=r"p.yaml: cannot read it: "):
        read_yaml(path)
    path.write_text("")
    assert read_yaml(path) is None


def test_exponent_floats_are_numbers_as_in_yaml_1_2() -> None:
    """``initial_lr: 1e-3`` is a number for DVC (YAML 1.2) and for pgnn; PyYAML alone reads a string."""
    text = "a: 1e-3\nb: 1.5e3\nc: -2E+4\nd: 1_000\ne: 7\nf: e5\ng: '1e-3'\n"
    assert yaml.safe_load(text)["a"] == "1e-3"
    assert parse_yaml(text, "p.yaml") == {
        "a": 0.001,
        "b": 1500.0,
        "c": -20000.0,
        "d": 1000,
        "e": 7,
        "f": "e5",
        "g": "1e-3",
    }
    assert type(parse_yaml("x: 7\n", "p.yaml")["x"]) is int
