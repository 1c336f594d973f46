"""The file formats under a TF1 checkpoint index, read without TensorFlow: crc32c, the protobuf wire format
and LevelDB's table (SSTable).

A table is read back to front. Its last 48 bytes are the footer: the block handles (varint offset, varint
size) of the metaindex block and of the index block, zero padding, then the 8-byte magic number. The index
block maps a separator key to the handle of each data block. Every block is followed by a 5-byte trailer:
a compression type byte and the masked crc32c of the block plus that byte. A block is a run of entries
(varints: bytes shared with the previous key, bytes not shared, value length; then the key's new bytes and
the value), then the restart offsets (uint32 each) and their count (uint32). TensorFlow writes bundle
indexes uncompressed; a snappy-compressed block is reported, not decoded.

Anything malformed is a ``DataError`` that names the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_LEN = 48  # two block handles padded to 40 bytes, then the 8-byte magic
BLOCK_TRAILER_LEN = 5  # compression type byte + masked crc32c
NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1


# --- crc32c (Castagnoli), as LevelDB and TensorFlow use it ----------------------------------------------

_CRC32C_POLY = 0x82F63B78  # 0x1EDC6F41 bit-reversed: the register shifts right
_MASK_DELTA = 0xA282EAD8
_LANES_FROM = 1 << 14  # shorter inputs go byte by byte in Python


def _crc_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_CRC32C_POLY), t >> 1).astype(np.uint32)
    return t


_TABLE = _crc_table()
_TABLE_LIST: list[int] = _TABLE.tolist()


def _advance_bytes(reg: int, data: bytes | memoryview) -> int:
    """The raw CRC register after feeding ``data``, one byte at a time."""
    table = _TABLE_LIST
    for b in data:
        reg = table[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


def _zeros_operator(n: int) -> list[list[int]]:
    """The map "feed ``n`` zero bytes" on the raw register, as four 256-entry tables (one per register byte).

    The register update is linear over GF(2), so the map is fixed by the images of the 32 one-bit registers;
    table ``j`` holds the image of every value of byte ``j``.
    """
    images = np.left_shift(np.uint32(1), np.arange(32, dtype=np.uint32))
    for _ in range(n):
        images = _TABLE[images & 0xFF] ^ (images >> 8)
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)
    tables = []
    for j in range(4):
        picked = np.where(bits, images[None, 8 * j : 8 * j + 8], np.uint32(0))
        tables.append(np.bitwise_xor.reduce(picked, axis=1).astype(np.uint32).tolist())
    return tables


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """The crc32c of ``data``, continuing from ``crc`` (the crc32c of what came before; 0 to start).

    Long inputs are cut into about sqrt(n) equal lanes whose registers numpy advances together, byte column by
    byte column; since the register update is linear, the lanes are then chained with the "feed L zero bytes"
    map. The tail that does not fill a lane, and short inputs, go byte by byte.
    """
    view = memoryview(data).cast("B")
    reg = crc ^ 0xFFFFFFFF
    n = len(view)
    if n >= _LANES_FROM:
        lanes = math.isqrt(n)
        lane_len = n // lanes
        body = np.frombuffer(view, dtype=np.uint8, count=lanes * lane_len).reshape(lanes, lane_len)
        columns = body.T.copy()  # row k: byte k of every lane
        lane_regs = np.zeros(lanes, dtype=np.uint32)
        for column in columns:
            lane_regs = _TABLE[(lane_regs ^ column) & 0xFF] ^ (lane_regs >> 8)
        t0, t1, t2, t3 = _zeros_operator(lane_len)
        for lane_reg in lane_regs.tolist():
            reg = t0[reg & 0xFF] ^ t1[(reg >> 8) & 0xFF] ^ t2[(reg >> 16) & 0xFF] ^ t3[reg >> 24] ^ lane_reg
        view = view[lanes * lane_len :]
    return _advance_bytes(reg, view) ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB's masked crc (rotate right by 15, add a constant), the form stored in tables and bundles."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# --- protobuf wire format -----------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, source: Path, what: str) -> tuple[int, int]:
    """The unsigned varint at ``buf[pos:]`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise DataError(source, f"expected a varint in {what}, got the end of the data (truncated?)")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise DataError(source, f"expected a varint of at most 10 bytes in {what}, got a longer one")


def signed_int64(value: int) -> int:
    """A varint read as two's-complement int64 (protobuf's int32/int64 fields)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def proto_fields(buf: bytes, source: Path, what: str) -> dict[int, list[int | bytes]]:
    """Field number -> values of a serialised protobuf message (numbers as int, length-delimited as bytes)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos, source, what)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos, source, what)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise DataError(source, f"expected a {width}-byte field in {what}, got the end of the data")
            value = int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = _varint(buf, pos, source, what)
            if pos + length > len(buf):
                raise DataError(source, f"expected {length} bytes of field {number} in {what}, got fewer")
            value = bytes(buf[pos : pos + length])
            pos += length
        else:
            raise DataError(source, f"expected protobuf wire type 0, 1, 2 or 5 in {what}, got {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def int_field(fields: dict[int, list[int | bytes]], number: int, source: Path, what: str) -> int:
    """The last value of scalar field ``number`` (0 when absent, as in proto3)."""
    values = fields.get(number, [0])
    if not isinstance(values[-1], int):
        raise DataError(source, f"expected field {number} of {what} to be a number, got bytes")
    return values[-1]


def message_field(fields: dict[int, list[int | bytes]], number: int, source: Path, what: str) -> list[bytes]:
    """Every value of message field ``number``."""
    values = fields.get(number, [])
    if not all(isinstance(v, bytes) for v in values):
        raise DataError(source, f"expected field {number} of {what} to be a message, got a number")
    return values  # type: ignore[return-value]


# --- the index table ----------------------------------------------------------------------------------


def _block_handle(buf: bytes, pos: int, source: Path, what: str) -> tuple[int, int, int]:
    """(offset, size, position after it) of the block handle at ``buf[pos:]``."""
    offset, pos = _varint(buf, pos, source, what)
    size, pos = _varint(buf, pos, source, what)
    return offset, size, pos


def _read_block(table: bytes, offset: int, size: int, source: Path, what: str) -> bytes:
    """The contents of the block at ``offset``, its trailer checked (uncompressed, crc32c matching)."""
    end = offset + size
    if end + BLOCK_TRAILER_LEN > len(table):
        raise DataError(
            source,
            f"expected {what} at bytes [{offset}, {end + BLOCK_TRAILER_LEN}), but the file has only "
            f"{len(table)} bytes (truncated?)",
        )
    compression = table[end]
    stored = int.from_bytes(table[end + 1 : end + BLOCK_TRAILER_LEN], "little")
    computed = mask_crc(crc32c(table[offset : end + 1]))
    if stored != computed:
        raise DataError(
            source,
            f"crc32c mismatch in {what}: stored {stored:#010x}, computed {computed:#010x} (corrupt file)",
        )
    if compression == SNAPPY_COMPRESSION:
        raise DataError(
            source,
            f"{what} is snappy-compressed; TensorFlow writes checkpoint indexes uncompressed and this reader "
            "supports only those",
        )
    if compression != NO_COMPRESSION:
        raise DataError(source, f"expected compression type 0 (none) for {what}, got {compression}")
    return table[offset:end]


def _block_entries(block: bytes, source: Path, what: str) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) pairs of a block, keys rebuilt from their shared prefixes."""
    if len(block) < 4:
        raise DataError(source, f"expected {what} to hold at least its restart count, got {len(block)} bytes")
    num_restarts = int.from_bytes(block[-4:], "little")
    entries_end = len(block) - 4 - 4 * num_restarts
    if entries_end < 0:
        raise DataError(
            source, f"expected {what} to hold its {num_restarts} restart offsets, got {len(block)} bytes"
        )
    key = b""
    pos = 0
    while pos < entries_end:
        shared, pos = _varint(block, pos, source, what)
        unshared, pos = _varint(block, pos, source, what)
        value_len, pos = _varint(block, pos, source, what)
        if shared > len(key) or pos + unshared + value_len > entries_end:
            raise DataError(source, f"expected well-formed entries in {what}, got one that runs past its end")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + value_len]
        pos += value_len


def table_entries(table: bytes, source: Path) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable, in key order: footer -> index block -> data blocks."""
    if len(table) < FOOTER_LEN:
        raise DataError(
            source,
            f"expected a table of at least {FOOTER_LEN} bytes (its footer), got {len(table)} (truncated?)",
        )
    footer = table[-FOOTER_LEN:]
    magic = int.from_bytes(footer[-8:], "little")
    if magic != TABLE_MAGIC:
        raise DataError(
            source,
            f"expected the table magic number {TABLE_MAGIC:#018x} in the last 8 bytes, got {magic:#018x} "
            "(truncated, or not a TensorFlow checkpoint index)",
        )
    meta_offset, meta_size, pos = _block_handle(footer, 0, source, "the footer")
    index_offset, index_size, _ = _block_handle(footer, pos, source, "the footer")
    # The metaindex block (filters; TF writes none) is only checked.
    _read_block(table, meta_offset, meta_size, source, "the metaindex block")
    index_block = _read_block(table, index_offset, index_size, source, "the index block")
    for n, (_separator, handle) in enumerate(_block_entries(index_block, source, "the index block")):
        what = f"data block {n}"
        offset, size, _ = _block_handle(handle, 0, source, f"the index entry of {what}")
        yield from _block_entries(_read_block(table, offset, size, source, what), source, what)
