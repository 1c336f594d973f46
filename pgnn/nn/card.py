"""The model card: what a model file states about the model in it, written once, read by every path.

A card holds the network's config, the frame its weights expect the points in, the runtime graph it runs
on, its box encoding, label method and input features, the post-processing of its detections (the label
method's yaw merge included) and, for a model pgnn trained, the train settings. Every model file carries
one: a checkpoint (``.pt``) as its entries (:meth:`ModelCard.entries`: the keys below, each field's alias),
an export (``.onnx``, ``.pt2``) as one JSON string (:meth:`ModelCard.to_json`). The predict stage,
``pgnn predict``, ``pgnn detect``, ``pgnn view``, ``pgnn export``, the explain view and the benchmarks all
read it through :func:`pgnn.inference.backends.load_detector`, so one model gives the same detections
through every path.

======================= =============================================================================
checkpoint entry        meaning
======================= =============================================================================
``model_config``        :class:`pgnn.config.network.ModelConfig` of the network
``input_frame``         ``"rect"`` (KITTI's label frame: pgnn's own models) or ``"cam2"`` (camera 2's
                        rectified frame: the authors' released weights)
``graph_preset``        the name of the runtime graph (a key of ``GRAPH_PRESETS``)
``runtime_graph``       :class:`pgnn.config.graphs.GraphConfig` the model is run on
``encoding``            the box encoding (``pgnn.graphs.encoding``)
``label_method``        the label method (``pgnn.graphs.targets``): the network's classes
``input_features``      the per-point input features (``pgnn.graphs.features``)
``postprocess``         :class:`pgnn.config.inference.PostprocessConfig` of its detections
``train_config``        :class:`pgnn.config.training.TrainConfig` it was trained with (None: imported)
======================= =============================================================================

Files written before the card had ``runtime_graph`` and ``postprocess`` (and a training run's resumable
checkpoints, which record only what training decides: :data:`TRAINING_FACTS`) get them from the rest:
:func:`runtime_graph_of` and :func:`postprocess_for`, the settings the label method's preset gives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pgnn.config.graphs import GRAPH_PRESETS, GraphConfig
from pgnn.config.inference import NMS_OVERLAP, YAW_MERGE, PostprocessConfig, class_fold
from pgnn.config.network import ModelConfig
from pgnn.config.training import TrainConfig
from pgnn.core.errors import DataError

InputFrame = Literal["rect", "cam2"]

TRAINING_FACTS = ("input_frame", "graph_preset", "encoding", "label_method", "input_features")
"""The card's entries a training run's every checkpoint states (what training decides about the data)."""


class ModelCard(BaseModel):
    """The facts of one model (see the module docstring); built once, where the model is made."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    network: ModelConfig = Field(alias="model_config")
    input_frame: InputFrame
    graph_preset: str
    runtime_graph: GraphConfig
    encoding: str
    label_method: str
    input_features: str
    postprocess: PostprocessConfig
    train: TrainConfig | None = Field(default=None, alias="train_config")

    @field_validator("label_method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        from pgnn.graphs.targets import method_class_names

        method_class_names(method)  # ValueError naming the known ones
        return method

    @field_validator("input_features")
    @classmethod
    def _known_features(cls, features: str) -> str:
        from pgnn.graphs.features import FEATURE_WIDTHS

        if features not in FEATURE_WIDTHS:
            raise ValueError(f"expected input features in {sorted(FEATURE_WIDTHS)}, got {features!r}")
        return features

    @property
    def classes(self) -> tuple[str, ...]:
        """The object classes the model detects (``pgnn.graphs.targets.object_classes``)."""
        from pgnn.graphs.targets import object_classes

        return object_classes(self.label_method)

    def entries(self) -> dict[str, Any]:
        """The card as checkpoint entries (plain data: strings, numbers, lists, dicts, None)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        """The card as one JSON string (the metadata of an exported model)."""
        return json.dumps(self.entries(), sort_keys=True)

    def with_postprocess(self, **overrides: Any) -> PostprocessConfig:
        """The card's post-processing with ``overrides`` (None values ignored: an option not given)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if not given:
            return self.postprocess
        return PostprocessConfig.model_validate({**self.postprocess.model_dump(), **given})


def runtime_graph_of(name: str) -> GraphConfig:
    """``GRAPH_PRESETS[name]``; for a training preset (``"car"``) its runtime counterpart (``"car_runtime"``:
    'center' keypoints, no neighbour cap), as the original's ``runtime_graph_gen_kwargs``. ValueError for an
    unknown name."""
    if f"{name}_runtime" in GRAPH_PRESETS:
        name = f"{name}_runtime"
    if name not in GRAPH_PRESETS:
        raise ValueError(f"expected a graph preset in {sorted(GRAPH_PRESETS)}, got {name!r}")
    return GRAPH_PRESETS[name]


def postprocess_for(label_method: str, overlap_threshold: float | None = None) -> PostprocessConfig:
    """The post-processing a label method's preset gives: its class names and folds (each object class's
    vertical-yaw id folds into its first id), candidates with a probability > 1 / num_classes (run.py's
    rule), the original's NMS overlap threshold for the method (or ``overlap_threshold``, an imported
    config's ``nms_overlapped_thres``) and the method's yaw merge (``YAW_MERGE``: circular for
    ``Car_heading``). ValueError for an unknown method."""
    from pgnn.graphs.targets import method_class_names

    names = method_class_names(label_method)
    overlap = NMS_OVERLAP.get(label_method, 0.01) if overlap_threshold is None else overlap_threshold
    return PostprocessConfig(
        class_names=names,
        class_fold=class_fold(names),
        score_threshold=1.0 / len(names),
        overlap_threshold=float(overlap),
        yaw_merge=YAW_MERGE.get(label_method, "median"),
    )


def card_of(entries: Mapping[str, Any], source: str | Path = "<checkpoint>") -> ModelCard:
    """The card in a checkpoint's (or an export's) entries; ``DataError`` naming ``source`` if it is bad.

    Entries without ``runtime_graph`` / ``postprocess`` (files from before the card, a training run's
    checkpoints) get them from ``graph_preset`` and ``label_method`` (:func:`runtime_graph_of`,
    :func:`postprocess_for`; an imported config's ``nms_overlapped_thres`` is kept).
    """
    fields = {key: entries[key] for key in _ENTRY_KEYS if key in entries}
    try:
        if "runtime_graph" not in fields:
            fields["runtime_graph"] = runtime_graph_of(str(fields.get("graph_preset", "")))
        if "postprocess" not in fields:
            original = entries.get("original_config") or {}
            overlap = original.get("nms_overlapped_thres") if isinstance(original, Mapping) else None
            fields["postprocess"] = postprocess_for(str(fields.get("label_method", "")), overlap)
        return ModelCard.model_validate(fields)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DataError(source, f"expected a valid model card, got {where}: {err['msg']}") from e
    except ValueError as e:  # runtime_graph_of, postprocess_for: an unknown graph_preset or label_method
        raise DataError(source, f"expected a valid model card (graph_preset, label_method), got {e}") from e


def card_from_json(text: str, source: str | Path) -> ModelCard:
    """:meth:`ModelCard.to_json`'s string read back; ``DataError`` naming ``source`` if it is bad."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(source, f"expected the model card as JSON, got {e.msg}") from e
    if not isinstance(entries, dict) or "postprocess" not in entries or "runtime_graph" not in entries:
        raise DataError(source, "expected a model card with its runtime graph and post-processing")
    return card_of(entries, source)


_ENTRY_KEYS = tuple(f.alias or name for name, f in ModelCard.model_fields.items())
"""The checkpoint entries of a card (each field's alias, else its name)."""
