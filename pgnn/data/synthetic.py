"""A synthetic KITTI dataset: ray-cast HDL-64E scans of procedural street scenes, written in KITTI's layout.

It is the pipeline's default dataset: a Point-GNN trains on it on a laptop CPU in minutes, and every stage
(reader, graph, targets, training, evaluation) runs on the same files a real KITTI root holds::

    OUT/training/velodyne/NNNNNN.bin        float32 (N, 4) x, y, z, reflectance (velodyne frame), ~120k points
    OUT/training/calib/NNNNNN.txt           a real KITTI calibration (drive 2011_09_26)
    OUT/training/label_2/NNNNNN.txt         Car / Van / Pedestrian / Cyclist / DontCare, KITTI's 15 fields
    OUT/training/image_2/NNNNNN.png         1242 x 375 RGB, ray-traced from camera 2
    OUT/training/painted_lidar/NNNNNN.npy   float64 (M, 8) PointPainting rows of the points image_2 sees
    OUT/ImageSets/{train,val,trainval}.txt

How a frame is made (all randomness from ``np.random.default_rng([seed, index])``, so a frame's bytes depend
only on (seed, index, config), never on how many frames are written):

1. Scene. A road (2-4 lanes, right-hand traffic, optional parking strips and a cross street) with sidewalks,
   front yards and building blocks or low walls on each side; ground with a gentle slope and undulation.
   Objects in road slots: moving cars and vans in lanes (heading with the lane), parked ones at the kerb,
   crossing traffic on the cross street, pedestrians on sidewalks (some crossing), cyclists at the road edge.
   Then poles, traffic signs, trees and bushes. Footprints never overlap (separating-axis test, 0.25 m gap).
   Objects are 5-60 m from the sensor, three quarters of them ahead (in the camera's view).
2. Labels first, geometry second. Each object's KITTI label (camera frame, values rounded to the 2 decimals a
   label file holds) is fixed before its geometry, and the geometry is built inside that exact box: a car is
   a body box, a narrower glass cabin and four wheel cylinders; a van a body and a hood; a pedestrian two leg
   cylinders, an ellipsoid torso and a head; a cyclist two thin wheels, a frame and a rider. Every part stays
   ``INSET_SIDE`` (6 cm) inside the box's sides and ``INSET_VERTICAL`` (3 cm) inside its top and bottom; the
   box's bottom is put ``GROUND_CLEARANCE`` (>= 3 cm, rounded up) above the highest ground under its
   footprint. With the range noise clipped to ``range_noise_clip_m`` (5 cm, which moves a point at most 5 cm
   sideways and 2.1 cm vertically at the steepest beam), the reader finds inside each label box exactly the
   points that hit that object: no ground, no neighbour, none of its own points lost.
3. Scan. A spinning 64-laser sensor like KITTI's Velodyne HDL-64E at 1.73 m: an upper block of 32 lasers from
   +2.0 to -8.33 deg (1/3 deg apart) and a lower block of 32 from -8.83 to -24.33 deg (1/2 deg apart),
   0.16 deg azimuth steps (2,250 columns, 144k rays). Rays are intersected (numba) with the ground height
   field (bracketed root search), boxes, cylinders and ellipsoids; the candidate primitives of each azimuth
   column come from their bird's-eye bounding circles. The recording car's own roof, bonnet and boot swallow
   the lowest lasers' rays to the front and back (as in KITTI). A return needs enough power: its range must
   be below ``max_range_m * sqrt(reflectivity * (0.3 + 0.7 cos incidence) / 0.25)`` (dark glass fades out
   near 50 m); then ``dropout`` of the returns are lost at random and the range gets N(0, 2 cm) noise
   clipped to 5 cm. Reflectance (``reported_reflectance``) falls with incidence and range (KITTI-like: ~0.25
   on near asphalt, ~0.3 on near objects, mostly 0 beyond 50 m) and comes in steps of 0.01.
4. Occlusion (``occluded`` 0-3) from the scan itself: of the rays (before dropout and range loss) whose line
   meets the object within ``max_range_m``, the fraction whose first hit is the object. >= 0.8 visible -> 0
   (fully visible), >= 0.4 -> 1 (partly occluded), >= 0.1 -> 2 (largely occluded), less (or no ray at all,
   e.g. a far pedestrian between two lasers) -> 3 (unknown); the devkit leaves level 3 out of every
   difficulty, as for real KITTI.
5. Labels. The 2D box is the 3D box's projection (cut at the near plane) clipped to [0, W-1] x [0, H-1];
   truncation = 1 - clipped area / unclipped area (``pgnn.core.boxes.boxes_to_image_2d``); alpha = ry -
   arctan2(x, z). Only objects whose 2D box has area in the image are written (KITTI labels what the camera
   sees); those under ``dontcare_min_height_px`` (20 px) tall are written as DontCare regions.
6. Image. Camera 2 rays are cast into the same scene (exact occlusion, no painter's algorithm): sky gradient,
   asphalt with lane markings, pavement, grass, shaded surfaces with per-object colours (car paint, dark
   glass, black tyres, clothes and skin, facades with windows, foliage), distance haze and pixel noise.
   Rays go through the centres of ``image_render_scale`` x ``image_render_scale`` pixel blocks (2: a quarter
   of the pixels) and the picture is scaled up bilinearly; the noise is added per pixel.
7. Painting. The points image_2 sees (``pgnn.data.kitti.fov_mask``) get PointPainting scores [background,
   bicycle_or_rider, car, pedestrian]: a Dirichlet draw around the one-hot class of the object the ray hit
   (Car and Van -> car, Pedestrian -> pedestrian, Cyclist -> bicycle_or_rider, anything else -> background).

Measured (``benchmarks/synth_speed.py``, 10 frames of seed 0): 110.6-123.8k points a scan (mean 117k) and
17.4-20.3k in the camera's view (mean 19.2k); real KITTI scans have 113-127k and 18.6-20.3k. About 0.2 s a
frame on one core of a quiet machine (scan and image ~70 ms each; numba casts all 144k rays against ground
and primitives faster than numpy does the boxes alone), about 0.3 s with the five files written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgnn.core.boxes import alpha_from_box, boxes_to_corners, boxes_to_image_2d
from pgnn.data.kitti import (
    PAINTED_CLASSES,
    Calib,
    Label,
    fov_mask,
    velo_to_rect_matrix,
    write_calib,
    write_labels,
    write_velodyne,
)
from pgnn.core.io import atomic_path, write_text_atomic

__all__ = [
    "BOX",
    "CLASSES",
    "CYLINDER",
    "ELLIPSOID",
    "Primitives",
    "SynthConfig",
    "SynthFrame",
    "SynthObject",
    "cast_rays",
    "generate_dataset",
    "generate_frame",
    "hdl64_elevations_deg",
    "split_frame_ids",
]

CLASSES: tuple[str, ...] = ("Car", "Van", "Pedestrian", "Cyclist")

# Geometry margins (metres) that make "inside the label box" == "hit on the object"; see the module docstring.
INSET_SIDE = 0.06
INSET_VERTICAL = 0.03
GROUND_CLEARANCE = 0.03
FOOTPRINT_GAP = 0.25

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


# KITTI training-set size statistics (mean, std) of (l, h, w) per class, metres.
_DIMS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "Car": ((3.88, 1.53, 1.63), (0.43, 0.14, 0.10)),
    "Van": ((5.08, 2.21, 1.90), (0.51, 0.32, 0.14)),
    "Pedestrian": ((0.84, 1.76, 0.66), (0.23, 0.11, 0.14)),
    "Cyclist": ((1.76, 1.74, 0.60), (0.18, 0.09, 0.12)),
}
_DIMS_MIN: dict[str, tuple[float, float, float]] = {
    "Car": (3.0, 1.30, 1.40),
    "Van": (4.0, 1.80, 1.65),
    "Pedestrian": (0.45, 1.45, 0.42),
    "Cyclist": (1.45, 1.55, 0.45),
}

# PointPainting column of each class (PAINTED_CLASSES order: background, bicycle_or_rider, car, pedestrian).
_PAINT_INDEX: dict[str, int] = {
    "Car": PAINTED_CLASSES.index("car"),
    "Van": PAINTED_CLASSES.index("car"),
    "Pedestrian": PAINTED_CLASSES.index("pedestrian"),
    "Cyclist": PAINTED_CLASSES.index("bicycle_or_rider"),
}

# Primitive kinds of the ray caster (``Primitives.kind``).
BOX, CYLINDER, ELLIPSOID = 0, 1, 2
# Ground materials: (reflectivity, RGB).
_GROUND_ASPHALT, _GROUND_MARKING, _GROUND_PAVEMENT, _GROUND_GRASS = 0, 1, 2, 3
_GROUND_REFLECTIVITY = np.array([0.36, 0.85, 0.42, 0.5])
_GROUND_RGB = np.array(
    [[78.0, 78.0, 82.0], [225.0, 225.0, 215.0], [150.0, 146.0, 138.0], [88.0, 112.0, 58.0]]
)
_NO_HIT = -2
_GROUND_HIT = -1
_EGO = -2  # owner of the recording car's own body: rays that hit it return nothing


# ----------------------------------------------------------------------------------------------------------
# configuration


class SynthConfig(BaseModel):
    """Knobs of the generator (defaults: KITTI-like).

    Count ranges are inclusive (min, max) per frame: ``cars`` .. ``cyclists`` are placed ``object_range_m``
    from the sensor (``front_fraction`` of them ahead), ``distant_vehicles`` (cars and vans) just beyond it,
    where most become DontCare regions. ``calib_jitter_deg`` rotates Tr_velo_to_cam per frame (0: KITTI's
    calibration as is). ``paint_concentration`` is the Dirichlet weight of the true class in the painted
    scores. ``image_render_scale`` traces one ray per scale x scale pixel block.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    azimuth_step_deg: float = Field(0.16, gt=0.01, le=1.0)
    max_range_m: float = Field(120.0, gt=10.0)
    mount_height_m: float = Field(1.73, gt=0.5)
    range_noise_std_m: float = Field(0.02, ge=0.0)
    range_noise_clip_m: float = Field(0.05, ge=0.0, le=0.05)
    dropout: float = Field(0.03, ge=0.0, lt=1.0)
    image_width: int = Field(1242, ge=64)
    image_height: int = Field(375, ge=32)
    cars: tuple[int, int] = (4, 12)
    vans: tuple[int, int] = (0, 2)
    pedestrians: tuple[int, int] = (0, 4)
    cyclists: tuple[int, int] = (0, 3)
    object_range_m: tuple[float, float] = (5.0, 60.0)
    front_fraction: float = Field(0.75, ge=0.0, le=1.0)
    distant_vehicles: tuple[int, int] = (0, 3)
    dontcare_min_height_px: float = Field(20.0, ge=0.0)
    calib_jitter_deg: float = Field(0.0, ge=0.0, le=1.0)
    paint_concentration: float = Field(20.0, gt=0.0)
    image_noise: float = Field(4.0, ge=0.0)
    image_render_scale: int = Field(2, ge=1, le=4)
    png_compress_level: int = Field(1, ge=0, le=9)

    @model_validator(mode="after")
    def _ranges_ordered(self) -> SynthConfig:
        for name in ("cars", "vans", "pedestrians", "cyclists", "distant_vehicles", "object_range_m"):
            lo, hi = getattr(self, name)
            if lo < 0 or hi < lo:
                raise ValueError(f"{name}: expected 0 <= min <= max, got ({lo}, {hi})")
        return self


