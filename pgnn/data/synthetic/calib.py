"""The calibration of every synthetic frame: KITTI's drive 2011_09_26, Tr_velo_to_cam optionally jittered."""

from __future__ import annotations

import numpy as np

from pgnn.data.kitti import Calib

# Calibration of KITTI drive 2011_09_26 (e.g. object frame 000001): facts, copied as numbers.
_KITTI_CALIB: dict[str, str] = {
    "P0": "7.215377e+02 0.0 6.095593e+02 0.0  0.0 7.215377e+02 1.728540e+02 0.0  0.0 0.0 1.0 0.0",
    "P1": "7.215377e+02 0.0 6.095593e+02 -3.875744e+02  0.0 7.215377e+02 1.728540e+02 0.0  0.0 0.0 1.0 0.0",
    "P2": (
        "7.215377e+02 0.0 6.095593e+02 4.485728e+01  0.0 7.215377e+02 1.728540e+02 2.163791e-01  "
        "0.0 0.0 1.0 2.745884e-03"
    ),
    "P3": (
        "7.215377e+02 0.0 6.095593e+02 -3.395242e+02  0.0 7.215377e+02 1.728540e+02 2.199936e+00  "
        "0.0 0.0 1.0 2.729905e-03"
    ),
    "R0_rect": (
        "9.999239e-01 9.837760e-03 -7.445048e-03  -9.869795e-03 9.999421e-01 -4.278459e-03  "
        "7.402527e-03 4.351614e-03 9.999631e-01"
    ),
    "Tr_velo_to_cam": (
        "7.533745e-03 -9.999714e-01 -6.166020e-04 -4.069766e-03  1.480249e-02 7.280733e-04 -9.998902e-01 "
        "-7.631618e-02  9.998621e-01 7.523790e-03 1.480755e-02 -2.717806e-01"
    ),
    "Tr_imu_to_velo": (
        "9.999976e-01 7.553071e-04 -2.035826e-03 -8.086759e-01  -7.854027e-04 9.998898e-01 -1.482298e-02 "
        "3.195559e-01  2.024406e-03 1.482454e-02 9.998881e-01 -7.997231e-01"
    ),
}


def _kitti_matrix(key: str) -> np.ndarray:
    values = np.array([float(v) for v in _KITTI_CALIB[key].split()])
    return values.reshape(3, -1)


def _rotation_xyz(angles: np.ndarray) -> np.ndarray:
    """Rotation matrix of small angles (rad) about x, then y, then z. Shapes: angles (3,) -> (3, 3)."""
    cx, cy, cz = np.cos(angles)
    sx, sy, sz = np.sin(angles)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]])
    ry = np.array([[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]])
    rz = np.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def synthetic_calib(rng: np.random.Generator, jitter_deg: float) -> Calib:
    """KITTI's 2011_09_26 calibration, with Tr_velo_to_cam rotated by up to ``jitter_deg`` (normal, std/3).

    The jitter draw happens only when ``jitter_deg`` > 0.
    """
    tr = _kitti_matrix("Tr_velo_to_cam")
    if jitter_deg > 0.0:
        angles = np.deg2rad(np.clip(rng.normal(0.0, jitter_deg / 3.0, 3), -jitter_deg, jitter_deg))
        tr[:, :3] = tr[:, :3] @ _rotation_xyz(angles)
    return Calib(
        P0=_kitti_matrix("P0"),
        P1=_kitti_matrix("P1"),
        P2=_kitti_matrix("P2"),
        P3=_kitti_matrix("P3"),
        R0_rect=_kitti_matrix("R0_rect"),
        Tr_velo_to_cam=tr,
        Tr_imu_to_velo=_kitti_matrix("Tr_imu_to_velo"),
    )
