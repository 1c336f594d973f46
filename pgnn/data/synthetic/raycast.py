"""Casting rays into a scene (numba): the first hit of each ray on the ground height field, boxes,
cylinders and ellipsoids, with the candidate primitives of each azimuth column from their bird's-eye
bounding circles."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pgnn.data.synthetic.primitives import PrimitiveArrays, primitive_extent, wrap

# What a ray hit when it hit no primitive (``cast_rays``'s hit codes; primitives are >= 0).
NO_HIT = -2
GROUND_HIT = -1


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
        local = signs * primitive_extent(int(prims.kind[p]), prims.params[p])  # (8, 3)
        world = (local - prims.affine[p, :, 3]) @ inv.T  # (8, 3)
        centre = world.mean(axis=0)
        centres[p] = centre[:2]
        radii[p] = float(np.max(np.linalg.norm(world[:, :2] - centre[:2], axis=1)))
    return centres, radii


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
    col_half = np.max(np.abs(wrap(azimuth - col_centre[None, :])), axis=0)  # (C,)
    centres, radii = _bounding_circles(prims)  # (P, 2), (P,)
    rel = centres - origin[None, :2]  # (P, 2)
    dist = np.linalg.norm(rel, axis=1)  # (P,)
    p_centre = np.arctan2(rel[:, 1], rel[:, 0])  # (P,)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_half = np.where(dist > radii + 0.05, np.arcsin(np.clip(radii / dist, 0.0, 1.0)), np.pi)  # (P,)
    diff = np.abs(wrap(col_centre[:, None] - p_centre[None, :]))  # (C, P)
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