# ----------------------------------------------------------------------------------------------------------
# public results


@dataclass(frozen=True, eq=False)
class SynthObject:
    """One object of a scene, labelled or not.

    ``box_rect`` is the exact KITTI box ``[x, y, z, l, h, w, ry]`` (rectified camera frame) the geometry was
    built in; ``label_index`` its row in the frame's labels (-1: not written, outside the image);
    ``visible_fraction`` the share of the rays meeting it that hit it first; ``num_points`` its points in the
    scan, ``num_points_fov`` those image_2 sees.
    """

    kind: str
    box_rect: np.ndarray
    label_index: int
    dontcare: bool
    visible_fraction: float
    num_points: int
    num_points_fov: int


@dataclass(frozen=True, eq=False)
class SynthFrame:
    """One generated frame, in memory.

    Shapes:
        points_velo: (N, 4) float32 x, y, z, reflectance in the velodyne frame (the .bin rows).
        point_object_id: (N,) int32 index into ``objects`` of the object each point hit, -1 for ground and
            clutter.
        fov: (N,) bool, the points image_2 sees (``painted`` holds exactly these rows, in order).
        painted: (M, 8) float64 [x, y, z, r, s_background, s_bicycle_or_rider, s_car, s_pedestrian].
        image: (H, W, 3) uint8.
    """

    index: int
    points_velo: np.ndarray
    point_object_id: np.ndarray
    fov: np.ndarray
    painted: np.ndarray
    calib: Calib
    labels: list[Label]
    image: np.ndarray
    objects: tuple[SynthObject, ...]

    @property
    def frame_id(self) -> str:
        return f"{self.index:06d}"


# ----------------------------------------------------------------------------------------------------------
# sensor and calibration


def hdl64_elevations_deg() -> np.ndarray:
    """Elevation of the 64 lasers, top to bottom: +2.0 .. -8.33 deg (32, 1/3 deg apart), -8.83 .. -24.33 (32).

    Shapes:
        returns (64,) float64 degrees.
    """
    upper = 2.0 - np.arange(32) / 3.0
    lower = -8.83 - 0.5 * np.arange(32)
    return np.concatenate([upper, lower])


def lidar_ray_directions(config: SynthConfig, azimuth0: float) -> np.ndarray:
    """Unit ray directions of one revolution, laser-major (row = laser, column = azimuth step).

    Each laser fires at a fixed azimuth offset within a step (as the HDL-64E's lasers do), so rings are not
    aligned column for column.

    Shapes:
        returns (64, C, 3) float64, velodyne frame, C = round(360 / azimuth_step_deg).
    """
    columns = int(round(360.0 / config.azimuth_step_deg))
    step = 2.0 * np.pi / columns
    elevation = np.deg2rad(hdl64_elevations_deg())  # (64,)
    offset = step * (((np.arange(64) * 0.6180339887) % 1.0) - 0.5)  # (64,)
    azimuth = azimuth0 + step * np.arange(columns)[None, :] + offset[:, None]  # (64, C)
    cos_el = np.cos(elevation)[:, None]  # (64, 1)
    return np.stack(
        [
            cos_el * np.cos(azimuth),
            cos_el * np.sin(azimuth),
            np.broadcast_to(np.sin(elevation)[:, None], azimuth.shape),
        ],
        axis=-1,
    )


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


# ----------------------------------------------------------------------------------------------------------
# road and ground


