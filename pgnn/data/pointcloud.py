"""Point clouds as they come from a sensor: ``.bin``, ``.npy``, ``.pcd`` and ``.ply`` readers and writers.

Formats (coordinates in the sensor frame: x forward, y left, z up, metres)::

    .bin   float32 little-endian rows x, y, z, intensity (KITTI's velodyne layout, 16 bytes a point)
    .npy   an (N, 3) xyz, (N, 4) xyz + intensity or (N, 8) painted array (xyz, intensity, 4 PointPainting
           scores); np.load without pickles
    .pcd   PCL's format, ASCII, binary or binary_compressed (read with pypcd4): fields x, y, z and optionally
           intensity (or reflectance / i); other fields are ignored
    .ply   ASCII or binary PLY (read with plyfile): element ``vertex`` with x, y, z and optionally intensity
           (or reflectance / scalar_intensity)

Intensity policy (:func:`normalise_intensity`): values within 0..1 are kept; values within 0..255 (an 8-bit
sensor's) are divided by 255, saying so in a log line; anything else is refused. A cloud without intensity
(an (N, 3) array, a PCD or PLY without such a field) is refused, unless the caller passes
``missing_intensity="zeros"``, which uses 0 for every point with a warning (the models were trained with
KITTI's reflectance: expect fewer or weaker detections).

Every malformed file raises ``pgnn.core.errors.DataError`` naming the file and what was expected. No file
costs more memory than a small multiple of its size: a header (``.npy``, PCD ``POINTS``, PLY ``element``)
declaring more data than the file holds is refused before anything is allocated, and a PCD holding fewer
(or more) points than it declares is refused after reading (an ASCII PCD cut off after 4 of its 4e9 points).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from pgnn.core.bounded import check_declared_size, read_npy
from pgnn.core.errors import DataError
from pgnn.core.io import atomic_path
from pgnn.data.kitti import MAX_POINT_DISTANCE, read_velodyne

log = logging.getLogger(__name__)

FORMATS: tuple[str, ...] = (".bin", ".npy", ".pcd", ".ply")
INTENSITY_NAMES: tuple[str, ...] = ("intensity", "reflectance", "i", "scalar_intensity")
MissingIntensity = Literal["refuse", "zeros"]


@dataclass(frozen=True, eq=False)
class PointCloud:
    """A sensor's points as read from a file.

    Shapes:
        xyz: (N, 3) float64, sensor frame; intensity: (N,) float32 as stored, or None when the file has
        none; scores: (N, 4) float32 PointPainting scores (an (N, 8) .npy) or None.
    """

    xyz: np.ndarray
    intensity: np.ndarray | None
    scores: np.ndarray | None = None


# ----------------------------------------------------------------------------------------------------
# readers


def read_point_cloud(path: str | Path) -> PointCloud:
    """Read a ``.bin``, ``.npy``, ``.pcd`` or ``.ply`` point cloud (chosen by the suffix)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise DataError(
            path, f"expected a point cloud file ({', '.join(FORMATS)}), got {suffix or 'no suffix'}"
        )
    if not path.is_file():
        raise DataError(path, "expected a point cloud file, found no such file")
    reader = {".bin": _read_bin, ".npy": _read_npy, ".pcd": _read_pcd, ".ply": _read_ply}[suffix]
    cloud = reader(path)
    _check_points(cloud, path)
    return cloud


def _read_bin(path: Path) -> PointCloud:
    scan = read_velodyne(path)  # (N, 4) float32, checked
    return PointCloud(scan[:, :3].astype(np.float64), scan[:, 3].copy())


