"""Camera 2's image of a scene, ray-traced: sky, ground materials, shaded parts, windows, haze and noise."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from pgnn.data.frames import velo_to_rect_matrix
from pgnn.data.kitti import Calib
from pgnn.data.synthetic.config import SynthConfig
from pgnn.data.synthetic.primitives import TEXTURE_WINDOWS
from pgnn.data.synthetic.raycast import GROUND_HIT, NO_HIT, cast_rays
from pgnn.data.synthetic.road import GROUND_RGB, ground_material
from pgnn.data.synthetic.scene import Scene


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
    rows = rows[scene.prims.texture[hit[rows]] == TEXTURE_WINDOWS]
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
    """Ray-trace image_2 of the scene (see the package docstring). Shapes: returns (H, W, 3) uint8."""
    width, height, scale = config.image_width, config.image_height, config.image_render_scale
    origin, dirs = camera_rays(scene.calib, width, height, scale)
    t, hit, normal, _ = cast_rays(origin, dirs, scene.prims, scene.ground, 400.0, len(scene.kinds))
    d = dirs.reshape(-1, 3)
    t_hit = np.where(hit != NO_HIT, t, 0.0)
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
    on_ground = hit == GROUND_HIT
    material = ground_material(scene.road, xyz[on_ground, 0], xyz[on_ground, 1])
    rgb[on_ground] = GROUND_RGB[material] * (0.85 + 0.15 * lambert[on_ground, None])
    sky = hit == NO_HIT
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
