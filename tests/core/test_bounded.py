"""pgnn/core/bounded.py, pgnn/core/yamlfile.py, pgnn/core/errors.py: hostile input (resource bombs, deep
nesting, terminal escapes) costs little and ends in one line naming the file. Each test's input failed
(a RecursionError, an allocation traceback, minutes and gigabytes, a raw escape) before the bounds."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pgnn.config.params import load_params
from pgnn.core.bounded import MAX_DEPTH, MAX_YAML_BYTES, MAX_YAML_NODES, read_json, read_npy
from pgnn.core.errors import DataError, ParamsError, excerpt, one_line
from pgnn.core.yamlfile import parse_yaml, read_yaml

REPO = Path(__file__).resolve().parents[2]


def billion_laughs(levels: int = 9) -> str:
    """A few hundred bytes of YAML whose aliases expand to 9**levels strings."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\npreset: *a{levels - 1}\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: the bomb took 3.3 GB


def test_a_yaml_alias_bomb_is_one_line_in_bounded_time_and_memory(tmp_path: Path) -> None:
    """533 bytes of nested aliases took 3.3 GB and a minute (hashing the values, quoting one in the error)."""
    path = tmp_path / "other.yaml"
    path.write_text(billion_laughs())
    assert path.stat().st_size < 600
    done = subprocess.run(
        [sys.executable, "-m", "pgnn.cli", "train", "--params", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PGNN_DEBUG": ""},
        timeout=60,
        preexec_fn=_limit_memory,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"pgnn train: error: {path}:5: expected at most {MAX_YAML_NODES} values with aliases expanded, "
        "got 66430 values"
    ]


def test_an_alias_that_contains_itself_and_a_small_bomb() -> None:
    with pytest.raises(DataError, match=r"p.yaml:1: expected plain data, got an alias that contains itself"):
        parse_yaml("a: &a [1, *a]\n", "p.yaml")
    with pytest.raises(DataError, match=rf"p.yaml:5: expected at most {MAX_YAML_NODES} values with aliases"):
        parse_yaml(billion_laughs(5), "p.yaml")  # 9**5 = 59049 strings in 150 bytes
    with pytest.raises(DataError, match=rf"p.yaml:1: expected at most {MAX_YAML_NODES} values, got more"):
        parse_yaml("a: [" + "1, " * MAX_YAML_NODES + "]\n", "p.yaml")  # as written, no alias
    shared = "base: &b {a: 1, b: 2}\n" + "".join(f"x{i}: *b\n" for i in range(50))
    assert len(parse_yaml(shared, "p.yaml")) == 51  # aliases within the bound are fine


@pytest.mark.parametrize("deep", [MAX_DEPTH + 1, 5000])
def test_deep_yaml_is_one_line_not_a_recursion_error(tmp_path: Path, deep: int) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("preset: " + "[" * deep + "]" * deep + "\n")
    with pytest.raises(DataError) as info:
        load_params(path)
    assert str(info.value) == f"{path}:1: expected at most {MAX_DEPTH} levels of nesting, got more"
    block = min(deep, 300)  # block style: 300 levels, 90 kB
    path.write_text("train:\n  x:\n" + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(block)))
    with pytest.raises(DataError, match=r"levels of nesting, got more"):
        read_yaml(path)


def test_a_yaml_file_past_its_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"# " + b"x" * MAX_YAML_BYTES + b"\n")
    with pytest.raises(
        DataError, match=rf"p.yaml: expected a YAML file of at most 256 KiB, got {MAX_YAML_BYTES + 3} "
    ):
        read_yaml(path)


@pytest.mark.parametrize("deep", [MAX_DEPTH + 1, 100_000])
def test_deep_json_is_one_line_not_a_recursion_error(tmp_path: Path, deep: int) -> None:
    path = tmp_path / "labels.json"
    path.write_text('{"objects": ' + "[" * deep + "]" * deep + "}")
    with pytest.raises(DataError) as info:
        read_json(path, "a JSON labels file")
    assert (
        str(info.value) == f"{path}: expected a JSON labels file nested at most {MAX_DEPTH} deep, got deeper"
    )
    path.write_text(json.dumps({"objects": [[[1]]]}))
    assert read_json(path, "x") == {"objects": [[[1]]]}
    path.write_text('{"objects": [1, 2')
    with pytest.raises(DataError, match=r"labels.json:1: expected x, got Expecting "):
        read_json(path, "x")


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (117 - len(header)) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


def test_an_npy_header_that_declares_10_to_the_10_rows_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """192 bytes declaring 10^10 x 4 float32: numpy's allocation traceback (149 GiB), no file named."""
    path = tmp_path / "scan.npy"
    path.write_bytes(_npy_header((10**10, 4)).ljust(192, b"\0"))
    assert path.stat().st_size == 192
    with pytest.raises(DataError) as info:
        read_npy(path, "a .npy array")
    assert str(info.value) == (
        f"{path}: expected a .npy array: its header declares 160000000000 bytes of data or more, the file "
        "holds 64 (it is cut off, or not what it claims)"
    )


def test_npy_reads_what_np_save_writes_and_refuses_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    for array in (
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.asfortranarray(np.eye(3)),
        np.zeros((0, 8)),
    ):
        np.save(path, array)
        back = read_npy(path, "an array")
        assert back.dtype == array.dtype and np.array_equal(back, array)
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"a.npy: expected an array of numbers, got dtype object"):
        read_npy(path, "an array")
    path.write_bytes(_npy_header((2,)) + b"\0" * 12)
    with pytest.raises(DataError, match=r"a.npy: expected an array, got 4 bytes after it"):
        read_npy(path, "an array")
    path.write_bytes(b"not numpy at all")
    with pytest.raises(DataError, match=r"a.npy: expected an array, could not read it"):
        read_npy(path, "an array")


# ----------------------------------------------------------------------------------------------------------
# messages: escaped, short, one line


def test_error_text_never_holds_a_raw_control_character() -> None:
    error = DataError("scan\x1b]0;owned\x07.ply", "got a\x1b[31mred\u202e and\nmore")
    text = str(error)
    assert text == "scan\\x1b]0;owned\\x07.ply: got a\\x1b[31mred\\u202e and; more"
    assert all(ch.isprintable() for ch in text)
    assert one_line(FileNotFoundError(2, "No such file", "a\x1bb")) == "a\\x1bb: No such file"
    assert str(ParamsError("p.yaml", "bad", key="x\x1b")) == "p.yaml: x\\x1b: bad"


def test_excerpts_and_messages_are_short() -> None:
    nested: list = []
    for _ in range(1000):
        nested = [nested] * 9  # 9**1000 leaves if walked
    assert len(excerpt(nested)) <= 80 and len(excerpt("x" * 10**6)) <= 80
    assert excerpt("\x1b[2J") == "'\\x1b[2J'"
    assert len(str(DataError("f", "y" * 10**6))) <= 1003


def test_a_params_value_is_quoted_as_a_short_excerpt(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("preset: [" + ", ".join(['"\\e[31m' + "x" * 200 + '"'] * 500) + "]\n")  # \e: ESC
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert len(str(info.value)) < len(str(path)) + 200 and "\x1b" not in str(info.value)
