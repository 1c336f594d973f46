"""The LiDAR: a spinning 64-laser sensor like KITTI's Velodyne HDL-64E, ray-cast into a scene, with its
return-power, dropout, range-noise and reflectance model (see ``pgnn.data.synthetic``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgnn.data.synthetic.config import SynthConfig
from pgnn.data.synthetic.primitives import EGO
from pgnn.data.synthetic.raycast import GROUND_HIT, NO_HIT, cast_rays
from pgnn.data.synthetic.road import GROUND_REFLECTIVITY, ground_material
from pgnn.data.synthetic.scene import Scene


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
    on_ground = hit == GROUND_HIT
    material = ground_material(scene.road, xyz[on_ground, 0], xyz[on_ground, 1])
    refl[on_ground] = GROUND_REFLECTIVITY[material]
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
    """Ray-cast one HDL-64E revolution (see the package docstring for the return and intensity model)."""
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

    any_hit = (hit != NO_HIT) & ~((hit >= 0) & (scene.prims.owner[np.maximum(hit, 0)] == EGO))
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
