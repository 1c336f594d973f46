"""pgnn.data.png: the fast 8-bit RGB PNG decoder gives Pillow's pixels, and declines everything else."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pgnn.data.kitti import read_image
from pgnn.data.png import decode_rgb8


def _pillow(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def _png(pixels: np.ndarray, filters: list[int], split: int = 1) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` (H, W, 3) with row ``y`` filtered by ``filters[y]`` (the spec's
    encoder, written out), its zlib stream in ``split`` IDAT chunks."""
    height, width, _ = pixels.shape
    rows = pixels.reshape(height, width * 3).astype(np.int64)
    raw = bytearray()
    for y in range(height):
        cur, prev = rows[y], rows[y - 1] if y else np.zeros_like(rows[0])
        kind = filters[y]
        out = []
        for i in range(width * 3):
            a = int(cur[i - 3]) if i >= 3 else 0
            b, c = int(prev[i]), (int(prev[i - 3]) if i >= 3 else 0)
            pred = [0, a, b, (a + b) // 2, _paeth(a, b, c)][kind]
            out.append((int(cur[i]) - pred) & 255)
        raw += bytes([kind, *out])
    stream = zlib.compress(bytes(raw), 6)
    step = -(-len(stream) // split)
    idat = b"".join(_chunk(b"IDAT", stream[i : i + step]) for i in range(0, len(stream), step))
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + _chunk(b"tEXt", b"k\x00v") + idat + _chunk(b"IEND", b"")


def test_every_row_filter_decodes_to_the_pixels_as_pillow_does(tmp_path: Path) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (15, 7, 3), dtype=np.uint8)
    pixels[5:9] = 255  # sums past 255 in every filter
    data = _png(pixels, [y % 5 for y in range(15)], split=3)
    path = tmp_path / "filters.png"
    path.write_bytes(data)
    assert np.array_equal(_pillow(path), pixels)
    decoded = decode_rgb8(data)
    assert decoded is not None and decoded.dtype == np.uint8 and np.array_equal(decoded, pixels)
    assert np.array_equal(read_image(path), pixels)


def test_kitti_images_decode_as_pillow_does(kitti_sample: Path) -> None:
    paths = sorted((kitti_sample / "training" / "image_2").glob("*.png"))
    assert paths
    for path in paths:
        decoded = decode_rgb8(path.read_bytes())
        assert decoded is not None and np.array_equal(decoded, _pillow(path)), path


@pytest.mark.parametrize(
    "mode, options",
    [("RGBA", {}), ("L", {}), ("P", {}), ("I;16", {})],
)
def test_other_pngs_are_declined_and_read_image_falls_back_to_pillow(
    tmp_path: Path, mode: str, options: dict[str, int]
) -> None:
    pixels = np.random.default_rng(1).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    path = tmp_path / "other.png"
    image.save(path, **options)
    assert decode_rgb8(path.read_bytes()) is None
    if mode != "I;16":  # read_image refuses 16-bit images (a DataError, as before)
        assert np.array_equal(read_image(path), _pillow(path))


def test_damage_and_oversize_are_declined(tmp_path: Path) -> None:
    pixels = np.random.default_rng(2).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    data = _png(pixels, [0, 1, 2, 4])
    assert decode_rgb8(data) is not None
    assert decode_rgb8(data, max_pixels=15) is None
    at = data.index(b"IDAT") + 6
    assert decode_rgb8(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]) is None  # CRC-32 mismatch
    assert decode_rgb8(data[: data.index(b"IEND") - 4]) is None  # truncated
    assert decode_rgb8(b"GIF89a" + data[6:]) is None
    interlaced = _chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 1))  # Adam7: Pillow's job
    assert decode_rgb8(data[:8] + interlaced + data[8 + len(interlaced) :]) is None
