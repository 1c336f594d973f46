"""A fast decoder for the one PNG kind KITTI's ``image_2`` holds: 8-bit RGB, not interlaced.

``prepare`` decodes an image a frame (RGB per point), the largest part of its time with Pillow (which
inflates, then unfilters into 4-byte pixels that ``np.asarray`` packs back to 3); this path is faster
(``zlib`` inflates, a numba loop unfilters straight into the (H, W, 3) array; measured: benchmarks/README.md,
"Measurements behind the code"). The pixels of a valid PNG are fixed by the format, so both
give the same array (tests/data/test_png.py compares them on KITTI's and synthetic images and on every row
filter). Anything else (another colour type or bit depth, interlacing, a bad CRC-32 or zlib stream, a size
Pillow would refuse or warn about) returns None: the caller decodes it with Pillow, which also reports the
damage.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
from numba import njit

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@njit(cache=True)
def _unfilter(raw: np.ndarray, height: int, stride: int, bpp: int) -> tuple[np.ndarray, bool]:
    """Undo the PNG row filters (None, Sub, Up, Average, Paeth) of ``height`` rows of ``stride`` bytes, each
    after its filter-type byte. Returns ((height, stride) uint8, ok); not ok on an unknown filter type."""
    out = np.empty((height, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    pos = 0
    for y in range(height):
        kind = raw[pos]
        pos += 1
        row = out[y]
        if kind == 0:
            for i in range(stride):
                row[i] = raw[pos + i]
        elif kind == 1:
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (np.int32(raw[pos + i]) + left) & 255
        elif kind == 2:
            for i in range(stride):
                row[i] = (np.int32(raw[pos + i]) + prev[i]) & 255
        elif kind == 3:
            for i in range(stride):
                left = np.int32(row[i - bpp]) if i >= bpp else np.int32(0)
                row[i] = (np.int32(raw[pos + i]) + ((left + np.int32(prev[i])) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                b = np.int32(prev[i])
                if i >= bpp:
                    a = np.int32(row[i - bpp])
                    c = np.int32(prev[i - bpp])
                else:
                    a = np.int32(0)
                    c = np.int32(0)
                p = a + b - c
                pa = abs(p - a)
                pb = abs(p - b)
                pc = abs(p - c)
                if pa <= pb and pa <= pc:
                    pred = a
                elif pb <= pc:
                    pred = b
                else:
                    pred = c
                row[i] = (np.int32(raw[pos + i]) + pred) & 255
        else:
            return out, False
        pos += stride
        prev = row
    return out, True


def decode_rgb8(data: bytes, max_pixels: int | None = None) -> np.ndarray | None:
    """The (H, W, 3) uint8 pixels of an 8-bit RGB, non-interlaced PNG file's bytes; None for any other file
    or any damage (see the module docstring). ``max_pixels``: None above this many pixels (pass Pillow's
    ``Image.MAX_IMAGE_PIXELS`` so that its size warning and limit still apply)."""
    if not data.startswith(_SIGNATURE):
        return None
    view = memoryview(data)
    pos = len(_SIGNATURE)
    header: tuple[int, ...] | None = None
    idat: list[memoryview] = []
    idat_done = False
    while True:
        if pos + 12 > len(data):
            return None  # no IEND
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 8 + length
        if end + 4 > len(data):
            return None
        (crc,) = struct.unpack_from(">I", data, end)
        if zlib.crc32(view[pos + 4 : end]) != crc:
            return None
        body = view[pos + 8 : end]
        if header is None:
            if kind != b"IHDR" or length != 13:
                return None
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            if idat_done:
                return None  # IDAT chunks must be consecutive
            idat.append(body)
        elif kind == b"IEND":
            break
        elif idat:
            idat_done = True
        pos = end + 4
    width, height, depth, colour, compression, filtering, interlace = header
    if (depth, colour, compression, filtering, interlace) != (8, 2, 0, 0, 0) or not idat:
        return None
    if width < 1 or height < 1 or (max_pixels is not None and width * height > max_pixels):
        return None
    stride = 3 * width
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(b"".join(idat))
    except zlib.error:
        return None
    if not inflate.eof or inflate.unused_data or len(raw) != height * (stride + 1):
        return None
    pixels, ok = _unfilter(np.frombuffer(raw, np.uint8), height, stride, 3)
    return pixels.reshape(height, width, 3) if ok else None


def warm_up() -> None:
    """Load the numba kernel (before a process pool forks, so that its workers inherit it)."""
    _unfilter(np.zeros(4, np.uint8), 1, 3, 3)
