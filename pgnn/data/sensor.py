"""A LiDAR's own frame <-> the network's frame: a synthesised calib, the field-of-view crop, box conversion.

Frames (metres)::

    sensor  --extrinsic-->  output frame  --height shift-->  KITTI velodyne  --axis swap + t-->  rectified cam
    (as the                 x forward, y left, z up;          (1.73 m above       x right, y down, z forward
     file holds)            detections, own labels here       the ground)        (pgnn's, THE box frame)

* ``extrinsic`` (``pgnn.config.sensor.SensorConfig``, default identity) maps the sensor into the output frame.
* The height shift ``z += mounting_height - 1.73`` puts the ground where it is under KITTI's HDL-64E.
* The axis swap ``(x_cam, y_cam, z_cam) = (-y, -z, x)`` plus ``KITTI_VELO_TO_CAM_T``, the mean translation of
  KITTI's ``R0_rect . Tr_velo_to_cam`` (its rotation is within 1 degree of the plain swap), is the rectified
  camera frame the network was trained in.

The chain is packed into a KITTI :class:`~pgnn.data.kitti.Calib` (:func:`sensor_calib`): ``R0_rect = I``,
``Tr_velo_to_cam`` the whole sensor -> camera transform, and a virtual camera with KITTI's intrinsics and no
baseline (``P2 = K [I | 0]``). There is no image: frames built here have ``image_size == NO_CAMERA``, which
tells post-processing to keep every box (no image truncation) and to write 2D boxes of -1.

Boxes in the output frame are ``[x, y, z, l, w, h, yaw]``: (x, y, z) the geometric centre, yaw about +z from
+x (``yaw = -ry - pi/2`` against KITTI's ``rotation_y``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pgnn.config.sensor import KITTI_MOUNTING_HEIGHT, SensorConfig
from pgnn.data.frames import Frame, points_velo_to_rect
from pgnn.data.kitti import Calib, frame_paths, read_calib, read_scan
from pgnn.data.labels import Label, read_labels

# image_size of a frame without a camera: no field-of-view crop by an image, no 2D boxes, no truncation.
NO_CAMERA: tuple[int, int] = (0, 0)

# The plain LiDAR -> camera axis swap (x_cam = -y, y_cam = -z, z_cam = x) and KITTI's mean translation
# (R0_rect . Tr_velo_to_cam of the sample's calibs: about (0.0, -0.08, -0.27) m).
AXIS_SWAP = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
KITTI_VELO_TO_CAM_T = np.array([0.0, -0.08, -0.27])

# KITTI's camera intrinsics (calib 000000's P2), for the virtual camera of a synthesised calib.
_K = np.array([[721.5377, 0.0, 609.5593], [0.0, 721.5377, 172.854], [0.0, 0.0, 1.0]])


def output_to_rect(sensor: SensorConfig) -> np.ndarray:
    """(4, 4) output frame -> rectified camera frame (height shift, axis swap, KITTI's translation)."""
    m = np.eye(4)
    m[:3, :3] = AXIS_SWAP
    shift = np.array([0.0, 0.0, sensor.mounting_height - KITTI_MOUNTING_HEIGHT])
    m[:3, 3] = AXIS_SWAP @ shift + KITTI_VELO_TO_CAM_T
    return m


def sensor_to_rect(sensor: SensorConfig) -> np.ndarray:
    """(4, 4) sensor frame -> rectified camera frame: ``output_to_rect . extrinsic``."""
    return output_to_rect(sensor) @ sensor.extrinsic_matrix()


def sensor_calib(sensor: SensorConfig) -> Calib:
    """A KITTI calib whose velodyne frame is the sensor's (see the module docstring)."""
    p = np.hstack([_K, np.zeros((3, 1))])  # (3, 4) no baseline: camera 2 = rectified camera 0
    return Calib(
        P0=p,
        P1=p.copy(),
        P2=p.copy(),
        P3=p.copy(),
        R0_rect=np.eye(3),
        Tr_velo_to_cam=sensor_to_rect(sensor)[:3],
    )


def view_mask(xyz_out: np.ndarray, sensor: SensorConfig) -> np.ndarray:
    """Points inside the sensor's field of view (a cone about +x) and range, in the output frame.

    Shapes:
        xyz_out: (N, 3) -> (N,) bool
    """
    xyz = np.asarray(xyz_out, dtype=np.float64)
    keep = np.ones(len(xyz), dtype=bool)
    if sensor.field_of_view < 360.0:
        azimuth = np.degrees(np.abs(np.arctan2(xyz[:, 1], xyz[:, 0])))  # (N,) 0 on +x
        keep &= azimuth <= sensor.field_of_view / 2.0
    if sensor.max_range is not None:
        keep &= np.hypot(xyz[:, 0], xyz[:, 1]) <= sensor.max_range
    return keep


def _transform(points: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.asarray(points, dtype=np.float64) @ m[:3, :3].T + m[:3, 3]


def frame_from_sensor_scan(
    frame_id: str,
    scan: np.ndarray,
    sensor: SensorConfig,
    *,
    scores: np.ndarray | None = None,
    labels: list[Label] | None = None,
) -> Frame:
    """A camera-less frame: the scan's points in the sensor's view, moved to the rectified camera frame.

    Shapes:
        scan: (N, 4) [x, y, z, intensity 0..1] sensor frame; scores: (N, 4) or None
    """
    xyz_out = _transform(scan[:, :3], sensor.extrinsic_matrix())  # (N, 3)
    keep = view_mask(xyz_out, sensor)  # (N,)
    rect = _transform(xyz_out[keep], output_to_rect(sensor))  # (K, 3)
    return Frame(
        frame_id=frame_id,
        points_rect=rect.astype(np.float32),
        intensity=np.asarray(scan[keep, 3], dtype=np.float32),
        rgb=np.zeros((len(rect), 3), dtype=np.float32),
        scores=None if scores is None else np.asarray(scores[keep], dtype=np.float32),
        labels=list(labels or []),
        calib=sensor_calib(sensor),
        image_size=NO_CAMERA,
    )


# ----------------------------------------------------------------------------------------------------
# boxes


def boxes_rect_to_output(boxes: np.ndarray, sensor: SensorConfig) -> np.ndarray:
    """KITTI boxes ``[x, y, z, l, h, w, ry]`` (bottom centre, rectified frame) -> output-frame boxes
    ``[x, y, z, l, w, h, yaw]`` (geometric centre, yaw about +z from +x).

    Shapes:
        boxes: (M, 7) -> (M, 7) float64
    """
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    centre = b[:, :3].copy()  # (M, 3)
    centre[:, 1] -= b[:, 4] / 2.0  # bottom -> geometric centre (y points down)
    xyz = _transform(centre, np.linalg.inv(output_to_rect(sensor)))  # (M, 3)
    yaw = (-b[:, 6] - np.pi / 2.0 + np.pi) % (2.0 * np.pi) - np.pi  # (M,) in [-pi, pi)
    return np.column_stack([xyz, b[:, 3], b[:, 5], b[:, 4], yaw])


def boxes_output_to_rect(boxes: np.ndarray, sensor: SensorConfig) -> np.ndarray:
    """The inverse of :func:`boxes_rect_to_output` (``ry`` wrapped into [-pi, pi)).

    Shapes:
        boxes: (M, 7) [x, y, z, l, w, h, yaw] -> (M, 7) [x, y, z, l, h, w, ry] float64
    """
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 7)
    centre = _transform(b[:, :3], output_to_rect(sensor))  # (M, 3)
    centre[:, 1] += b[:, 5] / 2.0  # geometric -> bottom centre
    ry = (-b[:, 6] - np.pi / 2.0 + np.pi) % (2.0 * np.pi) - np.pi  # (M,)
    return np.column_stack([centre, b[:, 3], b[:, 5], b[:, 4], ry])


def load_lidar_frame(
    root: str | Path, frame_id: str, painted: bool = False, subset: str = "training"
) -> Frame:
    """``pgnn.data.frames.load_frame`` for a LiDAR-only KITTI root (no ``image_2/``, e.g. ``pgnn convert``'s):
    every point of the scan, moved to the rectified frame with the root's calib; no colours, ``NO_CAMERA``."""
    paths = frame_paths(root, frame_id, subset)
    calib = read_calib(paths.calib)
    scan = read_scan(paths, painted)  # (N, 4) or (N, 8)
    labels = read_labels(paths.label) if paths.label.is_file() else []
    rect = points_velo_to_rect(scan[:, :3], calib)  # (N, 3)
    return Frame(
        frame_id=frame_id,
        points_rect=rect.astype(np.float32),
        intensity=scan[:, 3].astype(np.float32),
        rgb=np.zeros((len(rect), 3), dtype=np.float32),
        scores=scan[:, 4:8].astype(np.float32) if painted else None,
        labels=labels,
        calib=calib,
        image_size=NO_CAMERA,
    )
