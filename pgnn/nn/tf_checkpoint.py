"""Read TensorFlow 1 checkpoints (``tf.train.Saver``'s TensorBundle format) without TensorFlow.

A checkpoint ``PREFIX`` is two kinds of file:

* ``PREFIX.index``: a LevelDB-format table (SSTable) mapping each tensor name to a ``BundleEntryProto``
  (dtype, shape, shard, byte offset and size, masked crc32c of the bytes). The empty key holds the
  ``BundleHeaderProto`` (number of shards, endianness, format version).
* ``PREFIX.data-SSSSS-of-NNNNN``: the tensors' raw bytes, one file per shard (the original writes one).

``pgnn.nn.tf_bundle_format`` reads the table (crc32c, protobuf wire format, blocks); this module parses its
entries and reads the tensors.

``read_tf_checkpoint`` returns the tensors as numpy arrays in native byte order; every tensor's crc32c is
checked. Anything malformed is a ``DataError`` that names the file (and the tensor, when there is one).
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError
from pgnn.nn.tf_bundle_format import (
    crc32c,
    int_field,
    mask_crc,
    message_field,
    proto_fields,
    signed_int64,
    table_entries,
)

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
    fields = proto_fields(value, source, what)
    version = message_field(fields, 3, source, what)
    vfields = proto_fields(version[-1], source, "the header's version") if version else {}
    header = BundleHeader(
        num_shards=int_field(fields, 1, source, what),
        big_endian=int_field(fields, 2, source, what) == 1,
        producer=int_field(vfields, 1, source, "the header's version"),
        min_consumer=int_field(vfields, 2, source, "the header's version"),
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
    fields = proto_fields(value, source, what)
    if int_field(fields, 3, source, what):
        raise DataError(source, f"expected a fully known shape in {what}, got unknown rank")
    dims = []
    for dim in message_field(fields, 2, source, what):
        size = signed_int64(int_field(proto_fields(dim, source, what), 1, source, what))
        if size < 0:
            raise DataError(source, f"expected non-negative dimensions in {what}, got {size}")
        dims.append(size)
    return tuple(dims)


def _parse_entry(name: str, value: bytes, num_shards: int, source: Path) -> BundleEntry:
    what = f"the index entry of tensor {name!r}"
    fields = proto_fields(value, source, what)
    if fields.get(7):
        raise DataError(
            source,
            f"tensor {name!r} is saved in slices (a partitioned variable), which this reader cannot read",
        )
    shape = message_field(fields, 2, source, what)
    entry = BundleEntry(
        name=name,
        dtype_code=int_field(fields, 1, source, what),
        shape=_parse_shape(shape[-1], source, what) if shape else (),
        shard_id=signed_int64(int_field(fields, 3, source, what)),
        offset=signed_int64(int_field(fields, 4, source, what)),
        size=signed_int64(int_field(fields, 5, source, what)),
        masked_crc32c=int_field(fields, 6, source, what),
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
    for key, value in table_entries(table, source):
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
