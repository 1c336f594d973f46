"""Parquet files that carry their own checksums and are verified on every read, as ``.npz`` shards are.

pgnn's one integrity convention: an artifact holds the checksums of its own bytes and every reader checks them
(``.npz`` graph shards and ``torch.save`` checkpoints: the zip's CRC-32 of each member,
:func:`pgnn.core.io.verify_zip`). For parquet (the prepared shards, the gt_db):

- every data page carries a CRC-32 of its bytes (parquet's page checksums: ``write_page_checksum``), checked
  as the page is read (``page_checksum_verification``);
- the file footer has no checksum of its own, and pgnn keeps facts there (a prepared shard's labels and
  calibs, the gt_db's attribute names and box scale), so :func:`write_parquet` adds
  ``pgnn.metadata_crc32``, a CRC-32 of the column names, the number of rows (a flipped bit in a row group's
  row count would otherwise silently drop rows) and the schema metadata's other keys and values, checked on
  read.

A corrupted file is then a :class:`~pgnn.core.errors.DataError` naming it (``...: it is corrupted: checksum
mismatch ...``), never silently different numbers; a parquet file without ``pgnn.metadata_crc32`` (written by
another tool, or by pgnn before checksums) is refused too: rebuild it. Both checksums are deterministic: equal
tables still give equal bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pgnn.core.errors import DataError
from pgnn.core.io import atomic_path

METADATA_CRC = b"pgnn.metadata_crc32"
_PAGE_CRC_FAILED = "CRC checksum verification failed"


def metadata_crc(schema: pa.Schema, num_rows: int) -> bytes:
    """CRC-32 (8 hex digits) of the schema's column names, in order, of ``num_rows`` and of the schema
    metadata's keys and values, sorted by key, leaving out :data:`METADATA_CRC` and Arrow's ``ARROW:*``
    keys."""
    metadata = schema.metadata or {}
    keys = sorted(k for k in metadata if k != METADATA_CRC and not k.startswith(b"ARROW:"))
    parts = [name.encode() for name in schema.names] + [b"rows", str(num_rows).encode(), b"metadata"]
    parts += [part for key in keys for part in (key, metadata[key])]
    crc = 0
    for part in parts:
        crc = zlib.crc32(struct.pack("<Q", len(part)) + part, crc)
    return f"{crc:08x}".encode()


def write_parquet(path: str | Path, table: pa.Table, **options: Any) -> None:
    """Write ``table`` to ``path`` atomically with page checksums and :data:`METADATA_CRC` (``options`` go to
    ``pq.write_table``: compression, dictionary encoding)."""
    metadata = dict(table.schema.metadata or {})
    metadata[METADATA_CRC] = metadata_crc(table.schema, table.num_rows)
    with atomic_path(path, suffix=".parquet") as tmp:
        pq.write_table(table.replace_schema_metadata(metadata), tmp, write_page_checksum=True, **options)


def check_schema(path: str | Path, schema: pa.Schema, num_rows: int, what: str) -> None:
    """Raise DataError naming ``path`` unless the schema's metadata holds a :data:`METADATA_CRC` that
    matches it and ``num_rows`` (:func:`metadata_crc`)."""
    stored = (schema.metadata or {}).get(METADATA_CRC)
    if stored is None:
        raise DataError(
            path,
            f"expected a checksummed {what} (schema metadata {METADATA_CRC.decode()!r} missing: written by "
            f"another tool or an older pgnn; rebuild it)",
        )
    if stored != metadata_crc(schema, num_rows):
        raise DataError(
            path, f"expected an intact {what}, it is corrupted: checksum mismatch (schema metadata)"
        )


def read_parquet(path: str | Path, what: str) -> pa.Table:
    """Read a file written by :func:`write_parquet`, checking every page's checksum and the metadata's.

    ``what`` names the kind of file in messages (``prepared shard (parquet)``).

    Raises:
        DataError: naming ``path``: no such file, not parquet, corrupted (a checksum mismatch), or without
            checksums.
    """
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except FileNotFoundError:
        raise DataError(path, f"expected a {what}, found no file") from None
    except (pa.ArrowException, OSError) as e:
        text = " ".join(str(e).split())
        if _PAGE_CRC_FAILED in text:
            message = f"expected an intact {what}, it is corrupted: checksum mismatch ({text})"
            raise DataError(path, message) from e
        raise DataError(path, f"expected a {what}, got unreadable bytes: {text}") from e
    check_schema(path, table.schema, table.num_rows, what)
    return table


def read_parquet_metadata(path: str | Path, what: str) -> Mapping[bytes, bytes]:
    """The schema metadata of a file written by :func:`write_parquet` (the footer only: no pages are read),
    its checksum checked (with the file's row count). Raises as :func:`read_parquet`."""
    try:
        footer = pq.read_metadata(path)
        schema = footer.schema.to_arrow_schema()
    except FileNotFoundError:
        raise DataError(path, f"expected a {what}, found no file") from None
    except (pa.ArrowException, OSError) as e:
        raise DataError(path, f"expected a {what}, got unreadable bytes: {' '.join(str(e).split())}") from e
    check_schema(path, schema, footer.num_rows, what)
    return schema.metadata or {}
