"""A frame's scene, sampled from the frame's generator: calibration, road, ground, buildings, labelled
objects and street furniture."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgnn.data.frames import velo_to_rect_matrix
from pgnn.data.kitti import Calib
from pgnn.data.synthetic.calib import synthetic_calib
from pgnn.data.synthetic.clutter import add_buildings, add_ego_vehicle, add_street_furniture
from pgnn.data.synthetic.config import CLASSES, SynthConfig
from pgnn.data.synthetic.layout import Layout, rectangle
from pgnn.data.synthetic.objects import place_object
from pgnn.data.synthetic.primitives import PrimitiveArrays
from pgnn.data.synthetic.road import Road, sample_ground, sample_road


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
    layout = Layout(road=sample_road(rng), ground=sample_ground(rng, config.mount_height_m),
                     velo_to_rect=velo_to_rect_matrix(calib))  # fmt: skip
    add_ego_vehicle(layout.prims, config.mount_height_m)
    layout.placed.append(rectangle(-0.45, 0.0, 2.6, 1.1, 0.0))  # the recording car
    yards = add_buildings(layout, rng)
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
            box = place_object(layout, kind, len(kinds), config.object_range_m, config.front_fraction, rng)
        else:
            box = place_object(layout, kind, len(kinds), (far, far + 20.0), 1.0, rng)
        if box is not None:
            kinds.append(kind)
            boxes.append(box)
    add_street_furniture(layout, yards, rng)
    return Scene(
        calib=calib,
        road=layout.road,
        ground=layout.ground,
        prims=layout.prims.arrays(),
        kinds=tuple(kinds),
        boxes=np.array(boxes, dtype=np.float64).reshape(-1, 7),
    )
