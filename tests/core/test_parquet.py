"""pgnn/core/parquet.py: parquet files carry page and metadata checksums, verified on every read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgnn.core.errors import DataError
from pgnn.core.parquet import METADATA_CRC, read_parquet, read_parquet_metadata, write_parquet

WHAT = "test table (parquet)"


def _table() -> pa.Table:
    rng = np.random.default_rng(0)
    table = pa.table({"frame": np.repeat(np.arange(4, dtype=np.uint16), 500), "x": rng.normal(size=2000)})
    return table.replace_schema_metadata({b"pgnn.frames": b'[{"label": "Car 1.5"}]'})


def test_round_trip_is_deterministic_and_checksummed(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", _table(), compression="zstd", use_dictionary=False)
    write_parquet(tmp_path / "b.parquet", _table(), compression="zstd", use_dictionary=False)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    back = read_parquet(tmp_path / "a.parquet", WHAT)
    assert back.equals(_table())
    assert back.schema.metadata[b"pgnn.frames"] == _table().schema.metadata[b"pgnn.frames"]
    assert METADATA_CRC in read_parquet_metadata(tmp_path / "a.parquet", WHAT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]  # no temporary file


@pytest.mark.parametrize("column", ["frame", "x"])
@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_flipped_data_page_is_an_error_naming_the_file(
    tmp_path: Path, flip_page: Callable[[Path, str], None], column: str, compression: str
) -> None:
    path = tmp_path / "t.parquet"
    write_parquet(path, _table(), compression=compression, use_dictionary=False)
    flip_page(path, column)
    with pytest.raises(DataError, match="it is corrupted: checksum mismatch") as err:
        read_parquet(path, WHAT)
    assert err.value.path == str(path)


def _pgnn_metadata(table: pa.Table) -> dict[bytes, bytes]:
    return {k: v for k, v in (table.schema.metadata or {}).items() if not k.startswith(b"ARROW:")}


@pytest.mark.parametrize("dictionary", [False, True])  # as prepared shards, as the gt_db
def test_no_flipped_footer_byte_reads_back_different(tmp_path: Path, dictionary: bool) -> None:
    """The footer (schema, row counts, metadata with a prepared shard's labels and calibs) has no parquet
    checksum: every flipped bit in it is an error, or leaves what is read unchanged (a copy pyarrow does not
    use)."""
    path = tmp_path / "t.parquet"
    write_parquet(path, _table(), compression="zstd", use_dictionary=dictionary)
    clean = path.read_bytes()
    want = read_parquet(path, WHAT)
    footer = len(clean) - 8 - int.from_bytes(clean[-8:-4], "little")
    errors = 0
    for at in range(footer, len(clean) - 8):
        data = bytearray(clean)
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        try:
            got = read_parquet(path, WHAT)
        except DataError as e:
            assert e.path == str(path)
            errors += 1
            continue
        assert got.equals(want) and _pgnn_metadata(got) == _pgnn_metadata(want), f"footer byte {at - footer}"
    assert errors > (len(clean) - 8 - footer) // 2
    path.write_bytes(clean.replace(b"\x18\x01x", b"\x18\x01y"))  # column x renamed y
    with pytest.raises(DataError, match="checksum mismatch \\(schema metadata\\)"):
        read_parquet(path, WHAT)
    with pytest.raises(DataError, match="checksum mismatch \\(schema metadata\\)"):
        read_parquet_metadata(path, WHAT)


def test_files_without_checksums_and_non_parquet_are_refused(tmp_path: Path) -> None:
    pq.write_table(_table(), tmp_path / "plain.parquet")
    with pytest.raises(DataError, match="expected a checksummed test table .*missing"):
        read_parquet(tmp_path / "plain.parquet", WHAT)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="got unreadable bytes") as err:
        read_parquet(tmp_path / "junk.parquet", WHAT)
    assert err.value.path == str(tmp_path / "junk.parquet")
    with pytest.raises(DataError, match="found no file"):
        read_parquet(tmp_path / "missing.parquet", WHAT)
    with pytest.raises(DataError, match="found no file"):
        read_parquet_metadata(tmp_path / "missing.parquet", WHAT)