@dataclass(frozen=True)
class Road:
    """A straight road through the sensor's surroundings, in road coordinates (u along it, s to its left).

    ``lane_edges`` holds the lateral positions of the lane boundaries (right to left); the drivable area
    (lanes plus parking strips) spans ``s_right .. s_left``; sidewalks follow outwards, then front yards and
    buildings. ``cross_u`` is the centre of a cross street (NaN: none) of width ``cross_width``.
    """

    heading: float
    lane_edges: np.ndarray
    s_right: float
    s_left: float
    parking_right: bool
    parking_left: bool
    sidewalk_width: float
    cross_u: float
    cross_width: float

    def to_road(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Velodyne (x, y) -> road (u, s)."""
        c, s = math.cos(self.heading), math.sin(self.heading)
        return c * x + s * y, -s * x + c * y

    def to_velo(self, u: float, s: float) -> tuple[float, float]:
        """Road (u, s) -> velodyne (x, y)."""
        c, sn = math.cos(self.heading), math.sin(self.heading)
        return c * u - sn * s, sn * u + c * s

    def in_cross_street(self, u: np.ndarray, margin: float = 0.0) -> np.ndarray:
        if math.isnan(self.cross_u):
            return np.zeros(np.shape(u), dtype=bool)
        return np.abs(np.asarray(u) - self.cross_u) < self.cross_width / 2.0 + margin


def sample_road(rng: np.random.Generator) -> Road:
    """A 2-4 lane road with the sensor in one of the right-hand lanes."""
    lanes = int(rng.choice([2, 3, 4], p=[0.5, 0.3, 0.2]))
    lane_width = float(rng.uniform(3.2, 3.7))
    ego_lane = int(rng.integers(0, max(1, lanes // 2)))  # counted from the right
    right = -(ego_lane + 0.5) * lane_width + float(rng.normal(0.0, 0.2))
    edges = right + lane_width * np.arange(lanes + 1)
    parking_right = bool(rng.random() < 0.6)
    parking_left = bool(rng.random() < 0.6)
    has_cross = bool(rng.random() < 0.35)
    return Road(
        heading=float(np.clip(rng.normal(0.0, 0.04), -0.1, 0.1)),
        lane_edges=edges,
        s_right=float(edges[0] - (2.3 if parking_right else 0.3)),
        s_left=float(edges[-1] + (2.3 if parking_left else 0.3)),
        parking_right=parking_right,
        parking_left=parking_left,
        sidewalk_width=float(rng.uniform(1.8, 4.0)),
        cross_u=float(rng.uniform(14.0, 45.0)) if has_cross else math.nan,
        cross_width=float(rng.uniform(7.0, 10.0)),
    )


def sample_ground(rng: np.random.Generator, mount_height: float) -> np.ndarray:
    """Ground height field coefficients (velodyne frame): z = h0 + sx x + sy y + sum_k A_k sin(k_k.xy + p_k).

    Slopes within 1.5 %, two undulations of 2-8 cm amplitude and 20-60 m wavelength.

    Shapes:
        returns (11,) float64 [h0, sx, sy, A1, kx1, ky1, p1, A2, kx2, ky2, p2].
    """
    coeffs = [-mount_height + float(rng.normal(0.0, 0.02))]
    coeffs += list(np.clip(rng.normal(0.0, 0.006, 2), -0.015, 0.015))
    for _ in range(2):
        amplitude = rng.uniform(0.02, 0.08)
        wavelength = rng.uniform(20.0, 60.0)
        direction = rng.uniform(0.0, 2.0 * np.pi)
        k = 2.0 * np.pi / wavelength
        coeffs += [amplitude, k * np.cos(direction), k * np.sin(direction), rng.uniform(0.0, 2.0 * np.pi)]
    return np.array(coeffs, dtype=np.float64)


def ground_height(ground: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ground z (velodyne frame) under (x, y). Shapes: x, y (...) -> (...)."""
    g = ground
    return (
        g[0]
        + g[1] * x
        + g[2] * y
        + g[3] * np.sin(g[4] * x + g[5] * y + g[6])
        + g[7] * np.sin(g[8] * x + g[9] * y + g[10])
    )


def ground_material(road: Road, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Material id of the ground at velodyne (x, y): asphalt, lane marking, pavement or grass.

    Shapes:
        x, y: (N,) -> (N,) int64.
    """
    u, s = road.to_road(x, y)
    on_road = (s >= road.s_right) & (s <= road.s_left)
    cross = road.in_cross_street(u)
    sidewalk = ((s >= road.s_left) & (s < road.s_left + road.sidewalk_width)) | (
        (s <= road.s_right) & (s > road.s_right - road.sidewalk_width)
    )
    material = np.full(x.shape, _GROUND_GRASS, dtype=np.int64)
    material[sidewalk] = _GROUND_PAVEMENT
    material[on_road | cross] = _GROUND_ASPHALT
    inner = road.lane_edges[1:-1]
    dashed = np.zeros(x.shape, dtype=bool)
    for edge in inner:
        dashed |= (np.abs(s - edge) < 0.07) & (np.mod(u, 9.0) < 3.0)
    solid = (np.abs(s - road.lane_edges[0]) < 0.08) | (np.abs(s - road.lane_edges[-1]) < 0.08)
    marking = (dashed | solid) & on_road & ~cross
    material[marking] = _GROUND_MARKING
    return material


# ----------------------------------------------------------------------------------------------------------
# primitives


@dataclass
class Primitives:
    """The scene's solid parts for the ray caster: each a box, cylinder or ellipsoid in its own local frame.

    A world (velodyne) point p has local coordinates ``A[:, :3] @ p + A[:, 3]``; boxes are centred with half
    extents ``params``; cylinders run along local z with (radius, half height); ellipsoids have semi-axes
    ``params``. ``owner`` is the index of the scene object a part belongs to (-1: clutter, -2: the recording
    car, which returns nothing); an object's parts are contiguous.
    """

    kind: list[int] = field(default_factory=list)
    affine: list[np.ndarray] = field(default_factory=list)
    params: list[tuple[float, float, float]] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)
    reflectivity: list[float] = field(default_factory=list)
    rgb: list[tuple[float, float, float]] = field(default_factory=list)
    texture: list[int] = field(default_factory=list)

    def add(
        self,
        kind: int,
        frame: np.ndarray,
        centre: tuple[float, float, float],
        axes: np.ndarray,
        params: tuple[float, float, float],
        owner: int,
        reflectivity: float,
        rgb: tuple[float, float, float],
        texture: int = 0,
    ) -> None:
        """Add a part centred at ``centre`` of a parent frame (3, 4), local axes = the rows of ``axes``."""
        lin = axes @ frame[:, :3]
        off = axes @ (frame[:, 3] - np.asarray(centre, dtype=np.float64))
        self.kind.append(kind)
        self.affine.append(np.concatenate([lin, off[:, None]], axis=1))
        self.params.append(tuple(float(v) for v in params))
        self.owner.append(owner)
        self.reflectivity.append(float(reflectivity))
        self.rgb.append(tuple(float(v) for v in rgb))
        self.texture.append(texture)

    def arrays(self) -> PrimitiveArrays:
        n = len(self.kind)
        return PrimitiveArrays(
            kind=np.array(self.kind, dtype=np.int64).reshape(n),
            affine=np.array(self.affine, dtype=np.float64).reshape(n, 3, 4),
            params=np.array(self.params, dtype=np.float64).reshape(n, 3),
            owner=np.array(self.owner, dtype=np.int64).reshape(n),
            reflectivity=np.array(self.reflectivity, dtype=np.float64).reshape(n),
            rgb=np.array(self.rgb, dtype=np.float64).reshape(n, 3),
            texture=np.array(self.texture, dtype=np.int64).reshape(n),
        )


@dataclass(frozen=True)
class PrimitiveArrays:
    """``Primitives`` as arrays. Shapes: kind (P,), affine (P, 3, 4), params (P, 3), owner (P,), ..."""

    kind: np.ndarray
    affine: np.ndarray
    params: np.ndarray
    owner: np.ndarray
    reflectivity: np.ndarray
    rgb: np.ndarray
    texture: np.ndarray


_AXES_IDENTITY = np.eye(3)
_AXES_Y_ALONG_Z = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # cylinder axis = parent y


def _frame_from_yaw(x: float, y: float, z: float, yaw: float) -> np.ndarray:
    """(3, 4) velodyne -> local frame with origin (x, y, z) and x axis at ``yaw`` (about velodyne z)."""
    c, s = math.cos(yaw), math.sin(yaw)
    rot_t = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])
    return np.concatenate([rot_t, (-rot_t @ np.array([x, y, z]))[:, None]], axis=1)


def _primitive_extent(kind: int, params: np.ndarray) -> np.ndarray:
    """Half extents of a primitive's local bounding box. Shapes: params (3,) -> (3,)."""
    if kind == CYLINDER:
        return np.array([params[0], params[0], params[1]])
    return np.asarray(params, dtype=np.float64)


def _bounding_circles(prims: PrimitiveArrays) -> tuple[np.ndarray, np.ndarray]:
    """Bird's-eye bounding circle (velodyne x, y) of each primitive.

    Shapes:
        returns centres (P, 2), radii (P,).
    """
    n = prims.kind.shape[0]
    centres = np.zeros((n, 2))
    radii = np.zeros(n)
    signs = np.array(
        [[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], dtype=np.float64
    )  # (8, 3)
    for p in range(n):
        lin = prims.affine[p, :, :3]
        inv = np.linalg.inv(lin)
        local = signs * _primitive_extent(int(prims.kind[p]), prims.params[p])  # (8, 3)
        world = (local - prims.affine[p, :, 3]) @ inv.T  # (8, 3)
        centre = world.mean(axis=0)
        centres[p] = centre[:2]
        radii[p] = float(np.max(np.linalg.norm(world[:, :2] - centre[:2], axis=1)))
    return centres, radii


# ----------------------------------------------------------------------------------------------------------
# ray casting (numba)


@njit(cache=True)
def _ground_at(x: float, y: float, g: np.ndarray) -> tuple[float, float, float]:
    a1 = g[4] * x + g[5] * y + g[6]
    a2 = g[8] * x + g[9] * y + g[10]
    z = g[0] + g[1] * x + g[2] * y + g[3] * math.sin(a1) + g[7] * math.sin(a2)
    gx = g[1] + g[3] * g[4] * math.cos(a1) + g[7] * g[8] * math.cos(a2)
    gy = g[2] + g[3] * g[5] * math.cos(a1) + g[7] * g[9] * math.cos(a2)
    return z, gx, gy


@njit(cache=True)
def _hit_ground(
    ox: float, oy: float, oz: float, dx: float, dy: float, dz: float, g: np.ndarray, tmax: float
) -> float:
    """Range to the first crossing of the ground height field along a ray, inf if none within tmax.

    The field stays within +-(A1 + A2) of its tilted plane, so the first crossing lies where the ray passes
    through that slab: march it in 2 m steps until the ray dips below the ground, then refine the bracket by
    regula falsi (Illinois). Rays that do not descend relative to the plane never hit.
    """
    slope = dz - g[1] * dx - g[2] * dy
    if slope > -1e-9:
        return np.inf
    bump = abs(g[3]) + abs(g[7])
    above = oz - (g[0] + g[1] * ox + g[2] * oy)
    t_lo = max((bump - above) / slope, 0.0)
    t_hi = min((-bump - above) / slope, tmax)
    if t_lo > t_hi:
        return np.inf
    a = t_lo
    fa = oz + a * dz - _ground_at(ox + a * dx, oy + a * dy, g)[0]
    if fa <= 0.0:
        return a if a > 0.0 else np.inf
    b = a
    fb = fa
    while b < t_hi:
        b = min(b + 2.0, t_hi)
        fb = oz + b * dz - _ground_at(ox + b * dx, oy + b * dy, g)[0]
        if fb <= 0.0:
            break
        a, fa = b, fb
    if fb > 0.0:
        return np.inf
    side = 0
    c = b
    for _ in range(60):
        c = (a * fb - b * fa) / (fb - fa)
        fc = oz + c * dz - _ground_at(ox + c * dx, oy + c * dy, g)[0]
        if fc > 0.0:
            a, fa = c, fc
            if side == 1:
                fb *= 0.5
            side = 1
        else:
            b, fb = c, fc
            if side == -1:
                fa *= 0.5
            side = -1
        if b - a < 1e-7 or abs(fc) < 1e-9:
            break
    return c


@njit(cache=True)
def _hit_box(
    ox: float, oy: float, oz: float, dx: float, dy: float, dz: float, ex: float, ey: float, ez: float
) -> tuple[float, int, float]:
    """Entry range of a ray into a centred box, the entry face's axis and outward sign."""
    t_near = -np.inf
    t_far = np.inf
    axis = -1
    sign = 0.0
    for i in range(3):
        if i == 0:
            o, d, e = ox, dx, ex
        elif i == 1:
            o, d, e = oy, dy, ey
        else:
            o, d, e = oz, dz, ez
        if abs(d) < 1e-15:
            if abs(o) > e:
                return np.inf, -1, 0.0
            continue
        t1 = (-e - o) / d
        t2 = (e - o) / d
        s = -1.0
        if t1 > t2:
            t1, t2 = t2, t1
            s = 1.0
        if t1 > t_near:
            t_near = t1
            axis = i
            sign = s
        if t2 < t_far:
            t_far = t2
    if t_near > t_far or t_near <= 1e-9:
        return np.inf, -1, 0.0
    return t_near, axis, sign


@njit(cache=True)
def _hit_cylinder(
    ox: float, oy: float, oz: float, dx: float, dy: float, dz: float, r: float, hz: float
) -> tuple[float, float, float, float]:
    """Entry range into a closed cylinder along local z, and the local normal there."""
    best = np.inf
    nx = 0.0
    ny = 0.0
    nz = 0.0
    a = dx * dx + dy * dy
    if a > 1e-18:
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - r * r
        disc = b * b - a * c
        if disc >= 0.0:
            t = (-b - math.sqrt(disc)) / a
            if t > 1e-9 and abs(oz + t * dz) <= hz:
                best = t
                nx = ox + t * dx
                ny = oy + t * dy
                nz = 0.0
    if abs(dz) > 1e-15:
        for cap in (-hz, hz):
            t = (cap - oz) / dz
            if t > 1e-9 and t < best:
                px = ox + t * dx
                py = oy + t * dy
                if px * px + py * py <= r * r:
                    best = t
                    nx = 0.0
                    ny = 0.0
                    nz = 1.0 if cap > 0 else -1.0
    return best, nx, ny, nz


@njit(cache=True)
def _hit_ellipsoid(
    ox: float, oy: float, oz: float, dx: float, dy: float, dz: float, ea: float, eb: float, ec: float
) -> tuple[float, float, float, float]:
    """Entry range into a centred ellipsoid with semi-axes (ea, eb, ec), and the local normal there."""
    sx, sy, sz = ox / ea, oy / eb, oz / ec
    vx, vy, vz = dx / ea, dy / eb, dz / ec
    a = vx * vx + vy * vy + vz * vz
    b = sx * vx + sy * vy + sz * vz
    c = sx * sx + sy * sy + sz * sz - 1.0
    disc = b * b - a * c
    if disc < 0.0 or a < 1e-18:
        return np.inf, 0.0, 0.0, 0.0
    t = (-b - math.sqrt(disc)) / a
    if t <= 1e-9:
        return np.inf, 0.0, 0.0, 0.0
    px, py, pz = ox + t * dx, oy + t * dy, oz + t * dz
    return t, px / (ea * ea), py / (eb * eb), pz / (ec * ec)


@njit(cache=True)
def _cast_rays(
    origin: np.ndarray,
    dirs: np.ndarray,
    ray_col: np.ndarray,
    cand_ptr: np.ndarray,
    cand: np.ndarray,
    kind: np.ndarray,
    affine: np.ndarray,
    params: np.ndarray,
    owner: np.ndarray,
    ground: np.ndarray,
    tmax: float,
    n_objects: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """First hit of each ray: range, what was hit (primitive index, -1 ground, -2 nothing), unit normal facing
    the ray, and per object the number of rays whose line meets it within ``tmax`` (hidden or not)."""
    n = dirs.shape[0]
    t_out = np.full(n, np.inf)
    hit_out = np.full(n, -2, dtype=np.int64)
    normal_out = np.zeros((n, 3))
    expected = np.zeros(max(n_objects, 1), dtype=np.int64)
    ox, oy, oz = origin[0], origin[1], origin[2]
    for r in range(n):
        dx, dy, dz = dirs[r, 0], dirs[r, 1], dirs[r, 2]
        best = _hit_ground(ox, oy, oz, dx, dy, dz, ground, tmax)
        best_p = -2
        if best < np.inf:
            best_p = -1
        lnx = 0.0
        lny = 0.0
        lnz = 0.0
        last_owner = -1
        col = ray_col[r]
        for k in range(cand_ptr[col], cand_ptr[col + 1]):
            p = cand[k]
            a = affine[p]
            lox = a[0, 0] * ox + a[0, 1] * oy + a[0, 2] * oz + a[0, 3]
            loy = a[1, 0] * ox + a[1, 1] * oy + a[1, 2] * oz + a[1, 3]
            loz = a[2, 0] * ox + a[2, 1] * oy + a[2, 2] * oz + a[2, 3]
            ldx = a[0, 0] * dx + a[0, 1] * dy + a[0, 2] * dz
            ldy = a[1, 0] * dx + a[1, 1] * dy + a[1, 2] * dz
            ldz = a[2, 0] * dx + a[2, 1] * dy + a[2, 2] * dz
            kd = kind[p]
            if kd == 0:
                t, axis, sign = _hit_box(
                    lox, loy, loz, ldx, ldy, ldz, params[p, 0], params[p, 1], params[p, 2]
                )
                nx = sign if axis == 0 else 0.0
                ny = sign if axis == 1 else 0.0
                nz = sign if axis == 2 else 0.0
            elif kd == 1:
                t, nx, ny, nz = _hit_cylinder(lox, loy, loz, ldx, ldy, ldz, params[p, 0], params[p, 1])
            else:
                t, nx, ny, nz = _hit_ellipsoid(
                    lox, loy, loz, ldx, ldy, ldz, params[p, 0], params[p, 1], params[p, 2]
                )
            if t < tmax:
                o = owner[p]
                if o >= 0 and o != last_owner:
                    expected[o] += 1
                    last_owner = o
                if t < best:
                    best = t
                    best_p = p
                    lnx, lny, lnz = nx, ny, nz
        if best_p == -1:
            z, gx, gy = _ground_at(ox + best * dx, oy + best * dy, ground)
            wx, wy, wz = -gx, -gy, 1.0
        elif best_p >= 0:
            a = affine[best_p]
            wx = a[0, 0] * lnx + a[1, 0] * lny + a[2, 0] * lnz
            wy = a[0, 1] * lnx + a[1, 1] * lny + a[2, 1] * lnz
            wz = a[0, 2] * lnx + a[1, 2] * lny + a[2, 2] * lnz
        else:
            continue
        norm = math.sqrt(wx * wx + wy * wy + wz * wz)
        if norm > 0.0:
            wx, wy, wz = wx / norm, wy / norm, wz / norm
        if wx * dx + wy * dy + wz * dz > 0.0:
            wx, wy, wz = -wx, -wy, -wz
        t_out[r] = best
        hit_out[r] = best_p
        normal_out[r, 0] = wx
        normal_out[r, 1] = wy
        normal_out[r, 2] = wz
    return t_out, hit_out, normal_out, expected[:n_objects]


def _wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2.0 * np.pi) - np.pi


def _column_candidates(
    origin: np.ndarray, dirs: np.ndarray, prims: PrimitiveArrays
) -> tuple[np.ndarray, np.ndarray]:
    """Per ray column, the primitives whose bird's-eye bounding circle some ray of the column can meet.

    A ray's bird's-eye projection leaves ``origin`` at its azimuth; it can meet a circle only within the
    circle's angular half-width around the circle's azimuth.

    Shapes:
        dirs: (rows, C, 3), rays grouped in columns of similar azimuth (more than 64 rows: a camera, whose
            columns are bounded by 9 of their rays)
        returns cand_ptr (C + 1,) int64, cand (K,) int64 (primitive indices, ascending within a column).
    """
    rows = dirs.shape[0]
    if rows > 64:  # a camera: azimuth varies smoothly down a column, a few rows bound it
        dirs = dirs[np.unique(np.linspace(0, rows - 1, 9).round().astype(np.int64))]
    azimuth = np.arctan2(dirs[..., 1], dirs[..., 0])  # (rows', C)
    col_centre = azimuth[0]  # (C,)
    col_half = np.max(np.abs(_wrap(azimuth - col_centre[None, :])), axis=0)  # (C,)
    centres, radii = _bounding_circles(prims)  # (P, 2), (P,)
    rel = centres - origin[None, :2]  # (P, 2)
    dist = np.linalg.norm(rel, axis=1)  # (P,)
    p_centre = np.arctan2(rel[:, 1], rel[:, 0])  # (P,)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_half = np.where(dist > radii + 0.05, np.arcsin(np.clip(radii / dist, 0.0, 1.0)), np.pi)  # (P,)
    diff = np.abs(_wrap(col_centre[:, None] - p_centre[None, :]))  # (C, P)
    ok = diff <= col_half[:, None] + p_half[None, :] + 1e-6  # (C, P)
    cols, cand = np.nonzero(ok)
    cand_ptr = np.zeros(dirs.shape[1] + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=dirs.shape[1]), out=cand_ptr[1:])
    return cand_ptr, cand.astype(np.int64)


def cast_rays(
    origin: np.ndarray,
    dirs: np.ndarray,
    prims: PrimitiveArrays,
    ground: np.ndarray,
    tmax: float,
    n_objects: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cast a grid of rays into the scene.

    Shapes:
        origin: (3,) velodyne frame; dirs: (rows, C, 3) unit directions in columns of similar azimuth.
        returns range (rows*C,), hit (rows*C,) int64 primitive index / -1 ground / -2 nothing, normal
        (rows*C, 3) facing the ray, expected (n_objects,) rays meeting each object.
    """
    cand_ptr, cand = _column_candidates(origin, dirs, prims)
    rows, cols = dirs.shape[:2]
    ray_col = np.broadcast_to(np.arange(cols, dtype=np.int64)[None, :], (rows, cols)).reshape(-1)
    return _cast_rays(
        np.ascontiguousarray(origin, dtype=np.float64),
        np.ascontiguousarray(dirs.reshape(-1, 3), dtype=np.float64),
        np.ascontiguousarray(ray_col),
        cand_ptr,
        cand,
        prims.kind,
        prims.affine,
        prims.params,
        prims.owner,
        ground,
        float(tmax),
        int(n_objects),
    )


# ----------------------------------------------------------------------------------------------------------
# footprints (bird's-eye, velodyne x-y): no two solids of a scene may come closer than FOOTPRINT_GAP


def _rectangle(cx: float, cy: float, half_l: float, half_w: float, yaw: float) -> np.ndarray:
    """Corners of a bird's-eye rectangle. Shapes: returns (4, 2)."""
    c, s = math.cos(yaw), math.sin(yaw)
    local = np.array([[half_l, half_w], [-half_l, half_w], [-half_l, -half_w], [half_l, -half_w]])
    return local @ np.array([[c, s], [-s, c]]) + np.array([cx, cy])


def _edge_normals(polys: np.ndarray) -> np.ndarray:
    """Unit normals of the edges of quadrilaterals. Shapes: (..., 4, 2) -> (..., 4, 2)."""
    edges = np.roll(polys, -1, axis=-2) - polys
    normals = np.stack([-edges[..., 1], edges[..., 0]], axis=-1)
    return normals / np.linalg.norm(normals, axis=-1, keepdims=True)


def _free(candidate: np.ndarray, placed: list[np.ndarray], gap: float = FOOTPRINT_GAP) -> bool:
    """Whether a convex quadrilateral keeps ``gap`` from every placed one (separating-axis test).

    Shapes:
        candidate: (4, 2); placed: K x (4, 2).
    """
    if not placed:
        return True
    others = np.stack(placed)  # (K, 4, 2)
    axes = np.concatenate(
        [np.broadcast_to(_edge_normals(candidate), others.shape), _edge_normals(others)], axis=1
    )  # (K, 8, 2)
    mine = np.einsum("ci,kai->kca", candidate, axes)  # (K, 4, 8)
    theirs = np.einsum("kci,kai->kca", others, axes)  # (K, 4, 8)
    apart = (mine.max(axis=1) + gap <= theirs.min(axis=1)) | (theirs.max(axis=1) + gap <= mine.min(axis=1))
    return bool(apart.any(axis=1).all())


# ----------------------------------------------------------------------------------------------------------
# labelled objects


def _round2(value: float) -> float:
    """``value`` rounded to 2 decimals, as a label file holds it."""
    return float(f"{value:.2f}")


def _sample_dims(kind: str, rng: np.random.Generator) -> tuple[float, float, float]:
    """(l, h, w) from KITTI's per-class statistics (normal, clipped to 2.5 std), rounded to cm."""
    mean, std = (np.array(v) for v in _DIMS[kind])
    dims = np.maximum(mean + std * np.clip(rng.normal(size=3), -2.5, 2.5), np.array(_DIMS_MIN[kind]))
    return _round2(dims[0]), _round2(dims[1]), _round2(dims[2])


def _label_box(
    x: float,
    y: float,
    yaw: float,
    dims: tuple[float, float, float],
    ground: np.ndarray,
    velo_to_rect: np.ndarray,
) -> np.ndarray:
    """The exact (2-decimal) KITTI box of an object standing at velodyne (x, y) heading ``yaw``.

    Its bottom lies at least GROUND_CLEARANCE above the highest ground point under its footprint (sampled on
    a 7 x 7 grid), so no ground return can fall inside it.

    Shapes:
        velo_to_rect: (4, 4); returns (7,) [x, y, z, l, h, w, ry] rectified camera frame.
    """
    l, h, w = dims
    rot, off = velo_to_rect[:3, :3], velo_to_rect[:3, 3]
    centre = rot @ np.array([x, y, float(ground_height(ground, x, y))]) + off  # (3,)
    heading = rot @ np.array([math.cos(yaw), math.sin(yaw), 0.0])  # (3,)
    ry = _round2(_wrap(np.array(math.atan2(-heading[2], heading[0]))).item())
    ry = min(max(ry, -3.14), 3.14)
    bx, bz = _round2(centre[0]), _round2(centre[2])
    c, s = math.cos(ry), math.sin(ry)
    ql, qw = np.meshgrid(np.linspace(-l / 2, l / 2, 7), np.linspace(-w / 2, w / 2, 7), indexing="ij")
    grid_rect = np.stack(
        [
            bx + c * ql.ravel() + s * qw.ravel(),
            np.full(ql.size, centre[1]),
            bz - s * ql.ravel() + c * qw.ravel(),
        ],
        axis=1,
    )  # (49, 3)
    inv = np.linalg.inv(velo_to_rect)
    grid_velo = grid_rect @ inv[:3, :3].T + inv[:3, 3]  # (49, 3)
    grid_velo[:, 2] = ground_height(ground, grid_velo[:, 0], grid_velo[:, 1])
    ground_y = grid_velo @ rot[1] + off[1]  # (49,) rect y (down) of the ground under the footprint
    by = _round2(math.floor((float(ground_y.min()) - GROUND_CLEARANCE) * 100.0) / 100.0)
    return np.array([bx, by, bz, l, h, w, ry])


def _box_footprint_velo(box: np.ndarray, velo_to_rect: np.ndarray) -> np.ndarray:
    """Bird's-eye footprint of a rect-frame box in velodyne x-y. Shapes: (7,) -> (4, 2)."""
    corners = boxes_to_corners(box[None, :])[0, :4]  # (4, 3)
    inv = np.linalg.inv(velo_to_rect)
    return (corners @ inv[:3, :3].T + inv[:3, 3])[:, :2]


def _object_frame(box: np.ndarray, velo_to_rect: np.ndarray) -> np.ndarray:
    """(3, 4) velodyne -> object frame of a label box: x along the heading, y across, z up from the bottom.

    The object frame is the box's KITTI local frame (q = R_y(ry)^T (x_rect - bottom centre)) with its axes
    renamed (q_x, q_z, -q_y), so a part inside the object frame's [-l/2, l/2] x [-w/2, w/2] x [0, h] is
    inside the label box, exactly as ``pgnn.core.boxes.points_in_boxes`` tests it.
    """
    c, s = math.cos(box[6]), math.sin(box[6])
    r_y_t = np.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])
    rename = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    lin = rename @ r_y_t @ velo_to_rect[:3, :3]
    off = rename @ r_y_t @ (velo_to_rect[:3, 3] - box[:3])
    return np.concatenate([lin, off[:, None]], axis=1)


class _PartAdder:
    """Adds an object's parts to ``Primitives``, checking each stays inside the inset label box."""

    def __init__(self, prims: Primitives, frame: np.ndarray, dims: tuple[float, float, float], owner: int):
        self.prims, self.frame, self.owner = prims, frame, owner
        l, h, w = dims
        self.hl, self.hw = l / 2.0 - INSET_SIDE, w / 2.0 - INSET_SIDE
        self.bottom, self.top = INSET_VERTICAL, h - INSET_VERTICAL

    def __call__(
        self,
        kind: int,
        centre: tuple[float, float, float],
        params: tuple[float, float, float],
        reflectivity: float,
        rgb: tuple[float, float, float],
        axes: np.ndarray = _AXES_IDENTITY,
    ) -> None:
        extent = np.abs(axes.T) @ _primitive_extent(kind, np.array(params))  # object-frame half extents
        lo, hi = np.array(centre) - extent, np.array(centre) + extent
        bounds_lo = np.array([-self.hl, -self.hw, self.bottom]) - 1e-9
        bounds_hi = np.array([self.hl, self.hw, self.top]) + 1e-9
        if np.any(lo < bounds_lo) or np.any(hi > bounds_hi):
            raise RuntimeError(f"part {lo}..{hi} leaves the inset box {bounds_lo}..{bounds_hi}")
        self.prims.add(kind, self.frame, centre, axes, params, self.owner, reflectivity, rgb)


_CAR_PAINT: tuple[tuple[tuple[float, float, float], float], ...] = (
    ((235.0, 235.0, 235.0), 0.60),  # white
    ((20.0, 20.0, 24.0), 0.15),  # black
    ((150.0, 152.0, 158.0), 0.45),  # silver
    ((90.0, 92.0, 98.0), 0.30),  # grey
    ((160.0, 25.0, 25.0), 0.35),  # red
    ((25.0, 45.0, 120.0), 0.25),  # blue
    ((30.0, 80.0, 45.0), 0.27),  # green
    ((200.0, 180.0, 120.0), 0.47),  # beige
)
_GLASS = ((45.0, 55.0, 68.0), 0.06)
_TYRE = ((22.0, 22.0, 22.0), 0.05)
_SKIN = ((215.0, 170.0, 140.0), 0.35)


def _paint(rng: np.random.Generator) -> tuple[tuple[float, float, float], float]:
    colour, reflectivity = _CAR_PAINT[int(rng.integers(len(_CAR_PAINT)))]
    return colour, reflectivity * float(rng.uniform(0.8, 1.2))


def _wheels(add: _PartAdder, length: float, radius: float, half_width: float) -> None:
    for x in (add.hl - 0.18 * length - 0.05, -add.hl + 0.18 * length):
        x = float(np.clip(x, -add.hl + radius, add.hl - radius))
        for side in (-1.0, 1.0):
            centre = (x, side * (add.hw - half_width), add.bottom + radius)
            add(CYLINDER, centre, (radius, half_width, 0.0), _TYRE[1], _TYRE[0], axes=_AXES_Y_ALONG_Z)


def _build_car(add: _PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
    """Body box from the sills to the belt line, a narrower glass cabin, four wheels."""
    l, h, _ = dims
    rgb, refl = _paint(rng)
    radius = float(np.clip(0.2 * h, 0.27, 0.33))
    _wheels(add, l, radius, 0.1)
    belt = 0.56 * h
    sill = add.bottom + 0.17
    add(BOX, (0.0, 0.0, (sill + belt) / 2.0), (add.hl, add.hw, (belt - sill) / 2.0), refl, rgb)
    cabin_half = float(rng.uniform(0.22, 0.31)) * l
    cabin_x = float(np.clip(rng.uniform(-0.12, 0.0) * l, -add.hl + cabin_half, add.hl - cabin_half))
    add(
        BOX,
        (cabin_x, 0.0, (belt + add.top) / 2.0),
        (cabin_half, add.hw - 0.06, (add.top - belt) / 2.0),
        _GLASS[1],
        _GLASS[0],
    )


def _build_van(add: _PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
    """A tall box body, a low hood in front, a windscreen band and four wheels."""
    l, h, _ = dims
    rgb, refl = _paint(rng)
    radius = float(np.clip(0.16 * h, 0.3, 0.36))
    _wheels(add, l, radius, 0.11)
    sill = add.bottom + 0.2
    hood = float(rng.uniform(0.45, 0.85))
    front = add.hl - hood
    add(
        BOX,
        ((front - add.hl) / 2.0, 0.0, (sill + add.top) / 2.0),
        ((front + add.hl) / 2.0, add.hw, (add.top - sill) / 2.0),
        refl,
        rgb,
    )
    hood_top = 0.48 * h
    add(
        BOX,
        ((front + add.hl) / 2.0, 0.0, (sill + hood_top) / 2.0),
        (hood / 2.0, add.hw, (hood_top - sill) / 2.0),
        refl,
        rgb,
    )
    glass_lo, glass_hi = 0.6 * h, add.top - 0.12
    add(
        BOX,
        (front - 0.03, 0.0, (glass_lo + glass_hi) / 2.0),
        (0.04, add.hw - 0.08, (glass_hi - glass_lo) / 2.0),
        _GLASS[1],
        _GLASS[0],
    )


def _clothes(rng: np.random.Generator) -> tuple[tuple[float, float, float], float]:
    rgb = tuple(float(v) for v in rng.uniform(20.0, 220.0, 3))
    return rgb, float(rng.uniform(0.15, 0.5))


def _build_pedestrian(add: _PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
    """Two legs (mid-stride), arms, an ellipsoid torso and a head."""
    _, h, _ = dims
    shirt, shirt_refl = _clothes(rng)
    pants, pants_refl = _clothes(rng)
    leg_r = min(0.075, add.hw / 2.0)
    hip = 0.5 * h
    stride = float(rng.uniform(-1.0, 1.0)) * max(0.0, min(0.22, add.hl - leg_r))
    spread = max(0.0, min(0.1, add.hw - leg_r))
    for x, y in ((stride, spread), (-stride, -spread)):
        add(
            CYLINDER,
            (x, y, (add.bottom + hip) / 2.0),
            (leg_r, (hip - add.bottom) / 2.0, 0.0),
            pants_refl,
            pants,
        )
    torso = (min(0.14, add.hl), min(0.2, add.hw - 0.02), 0.19 * h)
    add(ELLIPSOID, (0.0, 0.0, 0.64 * h), torso, shirt_refl, shirt)
    arm_r = 0.045
    arm_y = min(torso[1] + 0.03, add.hw - arm_r)
    swing = -0.5 * stride
    for side in (-1.0, 1.0):
        add(
            CYLINDER,
            (float(np.clip(side * swing, -add.hl + arm_r, add.hl - arm_r)), side * arm_y, 0.66 * h),
            (arm_r, 0.15 * h, 0.0),
            shirt_refl,
            shirt,
        )
    head = min(0.11, add.hw, add.hl)
    add(ELLIPSOID, (0.0, 0.0, add.top - head), (head, head, head), _SKIN[1], _SKIN[0])


def _build_cyclist(add: _PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
    """Two thin wheels, a frame, handlebars; a rider with legs, torso and head."""
    _, h, _ = dims
    shirt, shirt_refl = _clothes(rng)
    pants, pants_refl = _clothes(rng)
    frame_rgb = tuple(float(v) for v in rng.uniform(30.0, 230.0, 3))
    radius = min(0.34, add.hl / 2.2, (h - 0.2) / 5.0)
    wheel_x = add.hl - radius
    for x in (-wheel_x, wheel_x):
        add(
            CYLINDER,
            (x, 0.0, add.bottom + radius),
            (radius, 0.025, 0.0),
            _TYRE[1],
            _TYRE[0],
            axes=_AXES_Y_ALONG_Z,
        )
    axle = add.bottom + radius
    add(BOX, (0.0, 0.0, axle + 0.17), (wheel_x, 0.025, 0.13), 0.5, frame_rgb)
    seat = axle + 0.45
    for side in (-1.0, 1.0):
        add(
            CYLINDER,
            (0.0, side * min(0.1, add.hw - 0.07), (axle + seat) / 2.0),
            (0.07, (seat - axle) / 2.0, 0.0),
            pants_refl,
            pants,
        )
    torso_z = (seat + add.top - 0.2) / 2.0
    add(
        ELLIPSOID,
        (-0.05, 0.0, torso_z),
        (0.17, min(0.19, add.hw - 0.01), (add.top - 0.2 - seat) / 2.0),
        shirt_refl,
        shirt,
    )
    bar_lo = -0.05 + 0.1
    add(
        BOX,
        ((bar_lo + wheel_x - 0.05) / 2.0, 0.0, torso_z + 0.05),
        ((wheel_x - 0.05 - bar_lo) / 2.0, min(0.22, add.hw), 0.035),
        shirt_refl,
        shirt,
    )
    head = 0.11
    add(ELLIPSOID, (0.05, 0.0, add.top - head), (head, head, head), _SKIN[1], _SKIN[0])


_BUILDERS = {"Car": _build_car, "Van": _build_van, "Pedestrian": _build_pedestrian, "Cyclist": _build_cyclist}


def _sample_slot(kind: str, road: Road, rng: np.random.Generator) -> tuple[float, float]:
    """Lateral road position s and heading relative to the road for an object of ``kind``."""
    edges = road.lane_edges
    lanes = len(edges) - 1
    if kind in ("Car", "Van"):
        modes = ["moving"] + ["parked"] * (road.parking_right or road.parking_left)
        modes += ["crossing"] * (not math.isnan(road.cross_u))
        weights = np.array([0.45, 0.4, 0.15][: len(modes)])
        mode = modes[int(rng.choice(len(modes), p=weights / weights.sum()))]
        if mode == "moving":
            lane = int(rng.integers(lanes))
            heading = 0.0 if lane < (lanes + 1) // 2 else math.pi
            return (edges[lane] + edges[lane + 1]) / 2.0 + float(rng.normal(0.0, 0.2)), heading + float(
                rng.normal(0.0, 0.03)
            )
        if mode == "parked":
            sides = [side for side, ok in ((-1, road.parking_right), (1, road.parking_left)) if ok]
            side = sides[int(rng.integers(len(sides)))]
            s = (edges[0] - 1.15) if side < 0 else (edges[-1] + 1.15)
            along = rng.random() < 0.85
            heading = (0.0 if side < 0 else math.pi) if along else (math.pi if side < 0 else 0.0)
            return s + float(rng.normal(0.0, 0.1)), heading + float(rng.normal(0.0, 0.05))
        return math.nan, (math.pi / 2.0 if rng.random() < 0.5 else -math.pi / 2.0) + float(
            rng.normal(0.0, 0.04)
        )
    if kind == "Pedestrian":
        if rng.random() < 0.8:
            offset = float(rng.uniform(0.4, road.sidewalk_width - 0.4))
            s = road.s_left + offset if rng.random() < 0.5 else road.s_right - offset
            heading = (0.0 if rng.random() < 0.5 else math.pi) + float(rng.normal(0.0, 0.3))
            if rng.random() < 0.3:
                heading = float(rng.uniform(-math.pi, math.pi))
            return s, heading
        s = float(rng.uniform(road.s_right, road.s_left))
        return s, (math.pi / 2.0 if rng.random() < 0.5 else -math.pi / 2.0) + float(rng.normal(0.0, 0.3))
    if rng.random() < 0.7:
        if rng.random() < 0.75:
            return edges[0] + float(rng.uniform(0.6, 1.2)), float(rng.normal(0.0, 0.08))
        return edges[-1] - float(rng.uniform(0.6, 1.2)), math.pi + float(rng.normal(0.0, 0.08))
    offset = float(rng.uniform(0.5, max(0.6, road.sidewalk_width - 0.5)))
    s = road.s_left + offset if rng.random() < 0.5 else road.s_right - offset
    return s, (0.0 if rng.random() < 0.5 else math.pi) + float(rng.normal(0.0, 0.1))


def _place_object(
    layout: _Layout,
    kind: str,
    owner: int,
    distance_range: tuple[float, float],
    front_fraction: float,
    rng: np.random.Generator,
) -> np.ndarray | None:
    """Try to put one object of ``kind`` into the scene, ``distance_range`` metres from the sensor and ahead
    of it with probability ``front_fraction``: its label box, or None when no slot was free."""
    road = layout.road
    dims = _sample_dims(kind, rng)
    near, far = distance_range
    for _ in range(40):
        s, heading = _sample_slot(kind, road, rng)
        if rng.random() < front_fraction:
            u = float(rng.uniform(near, far))
        else:
            u = float(rng.uniform(-0.6 * far, near))
        if math.isnan(s):  # crossing traffic: on the cross street, anywhere across
            u = (
                road.cross_u
                + (road.cross_width / 4.0) * (1.0 if heading > 0 else -1.0)
                + float(rng.normal(0, 0.2))
            )
            s = float(rng.uniform(road.s_right - 25.0, road.s_left + 25.0))
        x, y = road.to_velo(u, s)
        if not near <= math.hypot(x, y) <= far:
            continue
        box = _label_box(x, y, road.heading + heading, dims, layout.ground, layout.velo_to_rect)
        footprint = _box_footprint_velo(box, layout.velo_to_rect)
        if not _free(footprint, layout.placed):
            continue
        layout.placed.append(footprint)
        frame = _object_frame(box, layout.velo_to_rect)
        _BUILDERS[kind](_PartAdder(layout.prims, frame, dims, owner), dims, rng)
        return box
    return None


# ----------------------------------------------------------------------------------------------------------
# clutter: buildings, walls, poles, signs, trees, bushes

_FACADES = (
    (188.0, 170.0, 140.0),
    (150.0, 80.0, 60.0),
    (200.0, 200.0, 195.0),
    (120.0, 120.0, 125.0),
    (215.0, 195.0, 160.0),
    (170.0, 150.0, 120.0),
)
_FOLIAGE = ((50.0, 90.0, 40.0), (70.0, 110.0, 45.0), (40.0, 75.0, 35.0), (95.0, 120.0, 60.0))
_TEXTURE_WINDOWS = 1


@dataclass
class _Layout:
    """A scene under construction: its road and ground, the parts so far, and the footprints they cover."""

    road: Road
    ground: np.ndarray
    velo_to_rect: np.ndarray
    prims: Primitives = field(default_factory=Primitives)
    placed: list[np.ndarray] = field(default_factory=list)

    def add_block(
        self,
        u: float,
        s: float,
        half_u: float,
        half_s: float,
        height: float,
        reflectivity: float,
        rgb: tuple[float, float, float],
        texture: int = 0,
    ) -> None:
        """A road-aligned solid block (building, wall) around road (u, s), sunk 0.5 m into the ground."""
        x, y = self.road.to_velo(u, s)
        z0 = float(ground_height(self.ground, x, y)) - 0.5
        frame = _frame_from_yaw(x, y, z0, self.road.heading)
        half_h = (height + 0.5) / 2.0
        self.prims.add(BOX, frame, (0.0, 0.0, half_h), _AXES_IDENTITY, (half_u, half_s, half_h), -1,
                       reflectivity, rgb, texture)  # fmt: skip
        self.placed.append(_rectangle(x, y, half_u, half_s, self.road.heading))


def _add_building(
    layout: _Layout, u: float, s: float, half_u: float, half_s: float, rng: np.random.Generator
) -> None:
    rgb = _FACADES[int(rng.integers(len(_FACADES)))]
    height = float(rng.uniform(4.0, 16.0))
    layout.add_block(u, s, half_u, half_s, height, float(rng.uniform(0.25, 0.55)), rgb, _TEXTURE_WINDOWS)


def _add_buildings(layout: _Layout, rng: np.random.Generator) -> list[tuple[float, float]]:
    """Building blocks or low walls along both sides, and sometimes a row across the road's far end (where
    it bends away); returns the yard (s_from, s_to) of each side."""
    road = layout.road
    yards = []
    for side in (-1.0, 1.0):
        kerb = road.s_left if side > 0 else road.s_right
        setback = float(rng.uniform(0.0, 7.0))
        facade = kerb + side * (road.sidewalk_width + setback)
        yards.append((kerb + side * road.sidewalk_width, facade))
        style = rng.random()
        u = float(rng.uniform(-75.0, -60.0))
        while u < 110.0:
            length = float(rng.uniform(8.0, 32.0))
            gap = float(rng.uniform(1.0, 9.0))
            blocked = road.in_cross_street(np.array([u, u + length]), margin=3.0).any() or (
                not math.isnan(road.cross_u) and u < road.cross_u < u + length
            )
            if not blocked and style < 0.75 and rng.random() < 0.85:
                depth = float(rng.uniform(8.0, 14.0))
                _add_building(
                    layout, u + length / 2.0, facade + side * depth / 2.0, length / 2.0, depth / 2.0, rng
                )
            elif not blocked and rng.random() < 0.6:
                height = float(rng.uniform(0.8, 2.2))
                grey = float(rng.uniform(110.0, 190.0))
                rgb = (grey, grey * 0.97, grey * 0.92)
                layout.add_block(u + length / 2.0, facade + side * 0.15, length / 2.0, 0.15, height,
                                 float(rng.uniform(0.3, 0.5)), rgb)  # fmt: skip
            u += length + gap
    if rng.random() < 0.6:
        end = float(rng.uniform(85.0, 115.0))
        s = float(rng.uniform(-60.0, -45.0))
        while s < 60.0:
            width = float(rng.uniform(10.0, 30.0))
            _add_building(layout, end + 6.0, s + width / 2.0, 6.0, width / 2.0, rng)
            s += width + float(rng.uniform(2.0, 12.0))
    return yards


def _add_upright(layout: _Layout, u: float, s: float, kind: str, rng: np.random.Generator) -> bool:
    """A pole, traffic sign, tree or bush at road position (u, s) if its footprint is free."""
    x, y = layout.road.to_velo(u, s)
    if math.hypot(x, y) < 3.0:
        return False
    if kind == "tree":
        radius = float(rng.uniform(1.2, 3.0))
    elif kind == "bush":
        radius = float(rng.uniform(0.4, 1.4))
    else:
        radius = 0.35
    footprint = _rectangle(x, y, radius, radius, layout.road.heading)
    if not _free(footprint, layout.placed):
        return False
    layout.placed.append(footprint)
    frame = _frame_from_yaw(x, y, float(ground_height(layout.ground, x, y)), layout.road.heading)
    add = layout.prims.add
    if kind in ("pole", "sign"):
        height = float(rng.uniform(3.0, 4.0) if kind == "sign" else rng.uniform(4.5, 8.0))
        r = float(rng.uniform(0.05, 0.08) if kind == "sign" else rng.uniform(0.08, 0.14))
        centre = (0.0, 0.0, (height - 0.3) / 2.0)
        add(
            CYLINDER,
            frame,
            centre,
            _AXES_IDENTITY,
            (r, (height + 0.3) / 2.0, 0.0),
            -1,
            0.5,
            (130.0, 132.0, 135.0),
        )
        if kind == "sign":
            face = ((200.0, 30.0, 30.0), (30.0, 60.0, 170.0), (230.0, 200.0, 40.0))[int(rng.integers(3))]
            add(BOX, frame, (0.0, 0.0, height - 0.35), _AXES_IDENTITY, (0.03, 0.32, 0.32), -1, 0.9, face)
    elif kind == "tree":
        trunk = float(rng.uniform(1.8, 3.5))
        r = float(rng.uniform(0.12, 0.25))
        centre = (0.0, 0.0, (trunk - 0.3) / 2.0)
        add(
            CYLINDER,
            frame,
            centre,
            _AXES_IDENTITY,
            (r, (trunk + 0.3) / 2.0, 0.0),
            -1,
            0.35,
            (90.0, 70.0, 50.0),
        )
        crown = (radius, radius * float(rng.uniform(0.8, 1.0)), radius * float(rng.uniform(0.7, 1.1)))
        foliage = _FOLIAGE[int(rng.integers(len(_FOLIAGE)))]
        centre = (0.0, 0.0, trunk + 0.55 * crown[2])
        add(ELLIPSOID, frame, centre, _AXES_IDENTITY, crown, -1, float(rng.uniform(0.35, 0.6)), foliage)
    else:
        semi = (radius, radius * float(rng.uniform(0.6, 1.0)), float(rng.uniform(0.4, 1.0)))
        foliage = _FOLIAGE[int(rng.integers(len(_FOLIAGE)))]
        centre = (0.0, 0.0, 0.45 * semi[2])
        add(ELLIPSOID, frame, centre, _AXES_IDENTITY, semi, -1, float(rng.uniform(0.35, 0.6)), foliage)
    return True


def _add_street_furniture(
    layout: _Layout, yards: list[tuple[float, float]], rng: np.random.Generator
) -> None:
    """Poles and signs at the kerbs, trees and bushes on sidewalks and in yards."""
    road = layout.road
    for kerb, side in ((road.s_right, -1.0), (road.s_left, 1.0)):
        u = float(rng.uniform(-60.0, -40.0))
        while u < 95.0:
            kind = "sign" if rng.random() < 0.3 else "pole"
            _add_upright(layout, u, kerb + side * 0.45, kind, rng)
            u += float(rng.uniform(12.0, 35.0))
    for kind, count, min_width in (
        ("tree", int(rng.integers(4, 14)), 1.0),
        ("bush", int(rng.integers(4, 16)), 0.5),
    ):
        for _ in range(count):
            lo, hi = yards[int(rng.integers(2))]
            s = float(rng.uniform(min(lo, hi), max(lo, hi))) if abs(hi - lo) > min_width else lo
            _add_upright(layout, float(rng.uniform(-50.0, 90.0)), s, kind, rng)


def _add_ego_vehicle(prims: Primitives, mount_height: float) -> None:
    """The recording car under the sensor (roof, bonnet, boot): it swallows the lowest lasers' rays towards
    the front and back, as in KITTI's scans (whose -20..-24 deg rings are nearly empty behind the car)."""
    sill = -mount_height + 0.3
    for x0, x1, half_w, top in ((-1.5, 0.6, 0.85, -0.45), (0.6, 1.9, 0.9, -0.75), (-2.8, -1.5, 0.9, -0.7)):
        frame = _frame_from_yaw((x0 + x1) / 2.0, 0.0, (sill + top) / 2.0, 0.0)
        half = ((x1 - x0) / 2.0, half_w, (top - sill) / 2.0)
        prims.add(BOX, frame, (0.0, 0.0, 0.0), _AXES_IDENTITY, half, _EGO, 0.0, (60.0, 60.0, 65.0))


# ----------------------------------------------------------------------------------------------------------
# scene


@dataclass(frozen=True)
class Scene:
    """Everything a frame is rendered from (velodyne frame unless named otherwise).

    ``boxes`` (M, 7) are the objects' exact label boxes (rect frame) and ``kinds`` their classes; the
    objects' parts in ``prims`` have owner = row in ``boxes``.
    """

    calib: Calib
    road: Road
    ground: np.ndarray
    prims: PrimitiveArrays
    kinds: tuple[str, ...]
    boxes: np.ndarray


def sample_scene(rng: np.random.Generator, config: SynthConfig) -> Scene:
    """Road, ground, buildings, objects and street furniture of one frame."""
    calib = synthetic_calib(rng, config.calib_jitter_deg)
    layout = _Layout(road=sample_road(rng), ground=sample_ground(rng, config.mount_height_m),
                     velo_to_rect=velo_to_rect_matrix(calib))  # fmt: skip
    _add_ego_vehicle(layout.prims, config.mount_height_m)
    layout.placed.append(_rectangle(-0.45, 0.0, 2.6, 1.1, 0.0))  # the recording car
    yards = _add_buildings(layout, rng)
    counts = (config.cars, config.vans, config.pedestrians, config.cyclists)
    wanted: list[str] = []
    for kind, (lo, hi) in zip(CLASSES, counts, strict=True):
        wanted += [kind] * int(rng.integers(lo, hi + 1))
    wanted = [wanted[i] for i in rng.permutation(len(wanted))]
    far = config.object_range_m[1]
    lo, hi = config.distant_vehicles
    distant = [("Car" if rng.random() < 0.8 else "Van") for _ in range(int(rng.integers(lo, hi + 1)))]
    kinds: list[str] = []
    boxes: list[np.ndarray] = []
    for i, kind in enumerate(wanted + distant):
        if i < len(wanted):
            box = _place_object(layout, kind, len(kinds), config.object_range_m, config.front_fraction, rng)
        else:
            box = _place_object(layout, kind, len(kinds), (far, far + 20.0), 1.0, rng)
        if box is not None:
            kinds.append(kind)
            boxes.append(box)
    _add_street_furniture(layout, yards, rng)
    return Scene(
        calib=calib,
        road=layout.road,
        ground=layout.ground,
        prims=layout.prims.arrays(),
        kinds=tuple(kinds),
        boxes=np.array(boxes, dtype=np.float64).reshape(-1, 7),
    )


# ----------------------------------------------------------------------------------------------------------
# LiDAR scan


@dataclass(frozen=True)
class Scan:
    """One simulated revolution.

    Shapes:
        points: (N, 4) float32 velodyne x, y, z, reflectance; owner: (N,) int32 object row or -1;
        expected: (M,) rays whose line meets each object; visible: (M,) rays whose first hit is the object.
    """

    points: np.ndarray
    owner: np.ndarray
    expected: np.ndarray
    visible: np.ndarray


def _reflectivity(scene: Scene, hit: np.ndarray, xyz: np.ndarray) -> np.ndarray:
    """Surface reflectivity of each hit (a primitive's own; the ground's material). Shapes: (R,) -> (R,)."""
    refl = np.zeros(hit.shape)
    on_prim = hit >= 0
    refl[on_prim] = scene.prims.reflectivity[hit[on_prim]]
    on_ground = hit == _GROUND_HIT
    material = ground_material(scene.road, xyz[on_ground, 0], xyz[on_ground, 1])
    refl[on_ground] = _GROUND_REFLECTIVITY[material]
    return refl


def reported_reflectance(
    reflectivity: np.ndarray, cos_incidence: np.ndarray, distance: np.ndarray, noise: np.ndarray
) -> np.ndarray:
    """The reflectance a return reports: reflectivity * (0.55 + 0.45 cos) * 1 / (1 + (r / 45 m)^6) + noise,
    reported as 0 under 0.04 (the sensor's floor), at most 0.99, in steps of 0.01.

    Like KITTI's: near asphalt ~0.25, near objects ~0.3, almost all zero beyond 50 m.

    Shapes:
        all (N,) -> (N,) float64.
    """
    value = reflectivity * (0.55 + 0.45 * cos_incidence) / (1.0 + (distance / 45.0) ** 6) + noise
    value = np.where(value < 0.04, 0.0, np.minimum(value, 0.99))
    return np.round(value * 100.0) / 100.0


def simulate_scan(scene: Scene, config: SynthConfig, rng: np.random.Generator) -> Scan:
    """Ray-cast one HDL-64E revolution (see the module docstring for the return and intensity model)."""
    azimuth0 = float(rng.uniform(-np.pi, np.pi))
    dirs = lidar_ray_directions(config, azimuth0)  # (64, C, 3)
    n_objects = len(scene.kinds)
    t, hit, normal, expected = cast_rays(
        np.zeros(3), dirs, scene.prims, scene.ground, config.max_range_m, n_objects
    )
    d = dirs.reshape(-1, 3)  # (R, 3)
    n_rays = d.shape[0]
    dropped = rng.random(n_rays) < config.dropout
    noise = np.clip(
        rng.normal(0.0, config.range_noise_std_m, n_rays),
        -config.range_noise_clip_m,
        config.range_noise_clip_m,
    )
    intensity_noise = rng.normal(0.0, 0.025, n_rays)

    any_hit = (hit != _NO_HIT) & ~((hit >= 0) & (scene.prims.owner[np.maximum(hit, 0)] == _EGO))
    owner_all = np.where(hit >= 0, scene.prims.owner[np.maximum(hit, 0)], -1)  # (R,)
    first = owner_all[any_hit & (owner_all >= 0)]
    visible = np.bincount(first, minlength=n_objects)[:n_objects]

    t_hit = np.where(any_hit, t, 0.0)
    xyz_true = d * t_hit[:, None]  # (R, 3)
    cos_inc = np.clip(-(normal * d).sum(axis=1), 0.0, 1.0)
    refl = _reflectivity(scene, hit, xyz_true)
    power = refl * (0.3 + 0.7 * cos_inc)
    reach = config.max_range_m * np.sqrt(np.clip(power / 0.25, 0.0, 1.0))
    keep = any_hit & (t_hit <= reach) & ~dropped
    xyz = d[keep] * (t_hit[keep] + noise[keep])[:, None]
    reflectance = reported_reflectance(refl[keep], cos_inc[keep], t_hit[keep], intensity_noise[keep])
    points = np.concatenate([xyz, reflectance[:, None]], axis=1).astype(np.float32)
    return Scan(points=points, owner=owner_all[keep].astype(np.int32), expected=expected, visible=visible)


# ----------------------------------------------------------------------------------------------------------
# labels


def occlusion_level(visible: int, expected: int) -> int:
    """KITTI occlusion state from the share of an object's rays that reach it first (module docstring)."""
    if expected <= 0:
        return 3
    fraction = visible / expected
    if fraction >= 0.8:
        return 0
    if fraction >= 0.4:
        return 1
    if fraction >= 0.1:
        return 2
    return 3


def make_labels(scene: Scene, scan: Scan, config: SynthConfig) -> tuple[list[Label], np.ndarray, np.ndarray]:
    """KITTI labels of the objects image_2 sees, objects first, DontCare regions last.

    Returns the labels, each object's label row (-1: not labelled), and whether it became DontCare.
    """
    n = len(scene.kinds)
    box2d, truncation = boxes_to_image_2d(
        scene.boxes, scene.calib.P2, config.image_width - 1, config.image_height - 1
    )
    alpha = alpha_from_box(scene.boxes) if n else np.zeros(0)
    in_image = (box2d[:, 2] > box2d[:, 0]) & (box2d[:, 3] > box2d[:, 1]) & (truncation < 1.0)
    height = box2d[:, 3] - box2d[:, 1]
    dontcare = in_image & (height < config.dontcare_min_height_px)
    labels: list[Label] = []
    label_index = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(in_image & ~dontcare):
        x, y, z, l, h, w, ry = (float(v) for v in scene.boxes[i])
        labels.append(
            Label(
                type=scene.kinds[i],
                truncated=_round2(float(truncation[i])),
                occluded=occlusion_level(int(scan.visible[i]), int(scan.expected[i])),
                alpha=_round2(float(alpha[i])),
                bbox=tuple(_round2(float(v)) for v in box2d[i]),  # type: ignore[arg-type]
                h=h,
                w=w,
                l=l,
                x=x,
                y=y,
                z=z,
                ry=ry,
            )
        )
        label_index[i] = len(labels) - 1
    for i in np.flatnonzero(dontcare):
        labels.append(
            Label(
                type="DontCare",
                truncated=-1.0,
                occluded=-1,
                alpha=-10.0,
                bbox=tuple(_round2(float(v)) for v in box2d[i]),  # type: ignore[arg-type]
                h=-1.0,
                w=-1.0,
                l=-1.0,
                x=-1000.0,
                y=-1000.0,
                z=-1000.0,
                ry=-10.0,
            )
        )
        label_index[i] = len(labels) - 1
    return labels, label_index, dontcare


# ----------------------------------------------------------------------------------------------------------
# image


def camera_rays(calib: Calib, width: int, height: int, scale: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Camera 2's centre and the unit rays through the centres of ``scale`` x ``scale`` pixel blocks.

    Shapes:
        returns origin (3,), dirs (ceil(H / scale), ceil(W / scale), 3) velodyne frame (columns = image
        columns).
    """
    k = calib.P2[:, :3]
    k_inv = np.linalg.inv(k)
    centre_rect = -k_inv @ calib.P2[:, 3]  # (3,)
    velo_to_rect = velo_to_rect_matrix(calib)
    rect_to_velo = np.linalg.inv(velo_to_rect)
    origin = rect_to_velo[:3, :3] @ centre_rect + rect_to_velo[:3, 3]
    u, v = np.meshgrid(
        (np.arange(-(-width // scale)) + 0.5) * scale, (np.arange(-(-height // scale)) + 0.5) * scale
    )
    pix = np.stack([u, v, np.ones_like(u)], axis=-1)  # (H, W, 3)
    dirs = pix @ (rect_to_velo[:3, :3] @ k_inv).T  # (H, W, 3)
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    return origin, dirs


def _window_mask(scene: Scene, hit: np.ndarray, xyz: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Which façade hits fall on a window (a 3 m x 3.2 m grid of 1.4 m x 1.4 m panes). Shapes: (R,) bool."""
    mask = np.zeros(hit.shape, dtype=bool)
    rows = np.flatnonzero((hit >= 0) & (np.abs(normal[:, 2]) < 0.5))
    rows = rows[scene.prims.texture[hit[rows]] == _TEXTURE_WINDOWS]
    if rows.size == 0:
        return mask
    a = scene.prims.affine[hit[rows]]  # (K, 3, 4)
    local = np.einsum("kij,kj->ki", a[:, :, :3], xyz[rows]) + a[:, :, 3]  # (K, 3)
    half = scene.prims.params[hit[rows]]  # (K, 3)
    along = np.where(np.abs(np.abs(local[:, 1]) - half[:, 1]) < 1e-3, local[:, 0], local[:, 1])
    up = local[:, 2] + half[:, 2]
    pane = (
        (np.mod(along, 3.0) > 0.8)
        & (np.mod(along, 3.0) < 2.2)
        & (np.mod(up, 3.2) > 1.3)
        & (np.mod(up, 3.2) < 2.7)
    )
    mask[rows] = pane & (up > 1.3) & (up < 2.0 * half[:, 2] - 0.5)
    return mask


def render_image(scene: Scene, config: SynthConfig, rng: np.random.Generator) -> np.ndarray:
    """Ray-trace image_2 of the scene (see the module docstring). Shapes: returns (H, W, 3) uint8."""
    width, height, scale = config.image_width, config.image_height, config.image_render_scale
    origin, dirs = camera_rays(scene.calib, width, height, scale)
    t, hit, normal, _ = cast_rays(origin, dirs, scene.prims, scene.ground, 400.0, len(scene.kinds))
    d = dirs.reshape(-1, 3)
    t_hit = np.where(hit != _NO_HIT, t, 0.0)
    xyz = origin + d * t_hit[:, None]  # (R, 3)
    sun_az = float(rng.uniform(-np.pi, np.pi))
    sun = np.array([math.cos(sun_az) * 0.6, math.sin(sun_az) * 0.6, 0.8])
    sun /= np.linalg.norm(sun)
    brightness = float(rng.uniform(0.85, 1.1))

    rgb = np.zeros((d.shape[0], 3))
    on_prim = hit >= 0
    lambert = np.clip(normal @ sun, 0.0, 1.0)
    rgb[on_prim] = scene.prims.rgb[hit[on_prim]] * (0.45 + 0.55 * lambert[on_prim, None])
    windows = _window_mask(scene, hit, xyz, normal)
    rgb[windows] = np.array([55.0, 65.0, 80.0]) * (0.8 + 0.4 * lambert[windows, None])
    on_ground = hit == _GROUND_HIT
    material = ground_material(scene.road, xyz[on_ground, 0], xyz[on_ground, 1])
    rgb[on_ground] = _GROUND_RGB[material] * (0.85 + 0.15 * lambert[on_ground, None])
    sky = hit == _NO_HIT
    elevation = np.clip(d[sky, 2], 0.0, 0.3) / 0.3
    horizon, zenith = np.array([200.0, 210.0, 222.0]), np.array([90.0, 135.0, 200.0])
    rgb[sky] = horizon + elevation[:, None] * (zenith - horizon)
    haze = 1.0 - np.exp(-t_hit / 220.0)
    rgb[~sky] = rgb[~sky] * (1.0 - haze[~sky, None]) + horizon * haze[~sky, None]
    small = np.clip(np.round(rgb * brightness), 0, 255).astype(np.uint8).reshape(*dirs.shape[:2], 3)
    image = np.asarray(
        Image.fromarray(small, mode="RGB").resize(
            (width, height), Image.Resampling.BILINEAR, box=(0.0, 0.0, width / scale, height / scale)
        ),
        dtype=np.float32,
    )  # (H, W, 3)
    noise = rng.standard_normal(image.shape, dtype=np.float32) * np.float32(config.image_noise)
    return np.clip(np.round(image + noise), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------------------
# painting


def paint_points(
    points: np.ndarray,
    owner: np.ndarray,
    kinds: tuple[str, ...],
    concentration: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """PointPainting rows: scores drawn from Dirichlet(0.5 + concentration * one-hot(class of the hit)).

    Shapes:
        points: (M, 4) float32, owner: (M,) object row or -1 -> (M, 8) float64, score rows summing to 1.
    """
    paint_of_object = np.array([_PAINT_INDEX[k] for k in kinds] + [0], dtype=np.int64)  # owner -1 -> last
    cls = paint_of_object[owner]  # (M,)
    alpha = np.full((points.shape[0], len(PAINTED_CLASSES)), 0.5)
    alpha[np.arange(points.shape[0]), cls] += concentration
    draws = rng.gamma(alpha)  # (M, 4)
    scores = draws / draws.sum(axis=1, keepdims=True)
    return np.concatenate([points.astype(np.float64), scores], axis=1)


# ----------------------------------------------------------------------------------------------------------
# frames and datasets


def frame_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of frame ``index``: independent of every other frame and of the dataset size."""
    if seed < 0 or index < 0:
        raise ValueError(f"expected seed >= 0 and index >= 0, got seed={seed}, index={index}")
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


def generate_frame(index: int, seed: int, config: SynthConfig | None = None) -> SynthFrame:
    """Generate frame ``index`` of the dataset with ``seed`` (deterministic in (index, seed, config))."""
    config = config or SynthConfig()
    rng = frame_rng(seed, index)
    scene = sample_scene(rng, config)
    scan = simulate_scan(scene, config, rng)
    labels, label_index, dontcare = make_labels(scene, scan, config)
    fov = fov_mask(scan.points[:, :3], scene.calib, config.image_width, config.image_height)
    image = render_image(scene, config, rng)
    painted = paint_points(scan.points[fov], scan.owner[fov], scene.kinds, config.paint_concentration, rng)
    n = len(scene.kinds)
    counts = np.bincount(scan.owner[scan.owner >= 0], minlength=n)
    counts_fov = np.bincount(scan.owner[fov & (scan.owner >= 0)], minlength=n)
    objects = tuple(
        SynthObject(
            kind=scene.kinds[i],
            box_rect=scene.boxes[i].copy(),
            label_index=int(label_index[i]),
            dontcare=bool(dontcare[i]),
            visible_fraction=float(scan.visible[i] / scan.expected[i]) if scan.expected[i] else 0.0,
            num_points=int(counts[i]),
            num_points_fov=int(counts_fov[i]),
        )
        for i in range(n)
    )
    return SynthFrame(
        index=index,
        points_velo=scan.points,
        point_object_id=scan.owner,
        fov=fov,
        painted=painted,
        calib=scene.calib,
        labels=labels,
        image=image,
        objects=objects,
    )


def write_frame(out_dir: str | Path, frame: SynthFrame, png_compress_level: int = 1) -> None:
    """Write one frame's five files under ``out_dir/training`` (each atomically)."""
    base = Path(out_dir) / "training"
    name = frame.frame_id
    write_velodyne(base / "velodyne" / f"{name}.bin", frame.points_velo)
    write_calib(base / "calib" / f"{name}.txt", frame.calib)
    write_labels(base / "label_2" / f"{name}.txt", frame.labels)
    with atomic_path(base / "image_2" / f"{name}.png", suffix=".png") as tmp:
        Image.fromarray(frame.image, mode="RGB").save(tmp, format="PNG", compress_level=png_compress_level)
    with atomic_path(base / "painted_lidar" / f"{name}.npy", suffix=".npy") as tmp, open(tmp, "wb") as f:
        np.save(f, frame.painted, allow_pickle=False)


def split_frame_ids(num_frames: int, seed: int, val_fraction: float) -> tuple[list[str], list[str]]:
    """A random train / val partition of frames 0..num_frames-1 (ids sorted; both non-empty when possible)."""
    if not 0.0 <= val_fraction <= 1.0:
        raise ValueError(f"expected 0 <= val_fraction <= 1, got {val_fraction}")
    n_val = int(round(num_frames * val_fraction))
    if num_frames >= 2 and 0.0 < val_fraction < 1.0:
        n_val = min(max(n_val, 1), num_frames - 1)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x5A17, 0x5A17, 1])).permutation(num_frames)
    val = sorted(int(i) for i in order[:n_val])
    train = sorted(int(i) for i in order[n_val:])
    return [f"{i:06d}" for i in train], [f"{i:06d}" for i in val]


def generate_dataset(
    out_dir: str | Path,
    num_frames: int,
    seed: int,
    val_fraction: float = 0.5,
    config: SynthConfig | None = None,
) -> None:
    """Write a synthetic KITTI root: ``training/{velodyne,calib,label_2,image_2,painted_lidar}`` for frames
    000000 .. num_frames-1 and ``ImageSets/{train,val,trainval}.txt``. Same arguments, same bytes."""
    if num_frames < 1:
        raise ValueError(f"expected num_frames >= 1, got {num_frames}")
    config = config or SynthConfig()
    for index in range(num_frames):
        write_frame(out_dir, generate_frame(index, seed, config), config.png_compress_level)
    train, val = split_frame_ids(num_frames, seed, val_fraction)
    sets = Path(out_dir) / "ImageSets"
    write_text_atomic(sets / "train.txt", "".join(f"{i}\n" for i in train))
    write_text_atomic(sets / "val.txt", "".join(f"{i}\n" for i in val))
    write_text_atomic(sets / "trainval.txt", "".join(f"{i:06d}\n" for i in range(num_frames)))
