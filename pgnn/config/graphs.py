"""Configs of the graphs and the vertex targets (torch-free, numba-free).

- :class:`GraphConfig` / :data:`GRAPH_PRESETS`: multi-level graphs
  (:func:`pgnn.graphs.build.build_graph`).
- :class:`TargetsConfig`: vertex labels, box encoding and input features (:mod:`pgnn.graphs.targets`,
  :mod:`pgnn.graphs.features`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from pgnn.config.types import MAX_POINTS, Flag, Int, Real

# ----------------------------------------------------------------------------------------------------------
# Configs


class GraphLevelConfig(BaseModel):
    """One graph level (the original's ``level_configs`` entry with ``disjointed_rnn_local_graph_v3``).

    ``graph_scale`` multiplies ``base_voxel_size`` to give this level's destination voxel size; ``radius``
    (metres) is the neighbourhood radius; ``num_neighbors`` caps the in-degree (-1: keep all).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    graph_scale: Real = Field(gt=0)
    radius: Real = Field(gt=0)
    num_neighbors: Int = Field(-1, ge=-1, le=MAX_POINTS)

    @model_validator(mode="after")
    def _check_cap(self) -> GraphLevelConfig:
        if self.num_neighbors == 0:
            raise ValueError(f"num_neighbors must be -1 (all) or positive, got {self.num_neighbors}")
        return self


class GraphConfig(BaseModel):
    """A multi-level graph (the original's ``graph_gen_kwargs`` / ``runtime_graph_gen_kwargs``).

    Level ``i`` joins ``vertex_coord_i`` to ``vertex_coord_{i+1}`` (the original's ``graph_level == i``).

    ``voxel_origin`` anchors the downsampling's voxel grid (:mod:`pgnn.graphs.voxel`): ``points_min`` (the
    original's) at the minimum of the frame's points, so that cropping the scan moves the grid and can change
    keypoints anywhere; ``fixed`` at multiples of the voxel size in the points' frame, so that an object and
    its neighbours get the same keypoints whatever else the scan holds (``pgnn detect``'s default). It is
    written out only when it is not ``points_min``: params, cards and graph caches from before it are
    unchanged.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_voxel_size: Real = Field(gt=0)
    downsample_method: Literal["random", "center"] = "center"
    add_rnd3d: Flag = False
    levels: tuple[GraphLevelConfig, ...] = Field(min_length=1)
    voxel_origin: Literal["points_min", "fixed"] = "points_min"

    @model_serializer(mode="wrap")
    def _drop_default_origin(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out = handler(self)
        if out.get("voxel_origin") == "points_min":
            del out["voxel_origin"]
        return out


def _levels(*specs: tuple[float, float, int]) -> tuple[GraphLevelConfig, ...]:
    return tuple(GraphLevelConfig(graph_scale=s, radius=r, num_neighbors=k) for s, r, k in specs)


# The numbers of the original's configs/car_auto_T3_train_config (the same in every car_auto_* config) and
# configs/ped_cyl_auto_T3_trainval_config: ``graph_gen_kwargs`` for training, ``runtime_graph_gen_kwargs``
# (downsample_method defaults to 'center' there) for inference.
GRAPH_PRESETS: dict[str, GraphConfig] = {
    "car": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="random",
        add_rnd3d=True,
        levels=_levels((1.0, 1.0, -1), (1.0, 4.0, 256)),
    ),
    "car_runtime": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="center",
        add_rnd3d=False,
        levels=_levels((0.5, 1.0, -1), (0.5, 4.0, -1)),
    ),
    "ped_cyc": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="random",
        add_rnd3d=True,
        levels=_levels((0.5, 0.4, -1), (0.5, 1.6, 256)),
    ),
    "ped_cyc_runtime": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="center",
        add_rnd3d=False,
        levels=_levels((0.25, 0.4, -1), (0.25, 1.6, -1)),
    ),
    # pgnn's own, for the default preset small_painted_car: the car graphs with a 2 m keypoint radius instead
    # of 4 m: fewer keypoint edges, so a cheaper `small` training step (measured: benchmarks/README.md,
    # "Measurements behind the code"), and on the synthetic val set 3000 steps gave a higher 3D and BEV AP
    # than 4 m did (docs/experiment-log.md, e12-e16).
    "small_car": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="random",
        add_rnd3d=True,
        levels=_levels((1.0, 1.0, -1), (1.0, 2.0, 256)),
    ),
    "small_car_runtime": GraphConfig(
        base_voxel_size=0.8,
        downsample_method="center",
        add_rnd3d=False,
        levels=_levels((0.5, 1.0, -1), (0.5, 2.0, -1)),
    ),
}


class TargetsConfig(BaseModel):
    """How vertices get class labels and box targets, and which input features the points carry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label_method: Literal["Car", "Pedestrian_and_Cyclist", "yaw", "Car_heading"] = "Car"
    encoding: str = "classaware_all_class_box_encoding"
    input_features: Literal["irgb", "rgb", "0rgb", "0000", "i000", "i", "0", "is"] = "i"
    expend_factor: tuple[Real, Real, Real] = (1.0, 1.0, 1.0)