def _read_npy(path: Path) -> PointCloud:
    array = read_npy(path, "a .npy array of shape (N, 3), (N, 4) or (N, 8)")
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.shape[1] not in (3, 4, 8):
        shape = getattr(array, "shape", type(array).__name__)
        raise DataError(path, f"expected an array of shape (N, 3), (N, 4) or (N, 8 painted), got {shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise DataError(path, f"expected a float array, got dtype {array.dtype}")
    xyz = array[:, :3].astype(np.float64)  # (N, 3)
    intensity = array[:, 3].astype(np.float32) if array.shape[1] >= 4 else None
    scores = array[:, 4:8].astype(np.float32) if array.shape[1] == 8 else None
    if scores is not None and scores.size and (scores.min() < -1e-6 or scores.max() > 1 + 1e-6):
        raise DataError(path, "expected PointPainting scores (columns 4-7) in [0, 1]")
    return PointCloud(xyz, intensity, scores)


# LZF (binary_compressed PCD) expands at most ~88x: a 3-byte back reference copies up to 264 bytes.
_LZF_MAX_RATIO = 100
MAX_PCD_COLUMNS = 1024
"""The most values a PCD point may have (COUNT summed over FIELDS; PCL's VFH signature has 308)."""


def _pcd_points(path: Path) -> int:
    """The points a PCD header declares, refused unless the file can hold them: read before pypcd4, which
    allocates what the header says (``POINTS``, the compressed sizes) before reading the data."""
    from pypcd4 import Encoding, MetaData

    with open(path, "rb") as f:
        lines: list[str] = []
        for raw in f:  # pypcd4's own header loop: at most 10 lines, the last one DATA
            line = raw.decode("utf-8").strip()
            if line.startswith("#") or not line:
                continue
            lines.append(line)
            if line.startswith("DATA") or len(lines) >= 10:
                break
        meta = MetaData.parse_header(lines)
        columns = sum(meta.count)
        if columns > MAX_PCD_COLUMNS:
            raise DataError(path, f"expected at most {MAX_PCD_COLUMNS} values a point (COUNT), got {columns}")
        itemsize = meta.build_dtype().itemsize
        available = path.stat().st_size - f.tell()
        what = f"a PCD file of {meta.points} {meta.data.value} points"
        if meta.data == Encoding.ASCII:  # a digit and a separator a value, at least
            check_declared_size(path, meta.points * columns * 2, available, what)
        elif meta.data == Encoding.BINARY:
            check_declared_size(path, meta.points * itemsize, available, what)
        elif meta.points > 0:
            check_declared_size(path, 8, available, what)
            compressed, uncompressed = struct.unpack("II", f.read(8))
            check_declared_size(path, compressed, available - 8, what)
            if uncompressed != meta.points * itemsize:
                raise DataError(path, f"expected {what}: {meta.points * itemsize} bytes, got {uncompressed}")
            check_declared_size(path, uncompressed, compressed * _LZF_MAX_RATIO, what)
    return meta.points


def _read_pcd(path: Path) -> PointCloud:
    from pypcd4 import PointCloud as Pcd

    try:
        declared = _pcd_points(path)
        pcd = Pcd.from_path(path)
        fields = tuple(pcd.fields)
        data = pcd.pc_data
    except DataError:
        raise
    except Exception as e:  # pypcd4 raises bare ValueErrors, struct and lzf errors on a bad file
        raise DataError(
            path, f"expected a PCD file (ASCII, binary or binary_compressed): {_first_line(e)}"
        ) from None
    if data.size != declared:
        raise DataError(
            path, f"expected a PCD file of the {declared} points its header declares, it holds {data.size}"
        )
    return _from_columns(path, fields, lambda name: data[name], "PCD fields")


def _check_ply_size(path: Path) -> None:
    """Refuse a PLY file whose elements (``element vertex N``) need more bytes than it holds: plyfile
    allocates every element's rows before reading an ASCII file or a binary one with list properties."""
    from plyfile import PlyData, PlyListProperty

    with open(path, "rb") as f:
        header = PlyData._parse_header(f)  # plyfile's own header parser (PlyData.read's first step)
        available = path.stat().st_size - f.tell()
    least = 0
    for element in header.elements:
        if header.text:  # a digit and a separator a value, at least
            row = 2 * len(element.properties)
        else:
            row = sum(
                np.dtype(
                    p.list_dtype(header.byte_order)[0]
                    if isinstance(p, PlyListProperty)
                    else p.dtype(header.byte_order)
                ).itemsize
                for p in element.properties
            )
        least += element.count * row
    check_declared_size(path, least, available, "a PLY file holding its elements")


def _read_ply(path: Path) -> PointCloud:
    from plyfile import PlyData

    try:
        _check_ply_size(path)
        ply = PlyData.read(str(path))
        vertex = ply["vertex"]
        fields = tuple(p.name for p in vertex.properties)
        data = vertex.data
    except KeyError:
        raise DataError(path, "expected a PLY element 'vertex' holding the points") from None
    except DataError:
        raise
    except Exception as e:  # plyfile raises PlyParseError, ValueError, struct errors on a bad file
        raise DataError(path, f"expected a PLY file (ASCII or binary): {_first_line(e)}") from None
    return _from_columns(path, fields, lambda name: data[name], "PLY vertex properties")


def _first_line(error: Exception) -> str:
    """A library's error text, first line only (pydantic's, inside pypcd4, runs over many)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _from_columns(
    path: Path, fields: tuple[str, ...], column: Callable[[str], np.ndarray], what: str
) -> PointCloud:
    missing = [a for a in "xyz" if a not in fields]
    if missing:
        raise DataError(path, f"expected {what} x, y, z, got {', '.join(fields) or 'none'}")
    try:
        xyz = np.stack([np.asarray(column(a), dtype=np.float64).reshape(-1) for a in "xyz"], axis=1)  # (N, 3)
        name = next((n for n in INTENSITY_NAMES if n in fields), None)
        intensity = None if name is None else np.asarray(column(name), dtype=np.float32).reshape(-1)
    except (ValueError, TypeError) as e:
        raise DataError(path, f"expected numeric {what} x, y, z: {e}") from None
    return PointCloud(xyz, intensity)


def _check_points(cloud: PointCloud, path: Path) -> None:
    if len(cloud.xyz) == 0:
        raise DataError(path, "expected at least one point, got none")
    finite = np.isfinite(cloud.xyz).all(axis=1)
    if cloud.intensity is not None:
        finite &= np.isfinite(cloud.intensity)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DataError(path, f"expected finite numbers, point {row} is {cloud.xyz[row].tolist()}")
    far = np.abs(cloud.xyz).max(axis=1) > MAX_POINT_DISTANCE
    if far.any():
        row = int(np.flatnonzero(far)[0])
        raise DataError(path, f"expected points within {MAX_POINT_DISTANCE:.0f} m, point {row} is further")


# ----------------------------------------------------------------------------------------------------
# intensity


def normalise_intensity(
    cloud: PointCloud, path: str | Path, missing_intensity: MissingIntensity = "refuse"
) -> np.ndarray:
    """The cloud's intensity in KITTI's 0..1 range (see the module docstring for the policy).

    Shapes:
        return: (N,) float32
    """
    if cloud.intensity is None:
        if missing_intensity != "zeros":
            raise DataError(
                path,
                "expected an intensity per point (an (N, 4) array, a PCD/PLY field 'intensity'), got none; "
                "--missing-intensity zeros uses 0 for every point",
            )
        log.warning("%s: no intensity, using 0 for every point (expect weaker detections)", path)
        return np.zeros(len(cloud.xyz), dtype=np.float32)
    values = cloud.intensity.astype(np.float32)
    low, high = float(values.min()), float(values.max())
    if low >= 0.0 and high <= 1.0:
        return values
    if low >= 0.0 and high <= 255.0:
        log.info("%s: intensity in 0..%.0f, read as 0..255 and divided by 255", path, high)
        return values / np.float32(255.0)
    raise DataError(path, f"expected intensity in 0..1 or 0..255, got {low:g}..{high:g}")


def read_scan(
    path: str | Path, missing_intensity: MissingIntensity = "refuse"
) -> tuple[np.ndarray, np.ndarray | None]:
    """A point cloud file as KITTI-style rows with its painted scores.

    Shapes:
        return: scan (N, 4) float64 [x, y, z, intensity 0..1] sensor frame; scores (N, 4) float32 or None
    """
    cloud = read_point_cloud(path)
    intensity = normalise_intensity(cloud, path, missing_intensity)
    return np.column_stack([cloud.xyz, intensity.astype(np.float64)]), cloud.scores


# ----------------------------------------------------------------------------------------------------
# writers (the converter's and the tests')


def write_point_cloud(path: str | Path, scan: np.ndarray, encoding: str = "binary") -> None:
    """Write (N, 4) rows ``x, y, z, intensity`` as ``.bin``, ``.npy``, ``.pcd`` or ``.ply``, atomically.

    ``encoding``: for ``.pcd`` ``ascii``, ``binary`` or ``binary_compressed``; for ``.ply`` ``ascii`` or
    ``binary`` (little-endian). Coordinates are stored as float32 in every format.
    """
    path = Path(path)
    rows = np.ascontiguousarray(scan, dtype=np.float32)  # (N, 4)
    if rows.ndim != 2 or rows.shape[1] != 4:
        raise ValueError(f"expected (N, 4) rows x, y, z, intensity, got shape {rows.shape}")
    suffix = path.suffix.lower()
    with atomic_path(path) as tmp:
        if suffix == ".bin":
            rows.astype("<f4").tofile(tmp)
        elif suffix == ".npy":
            with open(tmp, "wb") as f:
                np.save(f, rows)
        elif suffix == ".pcd":
            from pypcd4 import Encoding
            from pypcd4 import PointCloud as Pcd

            Pcd.from_xyzi_points(rows).save(tmp, encoding=Encoding(encoding))
        elif suffix == ".ply":
            from plyfile import PlyData, PlyElement

            vertex = np.empty(len(rows), dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
            for i, name in enumerate(("x", "y", "z", "intensity")):
                vertex[name] = rows[:, i]
            ply = PlyData([PlyElement.describe(vertex, "vertex")], text=encoding == "ascii")
            ply.write(str(tmp))
        else:
            raise ValueError(f"{path}: expected a suffix in {FORMATS}")
