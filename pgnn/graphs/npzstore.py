"""Byte-stable ``.npz`` writing and zero-copy (memory-mapped) reading.

Byte-identical artifacts for equal content are what keep DVC hashes stable, so :func:`save_npz` does not leave
that to numpy's zip writer: it writes the same format (a zip of ``.npy`` members, stored uncompressed) itself,
with a fixed timestamp, fixed permissions and sorted member names. :func:`open_npz_memmap` maps each
member straight from the file: slicing one frame out of a shard of many touches that frame's pages, not a
read of the whole array. Opening checks every member's CRC-32 first (:func:`pgnn.core.io.verify_zip`, one
read of the file; its rate: benchmarks/README.md, "Measurements behind the code"), so a corrupted shard is
an error naming it, not silently wrong numbers.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pgnn.core.errors import DataError
from pgnn.core.io import atomic_path, verify_zip

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically as an uncompressed ``.npz`` with stable bytes."""
    with atomic_path(path, suffix=".npz") as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            array = np.require(arrays[name], requirements="C")
            if array.dtype.hasobject:
                raise ValueError(f"{name}: object arrays cannot be saved without pickles")
            header = io.BytesIO()  # np.lib.format.write_array's bytes: this header, then the C-order data
            np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            info.file_size = header.tell() + array.nbytes  # what ZipFile.writestr sets before it writes
            with zf.open(info, mode="w") as member:  # the array's memory is written without a copy
                member.write(header.getbuffer())
                if array.nbytes:
                    member.write(array.reshape(-1).view(np.uint8))


def open_npz_memmap(path: str | Path, verify: bool = True) -> dict[str, np.ndarray]:
    """Map every member of an uncompressed ``.npz`` read-only into memory.

    ``verify`` first checks each member's bytes against its CRC-32 (reads the whole file once).

    Raises:
        DataError: the file is not a zip of uncompressed, non-object ``.npy`` members, or (``verify``) a
            member's bytes do not match its CRC-32.
    """
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    if verify and zipfile.is_zipfile(path):  # not a zip: the error below says so
        verify_zip(path, what=".npz (zip) file")
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise DataError(path, f"expected an .npz (zip) file: {e}") from e
    with zf, open(path, "rb") as f:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            if info.compress_type != zipfile.ZIP_STORED:
                raise DataError(path, f"member {info.filename} is compressed; expected stored members")
            f.seek(info.header_offset)
            header = f.read(30)
            if header[:4] != b"PK\x03\x04":
                raise DataError(path, f"bad local zip header for {info.filename}")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            if dtype.hasobject:
                raise DataError(path, f"member {info.filename} holds Python objects; refusing to load")
            name = info.filename[: -len(".npy")]
            if int(np.prod(shape)) == 0:
                out[name] = np.empty(shape, dtype=dtype)
            else:
                out[name] = np.memmap(
                    path, dtype=dtype, mode="r", offset=f.tell(), shape=shape, order="F" if fortran else "C"
                )
    return out
