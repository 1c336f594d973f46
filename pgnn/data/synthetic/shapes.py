"""The geometry of labelled objects: cars, vans, pedestrians and cyclists built from primitives, every part
inside the object's inset label box (see ``pgnn.data.synthetic``)."""

from __future__ import annotations

import numpy as np

from pgnn.data.synthetic.primitives import (
    AXES_IDENTITY,
    AXES_Y_ALONG_Z,
    BOX,
    CYLINDER,
    ELLIPSOID,
    Primitives,
    primitive_extent,
)

# Geometry margins (metres) that make "inside the label box" == "hit on the object" (package docstring).
INSET_SIDE = 0.06
INSET_VERTICAL = 0.03


class PartAdder:
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
        axes: np.ndarray = AXES_IDENTITY,
    ) -> None:
        extent = np.abs(axes.T) @ primitive_extent(kind, np.array(params))  # object-frame half extents
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


def _wheels(add: PartAdder, length: float, radius: float, half_width: float) -> None:
    for x in (add.hl - 0.18 * length - 0.05, -add.hl + 0.18 * length):
        x = float(np.clip(x, -add.hl + radius, add.hl - radius))
        for side in (-1.0, 1.0):
            centre = (x, side * (add.hw - half_width), add.bottom + radius)
            add(CYLINDER, centre, (radius, half_width, 0.0), _TYRE[1], _TYRE[0], axes=AXES_Y_ALONG_Z)


def _build_car(add: PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
    """Body box from the sills to the belt line, a narrower glass cabin, four wheels.

    The cabin sits 4-14 % of the length behind the body's centre, as on real cars (the hood is longer than
    the trunk; a hatchback's or SUV's cabin reaches the tail): the only front/back cue of these shapes.
    (It was 0-12 % until the default run's heading study: a third of the cars had a cabin within 3 % of the
    centre, no front or back to see, and a quarter of those came out reversed; see the README's "Default
    run".)"""
    l, h, _ = dims
    rgb, refl = _paint(rng)
    radius = float(np.clip(0.2 * h, 0.27, 0.33))
    _wheels(add, l, radius, 0.1)
    belt = 0.56 * h
    sill = add.bottom + 0.17
    add(BOX, (0.0, 0.0, (sill + belt) / 2.0), (add.hl, add.hw, (belt - sill) / 2.0), refl, rgb)
    cabin_half = float(rng.uniform(0.22, 0.31)) * l
    cabin_x = float(np.clip(rng.uniform(-0.14, -0.04) * l, -add.hl + cabin_half, add.hl - cabin_half))
    add(
        BOX,
        (cabin_x, 0.0, (belt + add.top) / 2.0),
        (cabin_half, add.hw - 0.06, (add.top - belt) / 2.0),
        _GLASS[1],
        _GLASS[0],
    )


def _build_van(add: PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
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


def _build_pedestrian(add: PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
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


def _build_cyclist(add: PartAdder, dims: tuple[float, float, float], rng: np.random.Generator) -> None:
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
            axes=AXES_Y_ALONG_Z,
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


BUILDERS = {"Car": _build_car, "Van": _build_van, "Pedestrian": _build_pedestrian, "Cyclist": _build_cyclist}
