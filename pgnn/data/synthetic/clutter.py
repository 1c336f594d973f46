"""Unlabelled clutter of a scene: buildings, walls, poles, signs, trees, bushes, and the recording car
under the sensor."""

from __future__ import annotations

import math

import numpy as np

from pgnn.data.synthetic.layout import Layout, free, rectangle
from pgnn.data.synthetic.primitives import (
    AXES_IDENTITY,
    BOX,
    CYLINDER,
    EGO,
    ELLIPSOID,
    TEXTURE_WINDOWS,
    Primitives,
    frame_from_yaw,
)
from pgnn.data.synthetic.road import ground_height

_FACADES = (
    (188.0, 170.0, 140.0),
    (150.0, 80.0, 60.0),
    (200.0, 200.0, 195.0),
    (120.0, 120.0, 125.0),
    (215.0, 195.0, 160.0),
    (170.0, 150.0, 120.0),
)
_FOLIAGE = ((50.0, 90.0, 40.0), (70.0, 110.0, 45.0), (40.0, 75.0, 35.0), (95.0, 120.0, 60.0))


def _add_building(
    layout: Layout, u: float, s: float, half_u: float, half_s: float, rng: np.random.Generator
) -> None:
    rgb = _FACADES[int(rng.integers(len(_FACADES)))]
    height = float(rng.uniform(4.0, 16.0))
    layout.add_block(u, s, half_u, half_s, height, float(rng.uniform(0.25, 0.55)), rgb, TEXTURE_WINDOWS)


def add_buildings(layout: Layout, rng: np.random.Generator) -> list[tuple[float, float]]:
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


def _add_upright(layout: Layout, u: float, s: float, kind: str, rng: np.random.Generator) -> bool:
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
    footprint = rectangle(x, y, radius, radius, layout.road.heading)
    if not free(footprint, layout.placed):
        return False
    layout.placed.append(footprint)
    frame = frame_from_yaw(x, y, float(ground_height(layout.ground, x, y)), layout.road.heading)
    add = layout.prims.add
    if kind in ("pole", "sign"):
        height = float(rng.uniform(3.0, 4.0) if kind == "sign" else rng.uniform(4.5, 8.0))
        r = float(rng.uniform(0.05, 0.08) if kind == "sign" else rng.uniform(0.08, 0.14))
        centre = (0.0, 0.0, (height - 0.3) / 2.0)
        add(
            CYLINDER,
            frame,
            centre,
            AXES_IDENTITY,
            (r, (height + 0.3) / 2.0, 0.0),
            -1,
            0.5,
            (130.0, 132.0, 135.0),
        )
        if kind == "sign":
            face = ((200.0, 30.0, 30.0), (30.0, 60.0, 170.0), (230.0, 200.0, 40.0))[int(rng.integers(3))]
            add(BOX, frame, (0.0, 0.0, height - 0.35), AXES_IDENTITY, (0.03, 0.32, 0.32), -1, 0.9, face)
    elif kind == "tree":
        trunk = float(rng.uniform(1.8, 3.5))
        r = float(rng.uniform(0.12, 0.25))
        centre = (0.0, 0.0, (trunk - 0.3) / 2.0)
        add(
            CYLINDER,
            frame,
            centre,
            AXES_IDENTITY,
            (r, (trunk + 0.3) / 2.0, 0.0),
            -1,
            0.35,
            (90.0, 70.0, 50.0),
        )
        crown = (radius, radius * float(rng.uniform(0.8, 1.0)), radius * float(rng.uniform(0.7, 1.1)))
        foliage = _FOLIAGE[int(rng.integers(len(_FOLIAGE)))]
        centre = (0.0, 0.0, trunk + 0.55 * crown[2])
        add(ELLIPSOID, frame, centre, AXES_IDENTITY, crown, -1, float(rng.uniform(0.35, 0.6)), foliage)
    else:
        semi = (radius, radius * float(rng.uniform(0.6, 1.0)), float(rng.uniform(0.4, 1.0)))
        foliage = _FOLIAGE[int(rng.integers(len(_FOLIAGE)))]
        centre = (0.0, 0.0, 0.45 * semi[2])
        add(ELLIPSOID, frame, centre, AXES_IDENTITY, semi, -1, float(rng.uniform(0.35, 0.6)), foliage)
    return True


def add_street_furniture(layout: Layout, yards: list[tuple[float, float]], rng: np.random.Generator) -> None:
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


def add_ego_vehicle(prims: Primitives, mount_height: float) -> None:
    """The recording car under the sensor (roof, bonnet, boot): it swallows the lowest lasers' rays towards
    the front and back, as in KITTI's scans (whose -20..-24 deg rings are nearly empty behind the car)."""
    sill = -mount_height + 0.3
    for x0, x1, half_w, top in ((-1.5, 0.6, 0.85, -0.45), (0.6, 1.9, 0.9, -0.75), (-2.8, -1.5, 0.9, -0.7)):
        frame = frame_from_yaw((x0 + x1) / 2.0, 0.0, (sill + top) / 2.0, 0.0)
        half = ((x1 - x0) / 2.0, half_w, (top - sill) / 2.0)
        prims.add(BOX, frame, (0.0, 0.0, 0.0), AXES_IDENTITY, half, EGO, 0.0, (60.0, 60.0, 65.0))
