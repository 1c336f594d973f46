"""Frames: velodyne -> rectified camera 0 -> image_2 transforms, the field-of-view crop, ``load_frame``.

Frames (all metres)::

    velodyne (LiDAR)  Tr_velo_to_cam   camera 0    R0_rect    rectified camera 0       P2       image_2
      x forward       ------------->  (unrect.)  --------->     x right             ------->    u right
      y left            3x4 rigid                3x3 rot.       y down                3x4       v down
      z up                                                      z forward  <- pgnn's frame

    P2 projects rectified camera 0 coordinates into camera 2's image (its 4th column holds the baseline).
    x_rect = R0_rect . Tr_velo_to_cam . [x_velo, 1]          (R0_rect, Tr padded to 4x4)
    [u', v', w] = P2 . x_rect_h ;  (u, v) = (u'/w, v'/w)    w = z_rect + P2[2, 3], camera 2's depth

The velodyne frame exists only in the files and this module's transforms: ``load_frame`` returns points
in the rectified camera frame, the frame the labels are in.

Input rules beyond the file formats (``pgnn.data.kitti``): the image must match the calib
(``check_image_matches_calib``), and a scan with points but none in image_2's view means its image or
calib is not the scan's (``check_points_in_view``); both raise ``pgnn.core.errors.DataError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from pgnn.core.errors import DataError
from pgnn.data.kitti import Calib, frame_paths, read_calib, read_image, read_scan
from pgnn.data.labels import Label, read_labels
from pgnn.data.png import warm_up as png_warm_up

# The image_2 size of most KITTI frames (the original hard-codes it for its truncation test): the field of
# view of a scan read without its image.
DEFAULT_IMAGE_SIZE: tuple[int, int] = (1242, 375)


# ----------------------------------------------------------------------------------------------------
# input rules


def check_image_matches_calib(
    calib: Calib, width: int, height: int, image_path: str | Path, calib_path: str | Path | None = None
) -> None:
    """Raise DataError unless P2's principal point lies in the central half of a ``width`` x ``height`` image.

    The rule: W/4 <= cx <= 3W/4 and H/4 <= cy <= 3H/4 with (cx, cy) = (P2[0, 2], P2[1, 2]). A real camera's
    optical axis is near the image centre (KITTI's within 2 % of it); an image that fails this is not the one
    this calib describes: cropped, resized or rotated, another camera's, or smaller than the calib implies.
    """
    cx, cy = float(calib.P2[0, 2]), float(calib.P2[1, 2])
    if not (width / 4 <= cx <= 3 * width / 4 and height / 4 <= cy <= 3 * height / 4):
        raise DataError(
            image_path,
            f"expected an image whose central half holds P2's principal point ({cx:.1f}, {cy:.1f}) px, got a "
            f"{width}x{height} image (the image does not match the calib"
            + (f" {calib_path})" if calib_path is not None else ")"),
        )


def check_points_in_view(num_in_view: int, num_points: int, view: str | Path, calib_path: str | Path) -> None:
    """Raise DataError when a scan has points but none lands in image_2's view.

    The rule: a LiDAR scan always sees part of what its camera sees, so keeping 0 of N > 0 points means the
    image size (``view``: the image file, or a description of the assumed size) or the calib is not the
    scan's. A real KITTI frame keeps about 20 000 of 120 000 points.
    """
    if num_points > 0 and num_in_view == 0:
        raise DataError(
            view,
            f"expected some of the scan's {num_points} points in this image's view, got none with calib "
            f"{calib_path} (the image or the calib is not this scan's)",
        )


# ----------------------------------------------------------------------------------------------------
# frame transforms


def _pad4(matrix: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


def velo_to_rect_matrix(calib: Calib) -> np.ndarray:
    """(4, 4) homogeneous velodyne -> rectified camera 0: ``R0_rect . Tr_velo_to_cam`` (both padded)."""
    return _pad4(calib.R0_rect) @ _pad4(calib.Tr_velo_to_cam)


def velo_to_image_matrix(calib: Calib) -> np.ndarray:
    """(3, 4) velodyne -> image_2 homogeneous pixels: ``P2 . R0_rect . Tr_velo_to_cam``."""
    return calib.P2 @ velo_to_rect_matrix(calib)


def points_velo_to_rect(xyz: np.ndarray, calib: Calib) -> np.ndarray:
    """Velodyne frame -> rectified camera 0 frame.

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    m = velo_to_rect_matrix(calib)
    return np.asarray(xyz, dtype=np.float64) @ m[:3, :3].T + m[:3, 3]


def points_rect_to_velo(xyz: np.ndarray, calib: Calib) -> np.ndarray:
    """Rectified camera 0 frame -> velodyne frame (the exact inverse of ``points_velo_to_rect``).

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    m = np.linalg.inv(velo_to_rect_matrix(calib))
    return np.asarray(xyz, dtype=np.float64) @ m[:3, :3].T + m[:3, 3]


def points_rect_to_image(xyz: np.ndarray, calib: Calib) -> tuple[np.ndarray, np.ndarray]:
    """Project rectified-frame points into image_2 with P2.

    ``depth`` is the homogeneous w = z + P2[2, 3] (depth seen from camera 2); ``uv`` is meaningful only where
    depth > 0 (points behind the camera get mirrored or infinite pixels).

    Shapes:
        xyz: (N, 3) -> uv (N, 2) float64 pixels (u right, v down), depth (N,) float64.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    projected = xyz @ calib.P2[:, :3].T + calib.P2[:, 3]  # (N, 3)
    depth = projected[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = projected[:, :2] / depth[:, None]
    return uv, depth


def fov_mask(xyz_velo: np.ndarray, calib: Calib, width: int, height: int) -> np.ndarray:
    """Points of a velodyne scan that image_2 sees: w > 0, 0 <= u'/w < width, 0 <= v'/w < height.

    [u', v', w] = P2 . R0_rect . Tr_velo_to_cam . [x, y, z, 1] in float64; this reproduces the
    velodyne_reduced files of SECOND / OpenPCDet / mmdetection3d row for row (a numba loop, faster than the
    numpy matmul it replaces and tested to give the same rows; measured: benchmarks/README.md, "Measurements
    behind the code").

    Shapes:
        xyz_velo: (N, 3) -> (N,) bool.
    """
    xyz = np.asarray(xyz_velo)
    if xyz.dtype not in (np.float32, np.float64):
        xyz = xyz.astype(np.float64)
    return _fov_kernel(xyz, velo_to_image_matrix(calib), float(width), float(height))  # views need no copy


@njit(cache=True)
def _fov_kernel(xyz: np.ndarray, m: np.ndarray, width: float, height: float) -> np.ndarray:
    n = xyz.shape[0]
    keep = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        x = np.float64(xyz[i, 0])
        y = np.float64(xyz[i, 1])
        z = np.float64(xyz[i, 2])
        w = x * m[2, 0] + y * m[2, 1] + z * m[2, 2] + m[2, 3]
        if not w > 0:
            continue
        u = (x * m[0, 0] + y * m[0, 1] + z * m[0, 2] + m[0, 3]) / w
        v = (x * m[1, 0] + y * m[1, 1] + z * m[1, 2] + m[1, 3]) / w
        keep[i] = (u >= 0) & (u < width) & (v >= 0) & (v < height)
    return keep


def warm_up(painted: bool = False) -> None:
    """Load :func:`load_frame`'s numba kernels before a process pool forks, so that its workers inherit them:
    the PNG decoder's and the FOV crop's for the scans' column views, velodyne (float32) or ``painted``
    (float64)."""
    scan = np.zeros((1, 8 if painted else 4), np.float64 if painted else np.float32)
    _fov_kernel(scan[:, :3], np.zeros((3, 4)), 1.0, 1.0)
    png_warm_up()


def fov_mask_numpy(xyz_velo: np.ndarray, calib: Calib, width: int, height: int) -> np.ndarray:
    """:func:`fov_mask` as a plain numpy matmul (the reference the tests compare the numba kernel with)."""
    xyz = np.asarray(xyz_velo, dtype=np.float64)
    xyz1 = np.hstack([xyz, np.ones((xyz.shape[0], 1))])  # (N, 4)
    projected = xyz1 @ velo_to_image_matrix(calib).T  # (N, 3)
    w = projected[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = projected[:, 0] / w
        v = projected[:, 1] / w
    return (w > 0) & (u >= 0) & (u < width) & (v >= 0) & (v < height)


def rect_to_cam2_offset(P2: np.ndarray) -> np.ndarray:
    """Where camera 2's rectified frame sits in the label frame: ``K^-1 . P2[:, 3]`` with ``K = P2[:, :3]``.

    A point's camera 2 coordinates are its label-frame coordinates plus this offset.

    The two frames differ by this translation only (P2 = K [I | t]); for KITTI's calibs it is about
    (+0.06, -0.001, +0.004) m. The original Point-GNN fed its network points in camera 2's frame.

    Shapes:
        P2: (3, 4) -> (3,) float64.
    """
    P2 = np.asarray(P2, dtype=np.float64)
    if P2.shape != (3, 4):
        raise ValueError(f"P2: expected shape (3, 4), got {P2.shape}")
    return np.linalg.solve(P2[:, :3], P2[:, 3])


def points_rect_to_cam2(xyz: np.ndarray, P2: np.ndarray) -> np.ndarray:
    """Rectified camera 0 (label) frame -> camera 2's rectified frame: ``x + K^-1 . P2[:, 3]``.

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    return np.asarray(xyz, dtype=np.float64) + rect_to_cam2_offset(P2)


def points_cam2_to_rect(xyz: np.ndarray, P2: np.ndarray) -> np.ndarray:
    """Camera 2's rectified frame -> rectified camera 0 (label) frame (inverse of ``points_rect_to_cam2``).

    Shapes:
        xyz: (N, 3) -> (N, 3) float64.
    """
    return np.asarray(xyz, dtype=np.float64) - rect_to_cam2_offset(P2)


# ----------------------------------------------------------------------------------------------------
# frames


@dataclass(frozen=True, eq=False)
class Frame:
    """One frame cropped to image_2's view, in the rectified camera 0 frame.

    Shapes:
        points_rect: (N, 3) float32; intensity: (N,) float32 reflectance; rgb: (N, 3) float32 in [0, 1],
        image_2's pixel under each point; scores: (N, 4) float32 PointPainting scores (``PAINTED_CLASSES``)
        or None.
    """

    frame_id: str
    points_rect: np.ndarray
    intensity: np.ndarray
    rgb: np.ndarray
    scores: np.ndarray | None
    labels: list[Label]
    calib: Calib
    image_size: tuple[int, int]


def load_frame(root: str | Path, frame_id: str, painted: bool = False, subset: str = "training") -> Frame:
    """Read one frame, crop it to image_2's field of view and move it to the rectified camera frame.

    ``painted`` reads ``painted_lidar/`` instead of ``velodyne/``. Labels are [] when the label file is absent
    (test data). The image must match the calib (``check_image_matches_calib``).
    """
    paths = frame_paths(root, frame_id, subset)
    calib = read_calib(paths.calib)
    scan = read_scan(paths, painted)  # (N, 4) or (N, 8)
    image = read_image(paths.image)  # (H, W, 3)
    check_image_matches_calib(calib, image.shape[1], image.shape[0], paths.image, paths.calib)
    labels = read_labels(paths.label) if paths.label.is_file() else []
    frame = frame_from_scan(frame_id, scan, calib, image=image, labels=labels, painted=painted)
    check_points_in_view(len(frame.points_rect), len(scan), paths.image, paths.calib)
    return frame


def frame_from_scan(
    frame_id: str,
    scan: np.ndarray,
    calib: Calib,
    *,
    image: np.ndarray | None = None,
    image_size: tuple[int, int] | None = None,
    labels: Sequence[Label] = (),
    painted: bool = False,
) -> Frame:
    """Crop a velodyne scan to image_2's field of view and move it to the rectified camera frame.

    The view is ``image``'s size, else ``image_size`` (width, height), else ``DEFAULT_IMAGE_SIZE``. Without an
    image the points' ``rgb`` is all zeros (there is no colour to sample). ``painted`` scans carry the 4
    PointPainting scores in columns 4-7.

    Shapes:
        scan: (N, 4) velodyne [x, y, z, reflectance] or (N, 8) painted rows; image: (H, W, 3) uint8
    """
    if image is not None:
        height, width = image.shape[:2]
    else:
        width, height = image_size if image_size is not None else DEFAULT_IMAGE_SIZE
    keep = fov_mask(scan[:, :3], calib, width, height)  # (N,)
    kept = scan[keep]  # (K, 4|8)
    rect = points_velo_to_rect(kept[:, :3], calib)  # (K, 3) float64
    if image is not None:
        uv, _ = points_rect_to_image(rect, calib)  # (K, 2)
        cols = np.clip(np.floor(uv[:, 0]).astype(np.int64), 0, width - 1)
        rows = np.clip(np.floor(uv[:, 1]).astype(np.int64), 0, height - 1)
        rgb = image[rows, cols].astype(np.float32) / np.float32(255.0)  # (K, 3)
    else:
        rgb = np.zeros((len(kept), 3), dtype=np.float32)
    return Frame(
        frame_id=frame_id,
        points_rect=rect.astype(np.float32),
        intensity=kept[:, 3].astype(np.float32),
        rgb=rgb,
        scores=kept[:, 4:8].astype(np.float32) if painted else None,
        labels=list(labels),
        calib=calib,
        image_size=(int(width), int(height)),
    )
