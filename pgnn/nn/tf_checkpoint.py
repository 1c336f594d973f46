"""Read TensorFlow 1 checkpoints (``tf.train.Saver``'s TensorBundle format) without TensorFlow.

A checkpoint ``PREFIX`` is two kinds of file:

* ``PREFIX.index``: a LevelDB-format table (SSTable) mapping each tensor name to a ``BundleEntryProto``
  (dtype, shape, shard, byte offset and size, masked crc32c of the bytes). The empty key holds the
  ``BundleHeaderProto`` (number of shards, endianness, format version).
* ``PREFIX.data-SSSSS-of-NNNNN``: the tensors' raw bytes, one file per shard (the original writes one).

The table is read back to front. Its last 48 bytes are the footer: the block handles (varint offset, varint
size) of the metaindex block and of the index block, zero padding, then the 8-byte magic number. The index
block maps a separator key to the handle of each data block. Every block is followed by a 5-byte trailer:
a compression type byte and the masked crc32c of the block plus that byte. A block is a run of entries
(varints: bytes shared with the previous key, bytes not shared, value length; then the key's new bytes and
the value), then the restart offsets (uint32 each) and their count (uint32). TensorFlow writes bundle
indexes uncompressed; a snappy-compressed block is reported, not decoded.

``read_tf_checkpoint`` returns the tensors as numpy arrays in native byte order; every tensor's crc32c is
checked. Anything malformed is a ``DataError`` that names the file (and the tensor, when there is one).
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_LEN = 48  # two block handles padded to 40 bytes, then the 8-byte magic
BLOCK_TRAILER_LEN = 5  # compression type byte + masked crc32c
NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1
# The TensorBundle layout this reader understands; a header's min_consumer must not exceed it.
BUNDLE_VERSION = 1

# TF's DataType enum (types.proto) -> numpy dtype, little-endian (swapped for a big-endian bundle).
DTYPES: Mapping[int, np.dtype] = {
    1: np.dtype("<f4"),  # DT_FLOAT
    2: np.dtype("<f8"),  # DT_DOUBLE
    3: np.dtype("<i4"),  # DT_INT32
    4: np.dtype("u1"),  # DT_UINT8
    5: np.dtype("<i2"),  # DT_INT16
    6: np.dtype("i1"),  # DT_INT8
    8: np.dtype("<c8"),  # DT_COMPLEX64
    9: np.dtype("<i8"),  # DT_INT64
    10: np.dtype("?"),  # DT_BOOL
    17: np.dtype("<u2"),  # DT_UINT16
    18: np.dtype("<c16"),  # DT_COMPLEX128
    19: np.dtype("<f2"),  # DT_HALF
    22: np.dtype("<u4"),  # DT_UINT32
    23: np.dtype("<u8"),  # DT_UINT64
}
# Types a checkpoint may hold but this reader does not (strings are stored with a length table, not raw).
UNSUPPORTED_DTYPE_NAMES: Mapping[int, str] = {
    7: "string",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    14: "bfloat16",
    15: "qint16",
    16: "quint16",
    20: "resource",
    21: "variant",
}

# Names of the state TF1 optimizers add next to each variable (``<var>/Momentum``, Adam's two moments, ...)
# and beside them (Adam's power accumulators). A weight import has no use for them.
OPTIMIZER_SLOT_SUFFIXES = (
    "/Momentum",
    "/RMSProp",
    "/RMSProp_1",
    "/Adam",
    "/Adam_1",
    "/Adagrad",
    "/Ftrl",
    "/Ftrl_1",
    "/ExponentialMovingAverage",
)
OPTIMIZER_VARIABLES = ("beta1_power", "beta2_power")

_DATA_SHARD = re.compile(r"\.data-\d{5}-of-\d{5}$")


def is_optimizer_state(name: str) -> bool:
    """Whether ``name`` is optimizer state (a slot such as ``w/Momentum``, or Adam's ``beta1_power``)."""
    return name in OPTIMIZER_VARIABLES or name.endswith(OPTIMIZER_SLOT_SUFFIXES)


def checkpoint_prefix(path: str | Path) -> Path | None:
    """The TF checkpoint prefix ``path`` names, or ``None`` when it does not name one.

    ``path`` may be the prefix itself (``model-1400000``: recognised when ``model-1400000.index`` or a data
    shard exists beside it), the ``.index`` file or a ``.data-SSSSS-of-NNNNN`` file. An ``.npz`` is never a
    prefix.
    """
    path = Path(path)
    if path.name.endswith(".index"):
        return path.with_name(path.name[: -len(".index")])
    if _DATA_SHARD.search(path.name):
        return path.with_name(_DATA_SHARD.sub("", path.name))
    if path.suffix == ".npz":
        return None
    if index_path(path).exists() or glob.glob(glob.escape(str(path)) + ".data-*-of-*"):
        return path
    return None


def index_path(prefix: str | Path) -> Path:
    """``PREFIX.index``."""
    return Path(f"{prefix}.index")


def data_shard_path(prefix: str | Path, shard: int, num_shards: int) -> Path:
    """``PREFIX.data-SSSSS-of-NNNNN``, the file holding shard ``shard`` of ``num_shards``."""
    return Path(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}")


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


def _signed(value: int) -> int:
    """A varint read as two's-complement int64 (protobuf's int32/int64 fields)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _proto_fields(buf: bytes, source: Path, what: str) -> dict[int, list[int | bytes]]:
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


def _int_field(fields: dict[int, list[int | bytes]], number: int, source: Path, what: str) -> int:
    """The last value of scalar field ``number`` (0 when absent, as in proto3)."""
    values = fields.get(number, [0])
    if not isinstance(values[-1], int):
        raise DataError(source, f"expected field {number} of {what} to be a number, got bytes")
    return values[-1]


def _message_field(fields: dict[int, list[int | bytes]], number: int, source: Path, what: str) -> list[bytes]:
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


def _table_entries(table: bytes, source: Path) -> Iterator[tuple[bytes, bytes]]:
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


# --- bundle entries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleHeader:
    """The header entry of a bundle index (``BundleHeaderProto``)."""

    num_shards: int
    big_endian: bool
    producer: int
    min_consumer: int


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor lives (``BundleEntryProto``): its dtype code, shape and bytes in a data shard."""

    name: str
    dtype_code: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    masked_crc32c: int


def _parse_header(value: bytes, source: Path) -> BundleHeader:
    what = "the bundle header"
    fields = _proto_fields(value, source, what)
    version = _message_field(fields, 3, source, what)
    vfields = _proto_fields(version[-1], source, "the header's version") if version else {}
    header = BundleHeader(
        num_shards=_int_field(fields, 1, source, what),
        big_endian=_int_field(fields, 2, source, what) == 1,
        producer=_int_field(vfields, 1, source, "the header's version"),
        min_consumer=_int_field(vfields, 2, source, "the header's version"),
    )
    bad = [int(v) for v in vfields.get(3, []) if isinstance(v, int)]
    if header.min_consumer > BUNDLE_VERSION or BUNDLE_VERSION in bad:
        raise DataError(
            source,
            f"expected a bundle readable by format version {BUNDLE_VERSION}, got min_consumer "
            f"{header.min_consumer} and bad_consumers {bad}",
        )
    if header.num_shards < 1:
        raise DataError(source, f"expected at least one data shard, got num_shards {header.num_shards}")
    return header


def _parse_shape(value: bytes, source: Path, what: str) -> tuple[int, ...]:
    fields = _proto_fields(value, source, what)
    if _int_field(fields, 3, source, what):
        raise DataError(source, f"expected a fully known shape in {what}, got unknown rank")
    dims = []
    for dim in _message_field(fields, 2, source, what):
        size = _signed(_int_field(_proto_fields(dim, source, what), 1, source, what))
        if size < 0:
            raise DataError(source, f"expected non-negative dimensions in {what}, got {size}")
        dims.append(size)
    return tuple(dims)


def _parse_entry(name: str, value: bytes, num_shards: int, source: Path) -> BundleEntry:
    what = f"the index entry of tensor {name!r}"
    fields = _proto_fields(value, source, what)
    if fields.get(7):
        raise DataError(
            source,
            f"tensor {name!r} is saved in slices (a partitioned variable), which this reader cannot read",
        )
    shape = _message_field(fields, 2, source, what)
    entry = BundleEntry(
        name=name,
        dtype_code=_int_field(fields, 1, source, what),
        shape=_parse_shape(shape[-1], source, what) if shape else (),
        shard_id=_signed(_int_field(fields, 3, source, what)),
        offset=_signed(_int_field(fields, 4, source, what)),
        size=_signed(_int_field(fields, 5, source, what)),
        masked_crc32c=_int_field(fields, 6, source, what),
    )
    if not 0 <= entry.shard_id < num_shards or entry.offset < 0 or entry.size < 0:
        raise DataError(
            source,
            f"expected {what} to point into one of {num_shards} shards, got shard {entry.shard_id}, "
            f"offset {entry.offset}, size {entry.size}",
        )
    return entry


def read_bundle_index(prefix: str | Path) -> tuple[BundleHeader, dict[str, BundleEntry]]:
    """The header and the entries (tensor name -> ``BundleEntry``, in key order) of ``PREFIX.index``."""
    source = index_path(prefix)
    try:
        table = source.read_bytes()
    except FileNotFoundError as e:
        raise DataError(source, "expected a TensorFlow checkpoint index, got no such file") from e
    header: BundleHeader | None = None
    entries: dict[str, BundleEntry] = {}
    for key, value in _table_entries(table, source):
        if key == b"":
            header = _parse_header(value, source)
            continue
        if header is None:
            raise DataError(source, "expected the bundle header (the empty key) before the first tensor")
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(source, f"expected UTF-8 tensor names, got {key[:40]!r}") from e
        if name in entries:
            raise DataError(source, f"expected each tensor once, got {name!r} twice")
        entries[name] = _parse_entry(name, value, header.num_shards, source)
    if header is None:
        raise DataError(source, "expected a bundle header (the empty key), got none")
    return header, entries


def _entry_dtype(entry: BundleEntry, header: BundleHeader, source: Path) -> np.dtype:
    """The numpy dtype of ``entry``'s bytes (in the bundle's byte order), checked against its size."""
    dtype = DTYPES.get(entry.dtype_code)
    if dtype is None:
        kind = UNSUPPORTED_DTYPE_NAMES.get(entry.dtype_code, f"code {entry.dtype_code}")
        raise DataError(source, f"tensor {entry.name!r} has dtype {kind}, which this reader does not support")
    if header.big_endian:
        dtype = dtype.newbyteorder(">")
    expected = math.prod(entry.shape) * dtype.itemsize
    if entry.size != expected:
        raise DataError(
            source,
            f"expected {expected} bytes for tensor {entry.name!r} ({dtype.name}, shape {entry.shape}), "
            f"got {entry.size}",
        )
    return dtype


def read_tf_checkpoint(
    prefix: str | Path, keep: Callable[[str], bool] | None = None
) -> dict[str, np.ndarray]:
    """The tensors of the checkpoint ``prefix`` (name -> array in native byte order), in key order.

    ``keep`` picks the tensors to read by name (default: all); the others are not read or checked. Every
    tensor read is checked against its size and masked crc32c.
    """
    prefix = Path(prefix)
    source = index_path(prefix)
    header, entries = read_bundle_index(prefix)
    wanted = [e for e in entries.values() if keep is None or keep(e.name)]
    dtypes = {e.name: _entry_dtype(e, header, source) for e in wanted}
    arrays: dict[str, np.ndarray] = {}
    for shard in sorted({e.shard_id for e in wanted}):
        path = data_shard_path(prefix, shard, header.num_shards)
        try:
            f = path.open("rb")
        except FileNotFoundError as e:
            raise DataError(
                path,
                f"expected shard {shard} of {header.num_shards} of checkpoint {prefix}, got no such file",
            ) from e
        with f:
            file_size = os.fstat(f.fileno()).st_size
            for entry in sorted((e for e in wanted if e.shard_id == shard), key=lambda e: e.offset):
                end = entry.offset + entry.size
                if end > file_size:
                    raise DataError(
                        path,
                        f"expected tensor {entry.name!r} at bytes [{entry.offset}, {end}), but the file has "
                        f"only {file_size} bytes (truncated?)",
                    )
                f.seek(entry.offset)
                raw = f.read(entry.size)
                computed = mask_crc(crc32c(raw))
                if computed != entry.masked_crc32c:
                    raise DataError(
                        path,
                        f"crc32c mismatch for tensor {entry.name!r}: the index says "
                        f"{entry.masked_crc32c:#010x}, its bytes give {computed:#010x} (corrupt file)",
                    )
                dtype = dtypes[entry.name]
                array = np.frombuffer(raw, dtype=dtype).reshape(entry.shape)
                arrays[entry.name] = array.astype(dtype.newbyteorder("="), copy=True)
    return {e.name: arrays[e.name] for e in wanted}
